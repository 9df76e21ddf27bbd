//! Workspace-level tests live in `tests/tests/`; this library holds what several of them share.

pub mod cases;
pub mod diff;
pub mod reference;
