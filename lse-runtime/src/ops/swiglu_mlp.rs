//! The dense SwiGLU MLP, `y = (silu(x · gateᵀ) ⊙ (x · upᵀ)) · downᵀ`, with its element-wise
//! step fused into the gate and up products (`gemm.xwt_swiglu.v2`, `gemm.xwt_exact_swiglu.v2`,
//! `gemm.xwt_bf16x3_swiglu.v1`, `kernels-src/src/gemm_swiglu.rs`): they write `h` transposed, as the down product reads
//! its activations, so `h` is neither stored in f32, read back by `ffn.swiglu` nor
//! transposed by `gemm.transpose_x`. On the host the results are the unfused MLP's (three
//! [`gemm`](super::gemm) calls and [`swiglu`](super::swiglu)) bit for bit.

use half::{bf16, f16};
use lse_kernels::gemm_swiglu::{
    gemm_xwt_bf16x3_swiglu_bf16, gemm_xwt_exact_swiglu_bf16, gemm_xwt_exact_swiglu_f16,
    gemm_xwt_exact_swiglu_f32, gemm_xwt_swiglu_bf16, gemm_xwt_swiglu_f16,
};

use super::gemm::{launch_transposed, transpose, xt_len, xt_type, TransposedX, XtType};
use super::lm_head::WeightView;
use super::{check_len, to_u32, Activations, GemmOut, OpError};
use crate::device::{DevSlice, DevSliceMut, Device};

const OP: &str = "swiglu_mlp";

/// The 1.0s the kernels take their `silu`'s one from (a tile loads them with row stride 0).
static ONES: [f32; 64] = [1.0; 64];

/// The MLP `y = (silu(x · gateᵀ) ⊙ (x · upᵀ)) · downᵀ` for `x` `[m, k]`, `gate` and `up`
/// `[n, k]`, `down` `[h, n]` and `y` `[m, h]` (overwritten), every product meeting the
/// activations as `act` says, run fused (see the module) when the three weights take their
/// activations in one transposed form: bf16 or f16 weights of one type met by activations
/// rounded to it, or float weights met by f32 activations (`gate` and `up` of one type).
/// Returns whether it ran; when not, nothing was done and the caller runs the products
/// and `ffn.swiglu` itself (block-format weights, mixed types).
#[allow(clippy::too_many_arguments)]
pub fn swiglu_mlp<'a>(
    dev: &Device,
    x: impl Into<DevSlice<'a, f32>>,
    k: usize,
    [gate, up, down]: [WeightView<'a>; 3],
    n: usize,
    h: usize,
    y: impl Into<DevSliceMut<'a, f32>>,
    act: Activations,
) -> Result<bool, OpError> {
    let (x, y) = (x.into(), y.into());
    let float = |w: WeightView<'_>| {
        matches!(
            w,
            WeightView::Bf16(_) | WeightView::F16(_) | WeightView::F32(_)
        )
    };
    let rows = u32::try_from(x.len() / k.max(1)).unwrap_or(u32::MAX);
    let ty = xt_type(dev, gate, act, rows);
    let fused = matches!(
        act,
        Activations::RoundedToWeight | Activations::F32 | Activations::Bf16x3
    ) && [gate, up, down].into_iter().all(float)
        && std::mem::discriminant(&gate) == std::mem::discriminant(&up)
        && xt_type(dev, down, act, rows) == ty;
    if !fused {
        return Ok(false);
    }
    if k == 0 || n == 0 || h == 0 {
        return Err(OpError::Invalid {
            op: OP,
            message: format!("k = {k}, n = {n} and h = {h} must be positive"),
        });
    }
    let m = x.len() / k;
    check_len(OP, "x", x.len(), m * k)?;
    check_len(OP, "gate", gate.len(), n * k)?;
    check_len(OP, "up", up.len(), n * k)?;
    check_len(OP, "down", down.len(), h * n)?;
    check_len(OP, "y", y.len(), m * h)?;
    for (what, v) in [
        ("m * k", m * k),
        ("n * k", n * k),
        ("m * n", m.next_multiple_of(64) * n.next_multiple_of(2)),
        ("h * n", h * n),
        ("m * h", m * h),
    ] {
        to_u32(OP, what, v)?;
    }
    if m == 0 {
        return Ok(true);
    }
    let [m, n, k, h] = [m, n, k, h].map(|v| v as u32);
    let xt = transpose(dev, x, ty, [m, k])?;
    let ht = gate_up_swiglu(dev, &xt, gate, up, [m, n, k])?;
    launch_transposed(dev, &ht, down, y, [m, h, n], GemmOut::Overwrite)?;
    Ok(true)
}

/// `hᵀ` for `h = silu(x · gateᵀ) ⊙ (x · upᵀ)` `[m, n]`, in the transposed form `xt` is in.
fn gate_up_swiglu<'d>(
    dev: &'d Device,
    xt: &TransposedX<'_>,
    gate: WeightView<'_>,
    up: WeightView<'_>,
    [m, n, k]: [u32; 3],
) -> Result<TransposedX<'d>, OpError> {
    let grid = [m.div_ceil(64), n.div_ceil(64), 1];
    let ones = ONES.as_slice();
    macro_rules! pairs {
        ($kernel:ident, $elem:ty, $variant:ident, $xt:expr, $gate:expr, $up:expr) => {{
            let mut hp = dev.scratch::<$elem>(xt_len(XtType::$variant, m as usize, n as usize))?;
            let args = $kernel::Args {
                xp: $xt.view(),
                gate: $gate,
                up: $up,
                ones,
                hp: hp.view_mut(),
                m,
                n,
                k,
            };
            dev.launch(grid, args)?;
            TransposedX::$variant(hp)
        }};
    }
    macro_rules! exact {
        ($kernel:ident, $xt:expr, $gate:expr, $up:expr) => {{
            let mut ht = dev.scratch::<f32>(xt_len(XtType::F32, m as usize, n as usize))?;
            let args = $kernel::Args {
                xt: $xt.view(),
                gate: $gate,
                up: $up,
                ones,
                ht: ht.view_mut(),
                m,
                n,
                k,
            };
            dev.launch(grid, args)?;
            TransposedX::F32(ht)
        }};
    }
    Ok(match (xt, gate, up) {
        (TransposedX::Bf16(xt), WeightView::Bf16(g), WeightView::Bf16(u)) => {
            pairs!(gemm_xwt_swiglu_bf16, bf16, Bf16, xt, g, u)
        }
        (TransposedX::F16(xt), WeightView::F16(g), WeightView::F16(u)) => {
            pairs!(gemm_xwt_swiglu_f16, f16, F16, xt, g, u)
        }
        (TransposedX::F32(xt), WeightView::Bf16(g), WeightView::Bf16(u)) => {
            exact!(gemm_xwt_exact_swiglu_bf16, xt, g, u)
        }
        (TransposedX::F32(xt), WeightView::F16(g), WeightView::F16(u)) => {
            exact!(gemm_xwt_exact_swiglu_f16, xt, g, u)
        }
        (TransposedX::F32(xt), WeightView::F32(g), WeightView::F32(u)) => {
            exact!(gemm_xwt_exact_swiglu_f32, xt, g, u)
        }
        (TransposedX::Bf16x3(x3), WeightView::Bf16(g), WeightView::Bf16(u)) => {
            let mut h3 = dev.scratch::<bf16>(xt_len(XtType::Bf16x3, m as usize, n as usize))?;
            let args = gemm_xwt_bf16x3_swiglu_bf16::Args {
                x3: x3.view(),
                gate: g,
                up: u,
                ones,
                h3: h3.view_mut(),
                m,
                n,
                k,
            };
            dev.launch(grid, args)?;
            TransposedX::Bf16x3(h3)
        }
        _ => {
            return Err(OpError::Invalid {
                op: OP,
                message: "the transposed activations and the weights differ in type".into(),
            })
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{cpu_side_devices, test_values as values};
    use crate::ops::{gemm, swiglu};

    /// Weights in one stored type.
    enum Stored {
        Bf16(Vec<bf16>),
        F16(Vec<f16>),
        F32(Vec<f32>),
    }

    impl Stored {
        fn new(v: Vec<f32>, ty: XtType) -> Self {
            match ty {
                XtType::Bf16 | XtType::Bf16x3 => {
                    Stored::Bf16(v.into_iter().map(bf16::from_f32).collect())
                }
                XtType::F16 => Stored::F16(v.into_iter().map(f16::from_f32).collect()),
                XtType::F32 => Stored::F32(v),
            }
        }

        fn view(&self) -> WeightView<'_> {
            match self {
                Stored::Bf16(w) => WeightView::Bf16(DevSlice::from(&w[..])),
                Stored::F16(w) => WeightView::F16(DevSlice::from(&w[..])),
                Stored::F32(w) => WeightView::F32(DevSlice::from(&w[..])),
            }
        }
    }

    /// The MLP's output bits on `dev`, fused (`swiglu_mlp`) and as the three products and
    /// `ffn.swiglu` compute it, for weights stored as `ty` met as `act`.
    fn both(
        dev: &Device,
        (m, k, n, h): (usize, usize, usize, usize),
        ty: XtType,
        act: Activations,
    ) -> (Vec<u32>, Vec<u32>) {
        let x = values(m * k, 1, 1.0);
        let gate = Stored::new(values(n * k, 2, 0.2), ty);
        let up = Stored::new(values(n * k, 3, 0.2), ty);
        let down = Stored::new(values(h * n, 4, 0.2), ty);
        let views = [gate.view(), up.view(), down.view()];
        let mut fused = vec![f32::NAN; m * h];
        assert!(swiglu_mlp(dev, &x, k, views, n, h, &mut fused, act).unwrap());
        let (mut a, mut b) = (vec![0.0; m * n], vec![0.0; m * n]);
        gemm(dev, &x, k, views[0], n, &mut a, GemmOut::Overwrite, act).unwrap();
        gemm(dev, &x, k, views[1], n, &mut b, GemmOut::Overwrite, act).unwrap();
        swiglu(dev, &mut a, &b).unwrap();
        let mut unfused = vec![f32::NAN; m * h];
        gemm(
            dev,
            &a,
            n,
            views[2],
            h,
            &mut unfused,
            GemmOut::Overwrite,
            act,
        )
        .unwrap();
        let bits = |v: Vec<f32>| v.into_iter().map(f32::to_bits).collect();
        (bits(fused), bits(unfused))
    }

    /// On the generated Rust and every host level, the fused MLP gives the unfused one's
    /// bits: for ragged shapes (a last row block of 6 rows, odd widths, K and N below a
    /// tile, one row) and whole ones (where the host fuses the K loops), every weight type
    /// met by rounded and by f32 activations, and bf16 weights by bf16x3 activations (on AMX
    /// the pieces' kernels for the shapes past 32 rows).
    #[test]
    fn the_fused_mlp_gives_the_bits_of_the_products_and_swiglu_apart() {
        let shapes = [
            (70, 96, 130, 40),
            (1, 1, 1, 1),
            (5, 33, 7, 65),
            (64, 128, 128, 64),
        ];
        let kinds = [
            (XtType::Bf16, Activations::RoundedToWeight),
            (XtType::F16, Activations::RoundedToWeight),
            (XtType::Bf16, Activations::F32),
            (XtType::F16, Activations::F32),
            (XtType::F32, Activations::F32),
            (XtType::F32, Activations::RoundedToWeight),
            (XtType::Bf16, Activations::Bf16x3),
        ];
        for dev in cpu_side_devices() {
            for shape in shapes {
                for (ty, act) in kinds {
                    let (fused, unfused) = both(&dev, shape, ty, act);
                    assert!(fused == unfused, "{}: {shape:?} {ty:?} {act:?}", dev.arch());
                }
            }
        }
    }

    /// Weights that do not share one transposed form, or block-format activations, are left
    /// to the caller: nothing runs and `y` is untouched.
    #[test]
    fn mixed_weights_and_quantized_activations_are_left_to_the_caller() {
        let dev = Device::open(crate::device::Pool::Cpu).unwrap();
        let (bf, hf) = ([bf16::ZERO; 4], [f16::ZERO; 4]);
        let (b, f) = (
            WeightView::Bf16(DevSlice::from(&bf[..])),
            WeightView::F16(DevSlice::from(&hf[..])),
        );
        let x = [1.0f32; 2];
        for (weights, act) in [
            ([b, f, b], Activations::RoundedToWeight),
            ([b, b, f], Activations::RoundedToWeight),
            ([b, b, b], Activations::Q8K),
            ([b, b, b], Activations::Q8_0),
        ] {
            let mut y = [7.0f32; 2];
            assert!(!swiglu_mlp(&dev, &x, 2, weights, 2, 2, &mut y, act).unwrap());
            assert_eq!(y, [7.0; 2]);
        }
    }

    /// Operands of the wrong lengths and zero widths are errors naming the operand.
    #[test]
    fn operands_of_the_wrong_length_are_refused_by_name() {
        let dev = Device::open(crate::device::Pool::Cpu).unwrap();
        let w = [bf16::ZERO; 6];
        let v = |n: usize| WeightView::Bf16(DevSlice::from(&w[..n]));
        let x = [0.5f32; 4];
        let act = Activations::RoundedToWeight;
        let mut y = [0.0f32; 4];
        let run = |ws, k, n, h, y: &mut [f32]| {
            swiglu_mlp(&dev, &x, k, ws, n, h, y, act)
                .unwrap_err()
                .to_string()
        };
        assert!(run([v(5), v(4), v(4)], 2, 2, 2, &mut y).contains("gate"));
        assert!(run([v(4), v(6), v(4)], 2, 2, 2, &mut y).contains("up"));
        assert!(run([v(4), v(4), v(6)], 2, 2, 2, &mut y).contains("down"));
        assert!(run([v(4), v(4), v(4)], 2, 2, 2, &mut y[..3]).contains("y"));
        assert!(run([v(4), v(4), v(4)], 0, 2, 2, &mut y).contains("k = 0"));
    }
}
