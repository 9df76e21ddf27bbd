//! Which host code variant this CPU runs.

/// The environment variable that picks a lower host level than the best one (tests and
/// benchmarks use it to run every level the CPU has), e.g. `LSE_HOST_CPU=x86-64-v3`.
pub const HOST_CPU_ENV: &str = "LSE_HOST_CPU";

/// The best of `lse_dsl::rt::HOST_CPUS` the running CPU supports natively, or the level
/// `LSE_HOST_CPU` names when the CPU supports it (an emulated level only so, by name).
pub fn best_host_cpu() -> &'static str {
    let best = lse_dsl::rt::HOST_CPUS
        .iter()
        .rev()
        .find(|c| lse_dsl::rt::cpu_supports(c) && !lse_dsl::rt::cpu_emulates(c))
        .copied()
        .unwrap_or("x86-64");
    match std::env::var(HOST_CPU_ENV) {
        Ok(v) => override_level(&v).unwrap_or(best),
        Err(_) => best,
    }
}

/// The level that runs the kernels with a bf16 `tile_dot` (`KernelDef::bf16_dot`) on the host
/// device of level `level`, when not `level` itself: `x86-64-v4` (FMA on widened operands) in
/// place of `x86-64-v4-bf16` on an Intel CPU whose FMA multiply-adds per second, measured once
/// here, pass its `vdpbf16ps` ones by a quarter (an Intel Xeon of family 6, model 207: 1.8
/// times). Both levels add a bf16 dot's K pairs in the same order with the same roundings
/// there ([`lse_dsl::rt::intel_cpu`]), so the choice moves speed, not results. `None` with
/// `LSE_HOST_CPU` set: a level asked for runs every kernel.
pub fn bf16_dot_host_cpu(level: &'static str) -> Option<&'static str> {
    static FMA_FASTER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let eligible = level == "x86-64-v4-bf16"
        && std::env::var_os(HOST_CPU_ENV).is_none()
        && lse_dsl::rt::intel_cpu();
    (eligible && *FMA_FASTER.get_or_init(|| peak::fma_over_dpbf16() > 1.25)).then_some("x86-64-v4")
}

/// The multiply-add peaks of one core, by loops of independent 512-bit instructions on zeros.
#[cfg(target_arch = "x86_64")]
mod peak {
    use std::arch::asm;
    use std::time::Instant;

    /// Loop trips per timing, and timings per instruction (the fastest counts).
    const TRIPS: u64 = 20_000;
    const TIMES: usize = 5;

    /// `vfmadd231ps` multiply-adds per second over `vdpbf16ps` ones (16 and 32 per
    /// instruction). Only called where the CPU has AVX512-BF16.
    pub(super) fn fma_over_dpbf16() -> f64 {
        // SAFETY: the caller's level (`x86-64-v4-bf16`) means AVX-512F and AVX512-BF16.
        let (fma, dp) = unsafe { (best(fma_loop), best(dpbf16_loop)) };
        (16.0 / fma) / (32.0 / dp)
    }

    /// The fastest of [`TIMES`] timings of `f`, in seconds.
    unsafe fn best(f: unsafe fn(u64)) -> f64 {
        (0..TIMES)
            .map(|_| {
                let t0 = Instant::now();
                // SAFETY: the caller checked `f`'s target features.
                unsafe { f(TRIPS) };
                t0.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    }

    /// `trips` times 12 independent `$op zmmI, zmm12, zmm13` (I = 0..11) on zeroed registers.
    macro_rules! twelve_per_trip {
        ($trips:expr, $op:literal) => {
            asm!(
                "vpxord zmm12, zmm12, zmm12",
                "vpxord zmm13, zmm13, zmm13",
                "2:",
                concat!($op, " zmm0, zmm12, zmm13"),
                concat!($op, " zmm1, zmm12, zmm13"),
                concat!($op, " zmm2, zmm12, zmm13"),
                concat!($op, " zmm3, zmm12, zmm13"),
                concat!($op, " zmm4, zmm12, zmm13"),
                concat!($op, " zmm5, zmm12, zmm13"),
                concat!($op, " zmm6, zmm12, zmm13"),
                concat!($op, " zmm7, zmm12, zmm13"),
                concat!($op, " zmm8, zmm12, zmm13"),
                concat!($op, " zmm9, zmm12, zmm13"),
                concat!($op, " zmm10, zmm12, zmm13"),
                concat!($op, " zmm11, zmm12, zmm13"),
                "dec {n}",
                "jnz 2b",
                n = inout(reg) $trips => _,
                out("zmm0") _, out("zmm1") _, out("zmm2") _, out("zmm3") _,
                out("zmm4") _, out("zmm5") _, out("zmm6") _, out("zmm7") _,
                out("zmm8") _, out("zmm9") _, out("zmm10") _, out("zmm11") _,
                out("zmm12") _, out("zmm13") _,
                options(nostack, nomem),
            )
        };
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn fma_loop(trips: u64) {
        // SAFETY: registers only; the caller checked AVX-512F.
        unsafe { twelve_per_trip!(trips, "vfmadd231ps") }
    }

    #[target_feature(enable = "avx512f,avx512bf16")]
    unsafe fn dpbf16_loop(trips: u64) {
        // SAFETY: registers only; the caller checked AVX-512F and AVX512-BF16.
        unsafe { twelve_per_trip!(trips, "vdpbf16ps") }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod peak {
    pub(super) fn fma_over_dpbf16() -> f64 {
        0.0
    }
}

/// The level `value` names, if it is one we build and the CPU supports it.
fn override_level(value: &str) -> Option<&'static str> {
    lse_dsl::rt::HOST_CPUS
        .iter()
        .find(|c| **c == value)
        .copied()
        .filter(|c| lse_dsl::rt::cpu_supports(c))
}

/// Checks `LSE_HOST_CPU` when set: `Err` names the value and what is accepted (the CLI
/// refuses to start on it rather than silently running another level).
pub fn check_host_cpu_env() -> Result<(), String> {
    let Ok(v) = std::env::var(HOST_CPU_ENV) else {
        return Ok(());
    };
    if override_level(&v).is_some() {
        return Ok(());
    }
    let supported: Vec<&str> = lse_dsl::rt::HOST_CPUS
        .iter()
        .copied()
        .filter(|c| lse_dsl::rt::cpu_supports(c))
        .collect();
    Err(format!(
        "{HOST_CPU_ENV}={v:?} is not a host level this CPU runs; expected one of {supported:?}"
    ))
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_chosen_variant_is_one_we_build() {
        assert!(lse_dsl::rt::HOST_CPUS.contains(&super::best_host_cpu()));
    }

    /// Only `x86-64-v4-bf16` hands its bf16 dots to another level, and only to `x86-64-v4`,
    /// whose code every CPU with the former runs.
    #[test]
    fn bf16_dots_move_only_from_the_bf16_level_to_x86_64_v4() {
        for level in lse_dsl::rt::HOST_CPUS {
            match super::bf16_dot_host_cpu(level) {
                None => {}
                Some(other) => {
                    assert_eq!((level, other), ("x86-64-v4-bf16", "x86-64-v4"));
                    assert!(lse_dsl::rt::intel_cpu() && lse_dsl::rt::cpu_supports(other));
                }
            }
        }
    }

    #[test]
    fn only_supported_levels_can_be_forced() {
        assert_eq!(super::override_level("x86-64"), Some("x86-64"));
        assert_eq!(super::override_level("pentium"), None);
        assert_eq!(super::override_level(""), None);
    }
}
