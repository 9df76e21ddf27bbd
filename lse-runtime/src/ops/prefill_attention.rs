//! Causal prefill attention over a KV cache, dense and in FlashPrefill's block-sparse form,
//! both launching `attention.prefill_<ty>.v4` (ty = the cache's dtype: bf16, f16, f32) in its
//! dense or sparse mode, with the queries meeting the keys as [`Queries`] says. Both write
//! f32 `[t, n_heads, head_dim]`.

use half::{bf16, f16};
use lse_kernels::attention::prefill::{prefill_bf16, prefill_f16, prefill_f32};
use std::sync::LazyLock;

use super::{check_len, to_u32, AttnShape, BlockLists, KvSlice, KvView, OpError};
use crate::device::{DevSlice, DevSliceMut, Device};

const DENSE: &str = "attention.prefill_dense";
const SPARSE: &str = "attention.prefill_sparse";

/// Key blocks are split into the kernel's 64-key tiles and hold whole query tiles, so the
/// block size must be a multiple of this.
const BLOCK_MULTIPLE: usize = TILE;

/// The block size of dense mode. Dense mode walks blocks `0..=I` and each block's 64-key
/// tiles, the same tiles whatever the block size (a multiple of 64), so it only sets how the
/// key loop is split.
const DENSE_BLOCK: usize = 128;

/// What the kernel's `blocks` and `counts` take in dense mode, which reads neither.
const NO_LISTS: [u32; 1] = [0];

/// The kernel's query and key tiles: 64 rows.
const TILE: usize = 64;

/// The kernel's chunks of the head dimension: 32.
const CHUNK: usize = 32;

/// The kernel's `causal` operand ([`causal_mask`]), built once for every launch.
static CAUSAL: LazyLock<Vec<f32>> = LazyLock::new(causal_mask);

/// The kernel's `causal` operand: `[64, 128]`, -inf where the column is past the row + 64,
/// else 0. The diagonal key tile's scores start at a 64-column window of it, so the keys past
/// each query row are -inf.
fn causal_mask() -> Vec<f32> {
    (0..TILE)
        .flat_map(|r| {
            (0..2 * TILE).map(move |c| if c > r + TILE { f32::NEG_INFINITY } else { 0.0 })
        })
        .collect()
}

/// How the queries meet the keys in the scores `q · kᵀ` of the prefill attention.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Queries {
    /// In f32: each product is one `fma` of the query and the widened key, in ascending order
    /// (transformers' f32 attention; llama.cpp's over f16 and f32 caches, whose CPU flash
    /// attention widens the keys for its f32 tiles).
    #[default]
    F32,
    /// Rounded to bf16 against a bf16 cache, as llama.cpp's CPU flash attention does over a
    /// bf16 cache (it converts the queries to the keys' dot type): the products are exact
    /// and run on the target's bf16 dot (`vdpbf16ps`, AMX, MFMA, `mma`), summed in its order
    /// (`LOOM.md`, "Numeric contract of `tile_dot`"). Against f16 and f32 caches the queries
    /// stay f32, as [`Queries::F32`].
    RoundedToBf16Cache,
}

/// `out[r, h] = Σ_j softmax_j(scale · q[r, h] · k[j, kvh]) · v[j, kvh]` over cache rows
/// `j <= pos0 + r`, for the `t` query rows of `shape` (`q`, `out`: `[t, n_heads, head_dim]`;
/// query head `h` reads KV head `h / (n_heads / n_kv_heads)`), the products `q · k` taken
/// as `queries` says.
pub fn prefill_attention_dense<'a>(
    dev: &Device,
    shape: &AttnShape,
    q: impl Into<DevSlice<'a, f32>>,
    kv: KvView,
    queries: Queries,
    out: impl Into<DevSliceMut<'a, f32>>,
) -> Result<(), OpError> {
    let (q, out) = (q.into(), out.into());
    let kv = check(DENSE, shape, q, kv, out.len())?;
    let lists = Lists {
        blocks: &NO_LISTS,
        counts: &NO_LISTS,
        dense: true,
        block_size: DENSE_BLOCK,
        max_blocks: 1,
    };
    launch(dev, shape, q, kv, queries, lists, out)
}

/// [`prefill_attention_dense`] restricted to the key blocks `lists` keeps: query block `I`
/// (absolute, `position / block_size`) of query head `h` attends only to the keys of the
/// blocks listed for (`h`'s KV head, `I`), the causal mask applying inside the diagonal
/// block. With every causal block listed the result equals the dense op's bit for bit.
pub fn prefill_attention_sparse<'a>(
    dev: &Device,
    shape: &AttnShape,
    q: impl Into<DevSlice<'a, f32>>,
    kv: KvView,
    lists: &BlockLists,
    queries: Queries,
    out: impl Into<DevSliceMut<'a, f32>>,
) -> Result<(), OpError> {
    let (q, out) = (q.into(), out.into());
    let kv = check(SPARSE, shape, q, kv, out.len())?;
    check_lists(shape, lists)?;
    let lists = Lists {
        blocks: &lists.blocks,
        counts: &lists.counts,
        dense: false,
        block_size: lists.block_size,
        max_blocks: lists.max_blocks,
    };
    launch(dev, shape, q, kv, queries, lists, out)
}

/// The kernel's key-block arguments: its mode, and in sparse mode the checked lists.
struct Lists<'a> {
    blocks: &'a [u32],
    counts: &'a [u32],
    dense: bool,
    block_size: usize,
    max_blocks: usize,
}

/// Keys and values of one dtype, which picks the kernel instance.
enum SameDtype<'a> {
    Bf16(DevSlice<'a, bf16>, DevSlice<'a, bf16>),
    F16(DevSlice<'a, f16>, DevSlice<'a, f16>),
    F32(DevSlice<'a, f32>, DevSlice<'a, f32>),
}

/// Launches the dtype's instance of the kernel on checked arguments. The checks have bounded
/// every scalar by the 32-bit element counts (block size and list sizes included).
fn launch(
    dev: &Device,
    shape: &AttnShape,
    q: DevSlice<'_, f32>,
    kv: SameDtype,
    queries: Queries,
    lists: Lists,
    out: DevSliceMut<'_, f32>,
) -> Result<(), OpError> {
    // The kernel's accumulator and f32 query, 64 rows by the head dim (padded to its chunks
    // of 32) each, per workgroup; with rounded queries (a bf16 cache only) the bf16 query
    // too, half of that (so its length fits u32 when the other's does).
    let groups = grid(shape);
    let [tiles, heads, _] = groups;
    let per_group = 2 * shape.head_dim.next_multiple_of(CHUNK) * TILE;
    let len = tiles as usize * heads as usize * per_group;
    let op = if lists.dense { DENSE } else { SPARSE };
    to_u32(op, "workgroups * 2 * head_dim * 64", len)?;
    let mut work = dev.scratch::<f32>(len)?;
    let round_q = queries == Queries::RoundedToBf16Cache && matches!(kv, SameDtype::Bf16(..));
    macro_rules! launch {
        ($kernel:ident, $ty:ty, $k:expr, $v:expr) => {{
            let mut qr = dev.scratch::<$ty>(if round_q { len / 2 } else { 1 })?;
            dev.launch(
                groups,
                $kernel::Args {
                    q,
                    k: $k,
                    v: $v,
                    causal: CAUSAL.as_slice(),
                    blocks: lists.blocks,
                    counts: lists.counts,
                    out,
                    work: work.view_mut(),
                    qr: qr.view_mut(),
                    t: shape.t as u32,
                    pos0: shape.pos0 as u32,
                    n_heads: shape.n_heads as u32,
                    n_kv_heads: shape.n_kv_heads as u32,
                    head_dim: shape.head_dim as u32,
                    scale: shape.scale,
                    dense: lists.dense as u32,
                    block_size: lists.block_size as u32,
                    qblock0: (shape.pos0 / lists.block_size) as u32,
                    max_blocks: lists.max_blocks as u32,
                    round_q: round_q as u32,
                },
            )
        }};
    }
    match kv {
        SameDtype::Bf16(k, v) => launch!(prefill_bf16, bf16, k, v),
        SameDtype::F16(k, v) => launch!(prefill_f16, f16, k, v),
        SameDtype::F32(k, v) => launch!(prefill_f32, f32, k, v),
    }?;
    Ok(())
}

/// The shape and buffers, plus what the kernel adds: keys and values of one dtype (returned
/// paired), `n_heads * n_kv_heads < 2^24` (the kernel finds a query head's KV head by an
/// f32 division that is exact below that) and a positive, finite scale (masked scores are
/// -inf before the kernel scales them).
fn check<'a>(
    op: &'static str,
    shape: &AttnShape,
    q: DevSlice<'_, f32>,
    kv: KvView<'a>,
    out_len: usize,
) -> Result<SameDtype<'a>, OpError> {
    shape.check(op, q.len(), &kv, out_len)?;
    let pair = match (kv.k, kv.v) {
        (KvSlice::Bf16(k), KvSlice::Bf16(v)) => SameDtype::Bf16(k, v),
        (KvSlice::F16(k), KvSlice::F16(v)) => SameDtype::F16(k, v),
        (KvSlice::F32(k), KvSlice::F32(v)) => SameDtype::F32(k, v),
        (k, v) => {
            return Err(OpError::Invalid {
                op,
                message: format!(
                    "k is {} and v is {}, expected one dtype",
                    dtype(&k),
                    dtype(&v)
                ),
            })
        }
    };
    if !(shape.scale > 0.0 && shape.scale.is_finite()) {
        return Err(OpError::Invalid {
            op,
            message: format!("scale {} is not a positive finite number", shape.scale),
        });
    }
    if shape.n_heads.saturating_mul(shape.n_kv_heads) >= 1 << 24 {
        return Err(OpError::Invalid {
            op,
            message: format!(
                "n_heads {} times n_kv_heads {} is not below 2^24",
                shape.n_heads, shape.n_kv_heads
            ),
        });
    }
    Ok(pair)
}

fn dtype(x: &KvSlice) -> &'static str {
    x.pick(("bf16", "f16", "f32"))
}

/// Checks `lists` against `shape`: block size a positive multiple of 64, `qblock0` and
/// `n_qblocks` those of the pass, buffer lengths, and every row a non-empty ascending list of
/// causal key blocks ending with the diagonal one.
fn check_lists(shape: &AttnShape, lists: &BlockLists) -> Result<(), OpError> {
    let invalid = |message: String| {
        Err(OpError::Invalid {
            op: SPARSE,
            message,
        })
    };
    let b = lists.block_size;
    if b == 0 || !b.is_multiple_of(BLOCK_MULTIPLE) {
        return invalid(format!(
            "block_size {b} is not a positive multiple of {BLOCK_MULTIPLE}"
        ));
    }
    to_u32(SPARSE, "block_size", b)?;
    let qblock0 = shape.pos0 / b;
    let n_qblocks = (shape.kv_len() - 1) / b - qblock0 + 1;
    if lists.qblock0 != qblock0 || lists.n_qblocks != n_qblocks {
        return invalid(format!(
            "lists cover query blocks {}..{} (qblock0, n_qblocks = {}, {}), expected {qblock0}..{} \
             for positions {}..{} in blocks of {b}",
            lists.qblock0,
            lists.qblock0 + lists.n_qblocks,
            lists.qblock0,
            lists.n_qblocks,
            qblock0 + n_qblocks,
            shape.pos0,
            shape.kv_len()
        ));
    }
    if lists.max_blocks == 0 {
        return invalid("max_blocks is 0".into());
    }
    let rows = shape.n_kv_heads * n_qblocks;
    check_len(SPARSE, "counts", lists.counts.len(), rows)?;
    let want = rows
        .checked_mul(lists.max_blocks)
        .ok_or_else(|| OpError::Invalid {
            op: SPARSE,
            message: format!("max_blocks {} overflows the lists' size", lists.max_blocks),
        })?;
    check_len(SPARSE, "blocks", lists.blocks.len(), want)?;
    to_u32(SPARSE, "blocks elements", want)?;
    for (row, &count) in lists.counts.iter().enumerate() {
        let (kvh, qb) = (row / n_qblocks, qblock0 + row % n_qblocks);
        let count = count as usize;
        if count == 0 || count > lists.max_blocks {
            return invalid(format!(
                "counts[{row}] (KV head {kvh}, query block {qb}) is {count}, expected 1..={}",
                lists.max_blocks
            ));
        }
        let ids = &lists.blocks[row * lists.max_blocks..][..count];
        if ids.windows(2).any(|w| w[0] >= w[1]) || ids[count - 1] as usize != qb {
            return invalid(format!(
                "blocks of KV head {kvh}, query block {qb} are {ids:?}, expected ascending ids \
                 ending with the diagonal block {qb}"
            ));
        }
    }
    Ok(())
}

/// Workgroups: x = the query tiles ([`TILE`] rows, the workgroup size, aligned to absolute
/// positions) that hold a row of the pass, y = query heads.
fn grid(shape: &AttnShape) -> [u32; 3] {
    let tiles = shape.kv_len().div_ceil(TILE) - shape.pos0 / TILE;
    [tiles as u32, shape.n_heads as u32, 1]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Pool;
    use half::bf16;

    /// 2 query heads on 1 KV head, head_dim 8, rows 130..200 of a 200-row cache.
    fn shape() -> AttnShape {
        AttnShape {
            t: 70,
            pos0: 130,
            n_heads: 2,
            n_kv_heads: 1,
            head_dim: 8,
            scale: 0.35,
        }
    }

    /// Every causal block of the pass in blocks of 64: query blocks 2 and 3.
    fn full_lists() -> BlockLists {
        BlockLists {
            block_size: 64,
            qblock0: 2,
            n_qblocks: 2,
            max_blocks: 4,
            blocks: vec![0, 1, 2, 0, 0, 1, 2, 3],
            counts: vec![3, 4],
        }
    }

    /// The CPU device and f32 inputs of [`shape`].
    struct Fixture {
        dev: Device,
        s: AttnShape,
        q: Vec<f32>,
        k: Vec<f32>,
        v: Vec<f32>,
    }

    impl Fixture {
        fn new() -> Fixture {
            let s = shape();
            let q = (0..s.t * s.n_heads * s.head_dim)
                .map(|i| ((i * 7 % 13) as f32 - 6.0) / 4.0)
                .collect();
            let kv = s.kv_len() * s.n_kv_heads * s.head_dim;
            let k = (0..kv).map(|i| ((i * 5 % 11) as f32 - 5.0) / 3.0).collect();
            let v = (0..kv).map(|i| ((i * 3 % 17) as f32 - 8.0) / 5.0).collect();
            Fixture {
                dev: Device::open(Pool::Cpu).unwrap(),
                s,
                q,
                k,
                v,
            }
        }

        fn kv(&self) -> KvView<'_> {
            KvView {
                k: KvSlice::F32((&self.k).into()),
                v: KvSlice::F32((&self.v).into()),
            }
        }

        /// A zeroed output for the query rows.
        fn out(&self) -> Vec<f32> {
            vec![0.0; self.q.len()]
        }
    }

    fn message(r: Result<(), OpError>) -> String {
        r.expect_err("should be refused").to_string()
    }

    #[test]
    fn dense_refuses_bad_shapes_and_mixed_dtypes() {
        let f = Fixture::new();
        let (dev, s, q, k, v, kv) = (&f.dev, f.s, &f.q, &f.k, &f.v, f.kv());
        let mut out = f.out();
        let mut refused = |s: &AttnShape, q: &[f32], kv: KvView| {
            message(prefill_attention_dense(
                dev,
                s,
                q,
                kv,
                Queries::F32,
                &mut out,
            ))
        };
        let e = refused(&s, &q[1..], kv);
        assert!(
            e.contains("attention.prefill_dense") && e.contains("q"),
            "{e}"
        );
        let short = KvView {
            k: KvSlice::F32((&k[..k.len() - 8]).into()),
            v: KvSlice::F32(v.into()),
        };
        let e = refused(&s, q, short);
        assert!(e.contains("k has"), "{e}");
        let vb: Vec<bf16> = v.iter().map(|&x| bf16::from_f32(x)).collect();
        let mixed = KvView {
            k: KvSlice::F32(k.into()),
            v: KvSlice::Bf16((&vb).into()),
        };
        let e = refused(&s, q, mixed);
        assert!(e.contains("k is f32 and v is bf16"), "{e}");
        let wide = AttnShape { head_dim: 512, ..s };
        let e = refused(&wide, q, kv);
        assert!(e.contains("head_dim 512"), "{e}");
        let odd = AttnShape { n_kv_heads: 3, ..s };
        let e = refused(&odd, q, kv);
        assert!(e.contains("not a multiple of n_kv_heads"), "{e}");
        // The kernel scales masked (-inf) scores: 0, a negative or a non-finite scale would
        // turn them into NaN or +inf.
        for scale in [0.0, -0.35, f32::NAN, f32::INFINITY] {
            let bad = AttnShape { scale, ..s };
            let e = refused(&bad, q, kv);
            assert!(
                e.contains(&format!("scale {scale} is not a positive finite number")),
                "{e}"
            );
        }
    }

    /// The diagonal tile's mask: row r attends columns up to r + 64 of the 128.
    #[test]
    fn causal_mask_hides_the_keys_past_each_row() {
        let mask = causal_mask();
        assert_eq!(mask.len(), 64 * 128);
        for r in 0..64 {
            for c in 0..128 {
                let masked = mask[r * 128 + c] == f32::NEG_INFINITY;
                assert_eq!(masked, c > r + 64, "({r}, {c})");
            }
        }
    }

    /// Makes valid lists invalid in one way.
    type Spoil = fn(&mut BlockLists);

    #[test]
    fn sparse_refuses_inconsistent_lists() {
        let f = Fixture::new();
        let mut out = f.out();
        let mut run = |lists: &BlockLists| {
            message(prefill_attention_sparse(
                &f.dev,
                &f.s,
                &f.q,
                f.kv(),
                lists,
                Queries::F32,
                &mut out,
            ))
        };
        let cases: [(&str, Spoil); 9] = [
            ("not a positive multiple of 64", |l| l.block_size = 96),
            ("expected 2..4", |l| l.qblock0 = 1),
            ("expected 2..4", |l| l.n_qblocks = 3),
            ("max_blocks is 0", |l| l.max_blocks = 0),
            ("counts has 1 elements", |l| l.counts.truncate(1)),
            ("blocks has 7 elements", |l| l.blocks.truncate(7)),
            ("counts[0] (KV head 0, query block 2) is 0", |l| {
                l.counts[0] = 0
            }),
            ("ending with the diagonal block 3", |l| l.counts[1] = 3),
            ("expected ascending ids", |l| l.blocks[5] = 0),
        ];
        for (want, spoil) in cases {
            let mut lists = full_lists();
            spoil(&mut lists);
            let e = run(&lists);
            assert!(
                e.contains("attention.prefill_sparse") && e.contains(want),
                "{want}: {e}"
            );
        }
    }

    /// With every causal block listed the kernel's sparse mode visits dense mode's key tiles
    /// in the same order, so the two agree to the bit (here on the generated Rust).
    #[test]
    fn sparse_with_every_block_is_dense() {
        let f = Fixture::new();
        let mut dense = f.out();
        prefill_attention_dense(&f.dev, &f.s, &f.q, f.kv(), Queries::F32, &mut dense).unwrap();
        let mut sparse = f.out();
        let lists = full_lists();
        prefill_attention_sparse(
            &f.dev,
            &f.s,
            &f.q,
            f.kv(),
            &lists,
            Queries::F32,
            &mut sparse,
        )
        .unwrap();
        assert!(dense.iter().all(|x| x.is_finite()));
        let same = dense
            .iter()
            .zip(&sparse)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same);
    }
}
