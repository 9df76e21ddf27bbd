//! Feed-forward blocks: SwiGLU MLP and the Qwen3.5 mixture of experts (softmax router, top-k,
//! renormalised weights, sigmoid-gated shared expert). Experts may be fused 3-D tensors
//! (`experts.gate_up_proj` [E, 2Im, H], `experts.down_proj` [E, H, Im]) or per-expert 2-D.
//!
//! Everything runs as LOOM kernels on the engine's device: projections through the GEMM
//! ([`linear`]), SwiGLU through `ffn.swiglu`, the router, the gather of each expert's rows
//! and the final combine through the MoE ops ([`crate::ops::moe_router`] and the rest). The
//! host only sorts the routed (token, choice) pairs by expert ([`ExpertSlots`], integer
//! bookkeeping).

use super::config::{ModelConfig, MoeConfig};
use super::error::{ModelError, Result};
use super::linear::{linear, WeightMat};
use super::weights::{Tensor, WeightStore};
use crate::device::Device;
use crate::ops::{self, ExpertSlots};

/// A SwiGLU MLP: `down(silu(gate x) ⊙ up x)`.
pub struct Mlp {
    gate: Tensor,
    up: Tensor,
    down: Tensor,
}

impl Mlp {
    /// Loads `{p}{gate,up,down}_proj.weight` with width `i`.
    pub fn load(ws: &WeightStore, p: &str, h: usize, i: usize) -> Result<Self> {
        Ok(Mlp {
            gate: ws.get(&format!("{p}gate_proj.weight"), &[i, h])?,
            up: ws.get(&format!("{p}up_proj.weight"), &[i, h])?,
            down: ws.get(&format!("{p}down_proj.weight"), &[h, i])?,
        })
    }
    /// Applies the MLP to `x` [t, H], writing [t, H] to `out`; projections run on `dev`.
    pub fn forward(&self, dev: &Device, x: &[f32], t: usize, out: &mut [f32]) -> Result<()> {
        swiglu(
            dev,
            x,
            t,
            WeightMat::of(&self.gate),
            WeightMat::of(&self.up),
            WeightMat::of(&self.down),
            out,
        )
    }
}

fn swiglu(
    dev: &Device,
    x: &[f32],
    t: usize,
    g: WeightMat,
    u: WeightMat,
    d: WeightMat,
    out: &mut [f32],
) -> Result<()> {
    let i = g.n;
    let mut a = vec![0.0; t * i];
    let mut b = vec![0.0; t * i];
    linear(dev, x, t, g, &mut a)?;
    linear(dev, x, t, u, &mut b)?;
    ops::swiglu(dev, &mut a, &b)?;
    linear(dev, &a, t, d, out)?;
    Ok(())
}

enum Experts {
    Fused { gate_up: Tensor, down: Tensor },
    Split(Vec<[Tensor; 3]>),
}

/// The MoE block of one layer.
pub struct Moe {
    cfg: MoeConfig,
    hidden: usize,
    router: Tensor,
    experts: Experts,
    shared: Mlp,
    shared_gate: Tensor,
}

impl Moe {
    /// Loads `{p}mlp.*` (router, experts in either layout, shared expert and its gate).
    pub fn load(ws: &WeightStore, p: &str, cfg: &ModelConfig) -> Result<Self> {
        let m = cfg
            .moe
            .clone()
            .ok_or_else(|| ModelError::InvalidArgument("MoE layer without MoE config".into()))?;
        let (h, e, im) = (cfg.hidden_size, m.num_experts, m.moe_intermediate_size);
        let fused = format!("{p}mlp.experts.gate_up_proj");
        let experts = if ws.contains(&fused) {
            Experts::Fused {
                gate_up: ws.get(&fused, &[e, 2 * im, h])?,
                down: ws.get(&format!("{p}mlp.experts.down_proj"), &[e, h, im])?,
            }
        } else {
            let mut v = Vec::with_capacity(e);
            for x in 0..e {
                let q = format!("{p}mlp.experts.{x}.");
                v.push([
                    ws.get(&format!("{q}gate_proj.weight"), &[im, h])?,
                    ws.get(&format!("{q}up_proj.weight"), &[im, h])?,
                    ws.get(&format!("{q}down_proj.weight"), &[h, im])?,
                ]);
            }
            Experts::Split(v)
        };
        Ok(Moe {
            router: ws.get(&format!("{p}mlp.gate.weight"), &[e, h])?,
            shared: Mlp::load(
                ws,
                &format!("{p}mlp.shared_expert."),
                h,
                m.shared_expert_intermediate_size,
            )?,
            shared_gate: ws.get(&format!("{p}mlp.shared_expert_gate.weight"), &[1, h])?,
            cfg: m,
            hidden: h,
            experts,
        })
    }

    fn expert(&self, e: usize) -> (WeightMat<'_>, WeightMat<'_>, WeightMat<'_>) {
        let (h, im) = (self.hidden, self.cfg.moe_intermediate_size);
        match &self.experts {
            Experts::Fused { gate_up, down } => (
                WeightMat::rows(gate_up, e * 2 * im, im, h),
                WeightMat::rows(gate_up, e * 2 * im + im, im, h),
                WeightMat::rows(down, e * h, h, im),
            ),
            Experts::Split(v) => (
                WeightMat::of(&v[e][0]),
                WeightMat::of(&v[e][1]),
                WeightMat::of(&v[e][2]),
            ),
        }
    }

    /// Applies the block to `x` [t, H], writing [t, H] to `out`, all on `dev`: the router
    /// (GEMM, then `ffn.moe_router`), the token rows gathered in expert order, each expert's
    /// SwiGLU over its contiguous rows (one `ffn.swiglu` for all experts), the shared expert
    /// and its gate, and `ffn.moe_combine`.
    pub fn forward(&self, dev: &Device, x: &[f32], t: usize, out: &mut [f32]) -> Result<()> {
        let (h, ne, k, im) = (
            self.hidden,
            self.cfg.num_experts,
            self.cfg.num_experts_per_tok,
            self.cfg.moe_intermediate_size,
        );
        let (x, out) = (&x[..t * h], &mut out[..t * h]);
        let mut logits = vec![0.0; t * ne];
        linear(dev, x, t, WeightMat::of(&self.router), &mut logits)?;
        let routing = ops::moe_router(dev, &logits, ne, k)?;
        let slots = ExpertSlots::new(&routing)?;
        let n = slots.len();
        let mut xs = vec![0.0; n * h];
        ops::moe_gather(dev, x, h, &slots, &mut xs)?;
        // Routed experts: gate and up over each expert's rows, SwiGLU over all rows, down.
        let mut a = vec![0.0; n * im];
        let mut b = vec![0.0; n * im];
        for e in 0..ne {
            let r = slots.segment(e);
            if r.is_empty() {
                continue;
            }
            let (g, u, _) = self.expert(e);
            let rows = &xs[r.start * h..r.end * h];
            linear(dev, rows, r.len(), g, &mut a[r.start * im..r.end * im])?;
            linear(dev, rows, r.len(), u, &mut b[r.start * im..r.end * im])?;
        }
        ops::swiglu(dev, &mut a, &b)?;
        let mut ys = vec![0.0; n * h];
        for e in 0..ne {
            let r = slots.segment(e);
            if r.is_empty() {
                continue;
            }
            let (_, _, d) = self.expert(e);
            let rows = &a[r.start * im..r.end * im];
            linear(dev, rows, r.len(), d, &mut ys[r.start * h..r.end * h])?;
        }
        // Shared expert and the logit of its scalar gate.
        let mut shared = vec![0.0; t * h];
        self.shared.forward(dev, x, t, &mut shared)?;
        let mut sg = vec![0.0; t];
        linear(dev, x, t, WeightMat::of(&self.shared_gate), &mut sg)?;
        ops::moe_combine(dev, &routing, &slots, &ys, &shared, &sg, h, out)?;
        Ok(())
    }
}

/// The feed-forward block of one layer.
pub enum Ffn {
    /// Dense SwiGLU MLP.
    Dense(Box<Mlp>),
    /// Mixture of experts.
    Moe(Box<Moe>),
}

impl Ffn {
    /// Loads the dense MLP or the MoE block of the layer with prefix `p`.
    pub fn load(ws: &WeightStore, p: &str, cfg: &ModelConfig) -> Result<Self> {
        if cfg.moe.is_some() {
            Ok(Ffn::Moe(Box::new(Moe::load(ws, p, cfg)?)))
        } else {
            Ok(Ffn::Dense(Box::new(Mlp::load(
                ws,
                &format!("{p}mlp."),
                cfg.hidden_size,
                cfg.intermediate_size,
            )?)))
        }
    }
    /// Applies the block to `x` [t, H], writing [t, H] to `out`; projections run on `dev`.
    pub fn forward(&self, dev: &Device, x: &[f32], t: usize, out: &mut [f32]) -> Result<()> {
        match self {
            Ffn::Dense(m) => m.forward(dev, x, t, out),
            Ffn::Moe(m) => m.forward(dev, x, t, out),
        }
    }
}
