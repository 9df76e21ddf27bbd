//! FlashPrefill V2's selection kernels (`attention.key_block_mean_<ty>`,
//! `attention.block_score`, `attention.block_select`): differential cases against the
//! plain-Rust reference on the shared harness, and patterns with known block lists.

use lse_kernels::attention::block_score::block_score;
use lse_runtime::device::{Device, Pool};
use lse_runtime::ops::{self, AttnShape, BlockLists, FlashPrefillParams, KvSlice};
use lse_tests::cases::flashprefill::{cases, select_cases, SelectCase};
use lse_tests::cases::{shape, Dtype, Stored};
use lse_tests::diff::{run_cases, Case, Out, Rng};

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

#[test]
fn selection_agrees_across_generated_rust_llvm_host_and_reference() {
    run_cases(cases());
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

/// The cases' comparison leaves out exactly the undecided rows of the lists: a change in a
/// decided row is a mismatch, a change in an undecided row is not. The differential cases
/// have no undecided row; with `alpha = 1` every row but the dense last one is undecided (the
/// best block sits on the threshold).
#[test]
fn comparison_skips_only_undecided_rows() {
    let on_threshold = SelectCase {
        kv: Dtype::F32,
        shape: shape(300, 0, 2, 1, 16),
        params: FlashPrefillParams {
            last_full_blocks: 1,
            ..bare(64, 1.0)
        },
        extra_rows: 0,
        seed: 61,
    };
    let mut undecided_seen = false;
    for c in select_cases().into_iter().chain([on_threshold]) {
        let undecided = c.undecided(&c.reference_selection());
        let want = c.reference();
        let with_count_changed = |row: usize| {
            let mut got = c.reference();
            let Out::U32("counts", counts) = &mut got[3] else {
                panic!("{}: outputs {got:?}", c.name());
            };
            counts[row] += 1;
            got
        };
        let tol = c.tolerance();
        assert_eq!(c.compare(&want, &want, tol), Ok(()), "{}", c.name());
        let decided = undecided.iter().position(|&u| !u).unwrap();
        assert!(
            c.compare(&with_count_changed(decided), &want, tol).is_err(),
            "{}: row {decided}",
            c.name()
        );
        if let Some(row) = undecided.iter().position(|&u| u) {
            undecided_seen = true;
            assert_eq!(
                c.compare(&with_count_changed(row), &want, tol),
                Ok(()),
                "{}: row {row}",
                c.name()
            );
        }
    }
    assert!(undecided_seen, "no case has an undecided row");
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
    let k = KvSlice::F32((&k).into());
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
    // A budget as large as the row keeps the row.
    let all = FlashPrefillParams {
        min_budget: 10,
        ..base
    };
    assert_lists(&shape, &q, k, &all, |qb| (0..=qb).collect());
    // The default parameter set adds its own forced blocks to the same threshold choice (its
    // alpha, like 0.1, keeps block 3 alone once it is in the past).
    let defaults = FlashPrefillParams {
        block_size: 64,
        ..FlashPrefillParams::default()
    };
    let (sink, window, last) = (
        defaults.sink_blocks as u32,
        defaults.window_blocks as u32,
        defaults.last_full_blocks as u32,
    );
    assert_lists(
        &shape,
        &q,
        k,
        &defaults,
        plus(threshold, |qb, j| {
            j < sink || qb - j < window || qb + last >= 10
        }),
    );
}

/// Vertical: the keys of block 3 (only those) carry a strong component along a direction
/// every query shares; with noise elsewhere. Every query block after it keeps block 3 and,
/// apart from forced blocks, nothing else.
#[test]
fn vertical_stripe_is_found() {
    const J_STAR: usize = 3;
    for (kv, g) in [(Dtype::Bf16, 1), (Dtype::F16, 2), (Dtype::F32, 4)] {
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
        let keys = Stored::new(&k, kv);
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
            assert_lists(&shape, &q, keys.kv(), &params, |qb| {
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
    assert_lists(
        &shape,
        &q,
        KvSlice::F32((&k).into()),
        &params,
        |qb| match qb {
            0..=2 => (0..=qb).collect(),
            3 => vec![0, 3],
            _ => vec![qb - 4, qb - 3, qb],
        },
    );
}

/// `alpha = 0` keeps every causal block, whatever the scores.
#[test]
fn alpha_zero_keeps_every_causal_block() {
    let c = &select_cases()[1];
    let (q, k) = c.inputs();
    assert_lists(&c.shape, &q, k.kv(), &bare(64, 0.0), |qb| {
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
            kv: Dtype::F32,
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
                ops::flashprefill_stages(&dev, &c.shape, &q, KvSlice::F32((&k).into()), &c.params)
                    .unwrap();
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
                let args = block_score::Args {
                    q: &q_padded,
                    pooled: &st.pooled,
                    scores: &mut scores,
                    maxes: &mut maxes,
                    pos0: 0,
                    kv_len: t as u32,
                    qblock0: 0,
                    n_kv_heads: 2,
                    group: 2,
                    head_dim: 64,
                    block: 128,
                    n_kblocks: 2,
                    scale: c.shape.scale,
                };
                dev.launch([2, 2, 1], args).unwrap();
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
            let padded = ops::flashprefill_stages(
                &dev,
                &c.shape,
                &q,
                KvSlice::F32((&k_padded).into()),
                &c.params,
            )
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
