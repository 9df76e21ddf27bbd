#!/usr/bin/env bash
# The test command: builds everything (kernels through LLVM included) and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
cargo test --workspace --locked "$@"
