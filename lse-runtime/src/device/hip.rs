//! AMD GPUs through the HIP runtime (`libamdhip64`), loaded at run time so the binary runs on
//! machines without ROCm.
//!
//! Each launch runs the kernel's code object for the device's architecture. Device buffers
//! ([`super::DeviceBuf`]: `hipMalloc`, zeroed with `hipMemset`, filled and read with
//! `hipMemcpy`, released with `hipFree`) stay on the device across launches and are passed
//! by address; host slices are copied to device memory for the launch and writable ones
//! copied back.

use std::ffi::{c_char, c_void, CStr, CString};
use std::ptr;

use libloading::Library;
use lse_dsl::rt::{GpuObject, KernelDef};
use serde::Deserialize;

use super::gpu::{
    code_for_arch, open_library, symbol, FnCache, KernargValue, LastTime, OpenError, Ptr, Runtime,
};

/// The sonames tried, in order.
pub(super) const SONAMES: [&str; 3] = ["libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5"];

type Err = i32;

const MEMCPY_HOST_TO_DEVICE: i32 = 1;
const MEMCPY_DEVICE_TO_HOST: i32 = 2;
const LAUNCH_PARAM_BUFFER_POINTER: usize = 1;
const LAUNCH_PARAM_BUFFER_SIZE: usize = 2;
const LAUNCH_PARAM_END: usize = 3;

/// The HIP entry points LSE uses (C signatures from `hip_runtime_api.h`).
struct Api {
    init: unsafe extern "C" fn(u32) -> Err,
    get_device_count: unsafe extern "C" fn(*mut i32) -> Err,
    get_device_properties: unsafe extern "C" fn(*mut u8, i32) -> Err,
    set_device: unsafe extern "C" fn(i32) -> Err,
    get_error_string: unsafe extern "C" fn(Err) -> *const c_char,
    module_load_data: unsafe extern "C" fn(*mut Ptr, *const c_void) -> Err,
    module_get_function: unsafe extern "C" fn(*mut Ptr, Ptr, *const c_char) -> Err,
    module_unload: unsafe extern "C" fn(Ptr) -> Err,
    malloc: unsafe extern "C" fn(*mut Ptr, usize) -> Err,
    memcpy: unsafe extern "C" fn(Ptr, *const c_void, usize, i32) -> Err,
    memset: unsafe extern "C" fn(Ptr, i32, usize) -> Err,
    free: unsafe extern "C" fn(Ptr) -> Err,
    #[allow(clippy::type_complexity)]
    module_launch_kernel: unsafe extern "C" fn(
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
    ) -> Err,
    device_synchronize: unsafe extern "C" fn() -> Err,
    event_create: unsafe extern "C" fn(*mut Ptr) -> Err,
    event_record: unsafe extern "C" fn(Ptr, Ptr) -> Err,
    event_synchronize: unsafe extern "C" fn(Ptr) -> Err,
    event_elapsed_time: unsafe extern "C" fn(*mut f32, Ptr, Ptr) -> Err,
    event_destroy: unsafe extern "C" fn(Ptr) -> Err,
}

impl Api {
    fn load(lib: &Library) -> Result<Api, String> {
        // SAFETY: each type below is the documented C signature of the named HIP function,
        // and `HipDevice` keeps `lib` alive for as long as these pointers are used.
        unsafe {
            let props = symbol(lib, "hipGetDevicePropertiesR0600")
                .or_else(|_| symbol(lib, "hipGetDeviceProperties"))?;
            Ok(Api {
                init: symbol(lib, "hipInit")?,
                get_device_count: symbol(lib, "hipGetDeviceCount")?,
                get_device_properties: props,
                set_device: symbol(lib, "hipSetDevice")?,
                get_error_string: symbol(lib, "hipGetErrorString")?,
                module_load_data: symbol(lib, "hipModuleLoadData")?,
                module_get_function: symbol(lib, "hipModuleGetFunction")?,
                module_unload: symbol(lib, "hipModuleUnload")?,
                malloc: symbol(lib, "hipMalloc")?,
                memcpy: symbol(lib, "hipMemcpy")?,
                memset: symbol(lib, "hipMemset")?,
                free: symbol(lib, "hipFree")?,
                module_launch_kernel: symbol(lib, "hipModuleLaunchKernel")?,
                device_synchronize: symbol(lib, "hipDeviceSynchronize")?,
                event_create: symbol(lib, "hipEventCreate")?,
                event_record: symbol(lib, "hipEventRecord")?,
                event_synchronize: symbol(lib, "hipEventSynchronize")?,
                event_elapsed_time: symbol(lib, "hipEventElapsedTime")?,
                event_destroy: symbol(lib, "hipEventDestroy")?,
            })
        }
    }

    /// `Ok` for `hipSuccess`, else an error naming `call` and the runtime's text for `code`.
    fn check(&self, call: &str, code: Err) -> Result<(), String> {
        if code == 0 {
            return Ok(());
        }
        // SAFETY: hipGetErrorString returns a static NUL-terminated string (or null).
        let text = unsafe {
            let s = (self.get_error_string)(code);
            if s.is_null() {
                "unknown error".to_string()
            } else {
                CStr::from_ptr(s).to_string_lossy().into_owned()
            }
        };
        Err(format!("{call} failed with error {code}: {text}"))
    }
}

/// One opened HIP device.
pub(super) struct HipDevice {
    api: Api,
    index: i32,
    arch: String,
    /// Loaded `(fn_name, hipModule_t, hipFunction_t)`.
    cache: FnCache,
    last_ms: LastTime,
    /// Declared last so it is dropped after everything that uses its functions.
    _lib: Library,
}

// SAFETY: the raw handles inside are HIP module/function handles, which the HIP runtime allows
// any thread to use; the cache and timing are behind mutexes.
unsafe impl Send for HipDevice {}
// SAFETY: as above; launches serialise on the cache mutex.
unsafe impl Sync for HipDevice {}

impl std::fmt::Debug for HipDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HipDevice({}, {})", self.index, self.arch)
    }
}

impl HipDevice {
    /// Loads the HIP runtime and opens device `index`.
    pub(super) fn open(index: u32) -> Result<HipDevice, OpenError> {
        let lib = open_library(&SONAMES).map_err(OpenError::NoRuntime)?;
        let api = Api::load(&lib).map_err(OpenError::NoRuntime)?;
        let call = OpenError::Call;
        // SAFETY: plain HIP calls with valid out-pointers.
        unsafe { api.check("hipInit", (api.init)(0)).map_err(call)? };
        let mut count = 0i32;
        // SAFETY: as above.
        unsafe {
            api.check("hipGetDeviceCount", (api.get_device_count)(&mut count))
                .map_err(call)?
        };
        let count = count.max(0) as u32;
        if index >= count {
            return Err(OpenError::NoDevice { count });
        }
        let index = index as i32;
        // hipDeviceProp_t's size differs between ROCm versions; 64 KiB covers all of them.
        let mut props = vec![0u8; 1 << 16];
        // SAFETY: `props` is larger than any hipDeviceProp_t layout.
        unsafe {
            api.check(
                "hipGetDeviceProperties",
                (api.get_device_properties)(props.as_mut_ptr(), index),
            )
            .map_err(call)?
        };
        let arch = find_gfx_arch(&props).ok_or_else(|| {
            OpenError::Call(format!(
                "hipGetDeviceProperties: device {index} reports no gcnArchName (gfx...)"
            ))
        })?;
        Ok(HipDevice {
            api,
            index,
            arch,
            cache: Default::default(),
            last_ms: Default::default(),
            _lib: lib,
        })
    }

    /// The code object of `kernel` for this device, or the error saying which archs were
    /// built.
    fn object<'k>(&self, kernel: &'k KernelDef) -> Result<&'k GpuObject, String> {
        code_for_arch(kernel, kernel.gpu, |o| o.arch, "code object", &self.arch)
    }
}

/// Device memory: `hipMalloc`, `hipMemset`, `hipMemcpy`, `hipFree`; launches:
/// `hipModuleLaunchKernel` with a kernarg buffer packed to the code object's metadata, timed
/// with HIP events.
impl Runtime for HipDevice {
    /// The device's architecture, e.g. `gfx1201`.
    fn arch(&self) -> &str {
        &self.arch
    }

    fn require_code(&self, kernel: &KernelDef) -> Result<(), String> {
        self.object(kernel).map(|_| ())
    }

    /// Makes this device current on the calling thread (HIP's current device is per thread).
    fn set_current(&self) -> Result<(), String> {
        // SAFETY: hipSetDevice with an index checked at open.
        unsafe {
            self.api
                .check("hipSetDevice", (self.api.set_device)(self.index))
        }
    }

    fn malloc(&self, bytes: usize) -> Result<u64, String> {
        let mut d: Ptr = ptr::null_mut();
        // SAFETY: valid out-pointer.
        unsafe {
            self.api
                .check("hipMalloc", (self.api.malloc)(&mut d, bytes))?
        };
        Ok(d as usize as u64)
    }

    unsafe fn zero(&self, dst: u64, bytes: usize) -> Result<(), String> {
        // SAFETY: the caller guarantees the range.
        unsafe {
            self.api.check(
                "hipMemset",
                (self.api.memset)(dst as usize as Ptr, 0, bytes),
            )
        }
    }

    unsafe fn release(&self, ptr: u64) -> Result<(), String> {
        // SAFETY: the caller guarantees `ptr` came from hipMalloc and is freed once.
        unsafe {
            self.api
                .check("hipFree", (self.api.free)(ptr as usize as Ptr))
        }
    }

    unsafe fn copy_to_device(&self, dst: u64, src: *const u8, bytes: usize) -> Result<(), String> {
        let dst = dst as usize as Ptr;
        // SAFETY: the caller guarantees both ranges.
        unsafe {
            self.api.check(
                "hipMemcpy(host to device)",
                (self.api.memcpy)(dst, src.cast(), bytes, MEMCPY_HOST_TO_DEVICE),
            )
        }
    }

    unsafe fn copy_to_host(&self, dst: *mut u8, src: u64, bytes: usize) -> Result<(), String> {
        let src = src as usize as *const c_void;
        // SAFETY: the caller guarantees both ranges.
        unsafe {
            self.api.check(
                "hipMemcpy(device to host)",
                (self.api.memcpy)(dst.cast(), src, bytes, MEMCPY_DEVICE_TO_HOST),
            )
        }
    }

    fn cache(&self) -> &FnCache {
        &self.cache
    }

    fn last_time(&self) -> &LastTime {
        &self.last_ms
    }

    /// Loads the kernel's code object and finds its symbol.
    fn load(&self, kernel: &KernelDef) -> Result<(Ptr, Ptr), String> {
        let object = self.object(kernel)?;
        let mut module: Ptr = ptr::null_mut();
        // SAFETY: the code object is a complete ELF image that lives for the whole program.
        unsafe {
            self.api.check(
                "hipModuleLoadData",
                (self.api.module_load_data)(&mut module, object.code_object.as_ptr().cast()),
            )?
        };
        let name = CString::new(kernel.fn_name).map_err(|e| e.to_string())?;
        let mut function: Ptr = ptr::null_mut();
        // SAFETY: `module` was just loaded; `name` is NUL-terminated.
        let got = unsafe {
            self.api.check(
                "hipModuleGetFunction",
                (self.api.module_get_function)(&mut function, module, name.as_ptr()),
            )
        };
        if let Err(e) = got {
            // SAFETY: unloading the module loaded above, which nothing else references.
            unsafe { (self.api.module_unload)(module) };
            return Err(format!("{e} (symbol {})", kernel.fn_name));
        }
        Ok((module, function))
    }

    /// Packs `values` into a kernarg buffer laid out as the code object's metadata says.
    unsafe fn enqueue(
        &self,
        function: Ptr,
        kernel: &KernelDef,
        grid: [u32; 3],
        values: &[KernargValue],
    ) -> Result<(), String> {
        let object = self.object(kernel)?;
        let mut kernargs = pack_kernargs(object.metadata_json, values)
            .map_err(|e| format!("{}: code object metadata: {e}", kernel.id))?;
        let mut size = kernargs.len();
        let mut extra: [Ptr; 5] = [
            LAUNCH_PARAM_BUFFER_POINTER as Ptr,
            kernargs.as_mut_ptr().cast(),
            LAUNCH_PARAM_BUFFER_SIZE as Ptr,
            (&mut size as *mut usize).cast(),
            LAUNCH_PARAM_END as Ptr,
        ];
        // SAFETY: `function` is a loaded kernel; `extra` describes a kernarg buffer packed to
        // the code object's own layout, which the launch copies before returning; the caller
        // guarantees every buffer pointer in it.
        unsafe {
            self.api.check(
                "hipModuleLaunchKernel",
                (self.api.module_launch_kernel)(
                    function,
                    grid[0],
                    grid[1],
                    grid[2],
                    kernel.workgroup_size,
                    1,
                    1,
                    0,
                    ptr::null_mut(),
                    ptr::null_mut(),
                    extra.as_mut_ptr(),
                ),
            )
        }
    }

    fn event_create(&self) -> Result<Ptr, String> {
        let mut e: Ptr = ptr::null_mut();
        // SAFETY: valid out-pointer.
        unsafe {
            self.api
                .check("hipEventCreate", (self.api.event_create)(&mut e))?
        };
        Ok(e)
    }

    unsafe fn event_record(&self, event: Ptr) -> Result<(), String> {
        // SAFETY: the caller guarantees a live event.
        unsafe {
            self.api.check(
                "hipEventRecord",
                (self.api.event_record)(event, ptr::null_mut()),
            )
        }
    }

    fn synchronize(&self) -> Result<(), String> {
        // SAFETY: a plain runtime call on the current device.
        unsafe {
            self.api
                .check("hipDeviceSynchronize", (self.api.device_synchronize)())
        }
    }

    unsafe fn elapsed_ms(&self, start: Ptr, stop: Ptr) -> Result<f32, String> {
        let mut ms = 0f32;
        // SAFETY: the caller guarantees live, recorded events; valid out-pointer.
        unsafe {
            self.api
                .check("hipEventSynchronize", (self.api.event_synchronize)(stop))?;
            self.api.check(
                "hipEventElapsedTime",
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

impl Drop for HipDevice {
    fn drop(&mut self) {
        let cache = self.cache.get_mut().unwrap_or_else(|e| e.into_inner());
        for (_, module, _) in cache.drain(..) {
            // SAFETY: each module was loaded by this device and is unloaded once.
            unsafe { (self.api.module_unload)(module) };
        }
    }
}

/// The architecture in a `hipDeviceProp_t` image: the first NUL-preceded string starting with
/// `gfx` (the `gcnArchName` field, whose offset differs between ROCm versions), without
/// target-feature suffixes (`gfx90a:sramecc+:xnack-` -> `gfx90a`).
pub(super) fn find_gfx_arch(props: &[u8]) -> Option<String> {
    (0..props.len()).find_map(|i| {
        if !props[i..].starts_with(b"gfx") || (i > 0 && props[i - 1] != 0) {
            return None;
        }
        let end = props[i..].iter().position(|&b| b == 0)? + i;
        let name = std::str::from_utf8(&props[i..end]).ok()?;
        let arch = strip_features(name);
        (arch.len() > 3 && arch.bytes().all(|b| b.is_ascii_alphanumeric()))
            .then(|| arch.to_string())
    })
}

/// `gfx90a:sramecc+:xnack-` -> `gfx90a`.
pub(super) fn strip_features(name: &str) -> &str {
    name.split(':').next().unwrap_or(name)
}

#[derive(Deserialize)]
struct Metadata {
    kernels: Vec<MetaKernel>,
}

#[derive(Deserialize)]
struct MetaKernel {
    args: Vec<MetaArg>,
    kernarg_segment_size: u64,
}

#[derive(Deserialize)]
struct MetaArg {
    offset: u64,
    size: u64,
    value_kind: String,
}

/// Packs `values` (one per explicit parameter, in declaration order) into a kernarg segment
/// laid out as the code object's metadata (`lse_codegen::CodeObjectInfo` as JSON) says: each
/// at its `offset`, the segment `kernarg_segment_size` bytes long. Hidden arguments are left
/// zero (the HIP runtime fills the ones it knows).
pub(super) fn pack_kernargs(
    metadata_json: &str,
    values: &[KernargValue],
) -> Result<Vec<u8>, String> {
    let meta: Metadata =
        serde_json::from_str(metadata_json).map_err(|e| format!("invalid JSON: {e}"))?;
    let k = meta
        .kernels
        .first()
        .ok_or("no entry in kernels (expected one)")?;
    let explicit: Vec<&MetaArg> = k
        .args
        .iter()
        .filter(|a| !a.value_kind.starts_with("hidden_"))
        .collect();
    if explicit.len() != values.len() {
        return Err(format!(
            "{} explicit kernargs in the code object, {} arguments given",
            explicit.len(),
            values.len()
        ));
    }
    let mut out = vec![0u8; k.kernarg_segment_size as usize];
    for (i, (a, v)) in explicit.iter().zip(values).enumerate() {
        let bytes: Vec<u8> = match (v, a.value_kind.as_str(), a.size) {
            (KernargValue::Ptr(p), "global_buffer", 8) => p.to_le_bytes().to_vec(),
            (KernargValue::U32(x), "by_value", 4) => x.to_le_bytes().to_vec(),
            _ => {
                return Err(format!(
                    "kernarg {i} is {} of {} bytes, which does not fit {v:?}",
                    a.value_kind, a.size
                ))
            }
        };
        let at = a.offset as usize;
        let slot = out.get_mut(at..at + bytes.len()).ok_or_else(|| {
            format!(
                "kernarg {i} at offset {at} overruns the {}-byte segment",
                k.kernarg_segment_size
            )
        })?;
        slot.copy_from_slice(&bytes);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lse_dsl::rt::ParamKind;

    #[test]
    fn arch_is_found_in_a_properties_image_without_feature_suffixes() {
        let mut props = vec![0u8; 600];
        props[..18].copy_from_slice(b"AMD Radeon RX 9070");
        props[300..322].copy_from_slice(b"gfx90a:sramecc+:xnack-");
        assert_eq!(find_gfx_arch(&props).as_deref(), Some("gfx90a"));
        let mut plain = vec![0u8; 64];
        plain[8..15].copy_from_slice(b"gfx1201");
        assert_eq!(find_gfx_arch(&plain).as_deref(), Some("gfx1201"));
        // Not at a string start, or not an arch at all.
        let mut none = vec![0u8; 64];
        none[4..14].copy_from_slice(b"xgfx1201ab");
        none[20..23].copy_from_slice(b"gfx");
        assert_eq!(find_gfx_arch(&none), None);
        assert_eq!(strip_features("gfx1100"), "gfx1100");
    }

    #[test]
    fn kernargs_follow_real_code_object_metadata() {
        let mut checked = 0;
        for k in lse_kernels::ALL {
            for obj in k.gpu {
                let json: serde_json::Value = serde_json::from_str(obj.metadata_json).unwrap();
                let meta = &json["kernels"][0];
                assert_eq!(meta["name"], k.fn_name);
                assert_eq!(meta["symbol"], format!("{}.kd", k.fn_name));
                let args = meta["args"].as_array().unwrap();
                let values: Vec<KernargValue> = k
                    .params
                    .iter()
                    .enumerate()
                    .map(|(i, p)| match p.kind {
                        ParamKind::Buffer { .. } => {
                            KernargValue::Ptr(0x1122_3344_5566_0000 + i as u64)
                        }
                        ParamKind::Scalar { .. } => KernargValue::U32(0xA0B0_0000 + i as u32),
                    })
                    .collect();
                let packed = pack_kernargs(obj.metadata_json, &values).unwrap();
                assert_eq!(
                    packed.len() as u64,
                    meta["kernarg_segment_size"].as_u64().unwrap()
                );
                for (i, (p, v)) in k.params.iter().zip(&values).enumerate() {
                    let a = &args[i];
                    let off = a["offset"].as_u64().unwrap() as usize;
                    let size = a["size"].as_u64().unwrap() as usize;
                    match (p.kind, v) {
                        (ParamKind::Buffer { .. }, KernargValue::Ptr(x)) => {
                            assert_eq!(size, 8, "{} arg {i}", k.id);
                            assert_eq!(a["value_kind"], "global_buffer");
                            assert_eq!(packed[off..off + 8], x.to_le_bytes());
                        }
                        (ParamKind::Scalar { .. }, KernargValue::U32(x)) => {
                            assert_eq!(size, 4, "{} arg {i}", k.id);
                            assert_eq!(a["value_kind"], "by_value");
                            assert_eq!(packed[off..off + 4], x.to_le_bytes());
                        }
                        _ => unreachable!(),
                    }
                }
                checked += 1;
            }
        }
        assert!(checked > 0, "no kernel carries an AMDGPU code object");
    }

    #[test]
    fn kernarg_mismatches_are_errors() {
        let json = r#"{"kernels":[{"args":[{"offset":0,"size":8,"value_kind":"global_buffer"},
            {"offset":8,"size":4,"value_kind":"by_value"}],"kernarg_segment_size":12}]}"#;
        let ok = pack_kernargs(json, &[KernargValue::Ptr(1), KernargValue::U32(2)]).unwrap();
        assert_eq!(ok, [1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0]);
        let e = pack_kernargs(json, &[KernargValue::Ptr(1)]).unwrap_err();
        assert!(e.contains("2 explicit kernargs"), "{e}");
        let e = pack_kernargs(json, &[KernargValue::U32(1), KernargValue::U32(2)]).unwrap_err();
        assert!(e.contains("kernarg 0 is global_buffer"), "{e}");
        let short = json.replace("\"kernarg_segment_size\":12", "\"kernarg_segment_size\":10");
        let e = pack_kernargs(&short, &[KernargValue::Ptr(1), KernargValue::U32(2)]).unwrap_err();
        assert!(e.contains("overruns"), "{e}");
        assert!(pack_kernargs("{", &[])
            .unwrap_err()
            .contains("invalid JSON"));
    }
}
