# Sourced by the scripts: where LLVM 19 lives (Debian's llvm-19-dev).
export LLVM_SYS_191_PREFIX="${LLVM_SYS_191_PREFIX:-/usr/lib/llvm-19}"
export PATH="$LLVM_SYS_191_PREFIX/bin:$PATH"
