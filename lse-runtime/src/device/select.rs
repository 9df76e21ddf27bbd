//! Which host code variant this CPU runs.

/// The best of `lse_dsl::rt::HOST_CPUS` the running CPU supports.
pub fn best_host_cpu() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        let v4 = std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512cd")
            && std::arch::is_x86_feature_detected!("avx512dq")
            && std::arch::is_x86_feature_detected!("avx512vl");
        let v3 = std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && std::arch::is_x86_feature_detected!("bmi1")
            && std::arch::is_x86_feature_detected!("bmi2")
            && std::arch::is_x86_feature_detected!("lzcnt")
            && std::arch::is_x86_feature_detected!("movbe")
            && std::arch::is_x86_feature_detected!("f16c");
        if v3 && v4 {
            return "x86-64-v4";
        }
        if v3 {
            return "x86-64-v3";
        }
    }
    "x86-64"
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_chosen_variant_is_one_we_build() {
        assert!(lse_dsl::rt::HOST_CPUS.contains(&super::best_host_cpu()));
    }
}
