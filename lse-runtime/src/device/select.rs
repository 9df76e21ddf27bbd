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

    #[test]
    fn only_supported_levels_can_be_forced() {
        assert_eq!(super::override_level("x86-64"), Some("x86-64"));
        assert_eq!(super::override_level("pentium"), None);
        assert_eq!(super::override_level(""), None);
    }
}
