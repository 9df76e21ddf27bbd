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

mod packed;
mod shape;

pub use packed::{pack, PackedText, PACKED_ASM, PACKED_LL, PACKED_PTX};
pub use shape::{check_length, Len, LenFault, ShapeError, ShapeProblem};

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

/// Element types a kernel buffer may hold.
pub trait Elem: Copy + Default + 'static {
    /// The LOOM name of the type.
    const NAME: &'static str;
}

impl Elem for f32 {
    const NAME: &'static str = "f32";
}
impl Elem for u32 {
    const NAME: &'static str = "u32";
}
impl Elem for i32 {
    const NAME: &'static str = "i32";
}
impl Elem for half::bf16 {
    const NAME: &'static str = "bf16";
}
impl Elem for half::f16 {
    const NAME: &'static str = "f16";
}

/// A buffer a kernel may read as elements of `T`: the type of a read-only parameter
/// (`&[T]`) in a kernel's generated `Args`. Host slices implement it here; the runtime
/// implements it for its device views.
pub trait In<T: Elem> {
    /// The number of elements, checked against the parameter's declared length.
    fn len(&self) -> usize;

    /// Whether there are no elements.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A buffer a kernel may write as elements of `T`: the type of a writable parameter
/// (`&mut [T]`) in a kernel's generated `Args`. A read-only buffer does not implement it.
pub trait Out<T: Elem> {
    /// The number of elements, checked against the parameter's declared length.
    fn len(&self) -> usize;

    /// Whether there are no elements.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: Elem> In<T> for &[T] {
    fn len(&self) -> usize {
        <[T]>::len(self)
    }
}
impl<T: Elem> In<T> for &Vec<T> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
}
impl<T: Elem, const N: usize> In<T> for &[T; N] {
    fn len(&self) -> usize {
        N
    }
}
impl<T: Elem> Out<T> for &mut [T] {
    fn len(&self) -> usize {
        <[T]>::len(self)
    }
}
impl<T: Elem> Out<T> for &mut Vec<T> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
}
impl<T: Elem, const N: usize> Out<T> for &mut [T; N] {
    fn len(&self) -> usize {
        N
    }
}

/// The typed arguments of one launch of one kernel: the `Args` struct `#[loom::kernel]`
/// generates next to each `KERNEL`, whose fields rustc checks against the kernel's
/// parameters (element types, writability, scalar types, none missing or extra). A runtime
/// checks the buffers' declared lengths ([`Launch::check_lengths`]), then launches the
/// arguments by converting each field, in parameter order, into its own argument type `A`.
pub trait Launch<A> {
    /// The kernel these arguments are for.
    fn kernel(&self) -> &'static KernelDef;
    /// Checks every buffer whose parameter declares a minimum length (`x: &[f32; rows * d]`)
    /// against that length evaluated from these arguments' scalars and the launch's `grid`
    /// (workgroup counts along x, y, z); the first buffer that falls short, or whose length
    /// has no value (overflow, a negative difference, a division by zero), is the error.
    /// Buffers without a declared length are not checked.
    fn check_lengths(&self, grid: [u32; 3]) -> Result<(), ShapeError>;
    /// The arguments in parameter order.
    fn into_args(self) -> Vec<A>;
}

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
    /// One of [`HOST_CPUS`]: `x86-64`, `x86-64-v3`, `x86-64-v4`, `x86-64-v4-bf16`, `x86-64-v4-amx`.
    pub cpu: &'static str,
    pub entry: HostEntry,
    /// The optimised LLVM IR and assembly, for `lse kernels show`.
    pub llvm_ir: PackedText,
    pub asm: PackedText,
}

/// One AMDGPU code object.
#[derive(Clone, Copy, Debug)]
pub struct GpuObject {
    /// e.g. `gfx1201`.
    pub arch: &'static str,
    /// The linked HSA code object (ELF, `ET_DYN`).
    pub code_object: &'static [u8],
    pub llvm_ir: PackedText,
    pub asm: PackedText,
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
    pub ptx: PackedText,
    /// The optimised NVPTX LLVM IR the PTX came from.
    pub llvm_ir: PackedText,
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
    /// Bytes of dynamic shared memory an NVIDIA launch gives the kernel (its shared arrays
    /// and tiles when they pass the 48 KiB of static shared memory ptxas allows; else 0).
    pub nvidia_dynamic_shared_bytes: u32,
    pub params: &'static [ParamInfo],
    /// Whether the kernel has a `tile_dot` of two bf16 tiles: on a CPU where another level
    /// runs that dot faster with the same bits, the runtime may run such a kernel there.
    pub bf16_dot: bool,
    pub cpu: CpuEntry,
    pub host: &'static [HostVariant],
    pub gpu: &'static [GpuObject],
    /// PTX for every [`PTX_ARCHS`] entry; `&[]` without the LOOM build script.
    pub ptx: &'static [PtxModule],
}

/// The NVIDIA architectures every kernel is lowered to PTX for.
pub const PTX_ARCHS: [&str; 2] = ["sm_80", "sm_90"];

/// The host levels every kernel is compiled for, best last. The runtime picks the last one
/// the running CPU supports ([`cpu_supports`]). `x86-64-v4-bf16` adds AVX512-BF16
/// (`vdpbf16ps`) and AVX512-VNNI (`vpdpwssd`; every CPU with the first has the second), and
/// `x86-64-v4-amx` also AMX-BF16, which the tile lowering uses for `tile_dot`;
/// [`host_level_target`] gives each level's LLVM cpu and features.
pub const HOST_CPUS: [&str; 5] = [
    "x86-64",
    "x86-64-v3",
    "x86-64-v4",
    "x86-64-v4-bf16",
    "x86-64-v4-amx",
];

/// The LLVM target cpu and extra target features of host level `level`.
pub fn host_level_target(level: &str) -> Option<(&'static str, &'static str)> {
    match level {
        "x86-64" => Some(("x86-64", "")),
        "x86-64-v3" => Some(("x86-64-v3", "")),
        "x86-64-v4" => Some(("x86-64-v4", "")),
        "x86-64-v4-bf16" => Some(("x86-64-v4", "+avx512bf16,+avx512vnni")),
        "x86-64-v4-amx" => Some(("x86-64-v4", "+avx512bf16,+avx512vnni,+amx-tile,+amx-bf16")),
        _ => None,
    }
}

/// Set by [`declare_amx_emulated`].
static AMX_EMULATED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Declares that this process runs AMX tile instructions in software (the SIGILL handler of
/// the test crate `lse-amx-emu`), so that `x86-64-v4-amx` runs wherever the rest of that
/// level does ([`cpu_supports`], [`cpu_emulates`]). Only tests call it.
pub fn declare_amx_emulated() {
    AMX_EMULATED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Whether host level `cpu` runs here only through an emulator ([`declare_amx_emulated`]):
/// the runtime runs such a level when asked for it by name, never as its default.
pub fn cpu_emulates(cpu: &str) -> bool {
    cpu == "x86-64-v4-amx"
        && AMX_EMULATED.load(std::sync::atomic::Ordering::Relaxed)
        && cpu_supports(cpu)
        && !native_amx()
}

/// Whether this CPU is Intel's (CPUID vendor `GenuineIntel`). Its `vdpbf16ps` adds each bf16
/// pair as Intel's SDM defines, one rounding after each product, the odd one first: the order
/// every other host level and the generated Rust give a bf16 `tile_dot` (`tile::dot_step`),
/// so there `x86-64-v4-bf16` equals them bit for bit (but for subnormal operands and sums,
/// which `vdpbf16ps` flushes); checked on an Intel Xeon (family 6, model 207). Other
/// vendors' `vdpbf16ps` has not been checked.
pub fn intel_cpu() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let id = std::arch::x86_64::__cpuid(0);
        [id.ebx, id.edx, id.ecx]
            .iter()
            .flat_map(|r| r.to_le_bytes())
            .eq(*b"GenuineIntel")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether this CPU and OS can run host code built for `cpu` (one of [`HOST_CPUS`]), natively
/// or, for `x86-64-v4-amx`, through a declared emulator. For `x86-64-v4-amx` this also asks
/// Linux for AMX tile data permission (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`),
/// without which the first tile instruction raises SIGILL; the permission holds for the whole
/// process.
pub fn cpu_supports(cpu: &str) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        let v3 = has!("avx2")
            && has!("fma")
            && has!("bmi1")
            && has!("bmi2")
            && has!("lzcnt")
            && has!("movbe")
            && has!("f16c");
        let v4 = v3
            && has!("avx512f")
            && has!("avx512bw")
            && has!("avx512cd")
            && has!("avx512dq")
            && has!("avx512vl");
        match cpu {
            "x86-64" => true,
            "x86-64-v3" => v3,
            "x86-64-v4" => v4,
            "x86-64-v4-bf16" => v4 && has!("avx512vnni") && amx::avx512_bf16(),
            "x86-64-v4-amx" => {
                v4 && has!("avx512vnni")
                    && amx::avx512_bf16()
                    && (amx::usable() || AMX_EMULATED.load(std::sync::atomic::Ordering::Relaxed))
            }
            _ => false,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = cpu;
        false
    }
}

/// Whether the CPU and OS run AMX tile instructions themselves.
fn native_amx() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        amx::usable()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
mod amx {
    use std::sync::OnceLock;

    /// AVX512-BF16: CPUID leaf 7 sub-leaf 1, EAX bit 5 (leaf 7 exists on every CPU with
    /// AVX-512, which the caller checks first).
    pub(super) fn avx512_bf16() -> bool {
        std::arch::x86_64::__cpuid_count(7, 1).eax & (1 << 5) != 0
    }

    /// AMX-BF16 (CPUID leaf 7 EDX bit 22) and AMX-TILE (bit 24), then the Linux permission
    /// request, once per process.
    pub(super) fn usable() -> bool {
        static USABLE: OnceLock<bool> = OnceLock::new();
        *USABLE.get_or_init(|| {
            let l0 = std::arch::x86_64::__cpuid_count(7, 0);
            l0.edx & (1 << 22) != 0 && l0.edx & (1 << 24) != 0 && request_tile_data()
        })
    }

    #[cfg(target_os = "linux")]
    fn request_tile_data() -> bool {
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: arch_prctl with ARCH_REQ_XCOMP_PERM only changes this process's permitted
        // XSAVE features; it reads and writes no memory of ours.
        unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            ) == 0
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn request_tile_data() -> bool {
        false
    }
}

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

/// The tile statements' reference semantics, called by the generated Rust. A tile is a
/// row-major `Vec<f32>` of `rows * cols` values (a bf16 or f16 tile holds values already
/// rounded to its type, exact in f32), or a `Vec<i32>` for an integer tile (an i16, i8 or
/// u8 tile holds values already wrapped to its type).
pub mod tile {
    /// Where a load or store goes: element `(r, c)` is buffer element
    /// `offset + r * stride + c` (`offset + c * stride + r` when `transposed`), for `r < rows`,
    /// `c < cols`; in a `quads` window, byte `r % 4` of element `offset + (r / 4) * stride + c`;
    /// in a `packed` window, byte `c % 4` of element `offset + r * stride + c / 4`; in a
    /// `pairs` window, element `offset + (r / 2) * stride + 2 * c + r % 2`.
    #[derive(Clone, Copy, Debug)]
    pub struct Window {
        pub offset: u32,
        pub stride: u32,
        pub rows: u32,
        pub cols: u32,
        pub transposed: bool,
        pub quads: bool,
        pub packed: bool,
        pub pairs: bool,
    }

    impl Window {
        /// The buffer index of tile element `(r, c)`, or `None` outside the window.
        #[inline(always)]
        fn index(&self, r: u32, c: u32) -> Option<u32> {
            if r >= self.rows || c >= self.cols {
                return None;
            }
            let (major, minor) = match (self.transposed, self.quads, self.packed, self.pairs) {
                (true, ..) => (c, r),
                (false, true, ..) => (r / 4, c),
                (false, false, true, _) => (r, c / 4),
                (false, false, false, true) => (r / 2, 2 * c + r % 2),
                (false, false, false, false) => (r, c),
            };
            Some(self.offset + major * self.stride + minor)
        }
    }

    /// `tile_load_quads` and `tile_load_packed`: element `(r, c)` becomes `round(byte b of
    /// read(index))` inside the window (`b` is `r % 4` in a quads window, `c % 4` in a packed
    /// one), 0 outside.
    pub fn load_bytes(
        t: &mut [i32],
        cols: u32,
        w: Window,
        read: impl Fn(u32) -> i32,
        round: impl Fn(i32) -> i32,
    ) {
        for (i, v) in t.iter_mut().enumerate() {
            let (r, c) = (i as u32 / cols, i as u32 % cols);
            *v = w.index(r, c).map_or(0, |ix| {
                let b = if w.packed { c % 4 } else { r % 4 };
                round(read(ix) >> (8 * b))
            });
        }
    }

    /// `tile_load`: element `(r, c)` becomes `round(read(index))` inside the window, 0 outside.
    pub fn load<T: Copy + Default>(
        t: &mut [T],
        cols: u32,
        w: Window,
        read: impl Fn(u32) -> T,
        round: impl Fn(T) -> T,
    ) {
        for (i, v) in t.iter_mut().enumerate() {
            let (r, c) = (i as u32 / cols, i as u32 % cols);
            *v = w.index(r, c).map_or(T::default(), |ix| round(read(ix)));
        }
    }

    /// `tile_store_packed`: element `(r, c)` inside the window becomes byte `c % 4` of
    /// `read(index)`, the word's other bytes kept, written back by `write`.
    pub fn store_bytes(
        t: &[i32],
        cols: u32,
        w: Window,
        read: impl Fn(u32) -> i32,
        mut write: impl FnMut(u32, i32),
    ) {
        for (i, v) in t.iter().enumerate() {
            let (r, c) = (i as u32 / cols, i as u32 % cols);
            if let Some(ix) = w.index(r, c) {
                let shift = 8 * (c % 4);
                let kept = read(ix) & !(0xff << shift);
                write(ix, kept | ((v & 0xff) << shift));
            }
        }
    }

    /// `tile_store`: writes element `(r, c)` inside the window.
    pub fn store<T: Copy>(t: &[T], cols: u32, w: Window, mut write: impl FnMut(u32, T)) {
        for (i, v) in t.iter().enumerate() {
            if let Some(ix) = w.index(i as u32 / cols, i as u32 % cols) {
                write(ix, *v);
            }
        }
    }

    /// `tile_dot`: `acc[m][n] += sum over k of a[m][k] * b[k][n]`, each product fused into
    /// the running sum in the order of [`dot_step`] (the reference order; targets with a
    /// matrix instruction may sum differently). `pairs` when both operands are bf16.
    pub fn dot(acc: &mut [f32], a: &[f32], b: &[f32], n: u32, k: u32, pairs: bool) {
        let (n, k) = (n as usize, k as usize);
        for (m, row) in acc.chunks_mut(n).enumerate() {
            for (j, out) in row.iter_mut().enumerate() {
                let mut s = *out;
                for step in 0..k {
                    let kk = dot_step(step, k, pairs);
                    s = a[m * k + kk].mul_add(b[kk * n + j], s);
                }
                *out = s;
            }
        }
    }

    /// The `k` index a float `tile_dot` adds at its step `step` of `k`: `step` itself, or with
    /// `pairs` (both operands bf16) each pair `(2i, 2i + 1)` odd index first, as `vdpbf16ps` adds
    /// a pair (Intel's SDM: one rounding after each product), a last unpaired index last.
    /// So the bf16 dot on every host level equals the reference bit for bit.
    pub fn dot_step(step: usize, k: usize, pairs: bool) -> usize {
        if pairs && step < k & !1 {
            step ^ 1
        } else {
            step
        }
    }

    /// Element `(m, j)` of the integer product of `a` (`[M x k]`) and `b` (`[k x n]`) over
    /// the K indices `ks`: exact products added in wrapping i32.
    fn int_sum(
        a: &[i32],
        b: &[i32],
        (m, j): (usize, usize),
        n: usize,
        k: usize,
        ks: std::ops::Range<usize>,
    ) -> i32 {
        ks.fold(0i32, |sum, kk| {
            sum.wrapping_add(a[m * k + kk] * b[kk * n + j])
        })
    }

    /// `tile_dot` of integer tiles (i16, or i8 by u8): `acc[m][n] += sum over k of
    /// a[m][k] * b[k][n]`, the products exact and the sums wrapping in i32 (any order gives
    /// these values); with `scale` (`tile_dot_scaled`, `[G x n]`: K cut into `G` groups of
    /// `k / G`), each group's sum from `offset[m][g]` (if given, `[M x G]`), times
    /// `scale[g][n]` (wrapping).
    pub fn dot_int(
        acc: &mut [i32],
        a: &[i32],
        b: &[i32],
        n: u32,
        k: u32,
        scale: Option<&[i32]>,
        offset: Option<&[i32]>,
    ) {
        let (n, k) = (n as usize, k as usize);
        let groups = scale.map_or(1, |s| s.len() / n);
        let len = k / groups;
        for (m, row) in acc.chunks_mut(n).enumerate() {
            for (j, out) in row.iter_mut().enumerate() {
                for g in 0..groups {
                    let start = offset.map_or(0, |o| o[m * groups + g]);
                    let ks = g * len..(g + 1) * len;
                    let sum = start.wrapping_add(int_sum(a, b, (m, j), n, k, ks));
                    let scaled = scale.map_or(sum, |s| sum.wrapping_mul(s[g * n + j]));
                    *out = out.wrapping_add(scaled);
                }
            }
        }
    }

    /// `tile_dot_dequant`: K in `G` groups (`cols` holds `G` rows of `n`), and for each group
    /// `g` in order each element's integer sum of products over it `s` (exact, wrapping in
    /// i32) becomes `acc[m][n] + (s as f32 + offset[m][g]) · (rows[m][g] · cols[g][n])`, one
    /// rounding per operation (no fused multiply-add).
    #[allow(clippy::too_many_arguments)]
    pub fn dot_dequant(
        acc: &mut [f32],
        a: &[i32],
        b: &[i32],
        n: u32,
        k: u32,
        offset: &[f32],
        rows: &[f32],
        cols: &[f32],
    ) {
        let (n, k) = (n as usize, k as usize);
        let groups = cols.len() / n;
        let len = k / groups;
        for (m, row) in acc.chunks_mut(n).enumerate() {
            for (j, out) in row.iter_mut().enumerate() {
                for g in 0..groups {
                    let sum = int_sum(a, b, (m, j), n, k, g * len..(g + 1) * len);
                    let d = rows[m * groups + g] * cols[g * n + j];
                    *out += (sum as f32 + offset[m * groups + g]) * d;
                }
            }
        }
    }

    /// `tile_dequant`: `acc[m][n] + (s[m][n] as f32) · (rows[m] · cols[n])`, one rounding per
    /// operation (no fused multiply-add), for an `acc` of `n` columns.
    pub fn dequant(acc: &mut [f32], s: &[i32], n: u32, rows: &[f32], cols: &[f32]) {
        for (m, (row, sums)) in acc
            .chunks_mut(n as usize)
            .zip(s.chunks(n as usize))
            .enumerate()
        {
            for ((out, &sum), &col) in row.iter_mut().zip(sums).zip(cols) {
                *out += sum as f32 * (rows[m] * col);
            }
        }
    }

    /// `tile_add`, `tile_sub`, ...: `dst[r][c] = f(dst[r][c], src[r'][c'])` for a `dst` of
    /// `cols` columns and a `src` of `src_rows x src_cols` (the same shape, one column or one
    /// row, broadcast).
    pub fn binary(
        dst: &mut [f32],
        cols: u32,
        src: &[f32],
        src_rows: u32,
        src_cols: u32,
        f: impl Fn(f32, f32) -> f32,
    ) {
        for (i, d) in dst.iter_mut().enumerate() {
            let (r, c) = (i as u32 / cols, i as u32 % cols);
            let r = if src_rows == 1 { 0 } else { r };
            let c = if src_cols == 1 { 0 } else { c };
            *d = f(*d, src[(r * src_cols + c) as usize]);
        }
    }

    /// `tile_row_sum`, `tile_row_max`: `dst[r] = f(... f(f(dst[r], src[r][0]), src[r][1]) ...)`.
    pub fn row_reduce(dst: &mut [f32], src: &[f32], cols: u32, f: impl Fn(f32, f32) -> f32) {
        for (d, row) in dst.iter_mut().zip(src.chunks(cols as usize)) {
            *d = row.iter().fold(*d, |acc, &x| f(acc, x));
        }
    }

    /// `tile_exp`, `tile_scale`: every element `x` becomes `f(x)`.
    pub fn map(t: &mut [f32], f: impl Fn(f32) -> f32) {
        for x in t.iter_mut() {
            *x = f(*x);
        }
    }

    /// `tile_copy`: `dst = convert(src)` elementwise (`convert` to the destination's type).
    pub fn copy<S: Copy, D>(dst: &mut [D], src: &[S], convert: impl Fn(S) -> D) {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = convert(*s);
        }
    }
}
