//! The differential harness every LOOM kernel's tests use (in the spirit of ggml's
//! test-backend-ops): each case runs on the `cpu` device (generated Rust), on every `host`
//! device variant this CPU supports (LLVM-compiled code) and through an independent plain-Rust
//! reference, and the three must agree: integers exactly, floats within the case's stated
//! tolerance. A kernel joins by implementing [`Case`] and passing its cases to [`run_cases`].

use lse_runtime::device::{Device, Pool};

/// One output of a case.
#[derive(Debug)]
pub enum Out {
    F32(&'static str, Vec<f32>),
    U32(&'static str, Vec<u32>),
}

/// How close floats must be: `|a - b| <= abs + rel * |b|`; NaN must match NaN and ±inf must
/// match exactly.
#[derive(Clone, Copy, Debug)]
pub struct Tol {
    pub abs: f32,
    pub rel: f32,
}

/// Generated Rust and LLVM host code follow the same operation order, so they must agree to
/// the bit; this is the tolerance between those two.
pub const SAME_ORDER: Tol = Tol { abs: 0.0, rel: 0.0 };

/// One differential case: a kernel's inputs, how to run it on a device and its plain-Rust
/// reference. The CPU tests ([`run_cases`]) and the GPU test (against the `cpu` device) run the
/// same cases.
pub trait Case {
    fn name(&self) -> String;
    fn run(&self, dev: &Device) -> Vec<Out>;
    fn reference(&self) -> Vec<Out>;
    /// Tolerance of a device against the reference.
    fn tolerance(&self) -> Tol;
    /// Compares two output lists of this case (a device's against the reference's or another
    /// device's); a case whose outputs may legitimately differ somewhere (a decision within
    /// rounding of its threshold) narrows the comparison here.
    fn compare(&self, got: &[Out], want: &[Out], tol: Tol) -> Result<(), String> {
        compare(got, want, tol)
    }
    /// Whether every host level must equal the generated Rust bit for bit. Kernels that use
    /// `tile_dot` say no: its summation order belongs to the target (LOOM.md), so their
    /// host levels are held to the case's tolerance against the generated Rust instead.
    fn same_order(&self) -> bool {
        true
    }
}

/// Deterministic inputs (SplitMix64).
pub struct Rng(pub u64);

impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [-scale, scale).
    pub fn f32(&mut self, scale: f32) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
    }

    /// `n` values uniform in [-scale, scale).
    pub fn f32s(&mut self, n: usize, scale: f32) -> Vec<f32> {
        (0..n).map(|_| self.f32(scale)).collect()
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

pub fn close(a: f32, b: f32, tol: Tol) -> bool {
    if a.is_nan() || b.is_nan() {
        return a.is_nan() && b.is_nan();
    }
    if a.is_infinite() || b.is_infinite() {
        return a == b;
    }
    (a - b).abs() <= tol.abs + tol.rel * b.abs()
}

/// Compares two output lists; returns a description of the first difference.
pub fn compare(got: &[Out], want: &[Out], tol: Tol) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("{} outputs, expected {}", got.len(), want.len()));
    }
    for (g, w) in got.iter().zip(want) {
        match (g, w) {
            (Out::U32(name, g), Out::U32(_, w)) => {
                if g.len() != w.len() {
                    return Err(format!("{name}: {} values, expected {}", g.len(), w.len()));
                }
                if let Some(i) = (0..g.len()).find(|&i| g[i] != w[i]) {
                    return Err(format!("{name}[{i}] = {}, expected {}", g[i], w[i]));
                }
            }
            (Out::F32(name, g), Out::F32(_, w)) => {
                if g.len() != w.len() {
                    return Err(format!("{name}: {} values, expected {}", g.len(), w.len()));
                }
                if let Some(i) = (0..g.len()).find(|&i| !close(g[i], w[i], tol)) {
                    return Err(format!(
                        "{name}[{i}] = {:e}, expected {:e} (tolerance {tol:?})",
                        g[i], w[i]
                    ));
                }
            }
            _ => return Err("output kinds differ".into()),
        }
    }
    Ok(())
}

/// Every host code variant this CPU can run, not only the one the runtime picks; the AMX
/// level through [`lse_amx_emu`] on CPUs with AVX512-BF16 and no AMX.
pub fn host_variants() -> Vec<Device> {
    lse_amx_emu::install();
    lse_dsl::rt::HOST_CPUS
        .iter()
        .filter_map(|cpu| Device::host_variant(cpu))
        .collect()
}

/// Runs every case on the `cpu` device, on every host variant and through its reference, and
/// panics with every disagreement found.
pub fn run_cases(cases: Vec<Box<dyn Case>>) {
    let cpu = Device::open(Pool::Cpu).unwrap();
    let hosts = host_variants();
    assert!(!hosts.is_empty());
    let mut failures = Vec::new();
    for case in cases {
        let on_cpu = case.run(&cpu);
        let reference = case.reference();
        if let Err(e) = case.compare(&on_cpu, &reference, case.tolerance()) {
            failures.push(format!("{}: cpu vs reference: {e}", case.name()));
        }
        for host in &hosts {
            let on_host = case.run(host);
            let checks = [
                (
                    "vs reference",
                    case.compare(&on_host, &reference, case.tolerance()),
                ),
                (
                    "vs cpu",
                    case.compare(
                        &on_host,
                        &on_cpu,
                        if case.same_order() {
                            SAME_ORDER
                        } else {
                            case.tolerance()
                        },
                    ),
                ),
            ];
            for (what, result) in checks {
                if let Err(e) = result {
                    failures.push(format!("{}: {} {what}: {e}", case.name(), host.arch()));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
