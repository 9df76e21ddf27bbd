//! `ffn.swiglu.v1`: SwiGLU's element-wise step, `a = silu(a) · b`.

use lse_kernels::ffn::swiglu::swiglu as kernel;

use super::{check_len, to_u32, OpError};
use crate::device::{DevSlice, DevSliceMut, Device};

/// Work-items per workgroup of the kernel.
const WG: usize = 256;

/// `a[i] = silu(a[i]) · b[i]` on `dev` (LOOM's `silu`), for the gate projection `a` and the up
/// projection `b` of a SwiGLU MLP, of one length.
pub fn swiglu<'a>(
    dev: &Device,
    a: impl Into<DevSliceMut<'a, f32>>,
    b: impl Into<DevSlice<'a, f32>>,
) -> Result<(), OpError> {
    let (a, b) = (a.into(), b.into());
    const OP: &str = "ffn.swiglu.v1";
    check_len(OP, "b", b.len(), a.len())?;
    // The kernel's element index runs up to the grid's size, a multiple of the workgroup.
    to_u32(OP, "elements rounded up to whole workgroups", a.len() + WG)?;
    let n = a.len() as u32;
    if n == 0 {
        return Ok(());
    }
    dev.launch([n.div_ceil(WG as u32), 1, 1], kernel::Args { a, b, n })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Pool;

    #[test]
    fn swiglu_refuses_operands_of_different_lengths() {
        let dev = Device::open(Pool::Cpu).unwrap();
        let err = swiglu(&dev, &mut [0.0; 3], &[0.0; 2]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "ffn.swiglu.v1: b has 2 elements, expected 3"
        );
    }

    #[test]
    fn swiglu_of_nothing_is_nothing() {
        let dev = Device::open(Pool::Cpu).unwrap();
        swiglu(&dev, &mut [], &[]).unwrap();
    }
}
