//! NVIDIA GPUs through the CUDA driver API (`libcuda.so.1`), loaded at run time; kernels are
//! the PTX each `KernelDef` carries, JIT-compiled by the driver.
//!
//! Device buffers ([`super::DeviceBuf`]: `cuMemAlloc_v2`, zeroed with `cuMemsetD8_v2`, filled
//! and read with `cuMemcpyHtoD_v2` / `cuMemcpyDtoH_v2`, released with `cuMemFree_v2`) stay on
//! the device across launches and are passed by address; host slices are copied to device
//! memory for the launch and writable ones copied back.

use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr;

use libloading::Library;
use lse_dsl::rt::{KernelDef, PtxModule};

use super::gpu::{
    code_for_arch, open_library, symbol, FnCache, KernargValue, LastTime, OpenError, Ptr, Runtime,
};

/// The sonames tried, in order.
pub(super) const SONAMES: [&str; 2] = ["libcuda.so.1", "libcuda.so"];

type Res = i32;

const ATTR_CC_MAJOR: i32 = 75;
const ATTR_CC_MINOR: i32 = 76;
const JIT_ERROR_LOG_BUFFER: i32 = 5;
const JIT_ERROR_LOG_BUFFER_SIZE_BYTES: i32 = 6;
/// `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`.
const FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: i32 = 8;
const JIT_LOG_BYTES: usize = 16 * 1024;

/// The driver entry points LSE uses (C signatures from `cuda.h`).
struct Api {
    init: unsafe extern "C" fn(u32) -> Res,
    device_get_count: unsafe extern "C" fn(*mut i32) -> Res,
    device_get: unsafe extern "C" fn(*mut i32, i32) -> Res,
    device_get_attribute: unsafe extern "C" fn(*mut i32, i32, i32) -> Res,
    primary_ctx_retain: unsafe extern "C" fn(*mut Ptr, i32) -> Res,
    primary_ctx_release: unsafe extern "C" fn(i32) -> Res,
    ctx_set_current: unsafe extern "C" fn(Ptr) -> Res,
    ctx_synchronize: unsafe extern "C" fn() -> Res,
    get_error_string: unsafe extern "C" fn(Res, *mut *const c_char) -> Res,
    module_load_data_ex:
        unsafe extern "C" fn(*mut Ptr, *const c_void, u32, *mut i32, *mut Ptr) -> Res,
    module_get_function: unsafe extern "C" fn(*mut Ptr, Ptr, *const c_char) -> Res,
    module_unload: unsafe extern "C" fn(Ptr) -> Res,
    func_set_attribute: unsafe extern "C" fn(Ptr, i32, i32) -> Res,
    mem_alloc: unsafe extern "C" fn(*mut u64, usize) -> Res,
    memcpy_htod: unsafe extern "C" fn(u64, *const c_void, usize) -> Res,
    memcpy_dtoh: unsafe extern "C" fn(Ptr, u64, usize) -> Res,
    mem_free: unsafe extern "C" fn(u64) -> Res,
    memset_d8: unsafe extern "C" fn(u64, u8, usize) -> Res,
    #[allow(clippy::type_complexity)]
    launch_kernel: unsafe extern "C" fn(
        Ptr,
        u32,
        u32,
        u32,
        u32,
        u32,
        u32,
        u32,
        Ptr,
        *mut Ptr,
        *mut Ptr,
    ) -> Res,
    event_create: unsafe extern "C" fn(*mut Ptr, u32) -> Res,
    event_record: unsafe extern "C" fn(Ptr, Ptr) -> Res,
    event_synchronize: unsafe extern "C" fn(Ptr) -> Res,
    event_elapsed_time: unsafe extern "C" fn(*mut f32, Ptr, Ptr) -> Res,
    event_destroy: unsafe extern "C" fn(Ptr) -> Res,
}

impl Api {
    fn load(lib: &Library) -> Result<Api, String> {
        // SAFETY: each type below is the documented C signature of the named driver function
        // (the `_v2` names are what `cuda.h` maps the plain names to), and `CudaDevice` keeps
        // `lib` alive for as long as these pointers are used.
        unsafe {
            Ok(Api {
                init: symbol(lib, "cuInit")?,
                device_get_count: symbol(lib, "cuDeviceGetCount")?,
                device_get: symbol(lib, "cuDeviceGet")?,
                device_get_attribute: symbol(lib, "cuDeviceGetAttribute")?,
                primary_ctx_retain: symbol(lib, "cuDevicePrimaryCtxRetain")?,
                primary_ctx_release: symbol(lib, "cuDevicePrimaryCtxRelease_v2")?,
                ctx_set_current: symbol(lib, "cuCtxSetCurrent")?,
                ctx_synchronize: symbol(lib, "cuCtxSynchronize")?,
                get_error_string: symbol(lib, "cuGetErrorString")?,
                module_load_data_ex: symbol(lib, "cuModuleLoadDataEx")?,
                module_get_function: symbol(lib, "cuModuleGetFunction")?,
                module_unload: symbol(lib, "cuModuleUnload")?,
                func_set_attribute: symbol(lib, "cuFuncSetAttribute")?,
                mem_alloc: symbol(lib, "cuMemAlloc_v2")?,
                memcpy_htod: symbol(lib, "cuMemcpyHtoD_v2")?,
                memcpy_dtoh: symbol(lib, "cuMemcpyDtoH_v2")?,
                mem_free: symbol(lib, "cuMemFree_v2")?,
                memset_d8: symbol(lib, "cuMemsetD8_v2")?,
                launch_kernel: symbol(lib, "cuLaunchKernel")?,
                event_create: symbol(lib, "cuEventCreate")?,
                event_record: symbol(lib, "cuEventRecord")?,
                event_synchronize: symbol(lib, "cuEventSynchronize")?,
                event_elapsed_time: symbol(lib, "cuEventElapsedTime")?,
                event_destroy: symbol(lib, "cuEventDestroy_v2")?,
            })
        }
    }

    /// `Ok` for `CUDA_SUCCESS`, else an error naming `call` and the driver's text for `code`.
    fn check(&self, call: &str, code: Res) -> Result<(), String> {
        if code == 0 {
            return Ok(());
        }
        let mut s: *const c_char = ptr::null();
        // SAFETY: cuGetErrorString stores a static NUL-terminated string (or leaves null).
        let text = unsafe {
            if (self.get_error_string)(code, &mut s) != 0 || s.is_null() {
                "unknown error".to_string()
            } else {
                CStr::from_ptr(s).to_string_lossy().into_owned()
            }
        };
        Err(format!("{call} failed with error {code}: {text}"))
    }
}

/// The PTX architecture to JIT for a device of compute capability `major.minor`: `sm_90` from
/// 9.0 on, `sm_80` from 8.0 on (PTX JIT-compiles forward to newer devices).
pub(super) fn ptx_arch(major: i32, minor: i32) -> Result<&'static str, String> {
    match major {
        9.. => Ok("sm_90"),
        8 => Ok("sm_80"),
        _ => Err(format!(
            "compute capability {major}.{minor} is below 8.0; LOOM PTX is built for sm_80 and sm_90"
        )),
    }
}

/// One opened CUDA device (its primary context).
pub(super) struct CudaDevice {
    api: Api,
    device: i32,
    ctx: Ptr,
    arch: &'static str,
    /// Loaded `(fn_name, CUmodule, CUfunction)`.
    cache: FnCache,
    last_ms: LastTime,
    /// Declared last so it is dropped after everything that uses its functions.
    _lib: Library,
}

// SAFETY: the raw handles are driver context/module/function handles, usable from any thread
// once the context is made current (every entry point does so); state is behind mutexes.
unsafe impl Send for CudaDevice {}
// SAFETY: as above; launches serialise on the cache mutex.
unsafe impl Sync for CudaDevice {}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaDevice({}, {})", self.device, self.arch)
    }
}

impl CudaDevice {
    /// Loads the driver and opens device `index` (its primary context).
    pub(super) fn open(index: u32) -> Result<CudaDevice, OpenError> {
        let lib = open_library(&SONAMES).map_err(OpenError::NoRuntime)?;
        let api = Api::load(&lib).map_err(OpenError::NoRuntime)?;
        let call = OpenError::Call;
        let mut count = 0i32;
        // SAFETY: plain driver calls with valid out-pointers.
        unsafe {
            api.check("cuInit", (api.init)(0)).map_err(call)?;
            api.check("cuDeviceGetCount", (api.device_get_count)(&mut count))
                .map_err(call)?;
        }
        let count = count.max(0) as u32;
        if index >= count {
            return Err(OpenError::NoDevice { count });
        }
        let (mut device, mut major, mut minor) = (0i32, 0i32, 0i32);
        let mut ctx: Ptr = ptr::null_mut();
        // SAFETY: as above; `device` comes from cuDeviceGet.
        unsafe {
            api.check("cuDeviceGet", (api.device_get)(&mut device, index as i32))
                .map_err(call)?;
            api.check(
                "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MAJOR)",
                (api.device_get_attribute)(&mut major, ATTR_CC_MAJOR, device),
            )
            .map_err(call)?;
            api.check(
                "cuDeviceGetAttribute(COMPUTE_CAPABILITY_MINOR)",
                (api.device_get_attribute)(&mut minor, ATTR_CC_MINOR, device),
            )
            .map_err(call)?;
        }
        let arch =
            ptx_arch(major, minor).map_err(|e| OpenError::Call(format!("device {index}: {e}")))?;
        // SAFETY: as above.
        unsafe {
            api.check(
                "cuDevicePrimaryCtxRetain",
                (api.primary_ctx_retain)(&mut ctx, device),
            )
            .map_err(call)?
        };
        Ok(CudaDevice {
            api,
            device,
            ctx,
            arch,
            cache: Default::default(),
            last_ms: Default::default(),
            _lib: lib,
        })
    }

    /// The PTX of `kernel` for this device, or the error saying which archs were built.
    fn module<'k>(&self, kernel: &'k KernelDef) -> Result<&'k PtxModule, String> {
        code_for_arch(kernel, kernel.ptx, |p| p.arch, "PTX", self.arch)
    }
}

/// Device memory: `cuMemAlloc_v2`, `cuMemsetD8_v2`, `cuMemcpyHtoD_v2` (synchronous),
/// `cuMemcpyDtoH_v2`, `cuMemFree_v2`; launches: `cuLaunchKernel` with one parameter slot per
/// argument and the kernel's dynamic shared memory (past 48 KiB after `cuFuncSetAttribute`
/// at load), timed with CUDA events.
impl Runtime for CudaDevice {
    /// The PTX architecture this device runs (`sm_80` or `sm_90`).
    fn arch(&self) -> &str {
        self.arch
    }

    fn require_code(&self, kernel: &KernelDef) -> Result<(), String> {
        self.module(kernel).map(|_| ())
    }

    /// Makes the device's primary context current on the calling thread.
    fn set_current(&self) -> Result<(), String> {
        // SAFETY: the primary context retained at open.
        unsafe {
            self.api
                .check("cuCtxSetCurrent", (self.api.ctx_set_current)(self.ctx))
        }
    }

    fn malloc(&self, bytes: usize) -> Result<u64, String> {
        let mut d = 0u64;
        // SAFETY: valid out-pointer.
        unsafe {
            self.api
                .check("cuMemAlloc", (self.api.mem_alloc)(&mut d, bytes))?
        };
        Ok(d)
    }

    unsafe fn zero(&self, dst: u64, bytes: usize) -> Result<(), String> {
        // SAFETY: the caller guarantees the range.
        unsafe {
            self.api
                .check("cuMemsetD8", (self.api.memset_d8)(dst, 0, bytes))
        }
    }

    unsafe fn release(&self, ptr: u64) -> Result<(), String> {
        // SAFETY: the caller guarantees `ptr` came from cuMemAlloc and is freed once.
        unsafe { self.api.check("cuMemFree", (self.api.mem_free)(ptr)) }
    }

    unsafe fn copy_to_device(&self, dst: u64, src: *const u8, bytes: usize) -> Result<(), String> {
        // SAFETY: the caller guarantees both ranges.
        unsafe {
            self.api.check(
                "cuMemcpyHtoD",
                (self.api.memcpy_htod)(dst, src.cast(), bytes),
            )
        }
    }

    unsafe fn copy_to_host(&self, dst: *mut u8, src: u64, bytes: usize) -> Result<(), String> {
        // SAFETY: the caller guarantees both ranges.
        unsafe {
            self.api.check(
                "cuMemcpyDtoH",
                (self.api.memcpy_dtoh)(dst.cast(), src, bytes),
            )
        }
    }

    fn cache(&self) -> &FnCache {
        &self.cache
    }

    fn last_time(&self) -> &LastTime {
        &self.last_ms
    }

    /// JIT-compiles the kernel's PTX (the JIT log goes into the error) and finds its entry.
    fn load(&self, kernel: &KernelDef) -> Result<(Ptr, Ptr), String> {
        let module = self.module(kernel)?;
        let ptx = module
            .ptx
            .unpack()
            .map_err(|e| format!("{}: PTX: {e}", kernel.id))?;
        let ptx = CString::new(ptx).map_err(|e| format!("{}: PTX: {e}", kernel.id))?;
        let mut log = vec![0u8; JIT_LOG_BYTES];
        let mut options = [JIT_ERROR_LOG_BUFFER, JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
        let mut values: [Ptr; 2] = [log.as_mut_ptr().cast(), JIT_LOG_BYTES as Ptr];
        let mut m: Ptr = ptr::null_mut();
        // SAFETY: `ptx` is NUL-terminated; the option arrays have two entries each and the log
        // buffer is JIT_LOG_BYTES long, as declared.
        let loaded = unsafe {
            self.api.check(
                "cuModuleLoadDataEx",
                (self.api.module_load_data_ex)(
                    &mut m,
                    ptx.as_ptr().cast(),
                    2,
                    options.as_mut_ptr(),
                    values.as_mut_ptr(),
                ),
            )
        };
        if let Err(e) = loaded {
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            return Err(format!(
                "{}: {e}; JIT log: {}",
                kernel.id,
                String::from_utf8_lossy(&log[..end]).trim()
            ));
        }
        let name = CString::new(kernel.fn_name).map_err(|e| e.to_string())?;
        let mut f: Ptr = ptr::null_mut();
        // SAFETY: `m` was just loaded; `name` is NUL-terminated.
        let got = unsafe {
            self.api.check(
                "cuModuleGetFunction",
                (self.api.module_get_function)(&mut f, m, name.as_ptr()),
            )
        };
        let got = got.map_err(|e| format!("{e} (entry {})", kernel.fn_name));
        // A block may take over 48 KiB of dynamic shared memory only once the function opts in.
        let dynamic = kernel.nvidia_dynamic_shared_bytes;
        let sized = got.and_then(|()| match dynamic {
            0 => Ok(()),
            // SAFETY: `f` is the function just found; the attribute takes a byte count.
            bytes => unsafe {
                self.api.check(
                    "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)",
                    (self.api.func_set_attribute)(
                        f,
                        FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        bytes as i32,
                    ),
                )
            }
            .map_err(|e| format!("{}: {e} ({bytes} bytes)", kernel.id)),
        });
        if let Err(e) = sized {
            // SAFETY: unloading the module loaded above, which nothing else references.
            unsafe { (self.api.module_unload)(m) };
            return Err(e);
        }
        Ok((m, f))
    }

    /// One 8-byte slot per parameter: a device pointer, or a scalar in the low 4 bytes
    /// (little-endian, so a pointer to the slot is a pointer to the u32/f32).
    unsafe fn enqueue(
        &self,
        function: Ptr,
        kernel: &KernelDef,
        grid: [u32; 3],
        values: &[KernargValue],
    ) -> Result<(), String> {
        let mut slots: Vec<u64> = values
            .iter()
            .map(|v| match *v {
                KernargValue::Ptr(d) => d,
                KernargValue::U32(x) => u64::from(x),
            })
            .collect();
        let mut params: Vec<Ptr> = slots.iter_mut().map(|s| (s as *mut u64).cast()).collect();
        // SAFETY: `function` is a loaded kernel whose parameters are, in order, one .u64 per
        // buffer and one 32-bit value per scalar; `params` points at one slot per parameter,
        // and the launch reads them before returning.
        unsafe {
            self.api.check(
                "cuLaunchKernel",
                (self.api.launch_kernel)(
                    function,
                    grid[0],
                    grid[1],
                    grid[2],
                    kernel.workgroup_size,
                    1,
                    1,
                    kernel.nvidia_dynamic_shared_bytes,
                    ptr::null_mut(),
                    params.as_mut_ptr(),
                    ptr::null_mut(),
                ),
            )
        }
    }

    fn event_create(&self) -> Result<Ptr, String> {
        let mut e: Ptr = ptr::null_mut();
        // SAFETY: valid out-pointer.
        unsafe {
            self.api
                .check("cuEventCreate", (self.api.event_create)(&mut e, 0))?
        };
        Ok(e)
    }

    unsafe fn event_record(&self, event: Ptr) -> Result<(), String> {
        // SAFETY: the caller guarantees a live event.
        unsafe {
            self.api.check(
                "cuEventRecord",
                (self.api.event_record)(event, ptr::null_mut()),
            )
        }
    }

    fn synchronize(&self) -> Result<(), String> {
        // SAFETY: a plain driver call in the current context.
        unsafe {
            self.api
                .check("cuCtxSynchronize", (self.api.ctx_synchronize)())
        }
    }

    unsafe fn elapsed_ms(&self, start: Ptr, stop: Ptr) -> Result<f32, String> {
        let mut ms = 0f32;
        // SAFETY: the caller guarantees live, recorded events; valid out-pointer.
        unsafe {
            self.api
                .check("cuEventSynchronize", (self.api.event_synchronize)(stop))?;
            self.api.check(
                "cuEventElapsedTime",
                (self.api.event_elapsed_time)(&mut ms, start, stop),
            )?;
        }
        Ok(ms)
    }

    unsafe fn event_destroy(&self, event: Ptr) {
        // SAFETY: the caller guarantees a live event destroyed once.
        unsafe { (self.api.event_destroy)(event) };
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        let cache = self.cache.get_mut().unwrap_or_else(|e| e.into_inner());
        // SAFETY: make the context current, unload each module this device loaded once, then
        // release the primary context retained at open.
        unsafe {
            (self.api.ctx_set_current)(self.ctx);
            for (_, module, _) in cache.drain(..) {
                (self.api.module_unload)(module);
            }
            (self.api.primary_ctx_release)(self.device);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ptx_arch_follows_compute_capability() {
        assert_eq!(ptx_arch(9, 0).unwrap(), "sm_90");
        assert_eq!(ptx_arch(10, 0).unwrap(), "sm_90");
        assert_eq!(ptx_arch(12, 1).unwrap(), "sm_90");
        assert_eq!(ptx_arch(8, 0).unwrap(), "sm_80");
        assert_eq!(ptx_arch(8, 9).unwrap(), "sm_80");
        let e = ptx_arch(7, 5).unwrap_err();
        assert!(e.contains("7.5") && e.contains("sm_80"), "{e}");
    }

    #[test]
    fn every_kernel_carries_ptx_for_both_archs() {
        for k in lse_kernels::ALL {
            for arch in lse_dsl::rt::PTX_ARCHS {
                let m = k.ptx.iter().find(|p| p.arch == arch);
                let m = m.unwrap_or_else(|| panic!("{}: no PTX for {arch}", k.id));
                let ptx = m.ptx.unpack().unwrap();
                assert!(ptx.contains(&format!(".entry {}", k.fn_name)), "{}", k.id);
            }
        }
    }
}
