//! The Gated DeltaNet layer's ops besides its projections (`deltanet.conv.v3`,
//! `deltanet.gates.v2`, `deltanet.delta_prep.v4` with `deltanet.delta_rule.v5`,
//! `deltanet.gated_norm.v2`), in the order the layer runs them: conv + SiLU + q/k norms,
//! gates, the chunked delta rule, the output norm.

use lse_kernels::deltanet::{
    conv::conv, delta_prep::delta_prep, delta_rule::delta_rule, gated_norm::gated_norm,
    gates::gates,
};

use super::{check_len, to_u32, OpError};
use crate::device::{DevSlice, DevSliceMut, Device};

/// Largest key head dim (`dk`) the delta rule takes: its kernel keeps a `dk x 64` block of
/// the state in two 64 x 64 tiles. Qwen3.5's is 128.
pub const MAX_KEY_HEAD_DIM: usize = 128;

/// Value columns per delta-rule workgroup (the kernel's workgroup size).
const VALUE_BLOCK: usize = 64;

/// Rows per chunk of the chunked delta rule (the kernels' `CH`; as in transformers, FLA and
/// llama.cpp).
const CHUNK: usize = 64;

/// The sizes of a Gated DeltaNet layer (config.json's `linear_*` entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GdnShape {
    /// Key (and query) heads.
    pub hk: usize,
    /// Value heads, a multiple of `hk`; which key head a value head reads is `v_order`'s.
    pub hv: usize,
    /// Key head dim, at most [`MAX_KEY_HEAD_DIM`].
    pub dk: usize,
    /// Value head dim.
    pub dv: usize,
    /// Conv kernel length (the conv state holds `kc - 1` rows).
    pub kc: usize,
    /// The order of the value heads (and of every value-side weight row and column).
    pub v_order: VHeadOrder,
}

/// How value heads map to key heads when there are more value heads than key heads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VHeadOrder {
    /// Hugging Face's order: value head `h` reads key head `h / (hv / hk)`.
    Grouped,
    /// llama.cpp's order (its GGUF converter permutes the value-side weights so): value head
    /// `h` reads key head `h % hk`.
    Tiled,
}

impl GdnShape {
    /// Channels of the conv (and of the `in_proj_qkv` rows): `2 hk dk + hv dv`.
    pub fn conv_dim(&self) -> usize {
        2 * self.hk * self.dk + self.hv * self.dv
    }

    /// Values per token of the delta rule's output and the gated norm: `hv dv`.
    pub fn value_dim(&self) -> usize {
        self.hv * self.dv
    }

    /// Floats of the conv state: `(kc - 1) conv_dim`.
    pub fn conv_state_len(&self) -> usize {
        (self.kc - 1) * self.conv_dim()
    }

    /// Floats of the recurrent state: `hv dk dv`.
    pub fn recurrent_state_len(&self) -> usize {
        self.hv * self.dk * self.dv
    }

    /// Checks what every kernel assumes of the sizes: positive, `hk` dividing `hv`, `dk`
    /// within [`MAX_KEY_HEAD_DIM`], and the weight and state sizes below 2^32; returns
    /// `conv_dim`.
    fn check(&self, op: &'static str) -> Result<usize, OpError> {
        let invalid = |message: String| Err(OpError::Invalid { op, message });
        let GdnShape {
            hk, hv, dk, dv, kc, ..
        } = *self;
        if hk == 0 || hv == 0 || dk == 0 || dv == 0 || kc == 0 {
            return invalid(format!("sizes must be positive, got {self:?}"));
        }
        if hv % hk != 0 {
            return invalid(format!("hv = {hv} is not a multiple of hk = {hk}"));
        }
        if dk > MAX_KEY_HEAD_DIM {
            return invalid(format!(
                "dk = {dk} is above {MAX_KEY_HEAD_DIM}, the largest the delta rule takes"
            ));
        }
        let value_dim = hv.checked_mul(dv);
        let conv_dim = hk
            .checked_mul(2 * dk)
            .zip(value_dim)
            .and_then(|(k, v)| k.checked_add(v));
        let sizes = [
            ("conv_dim * kc", conv_dim.and_then(|c| c.checked_mul(kc))),
            ("hv * dk * dv", value_dim.and_then(|v| v.checked_mul(dk))),
        ];
        for (what, v) in sizes {
            to_u32(op, what, v.unwrap_or(usize::MAX))?;
        }
        Ok(self.conv_dim())
    }

    /// Checks that every buffer of a `t`-row pass is indexable in 32 bits (after
    /// [`GdnShape::check`]).
    fn check_rows(&self, op: &'static str, t: usize) -> Result<(), OpError> {
        let sizes = [
            (
                "(t + kc) * conv_dim",
                (t + self.kc).checked_mul(self.conv_dim()),
            ),
            ("t * hv * dv", t.checked_mul(self.value_dim())),
        ];
        for (what, v) in sizes {
            to_u32(op, what, v.unwrap_or(usize::MAX))?;
        }
        Ok(())
    }
}

/// The causal depthwise conv + SiLU of one pass, with the L2 norms of q (times `q_scale`)
/// and k per key head (`eps` added to the sum of squares): `out[r, c] = silu(Σ_j w[j, c] ·
/// X[r + j, c])` over `X = [state | x]`, then each q and k head of `out` normalised. `state`
/// is the `kc - 1` pre-conv rows carried from the previous pass (`[kc - 1, conv_dim]`), `x` the
/// pass's `t` new rows, `w` `[kc, conv_dim]` (the checkpoint's `conv1d.weight` transposed);
/// `new_state` gets the last `kc - 1` rows of `X`. A pass of no rows is an error (the state
/// simply stays).
#[allow(clippy::too_many_arguments)]
pub fn deltanet_conv<'a>(
    dev: &Device,
    shape: &GdnShape,
    w: impl Into<DevSlice<'a, f32>>,
    state: impl Into<DevSlice<'a, f32>>,
    x: impl Into<DevSlice<'a, f32>>,
    q_scale: f32,
    eps: f32,
    out: impl Into<DevSliceMut<'a, f32>>,
    new_state: impl Into<DevSliceMut<'a, f32>>,
) -> Result<(), OpError> {
    const OP: &str = "deltanet.conv.v3";
    let (w, state, x) = (w.into(), state.into(), x.into());
    let (out, new_state) = (out.into(), new_state.into());
    let cd = shape.check(OP)?;
    let t = x.len() / cd;
    shape.check_rows(OP, t)?;
    check_len(OP, "w", w.len(), cd * shape.kc)?;
    check_len(OP, "state", state.len(), shape.conv_state_len())?;
    check_len(OP, "x", x.len(), t * cd)?;
    check_len(OP, "out", out.len(), t * cd)?;
    check_len(OP, "new_state", new_state.len(), shape.conv_state_len())?;
    if t == 0 {
        // The kernel's first workgroup writes the new state; with no rows there is none.
        return Err(OpError::Invalid {
            op: OP,
            message: "a pass of no rows: nothing to convolve, and the state stays as it is".into(),
        });
    }
    let grid = [
        to_u32(OP, "2 hk + hv", 2 * shape.hk + shape.hv)?,
        to_u32(OP, "t / 8", t.div_ceil(8))?,
        1,
    ];
    let args = conv::Args {
        state,
        x,
        w,
        out,
        new_state,
        t: t as u32,
        cd: cd as u32,
        kc: shape.kc as u32,
        hk: shape.hk as u32,
        dk: shape.dk as u32,
        dv: shape.dv as u32,
        q_scale,
        eps,
    };
    dev.launch(grid, args)?;
    Ok(())
}

/// The gates of one pass: `beta = sigmoid(b)` and `g = rate[h] · softplus(a + dt_bias[h])`
/// (softplus is the identity above 20, as in torch), for `b`, `a`, `beta`, `g` `[t, hv]` and
/// `rate`, `dt_bias` `[hv]`. The decay rate is `-exp(A_log)` of the checkpoint.
pub fn deltanet_gates<'a>(
    dev: &Device,
    b: impl Into<DevSlice<'a, f32>>,
    a: impl Into<DevSlice<'a, f32>>,
    rate: impl Into<DevSlice<'a, f32>>,
    dt_bias: impl Into<DevSlice<'a, f32>>,
    beta: impl Into<DevSliceMut<'a, f32>>,
    g: impl Into<DevSliceMut<'a, f32>>,
) -> Result<(), OpError> {
    let (b, a, rate, dt_bias) = (b.into(), a.into(), rate.into(), dt_bias.into());
    let (beta, g) = (beta.into(), g.into());
    const OP: &str = "deltanet.gates.v2";
    const WORKGROUP: usize = 256;
    let (n, hv) = (b.len(), rate.len());
    if hv == 0 {
        return Err(OpError::Invalid {
            op: OP,
            message: "rate is empty (no value heads)".into(),
        });
    }
    check_len(OP, "b", n, n / hv * hv)?;
    for (what, len) in [("a", a.len()), ("beta", beta.len()), ("g", g.len())] {
        check_len(OP, what, len, n)?;
    }
    check_len(OP, "dt_bias", dt_bias.len(), hv)?;
    let n32 = to_u32(OP, "t * hv", n)?;
    if n == 0 {
        return Ok(());
    }
    let grid = [n.div_ceil(WORKGROUP) as u32, 1, 1];
    let args = gates::Args {
        b,
        a,
        rate,
        dt_bias,
        beta,
        g,
        n: n32,
        hv: hv as u32,
    };
    dev.launch(grid, args)?;
    Ok(())
}

/// The chunked gated delta rule over one pass (chunks of 64 rows), continuing from and
/// updating `state` (`[hv, dk, dv]`): per value head `h` and row, with its key head's (as
/// `shape.v_order` says) `q`, `k` and `h`'s `v` read from the conv output `qkv` (`[t,
/// conv_dim]`, q and k normalised), the result of the recurrence `S = e^g S; S += k (β (v -
/// Sᵀk))ᵀ; o = Sᵀq`.
/// `beta`, `g`: `[t, hv]`; `out`: `[t, hv, dv]`. Two launches: the per-chunk matrices of
/// every chunk at once (`deltanet.delta_prep.v4`, into `64 · 64 + 128` floats of scratch per
/// value head and chunk), then the chunks in order per block of value columns
/// (`deltanet.delta_rule.v5`, with 64 x 64 floats of scratch per workgroup for its
/// intermediate products).
pub fn delta_rule_chunked<'a>(
    dev: &Device,
    shape: &GdnShape,
    qkv: impl Into<DevSlice<'a, f32>>,
    beta: impl Into<DevSlice<'a, f32>>,
    g: impl Into<DevSlice<'a, f32>>,
    state: impl Into<DevSliceMut<'a, f32>>,
    out: impl Into<DevSliceMut<'a, f32>>,
) -> Result<(), OpError> {
    let (qkv, beta, g) = (qkv.into(), beta.into(), g.into());
    let (state, out) = (state.into(), out.into());
    const OP: &str = "deltanet.delta_rule.v5";
    let cd = shape.check(OP)?;
    let t = qkv.len() / cd;
    shape.check_rows(OP, t)?;
    check_len(OP, "qkv", qkv.len(), t * cd)?;
    check_len(OP, "beta", beta.len(), t * shape.hv)?;
    check_len(OP, "g", g.len(), t * shape.hv)?;
    check_len(OP, "state", state.len(), shape.recurrent_state_len())?;
    check_len(OP, "out", out.len(), t * shape.value_dim())?;
    if t == 0 {
        return Ok(());
    }
    // Scratch of the prep: M ([hv, chunks, 64, 64]) and the decays ([hv, chunks, 2, 64]).
    let chunks = t.div_ceil(CHUNK);
    let mats_len = shape.hv * chunks * CHUNK * CHUNK;
    to_u32(OP, "hv * chunks * 64 * 64", mats_len)?;
    // The per-chunk matrices stay in the device's memory between the two kernels.
    let mut mats = dev.scratch::<f32>(mats_len)?;
    let mut decay = dev.scratch::<f32>(shape.hv * chunks * 2 * CHUNK)?;
    // The rule's intermediate products: 64 x 64 floats per workgroup.
    let blocks = shape.dv.div_ceil(VALUE_BLOCK) * shape.hv;
    let mut work = dev.scratch::<f32>(blocks * CHUNK * VALUE_BLOCK)?;
    let (t, cd, dk, dv) = (t as u32, cd as u32, shape.dk as u32, shape.dv as u32);
    let (groups, hk) = ((shape.hv / shape.hk) as u32, shape.hk as u32);
    let tiled = u32::from(shape.v_order == VHeadOrder::Tiled);
    let prep = delta_prep::Args {
        qkv,
        beta,
        g,
        mats: mats.view_mut(),
        decay: decay.view_mut(),
        t,
        cd,
        dk,
        tiled,
    };
    dev.launch([chunks as u32, groups, hk], prep)?;
    let grid = [shape.dv.div_ceil(VALUE_BLOCK) as u32, groups, hk];
    let args = delta_rule::Args {
        qkv,
        beta,
        mats: mats.view(),
        decay: decay.view(),
        state,
        out,
        work: work.view_mut(),
        t,
        cd,
        dk,
        dv,
        tiled,
    };
    dev.launch(grid, args)?;
    Ok(())
}

/// The DeltaNet output norm: `y = o / sqrt(mean(o²) + eps) · w · silu(z)` per (row, value
/// head) over `dv` values, for `o`, `z`, `y` `[t, hv, dv]` and `w` `[dv]`.
pub fn deltanet_gated_norm<'a>(
    dev: &Device,
    hv: usize,
    o: impl Into<DevSlice<'a, f32>>,
    z: impl Into<DevSlice<'a, f32>>,
    w: impl Into<DevSlice<'a, f32>>,
    eps: f32,
    y: impl Into<DevSliceMut<'a, f32>>,
) -> Result<(), OpError> {
    let (o, z, w, y) = (o.into(), z.into(), w.into(), y.into());
    const OP: &str = "deltanet.gated_norm.v2";
    let dv = w.len();
    let row = hv
        .checked_mul(dv)
        .filter(|&r| r > 0)
        .ok_or_else(|| OpError::Invalid {
            op: OP,
            message: format!("hv = {hv} and dv = {dv} must be positive, their product below 2^64"),
        })?;
    let t = o.len() / row;
    check_len(OP, "o", o.len(), t * row)?;
    check_len(OP, "z", z.len(), o.len())?;
    check_len(OP, "y", y.len(), o.len())?;
    to_u32(OP, "t * hv * dv", o.len())?;
    if t == 0 {
        return Ok(());
    }
    let grid = [hv as u32, t as u32, 1];
    let args = gated_norm::Args {
        o,
        z,
        w,
        y,
        dv: dv as u32,
        eps,
    };
    dev.launch(grid, args)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Pool;

    fn shape(dk: usize) -> GdnShape {
        GdnShape {
            hk: 1,
            hv: 2,
            dk,
            dv: 8,
            kc: 4,
            v_order: VHeadOrder::Grouped,
        }
    }

    /// `(qkv, beta, g, state, out)` of a `t`-row pass of `s`.
    fn buffers(s: &GdnShape, t: usize) -> [Vec<f32>; 5] {
        [
            vec![0.0; t * s.conv_dim()],
            vec![0.5; t * s.hv],
            vec![-0.1; t * s.hv],
            vec![0.0; s.recurrent_state_len()],
            vec![0.0; t * s.value_dim()],
        ]
    }

    /// With decays as strong as g = -3 a row (Γ reaches -192 in a chunk), the prep stores 0
    /// for every decay `e^x` with `x < -69`, no subnormal float anywhere, and every other
    /// entry as the kernel's formula gives it; on every CPU-side device, bit for bit alike.
    #[test]
    fn delta_prep_takes_decays_below_e_to_the_minus_69_as_zero_and_stores_no_subnormal() {
        const FLOOR: f32 = -69.0;
        let s = shape(16);
        let (t, cd, chunks) = (70, s.conv_dim(), 2);
        // The keys' first column in a row (the queries' is 0).
        let kk = s.hk * s.dk;
        let qkv = crate::device::test_values(t * cd, 7, 0.5);
        let beta: Vec<f32> = (0..t).map(|i| 0.25 + (i % 3) as f32 * 0.25).collect();
        let g: Vec<f32> = (0..t)
            .map(|i| if i % 9 == 4 { -0.01 } else { -3.0 })
            .collect();
        let gam: Vec<Vec<f32>> = g
            .chunks(CHUNK)
            .map(|c| {
                c.iter()
                    .scan(0.0f32, |acc, &x| {
                        *acc += x;
                        Some(*acc)
                    })
                    .collect()
            })
            .collect();
        let dot = |a: usize, b: usize, i: usize, j: usize| -> f64 {
            (0..s.dk)
                .map(|d| qkv[i * cd + a + d] as f64 * qkv[j * cd + b + d] as f64)
                .sum()
        };
        let mut first: Option<(Vec<f32>, Vec<f32>)> = None;
        for dev in crate::device::cpu_side_devices() {
            let (mut mats, mut decay) = (
                vec![f32::NAN; chunks * CHUNK * CHUNK],
                vec![0.0; chunks * 128],
            );
            let args = delta_prep::Args {
                qkv: &qkv,
                beta: &beta,
                g: &g,
                mats: &mut mats,
                decay: &mut decay,
                t: t as u32,
                cd: cd as u32,
                dk: s.dk as u32,
                tiled: 0,
            };
            dev.launch([chunks as u32, 1, 1], args).unwrap();
            let arch = dev.arch();
            for (c, gam) in gam.iter().enumerate() {
                let n = gam.len();
                let last = gam[n - 1];
                for (r, &x0) in gam.iter().enumerate() {
                    for (x, got) in [
                        (x0, decay[c * 128 + r]),
                        (last - x0, decay[c * 128 + 64 + r]),
                    ] {
                        let want = if x < FLOOR { 0.0 } else { (x as f64).exp() };
                        assert!(
                            (got as f64 - want).abs() <= want * 1e-5,
                            "{arch}: decay {x}: {got}"
                        );
                    }
                }
                for i in 0..n {
                    for r in 0..n {
                        let got = mats[(c * CHUNK + i) * CHUNK + r];
                        let (x, want) = if r < i {
                            let x = gam[i] - gam[r];
                            (
                                x,
                                beta[c * CHUNK + i] as f64
                                    * dot(kk, kk, c * CHUNK + i, c * CHUNK + r),
                            )
                        } else {
                            let x = gam[r] - gam[i];
                            (x, dot(kk, 0, c * CHUNK + i, c * CHUNK + r))
                        };
                        assert!(!got.is_subnormal(), "{arch}: M[{i}][{r}] = {got:e}");
                        if x < FLOOR {
                            assert_eq!(got, 0.0, "{arch}: M[{i}][{r}] with decay e^{x}");
                        } else {
                            let want = want * (x as f64).exp();
                            let tol = 1e-5 * want.abs() + 1e-6 * (x as f64).exp() + 2e-38;
                            assert!(
                                (got as f64 - want).abs() <= tol,
                                "{arch}: M[{i}][{r}] {got:e} != {want:e}"
                            );
                        }
                    }
                }
            }
            match &first {
                None => first = Some((mats, decay)),
                Some((m, d)) => {
                    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    assert_eq!(
                        bits(m),
                        bits(&mats),
                        "{arch}: M differs from the generated Rust"
                    );
                    assert_eq!(
                        bits(d),
                        bits(&decay),
                        "{arch}: decays differ from the generated Rust"
                    );
                }
            }
        }
    }

    #[test]
    fn delta_rule_refuses_dk_above_the_maximum_with_an_error() {
        let dev = Device::open(Pool::Cpu).unwrap();
        let s = shape(MAX_KEY_HEAD_DIM + 1);
        let [qkv, beta, g, mut state, mut out] = buffers(&s, 3);
        let err = delta_rule_chunked(&dev, &s, &qkv, &beta, &g, &mut state, &mut out)
            .unwrap_err()
            .to_string();
        assert!(err.contains("dk = 129 is above 128"), "{err}");
    }

    #[test]
    fn delta_rule_refuses_inconsistent_lengths_and_head_counts() {
        let dev = Device::open(Pool::Cpu).unwrap();
        let s = shape(16);
        let [qkv, beta, g, mut state, mut out] = buffers(&s, 3);
        let short = &beta[1..];
        let err = delta_rule_chunked(&dev, &s, &qkv, short, &g, &mut state, &mut out);
        assert!(matches!(err, Err(OpError::Shape { what: "beta", .. })));
        let odd = GdnShape { hk: 2, hv: 3, ..s };
        let err = delta_rule_chunked(&dev, &odd, &qkv, &beta, &g, &mut state, &mut out);
        assert!(matches!(err, Err(OpError::Invalid { .. })));
    }

    #[test]
    fn conv_refuses_an_empty_pass_and_writes_nothing() {
        let dev = Device::open(Pool::Cpu).unwrap();
        let s = shape(16);
        let w = vec![1.0; s.conv_dim() * s.kc];
        let state: Vec<f32> = (0..s.conv_state_len()).map(|i| i as f32).collect();
        let mut new_state = vec![-1.0; state.len()];
        let err = deltanet_conv(
            &dev,
            &s,
            &w,
            &state,
            &[],
            1.0,
            1e-6,
            &mut [],
            &mut new_state,
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("a pass of no rows"), "{err}");
        assert!(new_state.iter().all(|&x| x == -1.0));
    }

    #[test]
    fn gates_and_gated_norm_refuse_mismatched_lengths() {
        let dev = Device::open(Pool::Cpu).unwrap();
        let (mut beta, mut g) = (vec![0.0; 4], vec![0.0; 3]);
        let err = deltanet_gates(
            &dev, &[0.0; 4], &[0.0; 4], &[0.0; 2], &[0.0; 2], &mut beta, &mut g,
        );
        assert!(matches!(err, Err(OpError::Shape { what: "g", .. })));
        let mut y = vec![0.0; 16];
        let err = deltanet_gated_norm(&dev, 2, &[0.0; 16], &[0.0; 12], &[1.0; 8], 1e-6, &mut y);
        assert!(matches!(err, Err(OpError::Shape { what: "z", .. })));
    }
}
