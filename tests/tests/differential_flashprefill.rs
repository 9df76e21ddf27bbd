//! FlashPrefill V2's selection kernels (`attention.key_block_mean_<ty>`,
//! `attention.block_score`, `attention.block_select`): differential cases against the
//! plain-Rust reference on the shared harness, and patterns with known block lists.

use half::{bf16, f16};
use lse_runtime::device::{Arg, Device, Pool};
use lse_runtime::ops::{self, AttnShape, BlockLists, FlashPrefillParams, KvSlice};
use lse_tests::diff::{run_cases, Case, Out, Rng, Tol};
use lse_tests::reference::flashprefill as reference;

/// The stored dtype of the key cache.
#[derive(Clone, Copy, Debug)]
enum KvType {
    Bf16,
    F16,
    F32,
}

/// A key cache in its stored dtype.
enum Keys {
    Bf16(Vec<bf16>),
    F16(Vec<f16>),
    F32(Vec<f32>),
}

impl Keys {
    fn new(values: &[f32], ty: KvType) -> Keys {
        match ty {
            KvType::Bf16 => Keys::Bf16(values.iter().map(|&x| bf16::from_f32(x)).collect()),
            KvType::F16 => Keys::F16(values.iter().map(|&x| f16::from_f32(x)).collect()),
            KvType::F32 => Keys::F32(values.to_vec()),
        }
    }

    fn slice(&self) -> KvSlice<'_> {
        match self {
            Keys::Bf16(k) => KvSlice::Bf16(k),
            Keys::F16(k) => KvSlice::F16(k),
            Keys::F32(k) => KvSlice::F32(k),
        }
    }

    /// The cache widened to f32 with `half`, for the reference.
    fn widened(&self) -> Vec<f32> {
        match self {
            Keys::Bf16(k) => k.iter().map(|x| x.to_f32()).collect(),
            Keys::F16(k) => k.iter().map(|x| x.to_f32()).collect(),
            Keys::F32(k) => k.clone(),
        }
    }
}

fn shape(t: usize, pos0: usize, n_heads: usize, n_kv_heads: usize, head_dim: usize) -> AttnShape {
    AttnShape {
        t,
        pos0,
        n_heads,
        n_kv_heads,
        head_dim,
        scale: 1.0 / (head_dim as f32).sqrt(),
    }
}

/// Forced blocks only where asked: no sink, the diagonal as the window, no dense rows.
fn bare(block_size: usize, alpha: f32) -> FlashPrefillParams {
    FlashPrefillParams {
        block_size,
        alpha,
        sink_blocks: 0,
        window_blocks: 1,
        last_full_blocks: 0,
        min_budget: 0,
    }
}

/// The rows of `lists` as vectors, `[kv head][query block]`.
fn rows(lists: &BlockLists) -> Vec<Vec<Vec<u32>>> {
    lists
        .counts
        .chunks(lists.n_qblocks)
        .enumerate()
        .map(|(h, counts)| {
            counts
                .iter()
                .enumerate()
                .map(|(i, &c)| {
                    let at = (h * lists.n_qblocks + i) * lists.max_blocks;
                    lists.blocks[at..at + c as usize].to_vec()
                })
                .collect()
        })
        .collect()
}

/// The devices the pattern tests run on: generated Rust and the host's LLVM code.
fn devices() -> Vec<Device> {
    vec![
        Device::open(Pool::Cpu).unwrap(),
        Device::open(Pool::Host).unwrap(),
    ]
}

/// Random inputs with structure: each key block of each KV head has its own centre (random
/// direction, a strength that varies by block) plus per-token noise, and each query block
/// its own direction per head plus noise, so block scores spread over several units and the
/// threshold keeps some blocks and drops others.
struct SelectCase {
    kv: KvType,
    shape: AttnShape,
    params: FlashPrefillParams,
    /// Cache rows past `kv_len` (filled with huge values that must not be read).
    extra_rows: usize,
    seed: u64,
}

/// Relative distance from the threshold (and between the budget's last member and the next
/// block) under which a row's list is not compared: the device's f32 scores may round to the
/// other side.
const DECISIVE: f64 = 1e-4;

impl SelectCase {
    fn inputs(&self) -> (Vec<f32>, Keys) {
        let s = &self.shape;
        let mut rng = Rng(self.seed);
        let row = s.n_kv_heads * s.head_dim;
        let n_kblocks = s.kv_len().div_ceil(self.params.block_size);
        let centres: Vec<f32> = (0..n_kblocks * row)
            .map(|i| {
                let strength = 0.5 + ((i / row) * 7 % 5) as f32 * 0.4;
                rng.f32(strength)
            })
            .collect();
        let mut k = Vec::with_capacity((s.kv_len() + self.extra_rows) * row);
        for r in 0..s.kv_len() {
            let jb = r / self.params.block_size;
            k.extend((0..row).map(|c| centres[jb * row + c] + rng.f32(0.5)));
        }
        k.extend((0..self.extra_rows * row).map(|i| if i % 2 == 0 { 3.0e4 } else { -1.0e4 }));
        // Queries of one block share a direction per head (as real queries are correlated),
        // so one block's logits against a key block move together.
        let q_row = s.n_heads * s.head_dim;
        let q_dirs: Vec<f32> = (0..n_kblocks * q_row).map(|_| rng.f32(6.0)).collect();
        let q = (0..s.t * q_row)
            .map(|i| {
                let qb = (s.pos0 + i / q_row) / self.params.block_size;
                q_dirs[qb * q_row + i % q_row] + rng.f32(1.0)
            })
            .collect();
        (q, Keys::new(&k, self.kv))
    }

    fn reference_selection(&self) -> reference::Selection {
        let (q, k) = self.inputs();
        reference::flashprefill_select(&self.shape, &q, &k.widened(), &self.params)
    }

    /// Rows of the lists whose decisions are within rounding of a boundary.
    fn undecided(&self, sel: &reference::Selection) -> Vec<bool> {
        let p = &self.params;
        let lists = &sel.lists;
        let mut out = Vec::new();
        for h in 0..self.shape.n_kv_heads {
            for i in 0..lists.n_qblocks {
                let qb = lists.qblock0 + i;
                let row = &sel.scores[(h * lists.n_qblocks + i) * lists.max_blocks..][..qb + 1];
                let best = row.iter().fold(0.0f64, |a, &b| a.max(b));
                let threshold = f64::from(p.alpha) * best;
                let near = |a: f64, b: f64| (a - b).abs() <= DECISIVE * a.abs().max(b.abs());
                let mut sorted = row.to_vec();
                sorted.sort_by(|a, b| b.total_cmp(a));
                let budget_edge = p.min_budget > 0
                    && p.min_budget < sorted.len()
                    && near(sorted[p.min_budget - 1], sorted[p.min_budget]);
                let dense = i + p.last_full_blocks >= lists.n_qblocks;
                out.push(!dense && (budget_edge || row.iter().any(|&v| near(v, threshold))));
            }
        }
        out
    }

    /// Lists and counts with undecided rows blanked out (the same rows on both sides).
    fn comparable(&self, lists: &BlockLists, undecided: &[bool]) -> [Out; 2] {
        let mut blocks = lists.blocks.clone();
        let mut counts = lists.counts.clone();
        for (r, _) in undecided.iter().enumerate().filter(|(_, &u)| u) {
            counts[r] = u32::MAX;
            blocks[r * lists.max_blocks..][..lists.max_blocks].fill(u32::MAX);
        }
        [Out::U32("blocks", blocks), Out::U32("counts", counts)]
    }
}

impl Case for SelectCase {
    fn name(&self) -> String {
        format!(
            "flashprefill {:?} {:?} {:?} extra_rows={}",
            self.kv, self.shape, self.params, self.extra_rows
        )
    }

    fn run(&self, dev: &Device) -> Vec<Out> {
        let (q, k) = self.inputs();
        let st = ops::flashprefill_stages(dev, &self.shape, &q, k.slice(), &self.params).unwrap();
        let undecided = self.undecided(&self.reference_selection());
        let [blocks, counts] = self.comparable(&st.lists, &undecided);
        vec![
            Out::F32("pooled", st.pooled),
            Out::F32("scores", st.scores),
            blocks,
            counts,
        ]
    }

    fn reference(&self) -> Vec<Out> {
        let sel = self.reference_selection();
        let undecided = self.undecided(&sel);
        let [blocks, counts] = self.comparable(&sel.lists, &undecided);
        let narrow = |x: &[f64]| x.iter().map(|&v| v as f32).collect();
        vec![
            Out::F32("pooled", narrow(&sel.pooled)),
            Out::F32("scores", narrow(&sel.scores)),
            blocks,
            counts,
        ]
    }

    fn tolerance(&self) -> Tol {
        // Means of at most 128 rows summed in f32; scores are exp of f32 logits (|s| up to
        // ~20) whose rounding becomes a relative error of the score.
        Tol {
            abs: 1e-6,
            rel: 1e-4,
        }
    }
}

fn select_cases() -> Vec<SelectCase> {
    let p = |block_size, alpha, sink, window, last_full, min_budget| FlashPrefillParams {
        block_size,
        alpha,
        sink_blocks: sink,
        window_blocks: window,
        last_full_blocks: last_full,
        min_budget,
    };
    let case = |kv, shape, params, extra_rows, seed| SelectCase {
        kv,
        shape,
        params,
        extra_rows,
        seed,
    };
    vec![
        // GQA 1, small head_dim, t not a multiple of B.
        case(
            KvType::Bf16,
            shape(300, 0, 4, 4, 16),
            p(64, 0.3, 0, 1, 0, 0),
            0,
            1,
        ),
        // GQA 2, pos0 not a multiple of B, a head_dim not a multiple of 4, min budget.
        case(
            KvType::F16,
            shape(333, 100, 4, 2, 22),
            p(64, 0.2, 1, 2, 0, 3),
            5,
            2,
        ),
        // GQA 4, B = 128, pos0 a multiple of B, the published defaults.
        case(
            KvType::F32,
            shape(1400, 256, 8, 2, 18),
            p(128, 0.1, 2, 4, 2, 0),
            0,
            3,
        ),
        // head_dim 256, the last block partial (t = 200, B = 128).
        case(
            KvType::Bf16,
            shape(200, 0, 2, 1, 256),
            p(128, 0.5, 0, 1, 0, 0),
            0,
            4,
        ),
        case(
            KvType::F32,
            shape(130, 1000, 4, 1, 256),
            p(64, 0.25, 0, 1, 1, 2),
            64,
            5,
        ),
        case(
            KvType::F16,
            shape(257, 129, 2, 2, 256),
            p(128, 0.3, 1, 1, 0, 1),
            0,
            6,
        ),
        // One row.
        case(
            KvType::Bf16,
            shape(1, 500, 4, 2, 32),
            p(64, 0.2, 0, 1, 0, 0),
            0,
            7,
        ),
        // More key blocks than a workgroup has work-items (several chunks per row).
        case(
            KvType::F32,
            shape(4500, 0, 1, 1, 8),
            p(64, 0.3, 0, 1, 0, 0),
            0,
            8,
        ),
        case(
            KvType::Bf16,
            shape(700, 4000, 2, 1, 8),
            p(64, 0.15, 0, 2, 0, 5),
            0,
            9,
        ),
    ]
}

#[test]
fn selection_agrees_across_generated_rust_llvm_host_and_reference() {
    run_cases(
        select_cases()
            .into_iter()
            .map(|c| Box::new(c) as Box<dyn Case>)
            .collect(),
    );
}

/// The differential cases decide most rows and keep some blocks but not all, so comparing
/// their lists says something.
#[test]
fn differential_cases_are_decisive_and_selective() {
    for c in select_cases() {
        let sel = c.reference_selection();
        let undecided = c.undecided(&sel);
        let n = undecided.len();
        let skipped = undecided.iter().filter(|&&u| u).count();
        assert!(
            skipped * 10 <= n,
            "{}: {skipped} of {n} rows undecided",
            c.name()
        );
        let (kept, causal) = sel.lists.kept_and_causal();
        if causal > 20 {
            assert!(kept < causal, "{}: everything kept", c.name());
            assert!(kept * 20 > causal, "{}: {kept} of {causal} kept", c.name());
        }
    }
}

/// Keys with one strong block: `w[J]` along dimension 0 for every row of key block `J`,
/// nothing else; every query row is `4 e_0` (scale 1/4, so a row's logit for block `J` is
/// exactly `w[J]`). Exact ties between blocks of equal strength.
fn exact_pattern(t: usize, w: &[f32]) -> (AttnShape, Vec<f32>, Vec<f32>) {
    let shape = AttnShape {
        t,
        pos0: 0,
        n_heads: 2,
        n_kv_heads: 1,
        head_dim: 8,
        scale: 0.25,
    };
    let mut q = vec![0.0; t * 2 * 8];
    q.iter_mut().step_by(8).for_each(|x| *x = 4.0);
    let mut k = vec![0.0; t * 8];
    for (r, row) in k.chunks_mut(8).enumerate() {
        row[0] = w[r / 64];
    }
    (shape, q, k)
}

/// Runs the selection on every device and checks the rows against `want(I)`.
fn assert_lists(
    shape: &AttnShape,
    q: &[f32],
    k: KvSlice,
    params: &FlashPrefillParams,
    want: impl Fn(u32) -> Vec<u32>,
) {
    for dev in devices() {
        let lists = ops::flashprefill_select(&dev, shape, q, k, params).unwrap();
        for (h, head) in rows(&lists).iter().enumerate() {
            for (i, got) in head.iter().enumerate() {
                let qb = (lists.qblock0 + i) as u32;
                assert_eq!(
                    *got,
                    want(qb),
                    "{} kv head {h} query block {qb} {params:?}",
                    dev.arch()
                );
            }
        }
    }
}

/// `base(I)` plus the blocks `J <= I` for which `extra(I, J)` holds, ascending.
fn plus(
    base: impl Fn(u32) -> Vec<u32>,
    extra: impl Fn(u32, u32) -> bool,
) -> impl Fn(u32) -> Vec<u32> {
    move |qb| {
        let kept = base(qb);
        (0..=qb)
            .filter(|&j| kept.contains(&j) || extra(qb, j))
            .collect()
    }
}

/// Block 3 is strong (logit 12), blocks 1 and 6 weaker (2 and 1), the rest 0; ten blocks.
const STRENGTHS: [f32; 10] = [0.0, 2.0, 0.0, 12.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0];

/// Sink, window, dense trailing rows and the minimum budget each add what they should to
/// the threshold's choice (block 3 from query block 3 on; before it every block clears the
/// threshold).
#[test]
fn forced_blocks_add_exactly_what_they_should() {
    let (shape, q, k) = exact_pattern(640, &STRENGTHS);
    let k = KvSlice::F32(&k);
    let threshold = |qb: u32| -> Vec<u32> {
        match qb {
            0..=2 => (0..=qb).collect(),
            3 => vec![3],
            _ => vec![3, qb],
        }
    };
    let base = bare(64, 0.1);
    assert_lists(&shape, &q, k, &base, threshold);
    let sink = FlashPrefillParams {
        sink_blocks: 2,
        ..base
    };
    assert_lists(&shape, &q, k, &sink, plus(threshold, |_, j| j < 2));
    let window = FlashPrefillParams {
        window_blocks: 3,
        ..base
    };
    assert_lists(&shape, &q, k, &window, plus(threshold, |qb, j| qb - j < 3));
    let last = FlashPrefillParams {
        last_full_blocks: 2,
        ..base
    };
    assert_lists(&shape, &q, k, &last, plus(threshold, |qb, _| qb >= 8));
    // Budget 3: block 3, then block 1, then the best of the rest. Before block 6 is in the
    // past that is a tie of zero-logit blocks, which goes to the lowest, 0 (the diagonal
    // counts only its last position's rows, so it scores below the past blocks).
    let budget = FlashPrefillParams {
        min_budget: 3,
        ..base
    };
    assert_lists(
        &shape,
        &q,
        k,
        &budget,
        plus(threshold, |qb, j| match qb {
            0..=6 => j <= 1 || j == 3,
            _ => j == 1 || j == 3 || j == 6,
        }),
    );
    // A budget as large as the row keeps the row; so does the default parameter set here,
    // from its own forced blocks.
    let all = FlashPrefillParams {
        min_budget: 10,
        ..base
    };
    assert_lists(&shape, &q, k, &all, |qb| (0..=qb).collect());
    let defaults = FlashPrefillParams {
        block_size: 64,
        ..FlashPrefillParams::default()
    };
    assert_lists(
        &shape,
        &q,
        k,
        &defaults,
        plus(threshold, |qb, j| j < 2 || qb - j < 4 || qb >= 8),
    );
}

/// Vertical: the keys of block 3 (only those) carry a strong component along a direction
/// every query shares; with noise elsewhere. Every query block after it keeps block 3 and,
/// apart from forced blocks, nothing else.
#[test]
fn vertical_stripe_is_found() {
    const J_STAR: usize = 3;
    for (kv, g) in [(KvType::Bf16, 1), (KvType::F16, 2), (KvType::F32, 4)] {
        let (b, hd, t) = (64, 16, 64 * 12 - 10);
        let shape = AttnShape {
            t,
            pos0: 0,
            n_heads: 2 * g,
            n_kv_heads: 2,
            head_dim: hd,
            scale: 0.25,
        };
        let mut rng = Rng(31);
        let q: Vec<f32> = (0..t * shape.n_heads * hd)
            .map(|i| (if i % hd == 0 { 4.0 } else { 0.0 }) + rng.f32(0.1))
            .collect();
        let k: Vec<f32> = (0..t * 2 * hd)
            .map(|i| {
                let strong = i / (2 * hd) / b == J_STAR && i % hd == 0;
                (if strong { 8.0 } else { 0.0 }) + rng.f32(0.1)
            })
            .collect();
        let keys = Keys::new(&k, kv);
        let j = J_STAR as u32;
        for params in [
            bare(b, 0.1),
            FlashPrefillParams {
                block_size: b,
                ..FlashPrefillParams::default()
            },
        ] {
            let forced = |qb: u32, jb: u32| {
                (jb as usize) < params.sink_blocks
                    || ((qb - jb) as usize) < params.window_blocks
                    || (qb as usize) + params.last_full_blocks >= 12
            };
            assert_lists(&shape, &q, keys.slice(), &params, |qb| {
                (0..=qb)
                    .filter(|&jb| match qb.cmp(&j) {
                        // Before the stripe the scores are noise, all within 10% of the best.
                        std::cmp::Ordering::Less => true,
                        _ => jb == j || forced(qb, jb),
                    })
                    .collect()
            });
        }
    }
}

/// Slash: each query at position `p >= D` is a multiple of the key at `p - D`, with
/// `D = 3.5` blocks, and each key block has its own direction. Query block `I` then looks at
/// blocks `I - 4` (its first half) and `I - 3` (its second half); nothing else clears the
/// threshold.
#[test]
fn slash_is_found() {
    let (b, hd, t, pos0) = (64usize, 32usize, 64 * 10, 0usize);
    let d = 3 * b + b / 2;
    let shape = AttnShape {
        t,
        pos0,
        n_heads: 2,
        n_kv_heads: 1,
        head_dim: hd,
        scale: 1.0 / (hd as f32).sqrt(),
    };
    let mut rng = Rng(41);
    let mut k = vec![0.0f32; t * hd];
    for (r, row) in k.chunks_mut(hd).enumerate() {
        row.iter_mut().for_each(|x| *x = rng.f32(0.05));
        row[r / b] += 1.0;
    }
    let mut q = vec![0.0f32; t * 2 * hd];
    for (i, x) in q.iter_mut().enumerate() {
        let p = i / (2 * hd);
        *x = if p >= d {
            40.0 * k[(p - d) * hd + i % hd]
        } else {
            rng.f32(0.1)
        };
    }
    let params = bare(b, 0.1);
    assert_lists(&shape, &q, KvSlice::F32(&k), &params, |qb| match qb {
        0..=2 => (0..=qb).collect(),
        3 => vec![0, 3],
        _ => vec![qb - 4, qb - 3, qb],
    });
}

/// `alpha = 0` keeps every causal block, whatever the scores.
#[test]
fn alpha_zero_keeps_every_causal_block() {
    let c = &select_cases()[1];
    let (q, k) = c.inputs();
    assert_lists(&c.shape, &q, k.slice(), &bare(64, 0.0), |qb| {
        (0..=qb).collect()
    });
}

/// Passes of 200 and 203 rows with blocks of 128 (the last block partial; with 203 its last
/// four-row chunk is partial too): extra query rows past `t` (huge values, or NaN) and extra
/// cache rows past `kv_len` change nothing, and the partial last block's scores are those of
/// the reference over its valid rows only.
#[test]
fn padding_rows_never_count() {
    for t in [200, 203] {
        let c = SelectCase {
            kv: KvType::F32,
            shape: shape(t, 0, 4, 2, 64),
            params: bare(128, 0.2),
            extra_rows: 0,
            seed: 51,
        };
        let (q, k) = c.inputs();
        let k = k.widened();
        let sel = c.reference_selection();
        let row = c.shape.n_heads * c.shape.head_dim;
        for dev in devices() {
            let st =
                ops::flashprefill_stages(&dev, &c.shape, &q, KvSlice::F32(&k), &c.params).unwrap();
            // The last query block (1) against both key blocks, for both KV heads.
            for at in [2, 3, 6, 7] {
                let (got, want) = (f64::from(st.scores[at]), sel.scores[at]);
                assert!(
                    (got - want).abs() <= 1e-4 * want,
                    "{} scores[{at}]: {got} vs {want}",
                    dev.arch()
                );
            }
            assert_eq!(st.lists, sel.lists, "{}", dev.arch());

            for fill in [1.0e6f32, f32::NAN] {
                let mut q_padded = q.clone();
                q_padded.resize(256 * row, fill);
                let mut scores = vec![0.0f32; st.scores.len()];
                let mut maxes = vec![0.0f32; st.scores.len()];
                dev.launch(
                    &lse_kernels::attention::block_score::block_score::KERNEL,
                    [2, 2, 1],
                    &[
                        Arg::buf(&q_padded),
                        Arg::buf(&st.pooled),
                        Arg::buf_mut(&mut scores),
                        Arg::buf_mut(&mut maxes),
                        Arg::U32(0),
                        Arg::U32(t as u32),
                        Arg::U32(0),
                        Arg::U32(2),
                        Arg::U32(2),
                        Arg::U32(64),
                        Arg::U32(128),
                        Arg::U32(2),
                        Arg::F32(c.shape.scale),
                    ],
                )
                .unwrap();
                let same = scores
                    .iter()
                    .zip(&st.scores)
                    .all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(
                    same,
                    "{} padded with {fill}: {scores:?} vs {:?}",
                    dev.arch(),
                    st.scores
                );
            }

            let mut k_padded = k.clone();
            k_padded.resize(k.len() + 56 * c.shape.n_kv_heads * c.shape.head_dim, -3.0e4);
            let padded =
                ops::flashprefill_stages(&dev, &c.shape, &q, KvSlice::F32(&k_padded), &c.params)
                    .unwrap();
            assert_eq!(
                padded,
                st,
                "{}: cache rows past kv_len were read",
                dev.arch()
            );
        }
    }
}
