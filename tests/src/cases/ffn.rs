//! Differential cases of the feed-forward kernels: `ffn.swiglu`, the dense MLP with SwiGLU
//! fused into its gate and up products (`gemm.xwt_swiglu`, `gemm.xwt_exact_swiglu`),
//! `ffn.moe_router`, `ffn.moe_combine`, and the routed-experts path of the MoE block end to end (router,
//! [`ExpertSlots`], `ffn.moe_gather`, the experts' GEMMs over their segments, SwiGLU,
//! combine). Ragged sizes, one token, k = 1 and k = num_experts, tied router logits, an
//! expert no token chooses, and every token routed to one expert.

use half::{bf16, f16};
use lse_runtime::device::Device;
use lse_runtime::ops::{self, Activations, ExpertSlots, GemmOut, HeadWeight, Routing};

use super::{Dtype, Stored};
use crate::diff::{Case, Out, Rng, Tol};
use crate::reference::ffn as reference;

/// f32's unit roundoff, 2^-24.
const U: f32 = 1.0 / (1u32 << 24) as f32;

struct SwigluCase {
    n: usize,
}

impl SwigluCase {
    fn inputs(&self) -> (Vec<f32>, Vec<f32>) {
        let mut rng = Rng(0x5769 + self.n as u64);
        let mut a = rng.f32s(self.n, 12.0);
        // Zeros, both flush sides of silu (below -87 LOOM's is 0), and the infinities.
        let special = [
            0.0,
            -0.0,
            -87.5,
            -100.0,
            100.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
        ];
        for (x, s) in a.iter_mut().zip(special) {
            *x = s;
        }
        (a, rng.f32s(self.n, 12.0))
    }
}

impl Case for SwigluCase {
    fn name(&self) -> String {
        format!("ffn.swiglu n={}", self.n)
    }

    fn run(&self, dev: &Device) -> Vec<Out> {
        let (mut a, b) = self.inputs();
        ops::swiglu(dev, &mut a, &b).unwrap();
        vec![Out::F32("a", a)]
    }

    fn reference(&self) -> Vec<Out> {
        let (mut a, b) = self.inputs();
        reference::swiglu(&mut a, &b);
        vec![Out::F32("a", a)]
    }

    fn tolerance(&self) -> Tol {
        // LOOM's silu is within 2.64 ulp of the exact value (LOOM.md), the reference's
        // `x · (1 / (1 + exp(-x)))` within about 3, and the product with `b` rounds once in
        // each: 8 ulp (2^-23 relative each) covers them. Below x = -87 LOOM's silu is 0
        // where the reference's is below 1e-36 in magnitude (times |b| <= 12).
        Tol {
            abs: 1e-30,
            rel: 8.0 * 2.0 * U,
        }
    }
}

/// Scale of the MLP cases' weights (activations are within 1).
const MLP_W: f32 = 0.2;

/// The dense MLP `(silu(x · gateᵀ) ⊙ (x · upᵀ)) · downᵀ` through `ops::swiglu_mlp`: `x`
/// `[m, k]`, `gate` and `up` `[n, k]`, `down` `[h, n]`, weights stored as `dtype` and met as
/// `act`. The reference rounds where the kernels round (the activations and `h` to a 16-bit
/// weight's type when `act` rounds to it) and sums exactly in f64.
struct SwigluMlpCase {
    m: usize,
    k: usize,
    n: usize,
    h: usize,
    dtype: Dtype,
    act: Activations,
    /// The tolerance, from the reference's own magnitudes (`SwigluMlpCase::new`).
    abs: f32,
}

struct MlpInputs {
    x: Vec<f32>,
    gate: Stored,
    up: Stored,
    down: Stored,
}

impl SwigluMlpCase {
    fn new(m: usize, k: usize, n: usize, h: usize, dtype: Dtype, act: Activations) -> Self {
        let mut case = SwigluMlpCase {
            m,
            k,
            n,
            h,
            dtype,
            act,
            abs: 0.0,
        };
        case.abs = case.bound();
        case
    }

    fn inputs(&self) -> MlpInputs {
        let (m, k, n, h) = (self.m, self.k, self.n, self.h);
        let mut rng = Rng(0x6d6c + (m * 131 + k * 17 + n * 7 + h) as u64);
        MlpInputs {
            x: rng.f32s(m * k, 1.0),
            gate: Stored::new(&rng.f32s(n * k, MLP_W), self.dtype),
            up: Stored::new(&rng.f32s(n * k, MLP_W), self.dtype),
            down: Stored::new(&rng.f32s(h * n, MLP_W), self.dtype),
        }
    }

    /// A value as the kernels round activations (to the weight's type, or kept f32).
    fn rounded(&self, v: f32) -> f32 {
        match (self.dtype, self.act) {
            (Dtype::Bf16, Activations::RoundedToWeight) => bf16::from_f32(v).to_f32(),
            (Dtype::F16, Activations::RoundedToWeight) => f16::from_f32(v).to_f32(),
            _ => v,
        }
    }

    /// The reference's `g`, `u` and `h` (`h` rounded as the kernels round it).
    fn hidden(&self, inp: &MlpInputs) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let x: Vec<f32> = inp.x.iter().map(|&v| self.rounded(v)).collect();
        let g = reference::matmul_xwt(&x, &inp.gate.widened(), self.k);
        let u = reference::matmul_xwt(&x, &inp.up.widened(), self.k);
        let mut hid = g.clone();
        reference::swiglu(&mut hid, &u);
        let hid = hid.into_iter().map(|v| self.rounded(v)).collect();
        (g, u, hid)
    }

    /// `abs` for this case: every sum of `j` terms in any f32 order is within `j · 2^-24 ·
    /// Σ|terms|` of the exact one; `g` and `u` carry that into `h` (silu's slope is below
    /// 1.1) with 8 more roundings of `h` (silu, the product); a rounded `h` may take the
    /// other neighbour in the weight's type (2^-8 relative for bf16, 2^-11 for f16) where
    /// those errors cross a midpoint; the down product sums `n` such `h` times `|w| <=
    /// MLP_W`, in its own order.
    fn bound(&self) -> f32 {
        let inp = self.inputs();
        let (g, u, hid) = self.hidden(&inp);
        let max = |v: &[f32]| v.iter().fold(0f32, |a, &b| a.max(b.abs()));
        let (gm, um, hm) = (max(&g), max(&u), max(&hid));
        let (k, n) = (self.k as f32, self.n as f32);
        // Σ|x w| <= k · max|x| · MLP_W, with max|x| <= 1.
        let dot = k * k * U * MLP_W;
        let eh = 1.1 * um * dot + gm * dot + 8.0 * U * hm;
        let flip = match (self.dtype, self.act) {
            (Dtype::Bf16, Activations::RoundedToWeight) => 1.0 / 256.0,
            (Dtype::F16, Activations::RoundedToWeight) => 1.0 / 2048.0,
            _ => 0.0,
        };
        n * MLP_W * (eh + flip * hm) + n * n * U * hm * MLP_W + 4.0 * U
    }
}

impl Case for SwigluMlpCase {
    fn name(&self) -> String {
        format!(
            "swiglu_mlp m={} k={} n={} h={} {:?} {:?}",
            self.m, self.k, self.n, self.h, self.dtype, self.act
        )
    }

    fn run(&self, dev: &Device) -> Vec<Out> {
        let inp = self.inputs();
        let mut y = vec![f32::NAN; self.m * self.h];
        let weights = [inp.gate.head(), inp.up.head(), inp.down.head()].map(Into::into);
        let fused = ops::swiglu_mlp(
            dev, &inp.x, self.k, weights, self.n, self.h, &mut y, self.act,
        )
        .unwrap();
        assert!(fused, "{}: the fused MLP applies", self.name());
        vec![Out::F32("y", y)]
    }

    fn reference(&self) -> Vec<Out> {
        let inp = self.inputs();
        let (_, _, hid) = self.hidden(&inp);
        let y = reference::matmul_xwt(&hid, &inp.down.widened(), self.n);
        vec![Out::F32("y", y)]
    }

    fn tolerance(&self) -> Tol {
        Tol {
            abs: self.abs,
            rel: 0.0,
        }
    }

    /// As `gemm.xwt`'s: only bf16 products of rounded activations take the target's order.
    fn same_order(&self) -> bool {
        self.dtype != Dtype::Bf16 || self.act == Activations::F32
    }
}

/// How router logits are made.
#[derive(Clone, Copy, Debug)]
enum Fill {
    /// Uniform in [-4, 4).
    Random,
    /// Three distinct values, so many experts tie.
    Ties,
    /// Random, but this expert's logit is -30 in every token: no token chooses it.
    Shunned(usize),
    /// Random, but this expert's logit is 30 in every token: every token chooses it first.
    Dominant(usize),
}

fn router_logits(tokens: usize, num_experts: usize, fill: Fill, seed: u64) -> Vec<f32> {
    let mut rng = Rng(seed);
    (0..tokens * num_experts)
        .map(|i| match fill {
            Fill::Random => rng.f32(4.0),
            Fill::Ties => rng.below(3) as f32 - 1.0,
            Fill::Shunned(e) if i % num_experts == e => -30.0,
            Fill::Dominant(e) if i % num_experts == e => 30.0,
            Fill::Shunned(_) | Fill::Dominant(_) => rng.f32(4.0),
        })
        .collect()
}

/// The router's weights against the reference: both take `p = exp(l - m) / s`, LOOM's `exp`
/// (0.92 ulp) against `std`'s (under 1 ulp), with `s` summed over `num_experts` terms in
/// different orders (within `num_experts · 2^-24` relative of the exact sum each), then
/// `w = p / Σ_top p` (k more additions). `(2 (num_experts + k) + 16) · 2^-24` relative
/// covers those differences.
fn router_tol(num_experts: usize, k: usize) -> Tol {
    Tol {
        abs: 0.0,
        rel: (2 * (num_experts + k) + 16) as f32 * U,
    }
}

struct RouterCase {
    tokens: usize,
    num_experts: usize,
    k: usize,
    fill: Fill,
}

impl RouterCase {
    fn logits(&self) -> Vec<f32> {
        router_logits(
            self.tokens,
            self.num_experts,
            self.fill,
            0x7274 + self.k as u64,
        )
    }
}

impl Case for RouterCase {
    fn name(&self) -> String {
        format!(
            "ffn.moe_router tokens={} num_experts={} k={} {:?}",
            self.tokens, self.num_experts, self.k, self.fill
        )
    }

    fn run(&self, dev: &Device) -> Vec<Out> {
        let r = ops::moe_router(dev, &self.logits(), self.num_experts, self.k).unwrap();
        vec![Out::U32("ids", r.ids), Out::F32("weights", r.weights)]
    }

    fn reference(&self) -> Vec<Out> {
        let (ids, weights) = reference::moe_router(&self.logits(), self.num_experts, self.k);
        vec![Out::U32("ids", ids), Out::F32("weights", weights)]
    }

    fn tolerance(&self) -> Tol {
        router_tol(self.num_experts, self.k)
    }
}

/// The combine alone, on a hand-made routing (distinct random experts per token, random
/// weights summing to about 1) and random expert outputs `y(e, t)`.
struct CombineCase {
    tokens: usize,
    h: usize,
    num_experts: usize,
    k: usize,
}

struct CombineInputs {
    routing: Routing,
    /// `[num_experts, tokens, h]`: expert `e`'s output row for token `t`.
    y: Vec<f32>,
    shared: Vec<f32>,
    shared_gate: Vec<f32>,
}

impl CombineCase {
    fn inputs(&self) -> CombineInputs {
        let (t, h, ne, k) = (self.tokens, self.h, self.num_experts, self.k);
        let mut rng = Rng(0x636d + (t * 31 + h) as u64);
        let mut ids = Vec::new();
        let mut weights = Vec::new();
        for _ in 0..t {
            let mut experts: Vec<u32> = (0..ne as u32).collect();
            for i in 0..k {
                let j = i + rng.below(ne - i);
                experts.swap(i, j);
            }
            let w: Vec<f32> = (0..k).map(|_| rng.f32(0.5) + 0.5).collect();
            let sum: f32 = w.iter().sum();
            ids.extend(&experts[..k]);
            weights.extend(w.iter().map(|v| v / sum));
        }
        CombineInputs {
            routing: Routing {
                k,
                num_experts: ne,
                ids,
                weights,
            },
            y: rng.f32s(ne * t * h, 1.0),
            shared: rng.f32s(t * h, 1.0),
            shared_gate: rng.f32s(t, 6.0),
        }
    }
}

impl Case for CombineCase {
    fn name(&self) -> String {
        format!(
            "ffn.moe_combine tokens={} h={} num_experts={} k={}",
            self.tokens, self.h, self.num_experts, self.k
        )
    }

    fn run(&self, dev: &Device) -> Vec<Out> {
        let (t, h) = (self.tokens, self.h);
        let inp = self.inputs();
        let slots = ExpertSlots::new(&inp.routing).unwrap();
        let mut ys = vec![0.0; slots.len() * h];
        for (i, (&e, &s)) in inp.routing.ids.iter().zip(slots.slots()).enumerate() {
            let src = (e as usize * t + i / self.k) * h;
            ys[s as usize * h..(s as usize + 1) * h].copy_from_slice(&inp.y[src..src + h]);
        }
        let mut out = vec![0.0; t * h];
        ops::moe_combine(
            dev,
            &inp.routing,
            &slots,
            &ys,
            &inp.shared,
            &inp.shared_gate,
            h,
            &mut out,
        )
        .unwrap();
        vec![Out::F32("out", out)]
    }

    fn reference(&self) -> Vec<Out> {
        let (t, h) = (self.tokens, self.h);
        let inp = self.inputs();
        let r = &inp.routing;
        let routed = reference::routed_by_expert(&r.ids, &r.weights, self.num_experts, self.k);
        let y = &inp.y;
        let out = reference::moe_combine(&inp.shared, &inp.shared_gate, h, &routed, |e, ti| {
            &y[(e * t + ti) * h..(e * t + ti + 1) * h]
        });
        vec![Out::F32("out", out)]
    }

    fn tolerance(&self) -> Tol {
        combine_tol(self.k)
    }
}

/// The combine's sum against the reference's: both add the shared term and `k` routed terms
/// (`|shared|, |y| <= 1`, weights summing to 1, so `Σ|terms| <= 2`), the kernel in the
/// router's order and the reference in expert-id order; each is within `(k + 1) · 2^-24 ·
/// Σ|terms|` of the exact sum (products included), so they differ by at most
/// `4 (k + 1) · 2^-24`. The two sigmoids (LOOM's 2.37 ulp, the reference's about 2) add
/// `9 · 2^-24`.
fn combine_tol(k: usize) -> Tol {
    Tol {
        abs: (4 * (k + 1) + 9) as f32 * U,
        rel: 0.0,
    }
}

/// The routed-experts path of the MoE block end to end, as `Moe::forward` runs it, with f32
/// expert weights (`|w| <= 1/4`) and activations `|x| <= 1`; the shared expert's output and
/// its gate's logits are inputs.
struct MoeCase {
    tokens: usize,
    h: usize,
    im: usize,
    num_experts: usize,
    k: usize,
    fill: Fill,
}

struct MoeInputs {
    x: Vec<f32>,
    logits: Vec<f32>,
    /// Per expert: gate `[im, h]`, up `[im, h]`, down `[h, im]`.
    experts: Vec<[Vec<f32>; 3]>,
    shared: Vec<f32>,
    shared_gate: Vec<f32>,
}

impl MoeCase {
    fn inputs(&self) -> MoeInputs {
        let (t, h, im, ne) = (self.tokens, self.h, self.im, self.num_experts);
        let mut rng = Rng(0x6d6f + (t * 131 + h * 17 + ne) as u64);
        MoeInputs {
            x: rng.f32s(t * h, 1.0),
            logits: router_logits(t, ne, self.fill, 0x6c67 + t as u64),
            experts: (0..ne)
                .map(|_| {
                    [
                        rng.f32s(im * h, 0.25),
                        rng.f32s(im * h, 0.25),
                        rng.f32s(h * im, 0.25),
                    ]
                })
                .collect(),
            shared: rng.f32s(t * h, 1.0),
            shared_gate: rng.f32s(t, 6.0),
        }
    }
}

/// `y = x · wᵀ` through the LOOM GEMM for an f32 weight `w` `[n, k]`.
fn gemm(dev: &Device, x: &[f32], k: usize, w: &[f32], y: &mut [f32]) {
    let n = w.len() / k;
    ops::gemm(
        dev,
        x,
        k,
        HeadWeight::F32(w),
        n,
        y,
        GemmOut::Overwrite,
        Activations::F32,
    )
    .unwrap();
}

impl Case for MoeCase {
    fn name(&self) -> String {
        format!(
            "moe routed experts tokens={} h={} im={} num_experts={} k={} {:?}",
            self.tokens, self.h, self.im, self.num_experts, self.k, self.fill
        )
    }

    fn run(&self, dev: &Device) -> Vec<Out> {
        let (t, h, im) = (self.tokens, self.h, self.im);
        let inp = self.inputs();
        let routing = ops::moe_router(dev, &inp.logits, self.num_experts, self.k).unwrap();
        let slots = ExpertSlots::new(&routing).unwrap();
        let n = slots.len();
        let mut xs = vec![0.0; n * h];
        ops::moe_gather(dev, &inp.x, h, &slots, &mut xs).unwrap();
        let mut a = vec![0.0; n * im];
        let mut b = vec![0.0; n * im];
        for (e, [g, u, _]) in inp.experts.iter().enumerate() {
            let r = slots.segment(e);
            let rows = &xs[r.start * h..r.end * h];
            gemm(dev, rows, h, g, &mut a[r.start * im..r.end * im]);
            gemm(dev, rows, h, u, &mut b[r.start * im..r.end * im]);
        }
        ops::swiglu(dev, &mut a, &b).unwrap();
        let mut ys = vec![0.0; n * h];
        for (e, [_, _, d]) in inp.experts.iter().enumerate() {
            let r = slots.segment(e);
            let rows = &a[r.start * im..r.end * im];
            gemm(dev, rows, im, d, &mut ys[r.start * h..r.end * h]);
        }
        let mut out = vec![0.0; t * h];
        ops::moe_combine(
            dev,
            &routing,
            &slots,
            &ys,
            &inp.shared,
            &inp.shared_gate,
            h,
            &mut out,
        )
        .unwrap();
        let used = (0..self.num_experts)
            .map(|e| slots.segment(e).len() as u32)
            .collect();
        vec![
            Out::U32("ids", routing.ids),
            Out::U32("rows per expert", used),
            Out::F32("out", out),
        ]
    }

    fn reference(&self) -> Vec<Out> {
        let h = self.h;
        let inp = self.inputs();
        let (ids, weights) = reference::moe_router(&inp.logits, self.num_experts, self.k);
        let routed = reference::routed_by_expert(&ids, &weights, self.num_experts, self.k);
        // Every expert's output for every token (the reference does not gather).
        let y: Vec<Vec<f32>> = inp
            .experts
            .iter()
            .map(|[g, u, d]| reference::swiglu_mlp(&inp.x, h, g, u, d))
            .collect();
        let out = reference::moe_combine(&inp.shared, &inp.shared_gate, h, &routed, |e, ti| {
            &y[e][ti * h..(ti + 1) * h]
        });
        let used = routed.iter().map(|r| r.len() as u32).collect();
        vec![
            Out::U32("ids", ids),
            Out::U32("rows per expert", used),
            Out::F32("out", out),
        ]
    }

    fn tolerance(&self) -> Tol {
        // Two f32 GEMM layers against f64 dots: a dot of n terms is within n · 2^-24 · Σ|terms|
        // of the exact value; with |x| <= 1 and |w| <= 1/4, gate and up are within
        // h² · 2^-26 and, through silu · up and down (Σ|terms| grows by at most im · 1/4 ·
        // max|a|), the expert's output within about (h² + im²) · 2^-24 for these sizes.
        // The combine adds its own bound (`combine_tol`).
        let (h, im) = (self.h as f32, self.im as f32);
        Tol {
            abs: (h * h + im * im) * U + combine_tol(self.k).abs,
            rel: 0.0,
        }
    }
}

/// Every feed-forward case.
pub fn cases() -> Vec<Box<dyn Case>> {
    use Fill::*;
    let mut out: Vec<Box<dyn Case>> = Vec::new();
    for n in [1, 7, 255, 256, 1000, 4099] {
        out.push(Box::new(SwigluCase { n }));
    }
    let kinds = [
        (Dtype::Bf16, Activations::RoundedToWeight),
        (Dtype::F16, Activations::RoundedToWeight),
        (Dtype::Bf16, Activations::F32),
        (Dtype::F16, Activations::F32),
        (Dtype::F32, Activations::F32),
    ];
    for (dtype, act) in kinds {
        // Ragged (a last row block of 6 rows, widths below a tile, one of everything), whole
        // blocks where the host fuses the K loops, and the 0.8B model's MLP on 9 rows.
        for (m, k, n, h) in [
            (70, 96, 130, 40),
            (1, 1, 1, 1),
            (5, 33, 7, 65),
            (64, 128, 128, 64),
            (9, 1024, 3584, 1024),
        ] {
            out.push(Box::new(SwigluMlpCase::new(m, k, n, h, dtype, act)));
        }
    }
    for (tokens, num_experts, k, fill) in [
        (1, 4, 1, Random),
        (5, 256, 8, Random),
        (3, 300, 300, Random),
        (2, 512, 10, Random),
        (4, 77, 5, Ties),
        (3, 64, 64, Ties),
        (6, 8, 3, Shunned(5)),
        (6, 8, 1, Dominant(2)),
        (9, 130, 4, Dominant(129)),
    ] {
        out.push(Box::new(RouterCase {
            tokens,
            num_experts,
            k,
            fill,
        }));
    }
    for (tokens, h, num_experts, k) in [(1, 5, 4, 1), (7, 300, 8, 3), (3, 64, 4, 4)] {
        out.push(Box::new(CombineCase {
            tokens,
            h,
            num_experts,
            k,
        }));
    }
    for (tokens, h, im, num_experts, k, fill) in [
        (1, 16, 8, 4, 1, Random),
        (13, 37, 19, 8, 2, Random),
        (7, 33, 9, 4, 4, Random),
        (9, 20, 12, 6, 2, Ties),
        (10, 24, 8, 8, 3, Shunned(5)),
        (70, 24, 8, 8, 1, Dominant(3)),
        (5, 64, 16, 256, 8, Random),
    ] {
        out.push(Box::new(MoeCase {
            tokens,
            h,
            im,
            num_experts,
            k,
            fill,
        }));
    }
    out
}
