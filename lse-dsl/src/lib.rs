//! LOOM, LSE's kernel language: the typed IR ([`ir`]), the front end that turns a restricted
//! Rust `fn` into IR ([`frontend`]), the work-item-loop transform ([`wil`]) and the Rust CPU
//! lowering ([`rustgen`]), plus the launch ABI shared with the runtime ([`rt`]).
//!
//! This crate links no LLVM: it runs inside the `#[loom::kernel]` proc-macro (that is,
//! inside rustc) and inside build scripts. LLVM lowering lives in `lse-codegen`. See
//! `LOOM.md` for the language reference.

pub mod ir;
pub mod rt;
pub mod wil;
