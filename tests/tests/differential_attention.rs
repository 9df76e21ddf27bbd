//! Differential cases of the prefill-attention kernel (`attention.prefill_<ty>`, dense and
//! sparse mode, [`lse_tests::cases::attention`]) on the shared harness [`lse_tests::diff`], and
//! sparse mode with every block listed against dense mode.

use lse_runtime::device::{Device, Pool};
use lse_runtime::ops;
use lse_tests::cases::attention::{block_lists, case, dense_cases, rounded, sparse_cases};
use lse_tests::cases::Dtype;
use lse_tests::diff::{host_variants, run_cases};

#[test]
fn dense_attention_matches_reference() {
    run_cases(dense_cases());
}

#[test]
fn sparse_attention_matches_reference() {
    run_cases(sparse_cases());
}

/// With every causal block listed, sparse mode visits exactly dense mode's key tiles in the
/// same order (dense mode's block size differing from the lists' one), so the two agree bit
/// for bit, on the generated Rust and on every host variant, with f32 queries and with
/// queries rounded to a bf16 cache.
#[test]
fn sparse_with_every_block_equals_dense_bit_for_bit() {
    use Dtype::*;
    let mut devices = vec![Device::open(Pool::Cpu).unwrap()];
    devices.extend(host_variants());
    let cases = [
        (case(Bf16, (300, 61), (4, 1, 256), None), 64),
        (case(F16, (200, 128), (2, 2, 40), None), 128),
        (case(F32, (97, 3), (4, 2, 64), None), 64),
        (rounded(Bf16, (300, 61), (4, 1, 256), None), 128),
    ];
    for (c, block_size) in cases {
        let x = c.inputs();
        let lists = block_lists(&x.shape, block_size, |_, _| true);
        for dev in &devices {
            let mut dense = vec![0.0; x.q.len()];
            let mut sparse = vec![0.0; x.q.len()];
            let (kv, queries) = (x.kv(), c.queries);
            ops::prefill_attention_dense(dev, &x.shape, &x.q, kv, queries, &mut dense).unwrap();
            ops::prefill_attention_sparse(dev, &x.shape, &x.q, kv, &lists, queries, &mut sparse)
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
