//! Per-kernel launch times, kept only when asked for ([`Device::record_kernel_times`], `lse
//! perplexity --kernel-times`): where a run's time goes, kernel by kernel and by the scalar
//! arguments of its launches (a GEMM's `m`, `n`, `k`), for whoever changes one. A GPU launch
//! counts its kernel's own time (the runtime's events around it, without the copies of host
//! slices); a CPU-side launch its wall time.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::Device;

/// One kernel's launches and their summed time.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTime {
    /// The kernel id (`gemm.xwt_bf16.v9`).
    pub kernel: &'static str,
    pub launches: u64,
    /// Milliseconds, summed over the launches.
    pub ms: f64,
}

/// The launches of one kernel with one set of scalar arguments, and their summed time.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchTime {
    /// The kernel id (`gemm.xwt_bf16.v9`).
    pub kernel: &'static str,
    /// The scalar arguments, `name=value` in parameter order (`m=512 n=3584 k=1024`).
    pub scalars: String,
    pub launches: u64,
    /// Milliseconds, summed over the launches.
    pub ms: f64,
}

/// Launches and summed milliseconds, by kernel id and scalar arguments.
type Table = HashMap<(&'static str, String), (u64, f64)>;

/// The table a device (and its clones) fills while recording is on.
#[derive(Debug, Default)]
pub(super) struct KernelTimes {
    on: AtomicBool,
    table: Mutex<Table>,
}

impl KernelTimes {
    pub(super) fn on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    pub(super) fn add(&self, kernel: &'static str, scalars: String, ms: f64) {
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let entry = table.entry((kernel, scalars)).or_default();
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
        let mut by_kernel: HashMap<&'static str, (u64, f64)> = HashMap::new();
        for t in self.launch_times() {
            let entry = by_kernel.entry(t.kernel).or_default();
            entry.0 += t.launches;
            entry.1 += t.ms;
        }
        let mut out: Vec<KernelTime> = by_kernel
            .into_iter()
            .map(|(kernel, (launches, ms))| KernelTime {
                kernel,
                launches,
                ms,
            })
            .collect();
        out.sort_by(|a, b| b.ms.total_cmp(&a.ms).then(a.kernel.cmp(b.kernel)));
        out
    }

    /// [`Device::kernel_times`] split by the launches' scalar arguments, the largest total
    /// first (ties by id, then arguments).
    pub fn launch_times(&self) -> Vec<LaunchTime> {
        let table = self
            .kernel_times_table()
            .table
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<LaunchTime> = table
            .iter()
            .map(|((kernel, scalars), &(launches, ms))| LaunchTime {
                kernel,
                scalars: scalars.clone(),
                launches,
                ms,
            })
            .collect();
        out.sort_by(|a, b| {
            (b.ms.total_cmp(&a.ms))
                .then(a.kernel.cmp(b.kernel))
                .then(a.scalars.cmp(&b.scalars))
        });
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
            let launches = dev.launch_times();
            assert_eq!(launches.len(), 1, "{pool}: {launches:?}");
            assert_eq!(launches[0].scalars, "vocab=4 k=2");
            assert_eq!(launches[0].launches, 2);
        }
    }

    /// Launches with other scalar arguments are rows of their own in
    /// [`Device::launch_times`], and [`Device::kernel_times`] is their sum per kernel.
    #[test]
    fn launch_times_split_a_kernel_by_its_scalar_arguments() {
        let dev = Device::open(Pool::Host).unwrap();
        dev.record_kernel_times();
        let logits = [0.5f32, 2.0, -1.0, 3.0, 7.0, -4.0];
        for (vocab, k) in [(6u32, 3u32), (4, 2), (6, 3)] {
            let (mut ids, mut vals) = ([0u32; 3], [0.0f32; 3]);
            let args = topk_pairs::Args {
                logits: &logits[..vocab as usize],
                out_ids: &mut ids[..k as usize],
                out_vals: &mut vals[..k as usize],
                vocab,
                k,
            };
            dev.launch([1, 1, 1], args).unwrap();
        }
        let mut rows: Vec<(String, u64)> = dev
            .launch_times()
            .into_iter()
            .map(|t| (t.scalars, t.launches))
            .collect();
        rows.sort();
        assert_eq!(
            rows,
            [
                ("vocab=4 k=2".to_string(), 1),
                ("vocab=6 k=3".to_string(), 2)
            ]
        );
        let total: f64 = dev.launch_times().iter().map(|t| t.ms).sum();
        let times = dev.kernel_times();
        assert_eq!(times.len(), 1);
        assert_eq!(times[0].launches, 3);
        assert!((times[0].ms - total).abs() <= 1e-9 * total.max(1.0));
    }
}
