#!/usr/bin/env bash
# Fetches `ptxas` (CUDA 12.9, the one binary of PyPI's nvidia-cuda-nvcc-cu12 wheel that LSE
# uses) into $LSE_TOOLS (default ~/.cache/lse), checked against the wheel's SHA-256. No GPU
# is needed: `tests/tests/code_objects.rs` assembles every kernel's PTX with it, the check
# NVIDIA's driver would make at load. Nothing is installed system-wide. When the download
# fails this warns and exits 0, and that test says it did not run.
set -euo pipefail
version=12.9.86
sha256=5d6a0d32fdc7ea39917c20065614ae93add6f577d840233237ff08e9a38f58f0
url=https://files.pythonhosted.org/packages/25/48/b54a06168a2190572a312bfe4ce443687773eb61367ced31e064953dd2f7/nvidia_cuda_nvcc_cu12-$version-py3-none-manylinux2010_x86_64.manylinux_2_12_x86_64.whl
dir="${LSE_TOOLS:-$HOME/.cache/lse}/ptxas-$version"
[ -x "$dir/ptxas" ] && exit 0
if [ "$(uname -m)" != x86_64 ]; then
    echo "warning: no ptxas for $(uname -m); the PTX assembly test will not run" >&2
    exit 0
fi
mkdir -p "$dir"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetching ptxas $version (40 MB wheel from PyPI)..." >&2
if ! curl -fsSL --retry 3 -o "$tmp/nvcc.whl" "$url"; then
    echo "warning: could not download $url; the PTX assembly test will not run" >&2
    exit 0
fi
echo "$sha256  $tmp/nvcc.whl" | sha256sum -c --quiet -
unzip -p "$tmp/nvcc.whl" nvidia/cuda_nvcc/bin/ptxas >"$tmp/ptxas"
chmod +x "$tmp/ptxas"
mv "$tmp/ptxas" "$dir/ptxas"
