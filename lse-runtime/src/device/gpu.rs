//! What the GPU runtimes share: opening a shared library by one of several sonames, the
//! per-launch argument list (host buffers with their byte sizes, device buffers by address,
//! scalars as 32-bit words), and device memory for [`super::DeviceBuf`].

use std::ffi::c_void;
use std::sync::Mutex;

use libloading::Library;
use lse_dsl::rt::{KernelDef, ParamKind, RawBuf};

use super::launch::{Place, PlacedBuf};

/// One kernel argument as the GPU runtimes see it.
#[derive(Clone, Copy, Debug)]
pub(super) enum GpuArg {
    /// A host buffer to copy to the device (and back when writable).
    Buf {
        host: RawBuf,
        bytes: usize,
        writable: bool,
    },
    /// Device memory the kernel uses in place (a device address).
    Device(u64),
    /// A 32-bit scalar (u32, i32 or f32 bits).
    Scalar(u32),
}

/// Bytes per element of a LOOM buffer element type.
pub(super) fn elem_bytes(elem: &str) -> usize {
    match elem {
        "bf16" | "f16" => 2,
        _ => 4,
    }
}

/// Pairs the marshalled buffers and scalars (already checked against the signature and the
/// device) with the kernel's parameters, in declaration order: host memory becomes a buffer
/// to copy, this GPU's memory its device address.
pub(super) fn gpu_args(kernel: &KernelDef, bufs: &[PlacedBuf], scalars: &[u64]) -> Vec<GpuArg> {
    let (mut b, mut s) = (bufs.iter(), scalars.iter());
    let mut out = Vec::with_capacity(kernel.params.len());
    for p in kernel.params {
        match p.kind {
            ParamKind::Buffer { elem, writable } => match b.next() {
                Some((raw, Place::Host)) => out.push(GpuArg::Buf {
                    host: *raw,
                    bytes: raw.len * elem_bytes(elem),
                    writable,
                }),
                Some((raw, Place::Gpu { .. })) => out.push(GpuArg::Device(raw.ptr as usize as u64)),
                None => {}
            },
            ParamKind::Scalar { .. } => {
                if let Some(v) = s.next() {
                    out.push(GpuArg::Scalar(*v as u32));
                }
            }
        }
    }
    out
}

/// Why a GPU runtime's device could not be opened.
#[derive(Debug)]
pub(super) enum OpenError {
    /// No soname loaded, or a required symbol is missing.
    NoRuntime(String),
    /// Device `index` does not exist; `count` devices do.
    NoDevice { count: u32 },
    /// A runtime call failed, or the device cannot run LOOM's code.
    Call(String),
}

/// The code of `kernel` among `built` (its code objects or PTX modules) whose arch,
/// `arch_of`, is the device's `arch`; else the error naming `what` (code object, PTX), the
/// device's arch and the archs that were built.
pub(super) fn code_for_arch<'k, T>(
    kernel: &KernelDef,
    built: &'k [T],
    arch_of: impl Fn(&T) -> &str,
    what: &str,
    arch: &str,
) -> Result<&'k T, String> {
    built.iter().find(|c| arch_of(c) == arch).ok_or_else(|| {
        let archs: Vec<&str> = built.iter().map(&arch_of).collect();
        let archs = if archs.is_empty() {
            "none".to_string()
        } else {
            archs.join(", ")
        };
        format!(
            "{}: no {what} for device arch {arch} (built for: {archs})",
            kernel.id
        )
    })
}

/// Opens the first of `sonames` that loads; on failure, the error lists every soname tried.
pub(super) fn open_library(sonames: &[&str]) -> Result<Library, String> {
    let mut errors = Vec::new();
    for name in sonames {
        // SAFETY: loading a vendor GPU runtime runs its initialisers; these libraries are
        // designed to be dlopen'ed by applications.
        match unsafe { Library::new(name) } {
            Ok(lib) => return Ok(lib),
            Err(e) => errors.push(e.to_string()),
        }
    }
    Err(format!("tried {}", errors.join("; ")))
}

/// Copies a function pointer of type `T` for `name` out of `lib`.
///
/// # Safety
/// `T` must be the exact C signature of the symbol, and the pointer must not be called after
/// `lib` is dropped.
pub(super) unsafe fn symbol<T: Copy>(lib: &Library, name: &str) -> Result<T, String> {
    // SAFETY: forwarded to the caller (signature and lifetime).
    unsafe { lib.get::<T>(name.as_bytes()) }
        .map(|s| *s)
        .map_err(|e| format!("symbol {name} not found: {e}"))
}

/// An opened GPU device of either runtime.
#[derive(Debug)]
pub(super) enum GpuDevice {
    Hip(super::hip::HipDevice),
    Cuda(super::cuda::CudaDevice),
}

/// A `GpuDevice` is used through the [`Runtime`] it wraps: one piece of allocation, copy and
/// launch logic serves both runtimes.
impl std::ops::Deref for GpuDevice {
    type Target = dyn Runtime;

    fn deref(&self) -> &(dyn Runtime + 'static) {
        match self {
            GpuDevice::Hip(d) => d,
            GpuDevice::Cuda(d) => d,
        }
    }
}

/// A raw pointer or handle as the GPU runtimes' C APIs take it.
pub(super) type Ptr = *mut c_void;

/// One kernel parameter's value as launched: a device address or a 32-bit scalar.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum KernargValue {
    /// A device pointer (a `global_buffer` kernarg, 8 bytes).
    Ptr(u64),
    /// A 32-bit scalar (a `by_value` kernarg, 4 bytes).
    U32(u32),
}

/// The calls one GPU runtime (HIP or CUDA) provides, each returning an error that names the
/// failing runtime call; the provided methods build device memory and launches on them the
/// same way for every runtime.
pub(super) trait Runtime {
    /// The device architecture (`gfx1201`, `sm_90`, ...).
    fn arch(&self) -> &str;

    /// `Ok` when `kernel` carries code for this device's architecture, else the error saying
    /// what was built.
    fn require_code(&self, kernel: &KernelDef) -> Result<(), String>;

    /// Makes this device current on the calling thread.
    fn set_current(&self) -> Result<(), String>;

    /// Allocates `bytes` (at least one) of device memory, contents undefined (device current).
    fn malloc(&self, bytes: usize) -> Result<u64, String>;

    /// Zeroes `bytes` bytes at `dst` (device current).
    ///
    /// # Safety
    /// `dst` must be an allocation of this device with at least `bytes` bytes from there on.
    unsafe fn zero(&self, dst: u64, bytes: usize) -> Result<(), String>;

    /// Frees an allocation made by [`Runtime::malloc`] (device current).
    ///
    /// # Safety
    /// `ptr` must come from `malloc` on this device, be freed once and not be used after.
    unsafe fn release(&self, ptr: u64) -> Result<(), String>;

    /// Copies `bytes` from host `src` to device `dst` (device current).
    ///
    /// # Safety
    /// As [`Runtime::upload`].
    unsafe fn copy_to_device(&self, dst: u64, src: *const u8, bytes: usize) -> Result<(), String>;

    /// Copies `bytes` from device `src` to host `dst`, after the kernels launched before it
    /// (device current).
    ///
    /// # Safety
    /// As [`Runtime::download`].
    unsafe fn copy_to_host(&self, dst: *mut u8, src: u64, bytes: usize) -> Result<(), String>;

    /// The loaded `(fn_name, module, function)` of this device.
    fn cache(&self) -> &FnCache;

    /// Where the last kernel's time is kept.
    fn last_time(&self) -> &LastTime;

    /// Loads the code of `kernel` for this device (device current); returns its module and
    /// function handles.
    fn load(&self, kernel: &KernelDef) -> Result<(Ptr, Ptr), String>;

    /// Queues `function` (loaded from `kernel`) over `grid` workgroups of the kernel's
    /// workgroup size, with one value per parameter in declaration order.
    ///
    /// # Safety
    /// `function` must come from [`Runtime::load`] of `kernel` on this device, and every
    /// pointer value a live device allocation of the size the kernel uses.
    unsafe fn enqueue(
        &self,
        function: Ptr,
        kernel: &KernelDef,
        grid: [u32; 3],
        values: &[KernargValue],
    ) -> Result<(), String>;

    /// Creates a timing event.
    fn event_create(&self) -> Result<Ptr, String>;

    /// Records `event` on the default stream.
    ///
    /// # Safety
    /// `event` must come from [`Runtime::event_create`] and not be destroyed.
    unsafe fn event_record(&self, event: Ptr) -> Result<(), String>;

    /// Waits for all work queued on the device.
    fn synchronize(&self) -> Result<(), String>;

    /// Waits for `event`, then returns the milliseconds from `start` to it.
    ///
    /// # Safety
    /// Both events must come from [`Runtime::event_create`], be recorded and not destroyed.
    unsafe fn elapsed_ms(&self, start: Ptr, stop: Ptr) -> Result<f32, String>;

    /// Destroys `event`.
    ///
    /// # Safety
    /// `event` must come from [`Runtime::event_create`], be destroyed once and not be used
    /// after.
    unsafe fn event_destroy(&self, event: Ptr);

    /// Whether `kernel` carries code for this device's architecture.
    fn has_kernel(&self, kernel: &KernelDef) -> bool {
        self.require_code(kernel).is_ok()
    }

    /// Milliseconds the last kernel ran on the device (events around the launch).
    fn last_kernel_ms(&self) -> Option<f32> {
        *self.last_time().lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Allocates `bytes` (at least one) of zeroed device memory; returns its device address.
    fn alloc(&self, bytes: usize) -> Result<u64, String> {
        self.set_current()?;
        let bytes = bytes.max(1);
        let d = self.malloc(bytes)?;
        // SAFETY: `d` was just allocated with `bytes` bytes.
        if let Err(e) = unsafe { self.zero(d, bytes) } {
            // SAFETY: freeing the allocation made above, which nothing else references; the
            // zeroing error is the one to report.
            let _ = unsafe { self.release(d) };
            return Err(e);
        }
        Ok(d)
    }

    /// Copies `bytes` from host `src` to device address `dst` (synchronous).
    ///
    /// # Safety
    /// `src` must be readable for `bytes` bytes and `dst` an allocation of this device with at
    /// least `bytes` bytes from there on.
    unsafe fn upload(&self, dst: u64, src: *const u8, bytes: usize) -> Result<(), String> {
        self.set_current()?;
        // SAFETY: forwarded to the caller.
        unsafe { self.copy_to_device(dst, src, bytes) }
    }

    /// Copies `bytes` from device address `src` to host `dst`, after the kernels launched
    /// before it.
    ///
    /// # Safety
    /// `dst` must be writable for `bytes` bytes and `src` an allocation of this device with at
    /// least `bytes` bytes from there on.
    unsafe fn download(&self, dst: *mut u8, src: u64, bytes: usize) -> Result<(), String> {
        self.set_current()?;
        // SAFETY: forwarded to the caller.
        unsafe { self.copy_to_host(dst, src, bytes) }
    }

    /// Frees an allocation made by [`Runtime::alloc`]; errors name the runtime call.
    fn free(&self, ptr: u64) -> Result<(), String> {
        self.set_current()?;
        // SAFETY: `ptr` came from `alloc` on this device and is freed once (its owner is
        // being dropped).
        unsafe { self.release(ptr) }
    }

    /// Copies host buffers in, runs `kernel` over `grid` workgroups (device buffers in
    /// place), copies writable host buffers back and frees the device memory it allocated
    /// for them; errors name the failing runtime call.
    fn launch(&self, kernel: &KernelDef, grid: [u32; 3], args: &[GpuArg]) -> Result<(), String> {
        self.require_code(kernel)?;
        let mut cache = self.cache().lock().unwrap_or_else(|e| e.into_inner());
        self.set_current()?;
        let function = match cache.iter().find(|c| c.0 == kernel.fn_name) {
            Some(c) => c.2,
            None => {
                let (module, function) = self.load(kernel)?;
                cache.push((kernel.fn_name, module, function));
                function
            }
        };
        let mut staged: Vec<(u64, GpuArg)> = Vec::new();
        let result = self.run(function, kernel, grid, args, &mut staged);
        for (d, _) in staged {
            // SAFETY: each pointer came from `malloc` and is freed once; the launch's own
            // result is the one to report.
            let _ = unsafe { self.release(d) };
        }
        result
    }

    /// The body of [`Runtime::launch`] once the function is loaded: device memory made for
    /// host buffers is pushed onto `staged` (with its argument) for the caller to free.
    fn run(
        &self,
        function: Ptr,
        kernel: &KernelDef,
        grid: [u32; 3],
        args: &[GpuArg],
        staged: &mut Vec<(u64, GpuArg)>,
    ) -> Result<(), String> {
        let mut values = Vec::with_capacity(args.len());
        for a in args {
            match *a {
                GpuArg::Buf { host, bytes, .. } => {
                    // At least one byte so the pointer is real.
                    let d = self.malloc(bytes.max(1))?;
                    staged.push((d, *a));
                    if bytes > 0 {
                        // SAFETY: `host` holds `bytes` readable bytes (borrowed by the
                        // caller's Arg) and `d` was allocated with at least that size.
                        unsafe { self.copy_to_device(d, host.ptr, bytes)? };
                    }
                    values.push(KernargValue::Ptr(d));
                }
                GpuArg::Device(d) => values.push(KernargValue::Ptr(d)),
                GpuArg::Scalar(v) => values.push(KernargValue::U32(v)),
            }
        }
        let start = self.event_create()?;
        let stop = match self.event_create() {
            Ok(stop) => stop,
            Err(e) => {
                // SAFETY: destroying the event created above.
                unsafe { self.event_destroy(start) };
                return Err(e);
            }
        };
        // SAFETY: `function` was loaded from `kernel` on this device; `values` holds one
        // value per parameter, every pointer a live device allocation of the right size
        // (staged above, or a DeviceBuf the caller borrows); the events were just created.
        let launched = unsafe {
            self.event_record(start)
                .and_then(|_| self.enqueue(function, kernel, grid, &values))
                .and_then(|_| self.event_record(stop))
                .and_then(|_| self.synchronize())
                .and_then(|_| self.elapsed_ms(start, stop))
        };
        // SAFETY: destroying the events created above.
        unsafe {
            self.event_destroy(start);
            self.event_destroy(stop);
        }
        *self.last_time().lock().unwrap_or_else(|e| e.into_inner()) = Some(launched?);
        for &(d, a) in staged.iter() {
            if let GpuArg::Buf {
                host,
                bytes,
                writable: true,
            } = a
            {
                if bytes > 0 {
                    // SAFETY: `host` is a writable buffer of `bytes` bytes borrowed mutably by
                    // the caller's Arg; `d` holds that many bytes.
                    unsafe { self.copy_to_host(host.ptr, d, bytes)? };
                }
            }
        }
        Ok(())
    }
}

/// A cache of loaded modules/functions by kernel function name, so each kernel's code object
/// or PTX is loaded once per device.
pub(super) type FnCache = Mutex<Vec<(&'static str, Ptr, Ptr)>>;

/// Milliseconds the last kernel took on a GPU device (from runtime events).
pub(super) type LastTime = Mutex<Option<f32>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_names_every_soname_tried() {
        let err =
            open_library(&["libdoes-not-exist-a.so", "libdoes-not-exist-b.so.1"]).unwrap_err();
        assert!(err.contains("libdoes-not-exist-a.so"), "{err}");
        assert!(err.contains("libdoes-not-exist-b.so.1"), "{err}");
    }

    #[test]
    fn code_is_found_by_arch_and_a_missing_arch_names_the_built_ones() {
        let k = &lse_kernels::ALL[0];
        let gfx942 = code_for_arch(k, k.gpu, |o| o.arch, "code object", "gfx942").unwrap();
        assert_eq!(gfx942.arch, "gfx942");
        let sm_90 = code_for_arch(k, k.ptx, |p| p.arch, "PTX", "sm_90").unwrap();
        assert_eq!(sm_90.arch, "sm_90");
        let e = code_for_arch(k, k.gpu, |o| o.arch, "code object", "gfx90a").unwrap_err();
        assert!(e.starts_with(&format!("{}: no code object for device arch gfx90a", k.id)));
        assert!(e.contains("gfx942") && e.contains("gfx1100"), "{e}");
        let none: &[lse_dsl::rt::PtxModule] = &[];
        let e = code_for_arch(k, none, |p| p.arch, "PTX", "sm_80").unwrap_err();
        assert!(e.ends_with("(built for: none)"), "{e}");
    }

    #[test]
    fn arguments_keep_declaration_order_and_byte_sizes() {
        let k = lse_kernels::ALL
            .iter()
            .find(|k| {
                k.params
                    .iter()
                    .any(|p| matches!(p.kind, ParamKind::Scalar { .. }))
                    && k.params
                        .iter()
                        .filter(|p| matches!(p.kind, ParamKind::Buffer { .. }))
                        .count()
                        >= 2
            })
            .expect("a kernel with two buffers and a scalar");
        let mut storage = vec![0u8; 64];
        let nb = k
            .params
            .iter()
            .filter(|p| matches!(p.kind, ParamKind::Buffer { .. }))
            .count();
        // Alternate host memory and device memory: host buffers keep their byte size, device
        // buffers become their address.
        let device_addr = 0x7000_0000_0000u64;
        let bufs: Vec<PlacedBuf> = (0..nb)
            .map(|i| {
                if i % 2 == 0 {
                    let raw = RawBuf {
                        ptr: storage.as_mut_ptr(),
                        len: 3,
                    };
                    (raw, Place::Host)
                } else {
                    let raw = RawBuf {
                        ptr: (device_addr + i as u64) as usize as *mut u8,
                        len: 3,
                    };
                    let place = Place::Gpu {
                        id: 1,
                        pool: super::super::Pool::Cuda(0),
                    };
                    (raw, place)
                }
            })
            .collect();
        let scalars: Vec<u64> = (0..k.params.len() - nb).map(|i| i as u64 + 7).collect();
        let args = gpu_args(k, &bufs, &scalars);
        assert_eq!(args.len(), k.params.len());
        let mut next_scalar = 7;
        let mut next_buf = 0;
        for (p, a) in k.params.iter().zip(&args) {
            match (p.kind, a) {
                (ParamKind::Buffer { .. }, GpuArg::Device(addr)) => {
                    assert_eq!(
                        next_buf % 2,
                        1,
                        "host buffer {next_buf} passed as device memory"
                    );
                    assert_eq!(*addr, device_addr + next_buf as u64);
                    next_buf += 1;
                }
                (
                    ParamKind::Buffer { elem, writable },
                    GpuArg::Buf {
                        bytes, writable: w, ..
                    },
                ) => {
                    assert_eq!(
                        next_buf % 2,
                        0,
                        "device buffer {next_buf} passed as host memory"
                    );
                    assert_eq!(*bytes, 3 * elem_bytes(elem));
                    assert_eq!(*w, writable);
                    next_buf += 1;
                }
                (ParamKind::Scalar { .. }, GpuArg::Scalar(v)) => {
                    assert_eq!(*v, next_scalar);
                    next_scalar += 1;
                }
                other => panic!("order mismatch: {other:?}"),
            }
        }
    }
}
