#!/usr/bin/env bash
# The test command: installs missing system packages, then builds everything (kernels through
# LLVM, the lse binary and the C API's shared library, which the C test links against) and
# runs every test. One `cargo test` builds it all: a `cargo build` first would build the
# kernels crate and everything above it a second time (the tests' dev-dependencies change
# some crates' features), about 1 GB more of the CI machine's disk.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
source scripts/env.sh
cargo test --workspace --locked "$@"
