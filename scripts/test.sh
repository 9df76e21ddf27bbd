#!/usr/bin/env bash
# The test command: installs missing system packages, builds everything (kernels through
# LLVM, the lse binary and the C API's shared library, which the C test links against), then
# runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
source scripts/env.sh
cargo build --workspace --locked
cargo test --workspace --locked "$@"
