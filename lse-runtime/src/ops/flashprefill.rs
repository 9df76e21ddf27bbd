//! FlashPrefill V2's block selection for one prefill pass of one full-attention layer:
//! `attention.key_block_mean_<ty>` (mean key per key block), `attention.block_score` (how much
//! of each query block's attention mass each causal key block gets) and
//! `attention.block_select` (the kept key blocks of each query block, as ascending lists).
//! The block-sparse attention kernel then walks those lists.

use lse_kernels::attention::block_score::block_score;
use lse_kernels::attention::block_select::block_select;
use lse_kernels::attention::key_blocks::{
    key_block_mean_bf16, key_block_mean_f16, key_block_mean_f32,
};

use super::attention_shape::{AttnShape, BlockLists, FlashPrefillParams, KvSlice, KvView};
use super::{to_u32, OpError};
use crate::device::{DevSlice, Device};

const OP: &str = "flashprefill_select";

/// Largest block size the selection takes (the attention kernels tile blocks by 64).
pub const MAX_BLOCK_SIZE: usize = 4096;

/// Every stage's output of one selection, for tests and diagnostics.
#[derive(Clone, Debug, PartialEq)]
pub struct FlashPrefillStages {
    /// `[n_kv_heads, head_dim, n_kblocks]`: each key block's mean key over its valid rows.
    pub pooled: Vec<f32>,
    /// `[n_kv_heads, n_qblocks, n_kblocks]`: `Score_{I,J} = S_{I,J} · exp(m_{I,J} - M_I)`,
    /// not divided by the row sum (selection is relative to the row maximum, which is at
    /// least 1); 0 for `J > I`.
    pub scores: Vec<f32>,
    /// The kept key blocks.
    pub lists: BlockLists,
}

/// Checks FlashPrefill's parameters; the message names the command-line option at fault.
pub fn validate_flashprefill_params(params: &FlashPrefillParams) -> Result<(), String> {
    let b = params.block_size;
    if b == 0 || !b.is_multiple_of(64) || b > MAX_BLOCK_SIZE {
        return Err(format!(
            "--flashprefill-block-size {b}: expected a positive multiple of 64, at most {MAX_BLOCK_SIZE}"
        ));
    }
    let alpha = params.alpha;
    if !alpha.is_finite() || !(0.0..=1.0).contains(&alpha) {
        return Err(format!(
            "--prefill-attention-scale {alpha}: expected a threshold between 0 and 1"
        ));
    }
    if params.window_blocks == 0 {
        return Err(
            "--flashprefill-window-blocks 0: expected at least 1 (the diagonal block)".into(),
        );
    }
    // Sink, window, last-full and min-budget values above a pass's block count are valid:
    // they keep every block.
    Ok(())
}

/// The key blocks each query block of the pass attends to, one list per (KV head, query
/// block): see [`flashprefill_stages`].
pub fn flashprefill_select<'a>(
    dev: &Device,
    shape: &AttnShape,
    q: impl Into<DevSlice<'a, f32>>,
    k: KvSlice<'_>,
    params: &FlashPrefillParams,
) -> Result<BlockLists, OpError> {
    Ok(flashprefill_stages(dev, shape, q, k, params)?.lists)
}

/// Runs the three selection kernels on `q` (`[t, n_heads, head_dim]`, positions
/// `pos0..pos0 + t`) and the key cache `k` (`[>= pos0 + t, n_kv_heads, head_dim]`) and
/// returns every stage's output. Blocks are absolute: query block `p / block_size` for
/// position `p`, key blocks `0..ceil((pos0 + t) / block_size)`. GQA as in FlashPrefill V2:
/// one selection per KV head, scored over all query heads of its group.
pub fn flashprefill_stages<'a>(
    dev: &Device,
    shape: &AttnShape,
    q: impl Into<DevSlice<'a, f32>>,
    k: KvSlice<'_>,
    params: &FlashPrefillParams,
) -> Result<FlashPrefillStages, OpError> {
    let q = q.into();
    validate_flashprefill_params(params).map_err(|message| OpError::Invalid { op: OP, message })?;
    shape.check(OP, q.len(), &KvView { k, v: k }, q.len())?;
    let block = params.block_size;
    let kv_len = shape.kv_len();
    let qblock0 = shape.pos0 / block;
    let n_kblocks = (kv_len - 1) / block + 1;
    let n_qblocks = n_kblocks - qblock0;
    let grid_size = shape.n_kv_heads * n_qblocks * n_kblocks;
    to_u32(OP, "n_kv_heads * n_qblocks * n_kblocks", grid_size)?;
    to_u32(
        OP,
        "n_kv_heads * head_dim * n_kblocks",
        shape.n_kv_heads * shape.head_dim * n_kblocks,
    )?;
    // Every size below is at most one of those just checked, or k's and q's element counts,
    // which `check` bounded.
    let kv_len32 = kv_len as u32;
    let nkb = n_kblocks as u32;
    let nqb = n_qblocks as u32;
    let nkv = shape.n_kv_heads as u32;
    let hd = shape.head_dim as u32;
    let b = block as u32;
    // Forced-block parameters above the block count act like the block count.
    let clamp = |v: usize| v.min(n_kblocks) as u32;

    let mut pooled = vec![0.0f32; shape.n_kv_heads * shape.head_dim * n_kblocks];
    let mean_grid = [nkb, nkv, 1];
    macro_rules! mean {
        ($kernel:ident, $k:expr) => {
            dev.launch(
                mean_grid,
                $kernel::Args {
                    k: $k,
                    pooled: &mut pooled,
                    kv_len: kv_len32,
                    n_kv_heads: nkv,
                    head_dim: hd,
                    block: b,
                },
            )
        };
    }
    match k {
        KvSlice::Bf16(k) => mean!(key_block_mean_bf16, k),
        KvSlice::F16(k) => mean!(key_block_mean_f16, k),
        KvSlice::F32(k) => mean!(key_block_mean_f32, k),
    }?;

    let mut scores = vec![0.0f32; grid_size];
    let mut maxes = vec![0.0f32; grid_size];
    let args = block_score::Args {
        q,
        pooled: &pooled,
        scores: &mut scores,
        maxes: &mut maxes,
        pos0: shape.pos0 as u32,
        kv_len: kv_len32,
        qblock0: qblock0 as u32,
        n_kv_heads: nkv,
        group: shape.group() as u32,
        head_dim: hd,
        block: b,
        n_kblocks: nkb,
        scale: shape.scale,
    };
    dev.launch([nqb, nkv, 1], args)?;

    let mut lists = BlockLists {
        block_size: block,
        qblock0,
        n_qblocks,
        max_blocks: n_kblocks,
        blocks: vec![0; grid_size],
        counts: vec![0; shape.n_kv_heads * n_qblocks],
    };
    let args = block_select::Args {
        scores: &scores,
        blocks: &mut lists.blocks,
        counts: &mut lists.counts,
        qblock0: qblock0 as u32,
        n_kblocks: nkb,
        alpha: params.alpha,
        sink: clamp(params.sink_blocks),
        window: clamp(params.window_blocks),
        last_full: clamp(params.last_full_blocks),
        min_budget: clamp(params.min_budget),
    };
    dev.launch([nqb, nkv, 1], args)?;
    Ok(FlashPrefillStages {
        pooled,
        scores,
        lists,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Pool;

    fn shape() -> AttnShape {
        AttnShape {
            t: 98,
            pos0: 30,
            n_heads: 4,
            n_kv_heads: 2,
            head_dim: 8,
            scale: 0.5,
        }
    }

    fn err(shape: &AttnShape, q: usize, k: usize, params: &FlashPrefillParams) -> String {
        let dev = Device::open(Pool::Cpu).unwrap();
        let q = vec![0.0; q];
        let k = vec![0.0; k];
        flashprefill_select(&dev, shape, &q, KvSlice::F32((&k).into()), params)
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn validate_params_names_the_option() {
        let ok = FlashPrefillParams::default();
        assert_eq!(validate_flashprefill_params(&ok), Ok(()));
        let cases = [
            (
                FlashPrefillParams {
                    block_size: 0,
                    ..ok
                },
                "--flashprefill-block-size 0",
            ),
            (
                FlashPrefillParams {
                    block_size: 96,
                    ..ok
                },
                "--flashprefill-block-size 96",
            ),
            (
                FlashPrefillParams {
                    block_size: 8192,
                    ..ok
                },
                "--flashprefill-block-size 8192",
            ),
            (
                FlashPrefillParams { alpha: -0.1, ..ok },
                "--prefill-attention-scale -0.1",
            ),
            (
                FlashPrefillParams { alpha: 1.5, ..ok },
                "--prefill-attention-scale 1.5",
            ),
            (
                FlashPrefillParams {
                    alpha: f32::NAN,
                    ..ok
                },
                "--prefill-attention-scale NaN",
            ),
            (
                FlashPrefillParams {
                    window_blocks: 0,
                    ..ok
                },
                "--flashprefill-window-blocks 0",
            ),
        ];
        for (params, want) in cases {
            let e = validate_flashprefill_params(&params).unwrap_err();
            assert!(e.starts_with(want), "{e}");
        }
        let edges = [
            FlashPrefillParams {
                block_size: 64,
                alpha: 0.0,
                ..ok
            },
            FlashPrefillParams {
                block_size: 4096,
                alpha: 1.0,
                ..ok
            },
            FlashPrefillParams {
                sink_blocks: 0,
                last_full_blocks: 0,
                min_budget: 1000,
                ..ok
            },
        ];
        for params in edges {
            assert_eq!(validate_flashprefill_params(&params), Ok(()), "{params:?}");
        }
    }

    #[test]
    fn bad_inputs_are_errors_naming_the_op_and_argument() {
        let s = shape();
        let (q, k) = (
            s.t * s.n_heads * s.head_dim,
            s.kv_len() * s.n_kv_heads * s.head_dim,
        );
        let ok = FlashPrefillParams::default();
        let e = err(
            &s,
            q,
            k,
            &FlashPrefillParams {
                block_size: 100,
                ..ok
            },
        );
        assert!(
            e.starts_with("flashprefill_select: --flashprefill-block-size 100"),
            "{e}"
        );
        let e = err(&s, q - 1, k, &ok);
        assert!(e.starts_with("flashprefill_select: q has"), "{e}");
        let e = err(&s, q, k - 8, &ok);
        assert!(e.starts_with("flashprefill_select: k has"), "{e}");
        let e = err(&s, q, k + 1, &ok);
        assert!(e.starts_with("flashprefill_select: k has"), "{e}");
        let gqa = AttnShape { n_heads: 3, ..s };
        let e = err(&gqa, 3 * s.t * s.head_dim, k, &ok);
        assert!(e.contains("not a multiple of n_kv_heads"), "{e}");
        let wide = AttnShape { head_dim: 300, ..s };
        let e = err(&wide, 0, 0, &ok);
        assert!(e.contains("head_dim 300"), "{e}");
        let empty = AttnShape { t: 0, ..s };
        let e = err(&empty, 0, k, &ok);
        assert!(e.contains("empty shape"), "{e}");
    }

    /// A short pass is dense under the default parameters (2 trailing dense blocks cover all
    /// of it), on the cpu device and the host one alike.
    #[test]
    fn short_pass_keeps_every_causal_block() {
        let s = shape();
        let q: Vec<f32> = (0..s.t * s.n_heads * s.head_dim)
            .map(|i| (i % 7) as f32 * 0.1)
            .collect();
        let k: Vec<f32> = (0..s.kv_len() * s.n_kv_heads * s.head_dim)
            .map(|i| (i % 5) as f32 * 0.2)
            .collect();
        let params = FlashPrefillParams {
            block_size: 64,
            ..FlashPrefillParams::default()
        };
        for pool in [Pool::Cpu, Pool::Host] {
            let dev = Device::open(pool).unwrap();
            let lists =
                flashprefill_select(&dev, &s, &q, KvSlice::F32((&k).into()), &params).unwrap();
            assert_eq!(
                (lists.qblock0, lists.n_qblocks, lists.max_blocks),
                (0, 2, 2)
            );
            assert_eq!(lists.counts, vec![1, 2, 1, 2]);
            assert_eq!(lists.blocks, vec![0, 0, 0, 1, 0, 0, 0, 1]);
            assert_eq!(lists.density(), 1.0);
        }
    }
}
