#!/usr/bin/env bash
# Installs the system packages the build needs on Debian 12 (LLVM 19, lld 19, zlib/zstd for
# linking LLVM, a C compiler for the C API test), only those that are missing; then fetches
# NVIDIA's PTX assembler, `ptxas`, for the test that assembles every kernel's PTX.
set -euo pipefail
need=()
for p in llvm-19-dev lld-19 libzstd-dev zlib1g-dev gcc curl unzip ca-certificates; do
    dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
    echo "installing ${need[*]} (apt)..." >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need[@]}"
fi
"$(dirname "$0")/fetch-ptxas.sh"
