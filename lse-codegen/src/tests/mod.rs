//! Tests of the whole pipeline on hand-built IR kernels (no GPU needed).

mod driver;
mod gpu;
mod host;
pub(crate) mod kernels;
mod nvptx;
