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

/// The error for a kernel with no `what` (code object, PTX) built for the device's `arch`.
pub(super) fn no_code_for_arch(
    kernel: &KernelDef,
    what: &str,
    arch: &str,
    built: &[&str],
) -> String {
    let built = if built.is_empty() {
        "none".to_string()
    } else {
        built.join(", ")
    };
    format!(
        "{}: no {what} for device arch {arch} (built for: {built})",
        kernel.id
    )
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

impl GpuDevice {
    /// The device architecture (`gfx1201`, `sm_90`, ...).
    pub(super) fn arch(&self) -> &str {
        match self {
            GpuDevice::Hip(d) => d.arch(),
            GpuDevice::Cuda(d) => d.arch(),
        }
    }

    /// Whether `kernel` carries code for this device's architecture.
    pub(super) fn has_kernel(&self, kernel: &KernelDef) -> bool {
        match self {
            GpuDevice::Hip(d) => d.object(kernel).is_some(),
            GpuDevice::Cuda(d) => d.module(kernel).is_some(),
        }
    }

    /// Runs one launch (host buffers copied in and out, device buffers used in place); errors
    /// name the failing runtime call.
    pub(super) fn launch(
        &self,
        kernel: &KernelDef,
        grid: [u32; 3],
        args: &[GpuArg],
    ) -> Result<(), String> {
        match self {
            GpuDevice::Hip(d) => d.launch(kernel, grid, args),
            GpuDevice::Cuda(d) => d.launch(kernel, grid, args),
        }
    }

    /// Allocates `bytes` (at least one) of zeroed device memory; returns its device address.
    pub(super) fn alloc(&self, bytes: usize) -> Result<u64, String> {
        match self {
            GpuDevice::Hip(d) => d.alloc(bytes),
            GpuDevice::Cuda(d) => d.alloc(bytes),
        }
    }

    /// Copies `bytes` from host `src` to device address `dst`.
    ///
    /// # Safety
    /// `src` must be readable for `bytes` bytes and `dst` an allocation of this device with at
    /// least `bytes` bytes from there on.
    pub(super) unsafe fn upload(
        &self,
        dst: u64,
        src: *const u8,
        bytes: usize,
    ) -> Result<(), String> {
        // SAFETY: forwarded to the caller.
        unsafe {
            match self {
                GpuDevice::Hip(d) => d.upload(dst, src, bytes),
                GpuDevice::Cuda(d) => d.upload(dst, src, bytes),
            }
        }
    }

    /// Copies `bytes` from device address `src` to host `dst`.
    ///
    /// # Safety
    /// `dst` must be writable for `bytes` bytes and `src` an allocation of this device with at
    /// least `bytes` bytes from there on.
    pub(super) unsafe fn download(
        &self,
        dst: *mut u8,
        src: u64,
        bytes: usize,
    ) -> Result<(), String> {
        // SAFETY: forwarded to the caller.
        unsafe {
            match self {
                GpuDevice::Hip(d) => d.download(dst, src, bytes),
                GpuDevice::Cuda(d) => d.download(dst, src, bytes),
            }
        }
    }

    /// Frees an allocation made by [`GpuDevice::alloc`]; errors name the runtime call.
    pub(super) fn free(&self, ptr: u64) -> Result<(), String> {
        match self {
            GpuDevice::Hip(d) => d.free(ptr),
            GpuDevice::Cuda(d) => d.free(ptr),
        }
    }

    /// Milliseconds the last kernel ran on the device.
    pub(super) fn last_kernel_ms(&self) -> Option<f32> {
        match self {
            GpuDevice::Hip(d) => d.last_kernel_ms(),
            GpuDevice::Cuda(d) => d.last_kernel_ms(),
        }
    }
}

/// A cache of loaded modules/functions by kernel function name, so each kernel's code object
/// or PTX is loaded once per device.
pub(super) type FnCache = Mutex<Vec<(&'static str, *mut c_void, *mut c_void)>>;

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
