//! `embedding.gather_<ty>.v1`: the token embedding, read in the table's stored dtype (ty =
//! bf16, f16, f32), `embedding.gather_q.v1` on a table in a ggml block format and
//! `embedding.gather_mlx_<ty>.v1` on one in mlx's affine quantization (ty = the scales' dtype).

use lse_kernels::embedding::{
    embed_tokens_bf16, embed_tokens_f16, embed_tokens_f32, embed_tokens_mlx_bf16,
    embed_tokens_mlx_f16, embed_tokens_mlx_f32, embed_tokens_q,
};

use super::affine::AffineParams;
use super::lm_head::WeightView;
use super::{check_len, to_u32, OpError};
use crate::device::{DevSliceMut, Device};

/// `x[i, :] = table[ids[i], :]` widened to f32, for `table` `[vocab, hidden]` in its stored
/// dtype and `x` `[ids.len(), hidden]`. Every id must be below `vocab`.
pub fn embed_tokens<'a>(
    dev: &Device,
    table: impl Into<WeightView<'a>>,
    hidden: usize,
    ids: &[u32],
    x: impl Into<DevSliceMut<'a, f32>>,
) -> Result<(), OpError> {
    const OP: &str = "embedding.gather.v1";
    let (table, x) = (table.into(), x.into());
    if hidden == 0 {
        return Err(OpError::Invalid {
            op: OP,
            message: "hidden is 0".into(),
        });
    }
    if let WeightView::Quant(q) = table {
        q.check_rows(OP, "table", hidden)?;
    }
    if let WeightView::Affine(q) = table {
        q.check_rows(OP, "table", hidden)?;
    }
    let vocab = table.len() / hidden;
    check_len(OP, "table", table.len(), vocab * hidden)?;
    check_len(OP, "x", x.len(), ids.len() * hidden)?;
    to_u32(OP, "table", table.len())?;
    to_u32(OP, "x", x.len())?;
    if let Some((i, id)) = ids.iter().enumerate().find(|(_, &id)| id as usize >= vocab) {
        return Err(OpError::Invalid {
            op: OP,
            message: format!("token id {id} at index {i} is not below the table's {vocab} rows"),
        });
    }
    if ids.is_empty() {
        return Ok(());
    }
    let grid = [ids.len() as u32, 1, 1];
    let hidden = hidden as u32;
    macro_rules! launch {
        ($kernel:ident, $table:expr) => {
            dev.launch(
                grid,
                $kernel::Args {
                    ids,
                    table: $table,
                    x,
                    hidden,
                },
            )
        };
    }
    match table {
        WeightView::Bf16(t) => launch!(embed_tokens_bf16, t),
        WeightView::F16(t) => launch!(embed_tokens_f16, t),
        WeightView::F32(t) => launch!(embed_tokens_f32, t),
        WeightView::Quant(q) => dev.launch(
            grid,
            embed_tokens_q::Args {
                ids,
                table: q.words,
                x,
                hidden,
                format: q.format.code(),
            },
        ),
        WeightView::Affine(q) => {
            let (table, bits, group) = (q.words, q.format.bits(), q.format.group() as u32);
            macro_rules! affine {
                ($kernel:ident, $scales:expr, $biases:expr) => {
                    dev.launch(
                        grid,
                        $kernel::Args {
                            ids,
                            table,
                            scales: $scales,
                            biases: $biases,
                            x,
                            hidden,
                            bits,
                            group,
                        },
                    )
                };
            }
            match q.params {
                AffineParams::Bf16 { scales, biases } => {
                    affine!(embed_tokens_mlx_bf16, scales, biases)
                }
                AffineParams::F16 { scales, biases } => {
                    affine!(embed_tokens_mlx_f16, scales, biases)
                }
                AffineParams::F32 { scales, biases } => {
                    affine!(embed_tokens_mlx_f32, scales, biases)
                }
            }
        }
    }?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Pool;
    use crate::ops::HeadWeight;

    #[test]
    fn embedding_rejects_an_id_past_the_table_and_bad_lengths() {
        let dev = Device::open(Pool::Cpu).unwrap();
        let table = vec![0.5f32; 3 * 4];
        let mut x = vec![0.0; 8];
        let e = embed_tokens(&dev, HeadWeight::F32(&table), 4, &[1, 3], &mut x).unwrap_err();
        assert!(e.to_string().contains("token id 3 at index 1"), "{e}");
        let e = embed_tokens(&dev, HeadWeight::F32(&table), 4, &[1], &mut x).unwrap_err();
        assert!(
            e.to_string().contains("x has 8 elements, expected 4"),
            "{e}"
        );
        let e = embed_tokens(&dev, HeadWeight::F32(&table), 5, &[1], &mut x).unwrap_err();
        assert!(e.to_string().contains("table has 12 elements"), "{e}");
        let e = embed_tokens(&dev, HeadWeight::F32(&table), 0, &[], &mut []).unwrap_err();
        assert!(e.to_string().contains("hidden is 0"), "{e}");
        embed_tokens(&dev, HeadWeight::F32(&table), 4, &[2, 0], &mut x).unwrap();
        assert_eq!(x, vec![0.5; 8]);
    }
}
