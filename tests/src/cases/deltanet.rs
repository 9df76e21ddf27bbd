//! Differential cases of the Gated DeltaNet kernels (`deltanet.conv`, `deltanet.gates`,
//! `deltanet.delta_prep` with `deltanet.delta_rule`, `deltanet.gated_norm`) against the f64
//! references of [`crate::reference::deltanet`]: ragged pass lengths around the 64-row chunk
//! (1, 5, 63, 64, 65, 150), passes shorter than the conv state, passes split inside a chunk
//! with both states carried, dk != dv, value blocks cut short (dv not a multiple of 32),
//! hv = 2 hk, Qwen3.5's own head sizes, and decays as strong as g = -30.
//!
//! None of these kernels uses `tile_dot`, so every host level equals the generated Rust bit
//! for bit; the tolerances below are against the f64 references.

use lse_runtime::device::Device;
use lse_runtime::ops::{self, GdnShape, VHeadOrder};

use super::boxed;
use crate::diff::{Case, Out, Rng, Tol};
use crate::reference::deltanet as reference;

/// The q/k norms' eps and the gated norm's, as the model passes them.
const EPS: f32 = 1e-6;

fn shape(hk: usize, hv: usize, dk: usize, dv: usize) -> GdnShape {
    GdnShape {
        hk,
        hv,
        dk,
        dv,
        kc: 4,
        v_order: VHeadOrder::Grouped,
    }
}

fn q_scale(shape: &GdnShape) -> f32 {
    1.0 / (shape.dk as f32).sqrt()
}

/// The conv of one pass of `t` rows after a carried state.
#[derive(Debug)]
struct ConvCase {
    shape: GdnShape,
    t: usize,
}

impl ConvCase {
    /// `(w, state, x)`.
    fn inputs(&self) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let mut rng = Rng(0xc0 + self.t as u64 * 7 + self.shape.dk as u64);
        let cd = self.shape.conv_dim();
        let w = rng.f32s(cd * self.shape.kc, 0.7);
        let state = rng.f32s(self.shape.conv_state_len(), 2.0);
        let x = rng.f32s(self.t * cd, 2.0);
        (w, state, x)
    }
}

impl Case for ConvCase {
    fn name(&self) -> String {
        format!("{self:?}")
    }

    fn run(&self, dev: &Device) -> Vec<Out> {
        let (w, state, x) = self.inputs();
        let mut out = vec![0.0; x.len()];
        let mut new_state = vec![0.0; state.len()];
        let scale = q_scale(&self.shape);
        ops::deltanet_conv(
            dev,
            &self.shape,
            &w,
            &state,
            &x,
            scale,
            EPS,
            &mut out,
            &mut new_state,
        )
        .unwrap();
        vec![Out::F32("out", out), Out::F32("new_state", new_state)]
    }

    fn reference(&self) -> Vec<Out> {
        let (w, state, x) = self.inputs();
        let (out, new_state) =
            reference::conv(&self.shape, &w, &state, &x, q_scale(&self.shape), EPS);
        vec![Out::F32("out", out), Out::F32("new_state", new_state)]
    }

    fn tolerance(&self) -> Tol {
        // Four products summed with `fma` (|terms| < 1.4 each), LOOM's silu (2.64 ulp), and
        // for q and k a sum of at most 128 squares and one division: a few ulp of values of
        // magnitude at most 4 (v) or 1 (normalised q, k). Observed: at most 4.8e-7 off; the
        // state is copied exactly.
        Tol {
            abs: 2e-6,
            rel: 2e-6,
        }
    }
}

/// The gates of `t` rows of `hv` heads, with `a + dt_bias` swept over softplus's regimes.
#[derive(Debug)]
struct GatesCase {
    t: usize,
    hv: usize,
    /// Whether `a` sweeps [-100, 40] evenly (else it is random in [-30, 30]).
    sweep: bool,
}

/// Values of `a` the gates case always includes: far below 0 (softplus = e^x, down to
/// subnormal results), around its threshold 20, and beyond.
const A_EXTREMES: [f32; 14] = [
    -100.0, -87.0, -40.0, -20.0, -17.0, -15.0, -1e-3, 0.0, 1.0, 19.99, 20.0, 20.01, 25.0, 60.0,
];

impl GatesCase {
    /// `(b, a, rate, dt_bias)` with the decay rate `-exp(A_log)` of a random `A_log`;
    /// `dt_bias` is 0 on head 0 so the extremes reach softplus as they are.
    fn inputs(&self) -> [Vec<f32>; 4] {
        let mut rng = Rng(0x9a7e + self.t as u64);
        let n = self.t * self.hv;
        let b = rng.f32s(n, 12.0);
        let mut a = if self.sweep {
            (0..n)
                .map(|i| -100.0 + 140.0 * i as f32 / n as f32)
                .collect()
        } else {
            rng.f32s(n, 30.0)
        };
        for (i, x) in A_EXTREMES.iter().enumerate() {
            if i * self.hv < n {
                a[i * self.hv] = *x;
            }
        }
        let rate = rng.f32s(self.hv, 2.0).iter().map(|a| -a.exp()).collect();
        let mut dt_bias = rng.f32s(self.hv, 1.0);
        dt_bias[0] = 0.0;
        [b, a, rate, dt_bias]
    }
}

impl Case for GatesCase {
    fn name(&self) -> String {
        format!("{self:?}")
    }

    fn run(&self, dev: &Device) -> Vec<Out> {
        let [b, a, rate, dt_bias] = self.inputs();
        let (mut beta, mut g) = (vec![0.0; b.len()], vec![0.0; b.len()]);
        ops::deltanet_gates(dev, &b, &a, &rate, &dt_bias, &mut beta, &mut g).unwrap();
        vec![Out::F32("beta", beta), Out::F32("g", g)]
    }

    fn reference(&self) -> Vec<Out> {
        let [b, a, rate, dt_bias] = self.inputs();
        let (beta, g) = reference::gates(&b, &a, &rate, &dt_bias);
        vec![Out::F32("beta", beta), Out::F32("g", g)]
    }

    fn tolerance(&self) -> Tol {
        // sigmoid is within 2.37 ulp (LOOM.md); g is the rate times softplus, whose log1p
        // form is within a few ulp, with one rounding. Observed over a sweep of
        // a + dt_bias in [-100, 40]: beta within 1.4e-7 and g within 2.4e-7 relative (2 ulp);
        // 1e-6 (8 ulp) still fails on any lost regime (softplus -> 0 below -17, a missed
        // threshold). The absolute 1e-37 admits subnormal g, where exp(-100) loses bits.
        Tol {
            abs: 1e-37,
            rel: 1e-6,
        }
    }
}

/// The delta rule over `passes` consecutive passes (their lengths) of one sequence, both
/// states carried from one pass to the next.
#[derive(Debug)]
struct DeltaCase {
    shape: GdnShape,
    passes: Vec<usize>,
    /// Whether the first pass starts from a random state (else from 0, as a prompt does).
    carried_in: bool,
    /// Whether every 17th row decays by e^-30 (else every g is in (-0.1, 0], so the state
    /// carried across a pass boundary matters for the rest of the sequence).
    strong_decay: bool,
}

struct DeltaInputs {
    qkv: Vec<f32>,
    beta: Vec<f32>,
    g: Vec<f32>,
    state: Vec<f32>,
}

impl DeltaCase {
    fn t(&self) -> usize {
        self.passes.iter().sum()
    }

    /// Conv-output rows with unit q and k heads (q then scaled by 1/sqrt(dk)) and v in
    /// [-1, 1], β in (0, 1), and g in (-1, 0] with every 17th row at -30 (a decay of e^-30
    /// within one row, near f32 underflow after a few), or with weak decay in (-0.1, 0].
    fn inputs(&self) -> DeltaInputs {
        let s = &self.shape;
        let t = self.t();
        let mut rng = Rng(0xde17a + t as u64 * 13 + (s.dk * 100 + s.dv) as u64);
        let cd = s.conv_dim();
        let mut qkv = rng.f32s(t * cd, 1.0);
        for row in qkv.chunks_mut(cd) {
            for head in 0..2 * s.hk {
                let x = &mut row[head * s.dk..(head + 1) * s.dk];
                let norm = x.iter().map(|v| v * v).sum::<f32>().sqrt();
                let scale = if head < s.hk { q_scale(s) } else { 1.0 };
                x.iter_mut().for_each(|v| *v *= scale / norm);
            }
        }
        let beta = (0..t * s.hv).map(|_| 0.5 + rng.f32(0.5)).collect();
        let g = (0..t * s.hv)
            .map(|i| {
                if !self.strong_decay {
                    -0.05 * (rng.f32(1.0) + 1.0)
                } else if (i / s.hv) % 17 == 5 {
                    -30.0
                } else {
                    -0.5 * (rng.f32(1.0) + 1.0)
                }
            })
            .collect();
        let state = if self.carried_in {
            rng.f32s(s.recurrent_state_len(), 0.5)
        } else {
            vec![0.0; s.recurrent_state_len()]
        };
        DeltaInputs {
            qkv,
            beta,
            g,
            state,
        }
    }
}

impl Case for DeltaCase {
    fn name(&self) -> String {
        format!("{self:?}")
    }

    fn run(&self, dev: &Device) -> Vec<Out> {
        let DeltaInputs {
            qkv,
            beta,
            g,
            mut state,
        } = self.inputs();
        let (cd, hv, vd) = (self.shape.conv_dim(), self.shape.hv, self.shape.value_dim());
        let mut out = vec![0.0; self.t() * vd];
        let mut r0 = 0;
        for &n in &self.passes {
            let rows = r0..r0 + n;
            ops::delta_rule_chunked(
                dev,
                &self.shape,
                &qkv[rows.start * cd..rows.end * cd],
                &beta[rows.start * hv..rows.end * hv],
                &g[rows.start * hv..rows.end * hv],
                &mut state,
                &mut out[rows.start * vd..rows.end * vd],
            )
            .unwrap();
            r0 += n;
        }
        vec![Out::F32("out", out), Out::F32("state", state)]
    }

    fn reference(&self) -> Vec<Out> {
        let x = self.inputs();
        let mut state: Vec<f64> = x.state.iter().map(|&v| v as f64).collect();
        let out = reference::delta_rule_recurrent(&self.shape, &x.qkv, &x.beta, &x.g, &mut state);
        let state = state.iter().map(|&v| v as f32).collect();
        vec![Out::F32("out", out), Out::F32("state", state)]
    }

    fn tolerance(&self) -> Tol {
        // The chunked form is the recurrence reassociated: per row, a dot product over dk
        // (unit k, state entries below 1), a forward substitution over at most 63 earlier
        // rows (|L_ij| <= β |k_i·k_j| < 1) and a sum over at most 64 rows, each term rounded
        // once in f32, and the state carries these errors from chunk to chunk under decay.
        // The largest term is the decay D_ij = exp(Γ_i - Γ_j) from the chunk's cumulative
        // sums: with g = -30 rows, |Γ| reaches about 150, whose f32 rounding (8e-6) moves
        // D by that relative amount (transformers' and FLA's chunked forms share it).
        // Observed: at most 4e-7 on outputs (magnitude below 0.2) and 1.3e-6 on the state
        // (below 0.8) with strong decay, 2e-7 without. 5e-6 leaves a factor 4 and still fails
        // on a wrong decay, a dropped row or a misplaced head, which move values by 1e-2.
        Tol {
            abs: 5e-6,
            rel: 0.0,
        }
    }
}

/// The gated norm of `t` rows of `hv` heads of `dv` values.
#[derive(Debug)]
struct NormCase {
    t: usize,
    hv: usize,
    dv: usize,
}

impl NormCase {
    /// `(o, z, w)`.
    fn inputs(&self) -> [Vec<f32>; 3] {
        let mut rng = Rng(0x90 + (self.t * 1000 + self.dv) as u64);
        let n = self.t * self.hv * self.dv;
        let o = rng.f32s(n, 3.0);
        let z = rng.f32s(n, 6.0);
        let w = rng.f32s(self.dv, 1.0).iter().map(|v| v + 1.0).collect();
        [o, z, w]
    }
}

impl Case for NormCase {
    fn name(&self) -> String {
        format!("{self:?}")
    }

    fn run(&self, dev: &Device) -> Vec<Out> {
        let [o, z, w] = self.inputs();
        let mut y = vec![0.0; o.len()];
        ops::deltanet_gated_norm(dev, self.hv, &o, &z, &w, EPS, &mut y).unwrap();
        vec![Out::F32("y", y)]
    }

    fn reference(&self) -> Vec<Out> {
        let [o, z, w] = self.inputs();
        vec![Out::F32("y", reference::gated_norm(&o, &z, &w, EPS))]
    }

    fn tolerance(&self) -> Tol {
        // A sum of at most 128 squares and a square root (a few ulp of 1 / rms), three
        // products and LOOM's silu (2.64 ulp): outputs up to about 6 / rms(o) · 2 · 6, so a
        // relative bound of 2e-6 (about 16 ulp; observed 3.4e-7) and an absolute one for
        // values near 0.
        Tol {
            abs: 1e-6,
            rel: 2e-6,
        }
    }
}

/// Every DeltaNet case.
pub fn cases() -> Vec<Box<dyn Case>> {
    let mut out = boxed(
        [1, 2, 5, 63, 64, 65, 150]
            .into_iter()
            .map(|t| ConvCase {
                shape: shape(2, 4, 16, 8),
                t,
            })
            .chain([
                ConvCase {
                    shape: shape(1, 2, 24, 40),
                    t: 9,
                },
                ConvCase {
                    shape: shape(2, 2, 128, 128),
                    t: 3,
                },
            ]),
    );
    out.extend(boxed([
        GatesCase {
            t: 1,
            hv: 1,
            sweep: false,
        },
        GatesCase {
            t: 14,
            hv: 3,
            sweep: false,
        },
        GatesCase {
            t: 150,
            hv: 16,
            sweep: false,
        },
        GatesCase {
            t: 20000,
            hv: 1,
            sweep: true,
        },
    ]));
    let delta = |(hk, hv, dk, dv), passes: &[usize], carried_in, strong_decay| DeltaCase {
        shape: shape(hk, hv, dk, dv),
        passes: passes.to_vec(),
        carried_in,
        strong_decay,
    };
    let mut deltas: Vec<DeltaCase> = [1, 5, 63, 64, 65, 150]
        .into_iter()
        .map(|t| delta((1, 2, 16, 8), &[t], false, true))
        .collect();
    deltas.extend([
        // Split inside a chunk (and across the chunk boundary), the state carried.
        delta((1, 2, 16, 8), &[50, 100], false, true),
        delta((1, 2, 16, 8), &[1, 64, 3, 82], true, true),
        delta((1, 2, 16, 8), &[150], true, false),
        delta((1, 2, 16, 8), &[50, 100], true, false),
        // dk != dv with a partial block of value columns, dk not a power of two.
        delta((2, 4, 24, 40), &[70], true, true),
        delta((2, 4, 24, 40), &[33, 37], true, false),
        // An odd dk (v3's state update took two rows of S per pass).
        delta((1, 2, 17, 8), &[70], true, false),
        // Qwen3.5's head sizes.
        delta((1, 2, 128, 128), &[100], true, false),
        // The state's second half of key rows: partial (dk 96, 65) or absent (dk 64), with a
        // second, partial block of value columns (dv 72, 130) and a short last chunk.
        delta((1, 2, 96, 72), &[130], true, false),
        delta((2, 4, 65, 64), &[70], true, true),
        delta((1, 2, 64, 130), &[64, 7], true, false),
        // One key or value dimension.
        delta((1, 1, 1, 1), &[1, 65], true, false),
        delta((1, 1, 128, 1), &[66], true, true),
        delta((1, 1, 1, 200), &[3], true, false),
    ]);
    // llama.cpp's tiled value-head order: value head h reads key head h % hk.
    deltas.extend(
        [
            delta((2, 4, 24, 40), &[70], true, true),
            delta((3, 6, 16, 8), &[20, 45], true, false),
        ]
        .map(|c| DeltaCase {
            shape: GdnShape {
                v_order: VHeadOrder::Tiled,
                ..c.shape
            },
            ..c
        }),
    );
    out.extend(boxed(deltas));
    out.extend(boxed([
        NormCase { t: 1, hv: 1, dv: 8 },
        NormCase {
            t: 7,
            hv: 3,
            dv: 100,
        },
        NormCase {
            t: 65,
            hv: 4,
            dv: 128,
        },
    ]));
    out
}
