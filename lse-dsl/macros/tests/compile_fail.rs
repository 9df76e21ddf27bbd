//! Misuses of `#[loom::kernel]` must fail to compile with a clear message at the offending
//! span. One file per misuse under `tests/ui/`; the expected compiler output is next to it
//! (`.stderr`). Regenerate with `TRYBUILD=overwrite cargo test -p loom --test compile_fail`
//! and review the diff.

#[test]
fn misuses_are_compile_errors() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
