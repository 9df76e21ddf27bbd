# Sourced by the scripts: where LLVM 19 lives (Debian's llvm-19-dev).
export LLVM_SYS_191_PREFIX="${LLVM_SYS_191_PREFIX:-/usr/lib/llvm-19}"
export PATH="$LLVM_SYS_191_PREFIX/bin:$PATH"
# NVIDIA's PTX assembler, where scripts/fetch-ptxas.sh puts it (the PTX assembly test uses it).
ptxas_default="${LSE_TOOLS:-$HOME/.cache/lse}/ptxas-12.9.86/ptxas"
if [ -z "${LSE_PTXAS:-}" ] && [ -x "$ptxas_default" ]; then
    export LSE_PTXAS="$ptxas_default"
fi
unset ptxas_default
