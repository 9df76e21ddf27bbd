//! Differential cases of the scoring kernels (`lse_pick`, `topk_pairs`, the LM head,
//! [`lse_tests::cases::scoring`]) on the shared harness [`lse_tests::diff`].

use lse_tests::cases::scoring;
use lse_tests::diff::run_cases;

#[test]
fn every_kernel_agrees_across_generated_rust_llvm_host_and_reference() {
    run_cases(scoring::cases());
}
