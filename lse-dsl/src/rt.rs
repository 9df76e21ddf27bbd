//! What a compiled LOOM kernel looks like to the runtime: the launch ABI shared by the
//! generated Rust code and the LLVM host code, and the static description
//! (`KernelDef`) that `#[loom::kernel]` emits for every kernel.
//!
//! Both CPU entry points take the same arguments, so the runtime can run either on the same
//! buffers and the differential tests can compare them: buffers as `(pointer, length)` pairs in
//! parameter order (scalars skipped), scalars as 64-bit slots in parameter order (buffers
//! skipped; an f32 is its bits in the low 32 bits), the grid's workgroup counts, and the
//! half-open range of linearised workgroup ids to run (`x` fastest, then `y`, then `z`).
//! Ranges let the runtime spread workgroups over threads.

/// One buffer argument: base pointer and length in elements.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct RawBuf {
    pub ptr: *mut u8,
    pub len: usize,
}

// SAFETY: a RawBuf is a plain address; the launcher guarantees the memory outlives the launch
// and that work-items of different workgroups write disjoint elements, as on a GPU.
unsafe impl Send for RawBuf {}
unsafe impl Sync for RawBuf {}

/// The generated-Rust entry point (the CPU reference).
pub type CpuEntry =
    fn(bufs: &[RawBuf], scalars: &[u64], num_groups: [u32; 3], group_begin: u32, group_end: u32);

/// The LLVM host entry point, compiled at build time for one host CPU variant.
pub type HostEntry = unsafe extern "C" fn(
    bufs: *const RawBuf,
    scalars: *const u64,
    num_groups: *const u32,
    group_begin: u32,
    group_end: u32,
);

/// How a kernel parameter is passed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// A buffer of the given element type (`"f32"`, `"bf16"`, `"f16"`, `"u32"`, `"i32"`).
    Buffer { elem: &'static str, writable: bool },
    /// A scalar of the given type (`"f32"`, `"i32"`, `"u32"`).
    Scalar { ty: &'static str },
}

#[derive(Clone, Copy, Debug)]
pub struct ParamInfo {
    pub name: &'static str,
    pub kind: ParamKind,
}

/// A host code variant: the same kernel compiled by LLVM for one x86-64 level.
#[derive(Clone, Copy, Debug)]
pub struct HostVariant {
    /// `x86-64`, `x86-64-v3` or `x86-64-v4` (LLVM cpu names).
    pub cpu: &'static str,
    pub entry: HostEntry,
    /// The optimised LLVM IR and assembly, for `lse kernels show`.
    pub llvm_ir: &'static str,
    pub asm: &'static str,
}

/// One AMDGPU code object.
#[derive(Clone, Copy, Debug)]
pub struct GpuObject {
    /// e.g. `gfx1201`.
    pub arch: &'static str,
    /// The linked HSA code object (ELF, `ET_DYN`).
    pub code_object: &'static [u8],
    pub llvm_ir: &'static str,
    pub asm: &'static str,
    /// Summary parsed from the code object's `amdhsa.kernels` note (JSON): symbol, kernarg
    /// size, LDS bytes, scratch bytes, SGPR/VGPR counts, wavefront size.
    pub metadata_json: &'static str,
}

/// One kernel lowered to NVIDIA PTX for one SM architecture (offline artefact; PTX is
/// JIT-compiled by the CUDA driver, so no device binary is stored).
#[derive(Clone, Copy, Debug)]
pub struct PtxModule {
    /// e.g. `sm_90` (one of [`PTX_ARCHS`]).
    pub arch: &'static str,
    /// The PTX assembly text.
    pub ptx: &'static str,
    /// The optimised NVPTX LLVM IR the PTX came from.
    pub llvm_ir: &'static str,
}

/// Everything known about one LOOM kernel at run time.
#[derive(Clone, Copy, Debug)]
pub struct KernelDef {
    /// The Rust function name; also the symbol base.
    pub fn_name: &'static str,
    /// `name.vN`.
    pub id: &'static str,
    /// SHA-256 (hex) of the canonical IR text.
    pub ir_hash: &'static str,
    /// The canonical IR text (`lse kernels show --emit ir`).
    pub ir_text: &'static str,
    /// The generated Rust CPU code (`lse kernels show --emit rust`).
    pub rust_src: &'static str,
    pub workgroup_size: u32,
    /// Shared memory bytes declared by the kernel.
    pub shared_bytes: u32,
    pub params: &'static [ParamInfo],
    pub cpu: CpuEntry,
    pub host: &'static [HostVariant],
    pub gpu: &'static [GpuObject],
    /// PTX for every [`PTX_ARCHS`] entry; `&[]` without the LOOM build script.
    pub ptx: &'static [PtxModule],
}

/// The NVIDIA architectures every kernel is lowered to PTX for.
pub const PTX_ARCHS: [&str; 2] = ["sm_80", "sm_90"];

/// The host variants every kernel is compiled for, best last. The runtime picks the last one
/// the running CPU supports.
pub const HOST_CPUS: [&str; 3] = ["x86-64", "x86-64-v3", "x86-64-v4"];

/// Symbol of a kernel's host entry for one host cpu: `loom_host_<fn_name>_<cpu with - as _>`.
pub fn host_symbol(fn_name: &str, cpu: &str) -> String {
    format!("loom_host_{}_{}", fn_name, cpu.replace('-', "_"))
}

/// Bounds-checked element access used by the generated Rust code. Going through raw pointers
/// (never references) keeps concurrent workgroups writing disjoint elements free of aliasing
/// UB, while every index is still checked like a slice index.
pub mod access {
    use super::RawBuf;

    /// Reads element `i` of `buf` as `T`. Panics if `i` is out of bounds.
    #[inline(always)]
    pub fn load<T: Copy>(buf: &RawBuf, i: u32) -> T {
        let i = i as usize;
        assert!(
            i < buf.len,
            "LOOM: index {i} out of bounds (len {})",
            buf.len
        );
        // SAFETY: in bounds per the check above; the launcher passed a valid buffer of T.
        unsafe { (buf.ptr as *const T).add(i).read_unaligned() }
    }

    /// Writes element `i` of `buf`. Panics if `i` is out of bounds.
    #[inline(always)]
    pub fn store<T: Copy>(buf: &RawBuf, i: u32, v: T) {
        let i = i as usize;
        assert!(
            i < buf.len,
            "LOOM: index {i} out of bounds (len {})",
            buf.len
        );
        // SAFETY: in bounds per the check above; the launcher passed a writable buffer of T.
        unsafe { (buf.ptr as *mut T).add(i).write_unaligned(v) }
    }
}
