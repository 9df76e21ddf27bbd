//! `#[loom::kernel(...)]`.
