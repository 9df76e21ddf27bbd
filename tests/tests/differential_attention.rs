//! Differential cases of the prefill-attention kernels (`attention.prefill_dense_<ty>`,
//! `attention.prefill_sparse_<ty>`) on the shared harness [`lse_tests::diff`], against the
//! plain-Rust reference [`lse_tests::reference::attention`].

use half::{bf16, f16};
use lse_runtime::device::{Device, Pool};
use lse_runtime::ops::{self, AttnShape, BlockLists, KvSlice, KvView};
use lse_tests::diff::{run_cases, Case, Out, Rng, Tol};
use lse_tests::reference::attention as reference;

/// The stored dtype of the KV cache.
#[derive(Clone, Copy, Debug)]
enum Dtype {
    Bf16,
    F16,
    F32,
}

/// A KV cache's keys and values in their stored dtype.
enum Cache {
    Bf16(Vec<bf16>, Vec<bf16>),
    F16(Vec<f16>, Vec<f16>),
    F32(Vec<f32>, Vec<f32>),
}

impl Cache {
    fn new(dtype: Dtype, k: &[f32], v: &[f32]) -> Cache {
        match dtype {
            Dtype::Bf16 => Cache::Bf16(
                k.iter().map(|&x| bf16::from_f32(x)).collect(),
                v.iter().map(|&x| bf16::from_f32(x)).collect(),
            ),
            Dtype::F16 => Cache::F16(
                k.iter().map(|&x| f16::from_f32(x)).collect(),
                v.iter().map(|&x| f16::from_f32(x)).collect(),
            ),
            Dtype::F32 => Cache::F32(k.to_vec(), v.to_vec()),
        }
    }

    fn view(&self) -> KvView<'_> {
        match self {
            Cache::Bf16(k, v) => KvView {
                k: KvSlice::Bf16(k),
                v: KvSlice::Bf16(v),
            },
            Cache::F16(k, v) => KvView {
                k: KvSlice::F16(k),
                v: KvSlice::F16(v),
            },
            Cache::F32(k, v) => KvView {
                k: KvSlice::F32(k),
                v: KvSlice::F32(v),
            },
        }
    }
}

/// One pass of one layer: the shape, the cache dtype, `extra` cache rows past `pos0 + t`,
/// and for the sparse kernel the block size of random block lists.
#[derive(Clone, Copy, Debug)]
struct AttnCase {
    dtype: Dtype,
    t: usize,
    pos0: usize,
    n_heads: usize,
    n_kv_heads: usize,
    head_dim: usize,
    extra: usize,
    sparse_block: Option<usize>,
    seed: u64,
}

/// A case's inputs.
struct Inputs {
    shape: AttnShape,
    q: Vec<f32>,
    cache: Cache,
    lists: Option<BlockLists>,
}

/// Random block lists: each causal key block kept with probability 2/5, the diagonal always.
fn random_lists(shape: &AttnShape, block_size: usize, rng: &mut Rng) -> BlockLists {
    let qblock0 = shape.pos0 / block_size;
    let n_qblocks = (shape.kv_len() - 1) / block_size - qblock0 + 1;
    let max_blocks = qblock0 + n_qblocks;
    let mut blocks = vec![0u32; shape.n_kv_heads * n_qblocks * max_blocks];
    let mut counts = Vec::new();
    for kvh in 0..shape.n_kv_heads {
        for i in 0..n_qblocks {
            let qb = qblock0 + i;
            let ids: Vec<u32> = (0..=qb)
                .filter(|&j| j == qb || rng.below(5) < 2)
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

/// Every causal key block of every query block.
fn full_lists(shape: &AttnShape, block_size: usize) -> BlockLists {
    let qblock0 = shape.pos0 / block_size;
    let n_qblocks = (shape.kv_len() - 1) / block_size - qblock0 + 1;
    let max_blocks = qblock0 + n_qblocks;
    let mut blocks = vec![0u32; shape.n_kv_heads * n_qblocks * max_blocks];
    let mut counts = Vec::new();
    for kvh in 0..shape.n_kv_heads {
        for i in 0..n_qblocks {
            let row = kvh * n_qblocks + i;
            for j in 0..=qblock0 + i {
                blocks[row * max_blocks + j] = j as u32;
            }
            counts.push((qblock0 + i + 1) as u32);
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
    fn shape(&self) -> AttnShape {
        AttnShape {
            t: self.t,
            pos0: self.pos0,
            n_heads: self.n_heads,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
            scale: 1.0 / (self.head_dim as f32).sqrt(),
        }
    }

    /// Random q, k, v, with queries twice as large as keys so that softmax rows are peaked
    /// as well as flat. Cache rows the pass must not read are NaN: the `extra` rows past
    /// `pos0 + t` and, for the sparse kernel, the rows (of one KV head) of key blocks that
    /// no query block of that head lists; reading one would make outputs NaN.
    fn inputs(&self) -> Inputs {
        let shape = self.shape();
        let mut rng = Rng(self.seed);
        let d = self.head_dim;
        let q = (0..self.t * self.n_heads * d)
            .map(|_| rng.f32(2.0))
            .collect();
        let rows = shape.kv_len() + self.extra;
        let mut k: Vec<f32> = (0..rows * self.n_kv_heads * d)
            .map(|_| rng.f32(1.0))
            .collect();
        let mut v: Vec<f32> = (0..rows * self.n_kv_heads * d)
            .map(|_| rng.f32(1.0))
            .collect();
        let lists = self.sparse_block.map(|b| random_lists(&shape, b, &mut rng));
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
            cache: Cache::new(self.dtype, &k, &v),
            lists,
        }
    }
}

impl Case for AttnCase {
    fn name(&self) -> String {
        format!("{self:?}")
    }

    fn run(&self, dev: &Device) -> Vec<Out> {
        let x = self.inputs();
        let mut out = vec![0.0; x.q.len()];
        match &x.lists {
            None => ops::prefill_attention_dense(dev, &x.shape, &x.q, x.cache.view(), &mut out),
            Some(l) => {
                ops::prefill_attention_sparse(dev, &x.shape, &x.q, x.cache.view(), l, &mut out)
            }
        }
        .unwrap();
        vec![Out::F32("out", out)]
    }

    fn reference(&self) -> Vec<Out> {
        let x = self.inputs();
        let out = match &x.lists {
            None => reference::causal(&x.shape, &x.q, x.cache.view()),
            Some(l) => reference::block_sparse(&x.shape, &x.q, x.cache.view(), l),
        };
        vec![Out::F32("out", out)]
    }

    fn tolerance(&self) -> Tol {
        // Outputs are convex combinations of values in [-1, 1]. The kernels round in f32: a
        // score (a dot product of up to 256 terms, |score| < 8) is off by about 1e-6, which
        // moves a softmax weight by that relative amount, and the weighted sums of up to 700
        // terms add about as much. Observed: at most 3e-7 over these cases; 2e-6 leaves room
        // and still fails on any dropped, extra or misplaced key, which moves outputs by
        // 1e-4 and more.
        Tol {
            abs: 2e-6,
            rel: 0.0,
        }
    }
}

fn case(
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
        seed: (t * 1000 + pos0 + head_dim) as u64,
    }
}

#[test]
fn dense_attention_matches_reference() {
    use Dtype::*;
    let cases = [
        // Qwen3.5's head_dim, GQA group 4, a pass from position 0, t not a multiple of 16.
        case(Bf16, (300, 0), (4, 1, 256), None),
        // A later chunk: pos0 not a multiple of 16, group 2.
        case(F16, (181, 37), (4, 2, 64), None),
        // head_dim not a multiple of 4, group 1.
        case(F32, (70, 130), (3, 3, 40), None),
        // head_dim below 4 (only the remainder loops), a single row, a single tile.
        case(Bf16, (1, 9), (2, 1, 3), None),
        case(F32, (5, 0), (2, 2, 3), None),
    ];
    run_cases(
        cases
            .iter()
            .map(|c| Box::new(*c) as Box<dyn Case>)
            .collect(),
    );
}

#[test]
fn sparse_attention_matches_reference() {
    use Dtype::*;
    let cases = [
        // Several 64-blocks, pos0 and t multiples of nothing.
        case(Bf16, (490, 213), (4, 1, 256), Some(64)),
        case(F16, (301, 0), (4, 2, 64), Some(128)),
        // pos0 not a multiple of the block size nor of 16; head_dim 40.
        case(F32, (333, 200), (4, 4, 40), Some(64)),
        // A pass inside one block; head_dim 100 leaves partial staging slices.
        case(Bf16, (20, 70), (2, 1, 100), Some(128)),
    ];
    run_cases(
        cases
            .iter()
            .map(|c| Box::new(*c) as Box<dyn Case>)
            .collect(),
    );
}

/// With every causal block listed, the sparse kernel visits exactly the dense kernel's key
/// tiles in the same order, so the two agree bit for bit, on the generated Rust and on every
/// host variant.
#[test]
fn sparse_with_every_block_equals_dense_bit_for_bit() {
    use Dtype::*;
    let mut devices = vec![Device::open(Pool::Cpu).unwrap()];
    devices.extend(
        lse_dsl::rt::HOST_CPUS
            .iter()
            .filter_map(|c| Device::host_variant(c)),
    );
    let cases = [
        (case(Bf16, (300, 61), (4, 1, 256), None), 64),
        (case(F16, (200, 128), (2, 2, 40), None), 128),
        (case(F32, (97, 3), (4, 2, 64), None), 64),
    ];
    for (c, block_size) in cases {
        let x = c.inputs();
        let lists = full_lists(&x.shape, block_size);
        for dev in &devices {
            let mut dense = vec![0.0; x.q.len()];
            let mut sparse = vec![0.0; x.q.len()];
            ops::prefill_attention_dense(dev, &x.shape, &x.q, x.cache.view(), &mut dense).unwrap();
            ops::prefill_attention_sparse(dev, &x.shape, &x.q, x.cache.view(), &lists, &mut sparse)
                .unwrap();
            assert!(dense.iter().all(|x| x.is_finite()), "{c:?}");
            let differ = (0..dense.len()).find(|&i| dense[i].to_bits() != sparse[i].to_bits());
            assert_eq!(
                differ,
                None,
                "{c:?} blocks of {block_size} on {}: sparse {:?} vs dense {:?}",
                dev.arch(),
                differ.map(|i| sparse[i]),
                differ.map(|i| dense[i])
            );
        }
    }
}
