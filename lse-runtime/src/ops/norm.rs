//! `norm.rmsnorm.v1` and `norm.add_rmsnorm.v1`: the RMSNorm of the residual stream, alone or
//! fused with the residual add before it. The weight is a plain multiplier: the model adds
//! the 1 of Qwen3.5's zero-centred norms to it at load.

use lse_kernels::norm::{add_rmsnorm as add_kernel, rmsnorm as kernel};

use super::{check_len, to_u32, OpError};
use crate::device::{DevSlice, DevSliceMut, Device};

/// Rows of `x` (`[rows, w.len()]`), checking every operand's length against it.
fn rows(
    op: &'static str,
    x: usize,
    w: usize,
    others: &[(&'static str, usize)],
) -> Result<usize, OpError> {
    if w == 0 {
        return Err(OpError::Invalid {
            op,
            message: "the norm weight is empty".into(),
        });
    }
    let rows = x / w;
    check_len(op, "x", x, rows * w)?;
    for &(what, len) in others {
        check_len(op, what, len, rows * w)?;
    }
    to_u32(op, "rows", rows)?;
    to_u32(op, "x", x)?;
    Ok(rows)
}

/// `y = x · (rsqrt(mean(x²) + eps) · w)` per row of `x` (`[rows, w.len()]`).
pub fn rmsnorm<'a>(
    dev: &Device,
    x: impl Into<DevSlice<'a, f32>>,
    w: impl Into<DevSlice<'a, f32>>,
    eps: f32,
    y: impl Into<DevSliceMut<'a, f32>>,
) -> Result<(), OpError> {
    let (x, w, y) = (x.into(), w.into(), y.into());
    const OP: &str = "norm.rmsnorm.v1";
    let rows = rows(OP, x.len(), w.len(), &[("y", y.len())])?;
    if rows == 0 {
        return Ok(());
    }
    let args = kernel::Args {
        x,
        w,
        y,
        d: w.len() as u32,
        eps,
    };
    dev.launch([rows as u32, 1, 1], args)?;
    Ok(())
}

/// The residual add and the next norm in one pass: `x += m`, then `y = rmsnorm(x)`.
pub fn add_rmsnorm<'a>(
    dev: &Device,
    x: impl Into<DevSliceMut<'a, f32>>,
    m: impl Into<DevSlice<'a, f32>>,
    w: impl Into<DevSlice<'a, f32>>,
    eps: f32,
    y: impl Into<DevSliceMut<'a, f32>>,
) -> Result<(), OpError> {
    let (x, m, w, y) = (x.into(), m.into(), w.into(), y.into());
    const OP: &str = "norm.add_rmsnorm.v1";
    let rows = rows(OP, x.len(), w.len(), &[("m", m.len()), ("y", y.len())])?;
    if rows == 0 {
        return Ok(());
    }
    let args = add_kernel::Args {
        x,
        m,
        w,
        y,
        d: w.len() as u32,
        eps,
    };
    dev.launch([rows as u32, 1, 1], args)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Pool;

    #[test]
    fn norms_reject_mismatched_lengths_and_an_empty_weight() {
        let dev = Device::open(Pool::Cpu).unwrap();
        let (x, w) = (vec![1.0; 8], vec![0.0; 4]);
        let mut y = vec![0.0; 7];
        let e = rmsnorm(&dev, &x, &w, 1e-6, &mut y).unwrap_err();
        assert!(
            e.to_string().contains("y has 7 elements, expected 8"),
            "{e}"
        );
        let e = rmsnorm(&dev, &x[..7], &w, 1e-6, &mut y).unwrap_err();
        assert!(
            e.to_string().contains("x has 7 elements, expected 4"),
            "{e}"
        );
        let e = rmsnorm(&dev, &x, &[], 1e-6, &mut y).unwrap_err();
        assert!(e.to_string().contains("weight is empty"), "{e}");
        let (mut x, mut y) = (vec![1.0; 8], vec![0.0; 8]);
        let e = add_rmsnorm(&dev, &mut x, &[0.0; 4], &w, 1e-6, &mut y).unwrap_err();
        assert!(
            e.to_string().contains("m has 4 elements, expected 8"),
            "{e}"
        );
        // No rows is a no-op.
        rmsnorm(&dev, &[], &w, 1e-6, &mut []).unwrap();
    }
}
