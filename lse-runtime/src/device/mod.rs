//! Devices that run LOOM kernels, chosen by `--pool`.
//!
//! - `cpu`: the generated Rust code of each kernel (the CPU reference; bounds-checked).
//! - `host`: the same kernels compiled by LLVM at build time for this CPU (the device CI runs).
//! - `hip:N` (alias `hrx:N`): AMD GPU N through the HIP runtime (`libamdhip64`), running the
//!   kernels' AMDGPU code objects.
//! - `cuda:N`: NVIDIA GPU N through the CUDA driver (`libcuda.so.1`), running the kernels' PTX.
//!
//! The GPU runtimes are loaded at run time: on machines without them, opening a GPU device is
//! a clear error and the CPU-side devices still work.
//!
//! On the CPU-side devices, kernel buffers are ordinary host memory and workgroups are spread
//! over all cores: each thread runs a contiguous range of linearised workgroup ids, which is
//! exactly the unit the kernels' CPU entry points take.
//!
//! A launch ([`Device::launch`]) takes a kernel's generated `Args` (`#[loom::kernel]`), whose
//! buffer fields take host slices or views of device buffers ([`DeviceBuf`]),
//! mixed freely in one launch: on a GPU, device buffers stay in device memory between
//! launches and host slices are copied in (and back, when writable) around each launch.

mod buffer;
mod cuda;
mod gpu;
mod hip;
mod kernel_times;
mod launch;
mod pool;
mod scratch;
mod select;

pub use buffer::{BufError, DevSlice, DevSliceMut, DeviceBuf};
pub use kernel_times::{KernelTime, LaunchTime};
pub use launch::{Arg, LaunchError};
pub use lse_dsl::rt::Elem;
pub use pool::{Device, DeviceOpenError, Pool, PoolParseError};
pub use scratch::Scratch;

/// The x86-64 level whose host code this CPU runs (`x86-64`, `x86-64-v3` or `x86-64-v4`).
pub fn host_cpu() -> &'static str {
    select::best_host_cpu()
}

/// The CPU-side devices: generated Rust and every host code variant this CPU runs (the unit
/// tests' devices).
#[cfg(test)]
pub(crate) fn cpu_side_devices() -> Vec<Device> {
    let mut devs = vec![Device::open(Pool::Cpu).unwrap()];
    devs.extend(
        lse_dsl::rt::HOST_CPUS
            .iter()
            .filter_map(|c| Device::host_variant(c)),
    );
    devs
}

/// Deterministic values in [-scale, scale) from a 64-bit linear congruential generator: the
/// unit tests' inputs, the same on every run.
#[cfg(test)]
pub(crate) fn test_values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}
