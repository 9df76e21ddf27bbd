//! Parsing `--pool` and opening the device it names.

use std::fmt;
use std::str::FromStr;

use lse_dsl::rt::{HostEntry, KernelDef};

use super::select;

/// A `--pool` value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pool {
    /// Generated Rust code (the CPU reference).
    Cpu,
    /// LLVM-compiled host code.
    Host,
    /// HIP device N.
    Hip(u32),
}

/// A `--pool` value that is not one of `host`, `cpu`, `hip:N`, `hrx:N`.
#[derive(Debug, thiserror::Error)]
#[error("invalid --pool {0:?}: expected host, cpu, hip:N or hrx:N")]
pub struct PoolParseError(String);

impl FromStr for Pool {
    type Err = PoolParseError;

    fn from_str(s: &str) -> Result<Pool, PoolParseError> {
        match s {
            "cpu" => return Ok(Pool::Cpu),
            "host" => return Ok(Pool::Host),
            _ => {}
        }
        let index = s.strip_prefix("hip:").or_else(|| s.strip_prefix("hrx:"));
        match index.map(str::parse::<u32>) {
            Some(Ok(n)) => Ok(Pool::Hip(n)),
            _ => Err(PoolParseError(s.to_string())),
        }
    }
}

impl fmt::Display for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pool::Cpu => write!(f, "cpu"),
            Pool::Host => write!(f, "host"),
            Pool::Hip(n) => write!(f, "hip:{n}"),
        }
    }
}

/// An opened device.
#[derive(Clone, Debug)]
pub struct Device {
    pool: Pool,
    /// For `host`: the x86-64 level whose code this CPU runs.
    host_cpu: Option<&'static str>,
}

/// Why a device could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum DeviceOpenError {
    #[error(
        "--pool {0}: no HIP runtime on this machine (libamdhip64.so could not be loaded); \
         use --pool host or --pool cpu"
    )]
    NoHipRuntime(Pool),
}

impl Device {
    /// Opens the device `pool` names. Never switches devices silently: a device that cannot be
    /// opened is an error.
    pub fn open(pool: Pool) -> Result<Device, DeviceOpenError> {
        match pool {
            Pool::Cpu => Ok(Device {
                pool,
                host_cpu: None,
            }),
            Pool::Host => Ok(Device {
                pool,
                host_cpu: Some(select::best_host_cpu()),
            }),
            Pool::Hip(_) => Err(DeviceOpenError::NoHipRuntime(pool)),
        }
    }

    /// The host device running one particular host code variant (an entry of
    /// `lse_dsl::rt::HOST_CPUS`), for tests that compare every variant this CPU can run.
    /// `None` if this CPU cannot run it.
    pub fn host_variant(cpu: &'static str) -> Option<Device> {
        let order = lse_dsl::rt::HOST_CPUS;
        let best = order.iter().position(|&c| c == select::best_host_cpu())?;
        let wanted = order.iter().position(|&c| c == cpu)?;
        (wanted <= best).then_some(Device {
            pool: Pool::Host,
            host_cpu: Some(order[wanted]),
        })
    }

    pub fn pool(&self) -> Pool {
        self.pool
    }

    /// What `config.device_arch` reports: `cpu`, or `host-<x86-64 level>`.
    pub fn arch(&self) -> String {
        match (self.pool, self.host_cpu) {
            (Pool::Host, Some(cpu)) => format!("host-{cpu}"),
            _ => self.pool.to_string(),
        }
    }

    /// The host entry of `kernel` this device runs, if it is the host device.
    pub(super) fn host_entry(&self, kernel: &KernelDef) -> Option<HostEntry> {
        let cpu = self.host_cpu?;
        kernel.host.iter().find(|v| v.cpu == cpu).map(|v| v.entry)
    }

    /// Whether `kernel` has code for this device (the `--no-cpu-fallback` check).
    pub fn has_kernel(&self, kernel: &KernelDef) -> bool {
        match self.pool {
            Pool::Cpu => true,
            Pool::Host => self.host_entry(kernel).is_some(),
            Pool::Hip(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_names_parse_with_hrx_alias() {
        assert_eq!("host".parse::<Pool>().unwrap(), Pool::Host);
        assert_eq!("cpu".parse::<Pool>().unwrap(), Pool::Cpu);
        assert_eq!("hip:1".parse::<Pool>().unwrap(), Pool::Hip(1));
        assert_eq!("hrx:0".parse::<Pool>().unwrap(), Pool::Hip(0));
    }

    #[test]
    fn bad_pool_names_are_rejected_with_the_accepted_forms() {
        for bad in ["gpu", "hip:", "hip:x", "hrx:-1", ""] {
            let err = bad.parse::<Pool>().unwrap_err().to_string();
            assert!(err.contains("expected host, cpu, hip:N or hrx:N"), "{err}");
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

    #[test]
    fn hip_without_a_runtime_is_a_clear_error() {
        let err = Device::open(Pool::Hip(0)).unwrap_err().to_string();
        assert!(err.contains("no HIP runtime"), "{err}");
    }
}
