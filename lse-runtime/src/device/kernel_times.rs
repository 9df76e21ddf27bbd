//! Per-kernel launch times, kept only when asked for ([`Device::record_kernel_times`], `lse
//! perplexity --kernel-times`): where a run's time goes, kernel by kernel, for whoever
//! changes one. A GPU launch counts its kernel's own time (the runtime's events around it,
//! without the copies of host slices); a CPU-side launch its wall time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::Device;

/// One kernel's launches and their summed time.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTime {
    /// The kernel id (`gemm.xwt_bf16.v7`).
    pub kernel: &'static str,
    pub launches: u64,
    /// Milliseconds, summed over the launches.
    pub ms: f64,
}

/// The table a device (and its clones) fills while recording is on.
#[derive(Debug, Default)]
pub(super) struct KernelTimes {
    on: AtomicBool,
    table: Mutex<HashMap<&'static str, (u64, f64)>>,
}

impl KernelTimes {
    pub(super) fn on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    pub(super) fn add(&self, kernel: &'static str, ms: f64) {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let entry = table.entry(kernel).or_default();
        entry.0 += 1;
        entry.1 += ms;
    }
}

impl Device {
    /// From now on, every launch on this device (and its clones) adds its time to
    /// [`Device::kernel_times`].
    pub fn record_kernel_times(&self) {
        self.kernel_times_table().on.store(true, Ordering::Relaxed);
    }

    /// The launches recorded since [`Device::record_kernel_times`], by kernel, the largest
    /// total first (ties by id); empty when recording is off.
    pub fn kernel_times(&self) -> Vec<KernelTime> {
        let table = self
            .kernel_times_table()
            .table
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<KernelTime> = table
            .iter()
            .map(|(&kernel, &(launches, ms))| KernelTime {
                kernel,
                launches,
                ms,
            })
            .collect();
        out.sort_by(|a, b| b.ms.total_cmp(&a.ms).then(a.kernel.cmp(b.kernel)));
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::device::{Device, Pool};
    use lse_kernels::topk_pairs::topk_pairs;

    fn launch_topk(dev: &Device) {
        let logits = [0.5f32, 2.0, -1.0, 3.0];
        let (mut ids, mut vals) = ([0u32; 2], [0.0f32; 2]);
        let args = topk_pairs::Args {
            logits: &logits,
            out_ids: &mut ids,
            out_vals: &mut vals,
            vocab: 4,
            k: 2,
        };
        dev.launch([1, 1, 1], args).unwrap();
    }

    #[test]
    fn launches_are_counted_per_kernel_only_while_recording() {
        for pool in [Pool::Cpu, Pool::Host] {
            let dev = Device::open(pool).unwrap();
            launch_topk(&dev);
            assert!(dev.kernel_times().is_empty(), "{pool}: recorded while off");
            dev.record_kernel_times();
            launch_topk(&dev);
            // A clone shares the table.
            launch_topk(&dev.clone());
            let times = dev.kernel_times();
            assert_eq!(times.len(), 1, "{pool}: {times:?}");
            assert_eq!(times[0].kernel, topk_pairs::KERNEL.id);
            assert_eq!(times[0].launches, 2);
            assert!(times[0].ms >= 0.0 && times[0].ms.is_finite());
        }
    }
}
