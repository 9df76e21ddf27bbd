//! Differential cases of the prefill-attention kernel (`attention.prefill_<ty>`, dense and
//! sparse mode) against [`crate::reference::attention`]: every cache dtype, GQA groups 1 to 4,
//! head dims that are and are not multiples of 4, passes that start inside a tile or a block,
//! cache rows the kernel must not read set to NaN, and queries in f32 and rounded to a bf16
//! cache ([`Queries`]: the reference rounds them likewise, then computes in f64).

use lse_runtime::device::Device;
use lse_runtime::ops::{self, AttnShape, BlockLists, KvView, Queries};

use super::{boxed, shape, Dtype, Stored};
use crate::diff::{Case, Out, Rng, Tol};
use crate::reference::attention as reference;
use crate::reference::flashprefill::blocks;

/// One pass of one layer: the shape, the cache dtype, `extra` cache rows past `pos0 + t`,
/// and for sparse mode the block size of random block lists.
#[derive(Clone, Copy, Debug)]
pub struct AttnCase {
    pub dtype: Dtype,
    pub t: usize,
    pub pos0: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub extra: usize,
    pub sparse_block: Option<usize>,
    pub queries: Queries,
    pub seed: u64,
}

/// A case's inputs.
pub struct Inputs {
    pub shape: AttnShape,
    pub q: Vec<f32>,
    /// The cache's keys and values in the case's dtype.
    pub k: Stored,
    pub v: Stored,
    /// Sparse mode's block lists; `None` for dense mode.
    pub lists: Option<BlockLists>,
}

impl Inputs {
    /// The cache as the kernels take it.
    pub fn kv(&self) -> KvView<'_> {
        KvView {
            k: self.k.kv(),
            v: self.v.kv(),
        }
    }
}

/// Block lists of a pass that keep, for every KV head and query block `I`, the causal key
/// blocks `J <= I` for which `keep(I, J)` holds (asked in that order: heads, query blocks,
/// then `J` ascending).
pub fn block_lists(
    shape: &AttnShape,
    block_size: usize,
    mut keep: impl FnMut(usize, usize) -> bool,
) -> BlockLists {
    let (qblock0, n_qblocks, max_blocks) = blocks(shape, block_size);
    let mut blocks = vec![0u32; shape.n_kv_heads * n_qblocks * max_blocks];
    let mut counts = Vec::new();
    for kvh in 0..shape.n_kv_heads {
        for i in 0..n_qblocks {
            let qb = qblock0 + i;
            let ids: Vec<u32> = (0..=qb)
                .filter(|&j| keep(qb, j))
                .map(|j| j as u32)
                .collect();
            let row = kvh * n_qblocks + i;
            blocks[row * max_blocks..][..ids.len()].copy_from_slice(&ids);
            counts.push(ids.len() as u32);
        }
    }
    BlockLists {
        block_size,
        qblock0,
        n_qblocks,
        max_blocks,
        blocks,
        counts,
    }
}

impl AttnCase {
    /// The pass's shape.
    pub fn shape(&self) -> AttnShape {
        shape(
            self.t,
            self.pos0,
            self.n_heads,
            self.n_kv_heads,
            self.head_dim,
        )
    }

    /// Random q, k, v, with queries twice as large as keys so that softmax rows are peaked
    /// as well as flat. Cache rows the pass must not read are NaN: the `extra` rows past
    /// `pos0 + t` and, for sparse mode, the rows (of one KV head) of key blocks that
    /// no query block of that head lists; reading one would make outputs NaN. Sparse mode's
    /// lists keep each causal key block with probability 2/5, the diagonal always.
    pub fn inputs(&self) -> Inputs {
        let shape = self.shape();
        let mut rng = Rng(self.seed);
        let d = self.head_dim;
        let q = rng.f32s(self.t * self.n_heads * d, 2.0);
        let rows = shape.kv_len() + self.extra;
        let mut k = rng.f32s(rows * self.n_kv_heads * d, 1.0);
        let mut v = rng.f32s(rows * self.n_kv_heads * d, 1.0);
        let lists = self
            .sparse_block
            .map(|b| block_lists(&shape, b, |qb, j| j == qb || rng.below(5) < 2));
        for row in 0..rows {
            for kvh in 0..self.n_kv_heads {
                let listed = match &lists {
                    None => true,
                    Some(l) => (0..l.n_qblocks).any(|i| {
                        let r = kvh * l.n_qblocks + i;
                        let n = l.counts[r] as usize;
                        l.blocks[r * l.max_blocks..][..n].contains(&((row / l.block_size) as u32))
                    }),
                };
                if row >= shape.kv_len() || !listed {
                    let at = (row * self.n_kv_heads + kvh) * d;
                    k[at..at + d].fill(f32::NAN);
                    v[at..at + d].fill(f32::NAN);
                }
            }
        }
        Inputs {
            shape,
            q,
            k: Stored::new(&k, self.dtype),
            v: Stored::new(&v, self.dtype),
            lists,
        }
    }

    /// Whether the kernel's scores are bf16 tile dots: queries rounded to a bf16 cache.
    fn bf16_scores(&self) -> bool {
        self.queries == Queries::RoundedToBf16Cache && self.dtype == Dtype::Bf16
    }
}

impl Case for AttnCase {
    fn name(&self) -> String {
        format!("{self:?}")
    }

    fn run(&self, dev: &Device) -> Vec<Out> {
        let x = self.inputs();
        let mut out = vec![0.0; x.q.len()];
        let queries = self.queries;
        match &x.lists {
            None => ops::prefill_attention_dense(dev, &x.shape, &x.q, x.kv(), queries, &mut out),
            Some(l) => {
                ops::prefill_attention_sparse(dev, &x.shape, &x.q, x.kv(), l, queries, &mut out)
            }
        }
        .unwrap();
        vec![Out::F32("out", out)]
    }

    fn reference(&self) -> Vec<Out> {
        let x = self.inputs();
        let (k, v) = (x.k.widened(), x.v.widened());
        let kv = reference::KvF32 { k: &k, v: &v };
        let q = if self.bf16_scores() {
            Stored::new(&x.q, Dtype::Bf16).widened()
        } else {
            x.q
        };
        let out = match &x.lists {
            None => reference::causal(&x.shape, &q, kv),
            Some(l) => reference::block_sparse(&x.shape, &q, kv, l),
        };
        vec![Out::F32("out", out)]
    }

    fn tolerance(&self) -> Tol {
        // Outputs are convex combinations of values in [-1, 1]. The kernels round in f32: a
        // score (a dot product of up to 256 terms, |score| < 8) is off by about 1e-6, which
        // moves a softmax weight by that relative amount, and the weighted sums of up to 700
        // terms add about as much. Observed: at most 3e-7 over these cases; 2e-6 leaves room
        // and still fails on any dropped, extra or misplaced key, which moves outputs by
        // 1e-4 and more. Queries rounded to bf16 (or not rounded where they should be) move
        // scores by about 2^-9 of their size, outputs by 1e-5 to 1e-4: the bound holds the
        // mode too (the bf16 dot's products are exact; only its sums round, as the f32 ones).
        Tol {
            abs: 2e-6,
            rel: 0.0,
        }
    }

    /// The f32 scores' dots keep the reference order on every host level; the bf16 ones sum
    /// in the target's order (AMX's differs, `LOOM.md`), held to the tolerance instead.
    fn same_order(&self) -> bool {
        !self.bf16_scores()
    }
}

/// A case of `t` rows from `pos0`, `n_heads` query and `n_kv_heads` KV heads of `head_dim`,
/// five cache rows past the pass, inputs seeded from the shape.
pub fn case(
    dtype: Dtype,
    (t, pos0): (usize, usize),
    (n_heads, n_kv_heads, head_dim): (usize, usize, usize),
    sparse_block: Option<usize>,
) -> AttnCase {
    AttnCase {
        dtype,
        t,
        pos0,
        n_heads,
        n_kv_heads,
        head_dim,
        extra: 5,
        sparse_block,
        queries: Queries::F32,
        seed: (t * 1000 + pos0 + head_dim) as u64,
    }
}

/// [`case`] with the queries rounded to a bf16 cache ([`Queries::RoundedToBf16Cache`]).
pub fn rounded(
    dtype: Dtype,
    rows: (usize, usize),
    heads: (usize, usize, usize),
    sparse_block: Option<usize>,
) -> AttnCase {
    AttnCase {
        queries: Queries::RoundedToBf16Cache,
        ..case(dtype, rows, heads, sparse_block)
    }
}

/// Dense mode's cases.
pub fn dense_cases() -> Vec<Box<dyn Case>> {
    use Dtype::*;
    boxed([
        // Qwen3.5's head_dim, GQA group 4, a pass from position 0, t not a multiple of 16.
        case(Bf16, (300, 0), (4, 1, 256), None),
        // A later chunk: pos0 not a multiple of 16, group 2.
        case(F16, (181, 37), (4, 2, 64), None),
        // head_dim not a multiple of 4, group 1.
        case(F32, (70, 130), (3, 3, 40), None),
        // head_dim below 4 (only the remainder loops), a single row, a single tile.
        case(Bf16, (1, 9), (2, 1, 3), None),
        case(F32, (5, 0), (2, 2, 3), None),
        // Queries rounded to the bf16 cache: the 0.8B shape; head dims of one half-chunk, of
        // a chunk and a half (the second half of the last chunk past head_dim) and below 4.
        rounded(Bf16, (300, 0), (4, 1, 256), None),
        rounded(Bf16, (181, 37), (4, 2, 32), None),
        rounded(Bf16, (70, 130), (3, 3, 100), None),
        rounded(Bf16, (1, 9), (2, 1, 3), None),
        // Against f16 and f32 caches the queries stay f32.
        rounded(F16, (181, 37), (4, 2, 64), None),
        rounded(F32, (70, 130), (3, 3, 40), None),
    ])
}

/// Sparse mode's cases.
pub fn sparse_cases() -> Vec<Box<dyn Case>> {
    use Dtype::*;
    boxed([
        // Several 64-blocks, pos0 and t multiples of nothing.
        case(Bf16, (490, 213), (4, 1, 256), Some(64)),
        case(F16, (301, 0), (4, 2, 64), Some(128)),
        // pos0 not a multiple of the block size nor of 16; head_dim 40.
        case(F32, (333, 200), (4, 4, 40), Some(64)),
        // A pass inside one block; head_dim 100 leaves partial staging slices.
        case(Bf16, (20, 70), (2, 1, 100), Some(128)),
        rounded(Bf16, (490, 213), (4, 1, 256), Some(64)),
        rounded(Bf16, (20, 70), (2, 1, 100), Some(128)),
    ])
}

/// Both kernels' cases.
pub fn cases() -> Vec<Box<dyn Case>> {
    let mut out = dense_cases();
    out.extend(sparse_cases());
    out
}
