//! Tests of the whole pipeline on hand-built IR kernels (no GPU needed).

mod driver;
mod gpu;
mod host;
mod kernels;
mod nvptx;
