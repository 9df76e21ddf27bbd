//! LOOM IR to LLVM.
