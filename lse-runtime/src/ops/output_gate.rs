//! `attention.output_gate.v1`: the sigmoid output gate of a full-attention layer.

use lse_kernels::attention::output_gate::output_gate as kernel;

use super::{check_len, to_u32, OpError};
use crate::device::{DevSlice, DevSliceMut, Device};

/// `o[i, h, :] *= sigmoid(p[i, h, 1, :])`: `o` is `[t, heads, head_dim]`, `p` the q
/// projection `[t, heads, 2, head_dim]` whose second half of each head is the gate.
pub fn output_gate<'a>(
    dev: &Device,
    p: impl Into<DevSlice<'a, f32>>,
    heads: usize,
    head_dim: usize,
    o: impl Into<DevSliceMut<'a, f32>>,
) -> Result<(), OpError> {
    let (p, o) = (p.into(), o.into());
    const OP: &str = "attention.output_gate.v1";
    let width = heads * head_dim;
    if width == 0 {
        return Err(OpError::Invalid {
            op: OP,
            message: format!("{heads} heads of {head_dim} values: expected at least one value"),
        });
    }
    let t = o.len() / width;
    check_len(OP, "o", o.len(), t * width)?;
    check_len(OP, "p", p.len(), 2 * t * width)?;
    to_u32(OP, "p", p.len())?;
    if t == 0 {
        return Ok(());
    }
    let args = kernel::Args {
        p,
        o,
        head_dim: head_dim as u32,
    };
    dev.launch([heads as u32, t as u32, 1], args)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Pool;

    #[test]
    fn output_gate_rejects_a_short_gate_and_no_heads() {
        let dev = Device::open(Pool::Cpu).unwrap();
        let mut o = vec![1.0; 8];
        let e = output_gate(&dev, &[0.0; 15], 2, 4, &mut o).unwrap_err();
        assert!(
            e.to_string().contains("p has 15 elements, expected 16"),
            "{e}"
        );
        let e = output_gate(&dev, &[], 0, 4, &mut o).unwrap_err();
        assert!(e.to_string().contains("0 heads"), "{e}");
        output_gate(&dev, &[0.0; 16], 2, 4, &mut o).unwrap();
        assert_eq!(o, vec![0.5; 8]);
    }
}
