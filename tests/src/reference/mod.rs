//! Plain-Rust references the differential tests compare kernels against.

pub mod attention;
pub mod deltanet;
pub mod ffn;
pub mod flashprefill;
pub mod norm;
