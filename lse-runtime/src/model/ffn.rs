//! Feed-forward blocks: SwiGLU MLP and the Qwen3.5 mixture of experts (softmax router, top-k,
//! renormalised weights, sigmoid-gated shared expert). Experts may be fused 3-D tensors
//! (`experts.gate_up_proj` [E, 2Im, H], `experts.down_proj` [E, H, Im]), stacked 3-D tensors
//! (`experts.gate_proj`, `experts.up_proj` [E, Im, H], as llama.cpp's GGUF files hold them) or
//! per-expert 2-D.
//!
//! Everything runs as LOOM kernels on the engine's device: projections through the GEMM
//! ([`linear`]; the routed experts of a fused or stacked bf16, f16 or f32 tensor in one
//! launch per product for all of them, [`ops::gemm_experts`]), SwiGLU fused into the dense
//! MLP's gate and up products where its three weights take one form of activations
//! ([`ops::swiglu_mlp`]), else through `ffn.swiglu`, the router, the gather of each expert's
//! rows and the final combine through the MoE ops ([`crate::ops::moe_router`] and the rest). The
//! host only sorts the routed (token, choice) pairs by expert ([`ExpertSlots`], integer
//! bookkeeping).

use super::config::{ModelConfig, MoeConfig};
use super::device_weights::DeviceWeight;
use super::error::{ModelError, Result};
use super::linear::{linear, linear_same_x, WeightMat};
use super::weights::WeightStore;
use crate::device::{DevSlice, DevSliceMut, Device};
use crate::ops::{self, Activations, ExpertSlots, ExpertsJob, WeightView};

/// A SwiGLU MLP: `down(silu(gate x) ⊙ up x)`, its weights on the engine's device.
pub struct Mlp {
    gate: DeviceWeight,
    up: DeviceWeight,
    down: DeviceWeight,
}

impl Mlp {
    /// Loads `{p}{gate,up,down}_proj.weight` with width `i` onto `dev`.
    pub fn load(dev: &Device, ws: &WeightStore, p: &str, h: usize, i: usize) -> Result<Self> {
        let w = |n: &str, s: &[usize]| DeviceWeight::new(dev, &ws.get(&format!("{p}{n}"), s)?);
        Ok(Mlp {
            gate: w("gate_proj.weight", &[i, h])?,
            up: w("up_proj.weight", &[i, h])?,
            down: w("down_proj.weight", &[h, i])?,
        })
    }
    /// Applies the MLP to `x` [t, H], writing [t, H] to `out`; everything runs on `dev`.
    pub fn forward(
        &self,
        dev: &Device,
        x: DevSlice<'_, f32>,
        mut out: DevSliceMut<'_, f32>,
    ) -> Result<()> {
        let (gate, up, down) = (&self.gate, &self.up, &self.down);
        if gate.act == up.act
            && up.act == down.act
            && ops::swiglu_mlp(
                dev,
                x,
                gate.cols,
                [gate.view(), up.view(), down.view()],
                gate.rows,
                down.rows,
                out.reborrow_mut(),
                gate.act,
            )?
        {
            return Ok(());
        }
        let t = x.len() / gate.cols;
        let i = gate.rows;
        let mut a = dev.scratch::<f32>(t * i)?;
        let mut b = dev.scratch::<f32>(t * i)?;
        linear_same_x(
            dev,
            x,
            vec![
                (WeightMat::of(gate), a.view_mut()),
                (WeightMat::of(up), b.view_mut()),
            ],
        )?;
        ops::swiglu(dev, &mut a, &b)?;
        linear(dev, a.view(), WeightMat::of(down), out)?;
        Ok(())
    }
}

/// A weight's view when one launch over every expert's matrix can read it
/// ([`ops::gemm_experts`]): bf16, f16 or f32 whose elements can be indexed in `u32` (a larger
/// tensor, such as 512 experts of 2 x 1024 x 4096, takes a product per expert, each on its
/// own matrix), or a block format interleaved for the integer GEMM (K-quants and Q8_0 met by
/// llama.cpp's activations) where each expert's matrix starts `first_row` rows into a
/// multiple of 64 of them, as its interleaved groups do.
fn grouped_view(w: &DeviceWeight, first_row: usize) -> Option<WeightView<'_>> {
    let v = w.view();
    let ok = match v {
        WeightView::Bf16(_) | WeightView::F16(_) | WeightView::F32(_) => {
            u32::try_from(v.len()).is_ok()
        }
        WeightView::Quant(q) => q.interleaved.is_some() && first_row.is_multiple_of(64),
        _ => false,
    };
    ok.then_some(v)
}

/// The job of [`ops::gemm_experts`] for one of [`GroupedExperts`]' weights, into `y`.
fn experts_job<'a>(
    (w, stride, offset): (WeightView<'a>, usize, usize),
    n: usize,
    y: DevSliceMut<'a, f32>,
) -> ExpertsJob<'a> {
    ExpertsJob {
        w,
        n,
        stride,
        offset,
        y,
    }
}

/// The routed experts' weights as [`ops::gemm_experts`] takes them ([`Moe::grouped`]): each
/// product's tensor, the distance between two experts' matrices in it and the first one's
/// offset.
struct GroupedExperts<'a> {
    gate: (WeightView<'a>, usize, usize),
    up: (WeightView<'a>, usize, usize),
    down: (WeightView<'a>, usize, usize),
    act: Activations,
}

enum Experts {
    Fused {
        gate_up: DeviceWeight,
        down: DeviceWeight,
    },
    Stacked {
        gate: DeviceWeight,
        up: DeviceWeight,
        down: DeviceWeight,
    },
    Split(Vec<[DeviceWeight; 3]>),
}

/// The MoE block of one layer, its weights on the engine's device.
pub struct Moe {
    cfg: MoeConfig,
    hidden: usize,
    router: DeviceWeight,
    experts: Experts,
    shared: Mlp,
    shared_gate: DeviceWeight,
}

impl Moe {
    /// Loads `{p}mlp.*` (router, experts in either layout, shared expert and its gate) onto
    /// `dev`.
    pub fn load(dev: &Device, ws: &WeightStore, p: &str, cfg: &ModelConfig) -> Result<Self> {
        let m = cfg
            .moe
            .clone()
            .ok_or_else(|| ModelError::InvalidArgument("MoE layer without MoE config".into()))?;
        let (h, e, im) = (cfg.hidden_size, m.num_experts, m.moe_intermediate_size);
        let fused = format!("{p}mlp.experts.gate_up_proj");
        let stacked = format!("{p}mlp.experts.gate_proj");
        let w = |name: &str, s: &[usize]| DeviceWeight::new(dev, &ws.get(name, s)?);
        let down = || w(&format!("{p}mlp.experts.down_proj"), &[e, h, im]);
        let experts = if ws.contains(&fused) {
            Experts::Fused {
                gate_up: w(&fused, &[e, 2 * im, h])?,
                down: down()?,
            }
        } else if ws.contains(&stacked) {
            Experts::Stacked {
                gate: w(&stacked, &[e, im, h])?,
                up: w(&format!("{p}mlp.experts.up_proj"), &[e, im, h])?,
                down: down()?,
            }
        } else {
            let mut v = Vec::with_capacity(e);
            for x in 0..e {
                let q = format!("{p}mlp.experts.{x}.");
                v.push([
                    w(&format!("{q}gate_proj.weight"), &[im, h])?,
                    w(&format!("{q}up_proj.weight"), &[im, h])?,
                    w(&format!("{q}down_proj.weight"), &[h, im])?,
                ]);
            }
            Experts::Split(v)
        };
        Ok(Moe {
            router: w(&format!("{p}mlp.gate.weight"), &[e, h])?,
            shared: Mlp::load(
                dev,
                ws,
                &format!("{p}mlp.shared_expert."),
                h,
                m.shared_expert_intermediate_size,
            )?,
            shared_gate: w(&format!("{p}mlp.shared_expert_gate.weight"), &[1, h])?,
            cfg: m,
            hidden: h,
            experts,
        })
    }

    fn expert(&self, e: usize) -> Result<(WeightMat<'_>, WeightMat<'_>, WeightMat<'_>)> {
        let (h, im) = (self.hidden, self.cfg.moe_intermediate_size);
        Ok(match &self.experts {
            Experts::Fused { gate_up, down } => (
                WeightMat::rows(gate_up, e * 2 * im, im, h)?,
                WeightMat::rows(gate_up, e * 2 * im + im, im, h)?,
                WeightMat::rows(down, e * h, h, im)?,
            ),
            Experts::Stacked { gate, up, down } => (
                WeightMat::rows(gate, e * im, im, h)?,
                WeightMat::rows(up, e * im, im, h)?,
                WeightMat::rows(down, e * h, h, im)?,
            ),
            Experts::Split(v) => (
                WeightMat::of(&v[e][0]),
                WeightMat::of(&v[e][1]),
                WeightMat::of(&v[e][2]),
            ),
        })
    }

    /// The experts' weights as [`ops::gemm_experts`] takes them, when they are stacked in
    /// one tensor per product (fused or stacked layouts) of bf16, f16 or f32, or interleaved
    /// for the integer GEMM, all met by the same activations; `None` for experts split into a
    /// tensor each or in another block format, which take a GEMM per expert.
    fn grouped(&self) -> Option<GroupedExperts<'_>> {
        let (h, im) = (self.hidden, self.cfg.moe_intermediate_size);
        let (gate, up, down, act) = match &self.experts {
            Experts::Fused { gate_up, down } if gate_up.act == down.act => (
                (grouped_view(gate_up, 0)?, 2 * im * h, 0),
                (grouped_view(gate_up, im)?, 2 * im * h, im * h),
                (grouped_view(down, 0)?, h * im, 0),
                down.act,
            ),
            Experts::Stacked { gate, up, down } if gate.act == down.act && up.act == down.act => (
                (grouped_view(gate, 0)?, im * h, 0),
                (grouped_view(up, 0)?, im * h, 0),
                (grouped_view(down, 0)?, h * im, 0),
                down.act,
            ),
            _ => return None,
        };
        Some(GroupedExperts {
            gate,
            up,
            down,
            act,
        })
    }

    /// Applies the block to `x` [t, H], writing [t, H] to `out`, all on `dev`: the router
    /// (GEMM, then `ffn.moe_router`), the token rows gathered in expert order, the experts'
    /// SwiGLU over their rows (one launch per product for all experts where `Moe::grouped`
    /// gives their tensors, else a GEMM per expert; one `ffn.swiglu` for all), the shared expert
    /// and its gate, and `ffn.moe_combine`.
    pub fn forward(
        &self,
        dev: &Device,
        x: DevSlice<'_, f32>,
        out: DevSliceMut<'_, f32>,
    ) -> Result<()> {
        let (h, ne, k, im) = (
            self.hidden,
            self.cfg.num_experts,
            self.cfg.num_experts_per_tok,
            self.cfg.moe_intermediate_size,
        );
        let t = x.len() / h;
        let mut logits = dev.scratch::<f32>(t * ne)?;
        linear(dev, x, WeightMat::of(&self.router), logits.view_mut())?;
        // The routing comes to the host for the integer sort by expert.
        let routing = ops::moe_router(dev, &logits, ne, k)?;
        let grouped = self.grouped();
        let slots = match grouped {
            Some(_) => ExpertSlots::aligned(&routing, ops::NARROW_ROWS)?,
            None => ExpertSlots::new(&routing)?,
        };
        let n = slots.len();
        // Routed experts: gate and up over each expert's rows, SwiGLU over all rows, down.
        let mut a = dev.scratch::<f32>(n * im)?;
        let mut b = dev.scratch::<f32>(n * im)?;
        let mut ys = dev.scratch::<f32>(n * h)?;
        if let Some(g) = grouped {
            // Every expert in one launch per weight, each block of rows on its expert's; the
            // tokens' rows gathered into the experts' order as the products read them.
            let experts = slots.block_experts();
            let jobs = vec![
                experts_job(g.gate, im, a.view_mut()),
                experts_job(g.up, im, b.view_mut()),
            ];
            ops::gemm_experts_gathered(dev, x, h, &slots, &experts, g.act, jobs)?;
            ops::swiglu(dev, &mut a, &b)?;
            let jobs = vec![experts_job(g.down, h, ys.view_mut())];
            ops::gemm_experts(dev, a.view(), im, &experts, g.act, jobs)?;
        } else {
            let mut xs = dev.scratch::<f32>(n * h)?;
            ops::moe_gather(dev, x, h, &slots, &mut xs)?;
            for e in 0..ne {
                let r = slots.segment(e);
                if r.is_empty() {
                    continue;
                }
                let (g, u, _) = self.expert(e)?;
                let rows = xs.slice(r.start * h..r.end * h)?;
                let (ya, yb) = (
                    a.slice_mut(r.start * im..r.end * im)?,
                    b.slice_mut(r.start * im..r.end * im)?,
                );
                linear_same_x(dev, rows, vec![(g, ya), (u, yb)])?;
            }
            ops::swiglu(dev, &mut a, &b)?;
            for e in 0..ne {
                let r = slots.segment(e);
                if r.is_empty() {
                    continue;
                }
                let (_, _, d) = self.expert(e)?;
                let rows = a.slice(r.start * im..r.end * im)?;
                linear(dev, rows, d, ys.slice_mut(r.start * h..r.end * h)?)?;
            }
        }
        // Shared expert and the logit of its scalar gate.
        let mut shared = dev.scratch::<f32>(t * h)?;
        self.shared.forward(dev, x, shared.view_mut())?;
        let mut sg = dev.scratch::<f32>(t)?;
        linear(dev, x, WeightMat::of(&self.shared_gate), sg.view_mut())?;
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
    /// Loads the dense MLP or the MoE block of the layer with prefix `p` onto `dev`.
    pub fn load(dev: &Device, ws: &WeightStore, p: &str, cfg: &ModelConfig) -> Result<Self> {
        if cfg.moe.is_some() {
            Ok(Ffn::Moe(Box::new(Moe::load(dev, ws, p, cfg)?)))
        } else {
            Ok(Ffn::Dense(Box::new(Mlp::load(
                dev,
                ws,
                &format!("{p}mlp."),
                cfg.hidden_size,
                cfg.intermediate_size,
            )?)))
        }
    }
    /// Applies the block to `x` [t, H], writing [t, H] to `out`; everything runs on `dev`.
    pub fn forward(
        &self,
        dev: &Device,
        x: DevSlice<'_, f32>,
        out: DevSliceMut<'_, f32>,
    ) -> Result<()> {
        match self {
            Ffn::Dense(m) => m.forward(dev, x, out),
            Ffn::Moe(m) => m.forward(dev, x, out),
        }
    }
}
