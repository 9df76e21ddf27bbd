//! LSE's kernels in LOOM.
