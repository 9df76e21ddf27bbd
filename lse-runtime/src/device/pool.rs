//! Parsing `--pool` and opening the device it names.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use lse_dsl::rt::{HostEntry, KernelDef};

use super::cuda::CudaDevice;
use super::gpu::{GpuDevice, OpenError};
use super::hip::HipDevice;
use super::kernel_times::KernelTimes;
use super::scratch::ScratchPool;
use super::select;

/// A `--pool` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pool {
    /// Generated Rust code (the CPU reference).
    Cpu,
    /// LLVM-compiled host code.
    Host,
    /// HIP device N (AMD GPUs).
    Hip(u32),
    /// CUDA device N (NVIDIA GPUs).
    Cuda(u32),
}

/// A `--pool` value that is not one of `host`, `cpu`, `hip:N`, `hrx:N`, `cuda:N`.
#[derive(Debug, thiserror::Error)]
#[error("invalid --pool {0:?}: expected host, cpu, hip:N, hrx:N or cuda:N")]
pub struct PoolParseError(String);

impl FromStr for Pool {
    type Err = PoolParseError;

    fn from_str(s: &str) -> Result<Pool, PoolParseError> {
        match s {
            "cpu" => return Ok(Pool::Cpu),
            "host" => return Ok(Pool::Host),
            _ => {}
        }
        let bad = || PoolParseError(s.to_string());
        let (make, index): (fn(u32) -> Pool, &str) = if let Some(i) = s.strip_prefix("cuda:") {
            (Pool::Cuda, i)
        } else if let Some(i) = s.strip_prefix("hip:").or_else(|| s.strip_prefix("hrx:")) {
            (Pool::Hip, i)
        } else {
            return Err(bad());
        };
        index.parse::<u32>().map(make).map_err(|_| bad())
    }
}

impl fmt::Display for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pool::Cpu => write!(f, "cpu"),
            Pool::Host => write!(f, "host"),
            Pool::Hip(n) => write!(f, "hip:{n}"),
            Pool::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// An opened device.
#[derive(Clone, Debug)]
pub struct Device {
    pool: Pool,
    /// For `host`: the x86-64 level whose code this CPU runs.
    host_cpu: Option<&'static str>,
    /// For `host`: the level that runs the kernels with a bf16 dot, when another one
    /// ([`select::bf16_dot_host_cpu`]).
    bf16_dot_cpu: Option<&'static str>,
    /// For `hip:N` / `cuda:N`: the opened GPU (shared by clones).
    gpu: Option<Arc<GpuDevice>>,
    /// Working buffers kept between ops (shared by clones).
    scratch: ScratchPool,
    /// Per-kernel launch times, when recorded (shared by clones).
    times: Arc<KernelTimes>,
}

/// Why a device could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum DeviceOpenError {
    /// The GPU runtime library did not load (or lacks a function LSE needs).
    #[error("--pool {pool}: no {runtime} runtime on this machine ({detail}); use --pool host or --pool cpu")]
    NoGpuRuntime {
        pool: Pool,
        /// `HIP` or `CUDA`.
        runtime: &'static str,
        /// The sonames tried and why each failed, or the missing symbol.
        detail: String,
    },
    /// The runtime loaded but has no device with that index.
    #[error("--pool {pool}: no {runtime} device {index}: this machine has {count}")]
    NoSuchDevice {
        pool: Pool,
        runtime: &'static str,
        index: u32,
        count: u32,
    },
    /// A runtime call failed while opening the device.
    #[error("--pool {pool}: {message}")]
    Gpu { pool: Pool, message: String },
    /// `LSE_HOST_CPU` names a host level this CPU cannot run.
    #[error("--pool host: {0}")]
    HostLevel(String),
}

impl Device {
    /// Opens the device `pool` names. Never switches devices silently: a device that cannot be
    /// opened is an error.
    pub fn open(pool: Pool) -> Result<Device, DeviceOpenError> {
        match pool {
            Pool::Cpu => Ok(Device {
                pool,
                host_cpu: None,
                bf16_dot_cpu: None,
                gpu: None,
                scratch: ScratchPool::default(),
                times: Default::default(),
            }),
            Pool::Host => {
                select::check_host_cpu_env().map_err(DeviceOpenError::HostLevel)?;
                let level = select::best_host_cpu();
                Ok(Device {
                    pool,
                    host_cpu: Some(level),
                    bf16_dot_cpu: select::bf16_dot_host_cpu(level),
                    gpu: None,
                    scratch: ScratchPool::default(),
                    times: Default::default(),
                })
            }
            Pool::Hip(n) => {
                let dev = HipDevice::open(n).map_err(|e| gpu_open_error(pool, "HIP", n, e))?;
                Ok(Device::gpu(pool, GpuDevice::Hip(dev)))
            }
            Pool::Cuda(n) => {
                let dev = CudaDevice::open(n).map_err(|e| gpu_open_error(pool, "CUDA", n, e))?;
                Ok(Device::gpu(pool, GpuDevice::Cuda(dev)))
            }
        }
    }

    fn gpu(pool: Pool, dev: GpuDevice) -> Device {
        Device {
            pool,
            host_cpu: None,
            bf16_dot_cpu: None,
            gpu: Some(Arc::new(dev)),
            scratch: ScratchPool::default(),
            times: Default::default(),
        }
    }

    /// The opened GPU, on `hip:N` / `cuda:N`.
    pub(super) fn gpu_device(&self) -> Option<&Arc<GpuDevice>> {
        self.gpu.as_ref()
    }

    /// The identity of the opened GPU (shared by clones of this device): device memory
    /// allocated through one handle is only launched on by that handle.
    pub(super) fn gpu_id(&self) -> Option<usize> {
        self.gpu.as_ref().map(|g| Arc::as_ptr(g) as usize)
    }

    /// Milliseconds the last kernel launched on this GPU device ran (timed with the runtime's
    /// events); `None` on CPU-side devices or before the first launch.
    pub fn last_gpu_kernel_ms(&self) -> Option<f32> {
        self.gpu.as_ref()?.last_kernel_ms()
    }

    /// The host device running one particular host code variant (an entry of
    /// `lse_dsl::rt::HOST_CPUS`), for tests that compare every variant this CPU can run.
    /// `None` if this CPU cannot run it, or it is above the level `LSE_HOST_CPU` names; a
    /// level that runs through an emulator (`lse_dsl::rt::cpu_emulates`) is always offered.
    pub fn host_variant(cpu: &'static str) -> Option<Device> {
        let order = lse_dsl::rt::HOST_CPUS;
        let best = order.iter().position(|&c| c == select::best_host_cpu())?;
        let wanted = order.iter().position(|&c| c == cpu)?;
        (wanted <= best || lse_dsl::rt::cpu_emulates(cpu)).then_some(Device {
            pool: Pool::Host,
            host_cpu: Some(order[wanted]),
            bf16_dot_cpu: None,
            gpu: None,
            scratch: ScratchPool::default(),
            times: Default::default(),
        })
    }

    /// The per-kernel times of [`Device::record_kernel_times`].
    pub(super) fn kernel_times_table(&self) -> &KernelTimes {
        &self.times
    }

    /// The buffers [`Device::scratch`] keeps.
    pub(super) fn scratch_pool(&self) -> &ScratchPool {
        &self.scratch
    }

    pub fn pool(&self) -> Pool {
        self.pool
    }

    /// The device named by `--pool`.
    /// What `config.device_arch` reports: `cpu`, `host-<x86-64 level>`, or the GPU
    /// architecture (`gfx1201`, `sm_90`, ...).
    pub fn arch(&self) -> String {
        if let Some(gpu) = &self.gpu {
            return gpu.arch().to_string();
        }
        match (self.pool, self.host_cpu) {
            (Pool::Host, Some(cpu)) => format!("host-{cpu}"),
            _ => self.pool.to_string(),
        }
    }

    /// The host entry of `kernel` this device runs, if it is the host device.
    pub(super) fn host_entry(&self, kernel: &KernelDef) -> Option<HostEntry> {
        let cpu = match self.bf16_dot_cpu {
            Some(cpu) if kernel.bf16_dot => cpu,
            _ => self.host_cpu?,
        };
        kernel.host.iter().find(|v| v.cpu == cpu).map(|v| v.entry)
    }

    /// Whether this device runs bf16 dots on AMX tiles: the host device at the AMX level
    /// (`x86-64-v4-amx`, natively or through the emulator of `lse_dsl::rt::cpu_emulates`).
    pub fn runs_amx(&self) -> bool {
        self.pool == Pool::Host
            && self
                .bf16_dot_cpu
                .or(self.host_cpu)
                .is_some_and(|cpu| cpu.ends_with("-amx"))
    }

    /// Whether `kernel` has code for this device (the `--no-cpu-fallback` check).
    pub fn has_kernel(&self, kernel: &KernelDef) -> bool {
        match self.pool {
            Pool::Cpu => true,
            Pool::Host => self.host_entry(kernel).is_some(),
            Pool::Hip(_) | Pool::Cuda(_) => self.gpu.as_ref().is_some_and(|g| g.has_kernel(kernel)),
        }
    }
}

/// The error for a GPU `runtime` ("HIP", "CUDA") that could not open device `index`.
fn gpu_open_error(pool: Pool, runtime: &'static str, index: u32, e: OpenError) -> DeviceOpenError {
    match e {
        OpenError::NoRuntime(detail) => DeviceOpenError::NoGpuRuntime {
            pool,
            runtime,
            detail,
        },
        OpenError::NoDevice { count } => DeviceOpenError::NoSuchDevice {
            pool,
            runtime,
            index,
            count,
        },
        OpenError::Call(message) => DeviceOpenError::Gpu { pool, message },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{cuda, hip};

    #[test]
    fn pool_names_parse_with_hrx_alias() {
        assert_eq!("host".parse::<Pool>().unwrap(), Pool::Host);
        assert_eq!("cpu".parse::<Pool>().unwrap(), Pool::Cpu);
        assert_eq!("hip:1".parse::<Pool>().unwrap(), Pool::Hip(1));
        assert_eq!("hrx:0".parse::<Pool>().unwrap(), Pool::Hip(0));
        assert_eq!("cuda:0".parse::<Pool>().unwrap(), Pool::Cuda(0));
        assert_eq!("cuda:3".parse::<Pool>().unwrap(), Pool::Cuda(3));
        assert_eq!(Pool::Cuda(2).to_string(), "cuda:2");
        assert_eq!(Pool::Hip(1).to_string(), "hip:1");
    }

    #[test]
    fn bad_pool_names_are_rejected_with_the_accepted_forms() {
        for bad in [
            "gpu", "hip:", "hip:x", "hrx:-1", "", "cuda", "cuda:", "cuda:x", "cuda:-1",
        ] {
            let err = bad.parse::<Pool>().unwrap_err().to_string();
            assert!(
                err.contains("expected host, cpu, hip:N, hrx:N or cuda:N"),
                "{err}"
            );
        }
    }

    #[test]
    fn host_variants_up_to_the_best_one_can_be_opened() {
        let best = Device::open(Pool::Host).unwrap().arch();
        assert_eq!(
            Device::host_variant("x86-64").unwrap().arch(),
            "host-x86-64"
        );
        let best_cpu = best.strip_prefix("host-").unwrap();
        let best_cpu = lse_dsl::rt::HOST_CPUS
            .iter()
            .find(|&&c| c == best_cpu)
            .unwrap();
        assert_eq!(Device::host_variant(best_cpu).unwrap().arch(), best);
        assert!(Device::host_variant("pentium").is_none());
    }

    /// Whether `ldconfig -p` lists a library whose name starts with `prefix`.
    fn installed(prefix: &str) -> bool {
        let out = std::process::Command::new("ldconfig")
            .arg("-p")
            .output()
            .or_else(|_| {
                std::process::Command::new("/sbin/ldconfig")
                    .arg("-p")
                    .output()
            })
            .expect("ldconfig -p runs");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .any(|l| l.trim_start().starts_with(prefix))
    }

    #[test]
    fn hip_without_a_runtime_is_a_clear_error() {
        if installed("libamdhip64.so") {
            eprintln!("skipped: libamdhip64 is installed here");
            return;
        }
        let err = Device::open(Pool::Hip(0)).unwrap_err().to_string();
        assert!(err.contains("--pool hip:0: no HIP runtime"), "{err}");
        for soname in hip::SONAMES {
            assert!(err.contains(soname), "{err}");
        }
    }

    #[test]
    fn cuda_without_a_driver_is_a_clear_error() {
        if installed("libcuda.so") {
            eprintln!("skipped: libcuda is installed here");
            return;
        }
        let err = Device::open(Pool::Cuda(1)).unwrap_err().to_string();
        assert!(err.contains("--pool cuda:1: no CUDA runtime"), "{err}");
        for soname in cuda::SONAMES {
            assert!(err.contains(soname), "{err}");
        }
    }

    #[test]
    fn missing_devices_say_how_many_there_are() {
        let err = DeviceOpenError::NoSuchDevice {
            pool: Pool::Cuda(3),
            runtime: "CUDA",
            index: 3,
            count: 2,
        };
        assert_eq!(
            err.to_string(),
            "--pool cuda:3: no CUDA device 3: this machine has 2"
        );
    }
}
