//! The closing summary `lse perplexity` prints on stderr: what was scored, llama.cpp's
//! `Final estimate` line, the speed and the configuration, and with `--perplexity-kld` the
//! statistics table `llama-perplexity --kl-divergence` prints, in its layout and formats.

use std::fmt::Write as _;

use lse_runtime::device::{KernelTime, LaunchTime};
use lse_runtime::scoring::{KldReport, KldTable, PerplexityReport, Quantiles};

/// The whole summary: the run, then the KL-divergence table when the run compared.
pub fn summary(report: &PerplexityReport) -> String {
    let mut s = run_summary(report);
    if let (Some(kld), Some(table)) = (&report.kld, &report.kld_statistics) {
        s.push('\n');
        s.push_str(&kld_table(kld, table));
    }
    s
}

/// `--kernel-times`: each kernel's share of the summed time, milliseconds and launches on
/// `device`, the largest first, under a line with the totals.
pub fn kernel_times_table(times: &[KernelTime], device: &str) -> String {
    let total = times.iter().fold(0.0f64, |s, t| s + t.ms);
    let launches: u64 = times.iter().map(|t| t.launches).sum();
    let mut s = format!(
        "kernel times on {device}: {total:.1} ms in {launches} launches of {} kernels\n",
        times.len()
    );
    let _ = writeln!(s, "{:>7} {:>11} {:>9}  kernel", "share", "ms", "launches");
    for t in times {
        time_row(&mut s, total, t.ms, t.launches, t.kernel);
    }
    s
}

/// One row of the `--kernel-times` tables: `ms`' share of `total`, `ms`, `launches`, `what`.
fn time_row(s: &mut String, total: f64, ms: f64, launches: u64, what: &str) {
    let share = if total > 0.0 { 100.0 * ms / total } else { 0.0 };
    let _ = writeln!(s, "{share:>6.1}% {ms:>11.3} {launches:>9}  {what}");
}

/// Rows of `--kernel-times`' second table, the launches split by their scalar arguments.
pub const LAUNCH_ROWS: usize = 15;

/// `--kernel-times`' second table: the `limit` largest of `rows` (a kernel with one set of
/// scalar arguments each, the largest first), each with its share of all rows' time, its
/// milliseconds, launches, kernel and arguments, so a GEMM's time reads by shape.
pub fn launch_times_table(rows: &[LaunchTime], limit: usize) -> String {
    let total = rows.iter().fold(0.0f64, |s, t| s + t.ms);
    let mut s = format!(
        "by scalar arguments, the {} largest of {}:\n",
        rows.len().min(limit),
        rows.len()
    );
    let _ = writeln!(
        s,
        "{:>7} {:>11} {:>9}  kernel  arguments",
        "share", "ms", "launches"
    );
    for t in rows.iter().take(limit) {
        let what = format!("{}  {}", t.kernel, t.scalars);
        time_row(&mut s, total, t.ms, t.launches, &what);
    }
    s
}

/// What was scored, `Final estimate: PPL = … +/- …` (llama.cpp's line and formats), the
/// prefill speed, the device and the attention mode.
pub fn run_summary(r: &PerplexityReport) -> String {
    let unit = match r.method {
        lse_runtime::scoring::Method::Chunks => "chunks",
        lse_runtime::scoring::Method::Sliding => "sliding windows",
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "lse perplexity: {} tokens, {} {unit} of {} (stride {}), {} tokens scored",
        r.tokens, r.windows_scored, r.ctx, r.stride, r.scored_tokens
    );
    let _ = writeln!(
        s,
        "Final estimate: PPL = {:.4} +/- {:.5}",
        r.perplexity, r.perplexity_uncertainty
    );
    let c = &r.config;
    let _ = writeln!(
        s,
        "{} prefill tokens in {:.2} s: {:.1} tokens/s on {}, prefill attention {}, KV cache {}{}",
        r.prefill_tokens,
        r.elapsed_seconds,
        r.prefill_tokens_per_second,
        c.device_arch,
        c.prefill_attention,
        c.kv_cache_dtype,
        match c.gemm_activations {
            Some(a) => format!(", GEMM activations {}", a.as_str()),
            None => String::new(),
        }
    );
    s
}

fn pm(label: &str, value: f64, unc: f64) -> String {
    format!("{label:<30}: {value:10.6} ± {unc:10.6}\n")
}

fn pct_pm(label: &str, value: f64, unc: f64) -> String {
    format!("{label}: {:6.3} ± {:5.3} %\n", 100.0 * value, 100.0 * unc)
}

/// The quantile rows llama.cpp prints, highest first: (label, value); the 75th and 25th
/// only when `quartiles`.
fn quantile_rows(q: &Quantiles, quartiles: bool) -> Vec<(&'static str, f64)> {
    let mut rows = vec![
        ("Maximum", q.max),
        ("99.9%  ", q.p99_9),
        ("99.0%  ", q.p99),
        ("95.0%  ", q.p95),
        ("90.0%  ", q.p90),
    ];
    if quartiles {
        rows.push(("75.0%  ", q.p75));
    }
    rows.push(("Median ", q.median));
    if quartiles {
        rows.push(("25.0%  ", q.p25));
    }
    rows.extend([
        ("10.0%  ", q.p10),
        (" 5.0%  ", q.p5),
        (" 1.0%  ", q.p1),
        (" 0.1%  ", q.p0_1),
        ("Minimum", q.min),
    ]);
    rows
}

/// llama.cpp's three final blocks: perplexity, KL divergence and token probability
/// statistics, headed by the base the run compared against.
pub fn kld_table(kld: &KldReport, t: &KldTable) -> String {
    let mut s = format!(
        "KL divergence against {} (top {} ids per token), {} tokens\n",
        kld.base, kld.top_k, t.tokens
    );
    s.push_str("====== Perplexity statistics ======\n");
    s.push_str(&pm("Mean PPL(Q)", t.mean_ppl, t.mean_ppl_uncertainty));
    s.push_str(&pm(
        "Mean PPL(base)",
        t.base_mean_ppl,
        t.base_mean_ppl_uncertainty,
    ));
    let cor = match t.ln_ppl_correlation {
        Some(c) => format!("{:6.2}%", 100.0 * c),
        None => "   n/a (no spread in the NLLs)".to_string(),
    };
    let _ = writeln!(s, "{:<30}: {cor}", "Cor(ln(PPL(Q)), ln(PPL(base)))");
    s.push_str(&pm(
        "Mean ln(PPL(Q)/PPL(base))",
        t.mean_ln_ratio,
        t.mean_ln_ratio_uncertainty,
    ));
    s.push_str(&pm(
        "Mean PPL(Q)/PPL(base)",
        t.ppl_ratio,
        t.ppl_ratio_uncertainty,
    ));
    s.push_str(&pm(
        "Mean PPL(Q)-PPL(base)",
        t.delta_ppl,
        t.delta_ppl_uncertainty,
    ));

    s.push_str("\n====== KL divergence statistics ======\n");
    let _ = writeln!(
        s,
        "Mean    KLD: {:10.6} ± {:10.6}",
        t.mean_kld, t.mean_kld_uncertainty
    );
    for (label, v) in quantile_rows(&t.kld_quantiles, false) {
        let _ = writeln!(s, "{label} KLD: {v:10.6}");
    }

    s.push_str("\n====== Token probability statistics ======\n");
    s.push_str(&pct_pm(
        "Mean    Δp",
        t.mean_delta_p,
        t.mean_delta_p_uncertainty,
    ));
    for (label, v) in quantile_rows(&t.delta_p_quantiles, true) {
        let _ = writeln!(s, "{label} Δp: {:6.3}%", 100.0 * v);
    }
    s.push_str(&pct_pm(
        "RMS Δp    ",
        t.rms_delta_p,
        t.rms_delta_p_uncertainty,
    ));
    s.push_str(&pct_pm("Same top p", t.same_top, t.same_top_uncertainty));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use lse_runtime::scoring::KldSummary;

    fn quantiles(scale: f64) -> Quantiles {
        Quantiles {
            max: 13.0 * scale,
            p99_9: 12.0 * scale,
            p99: 11.0 * scale,
            p95: 10.0 * scale,
            p90: 9.0 * scale,
            p75: 8.0 * scale,
            median: 7.0 * scale,
            p25: 6.0 * scale,
            p10: 5.0 * scale,
            p5: 4.0 * scale,
            p1: 3.0 * scale,
            p0_1: 2.0 * scale,
            min: scale,
        }
    }

    #[test]
    fn kernel_times_table_gives_shares_and_totals() {
        let times = [
            KernelTime {
                kernel: "gemm.xwt_bf16.v9",
                launches: 3,
                ms: 7.5,
            },
            KernelTime {
                kernel: "norm.rms.v1",
                launches: 5,
                ms: 2.5,
            },
        ];
        let t = kernel_times_table(&times, "sm_90");
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(
            lines[0],
            "kernel times on sm_90: 10.0 ms in 8 launches of 2 kernels"
        );
        assert_eq!(lines[2], "  75.0%       7.500         3  gemm.xwt_bf16.v9");
        assert_eq!(lines[3], "  25.0%       2.500         5  norm.rms.v1");
        // Nothing recorded: totals of zero, no rows, no division by zero.
        let empty = kernel_times_table(&[], "host-x86-64-v4");
        assert_eq!(empty.lines().count(), 2);
        assert!(empty.starts_with("kernel times on host-x86-64-v4: 0.0 ms in 0 launches"));
    }

    #[test]
    fn launch_times_table_keeps_the_largest_rows_with_their_arguments() {
        let row = |kernel, scalars: &str, launches, ms| LaunchTime {
            kernel,
            scalars: scalars.to_string(),
            launches,
            ms,
        };
        let rows = [
            row(
                "gemm.xwt_exact_bf16.v8",
                "m=512 n=3584 k=1024 accumulate=0",
                4,
                6.0,
            ),
            row(
                "gemm.xwt_exact_bf16.v8",
                "m=512 n=16 k=1024 accumulate=0",
                8,
                3.0,
            ),
            row("norm.rms.v1", "d=1024 eps=0.000001", 2, 1.0),
        ];
        let t = launch_times_table(&rows, 2);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "by scalar arguments, the 2 largest of 3:");
        assert_eq!(
            lines[2],
            "  60.0%       6.000         4  gemm.xwt_exact_bf16.v8  m=512 n=3584 k=1024 accumulate=0"
        );
        assert_eq!(
            lines[3],
            "  30.0%       3.000         8  gemm.xwt_exact_bf16.v8  m=512 n=16 k=1024 accumulate=0"
        );
        assert_eq!(lines.len(), 4);
        let empty = launch_times_table(&[], LAUNCH_ROWS);
        assert_eq!(empty.lines().count(), 2);
        assert!(empty.starts_with("by scalar arguments, the 0 largest of 0:"));
    }

    #[test]
    fn kld_table_has_llama_cpp_rows_and_formats() {
        let t = KldTable {
            tokens: 1020,
            mean_ppl: 216.128712,
            mean_ppl_uncertainty: 16.424631,
            base_mean_ppl: 215.5,
            base_mean_ppl_uncertainty: 16.4,
            ln_ppl_correlation: Some(0.99871),
            mean_ln_ratio: 0.002912,
            mean_ln_ratio_uncertainty: 0.000151,
            ppl_ratio: 1.002916,
            ppl_ratio_uncertainty: 0.000151,
            delta_ppl: 0.628712,
            delta_ppl_uncertainty: 0.0321,
            mean_kld: 0.001234,
            mean_kld_uncertainty: 0.000012,
            kld_quantiles: quantiles(0.001),
            mean_delta_p: -0.000123,
            mean_delta_p_uncertainty: 0.000041,
            rms_delta_p: 0.0123,
            rms_delta_p_uncertainty: 0.0004,
            delta_p_quantiles: quantiles(0.01),
            same_top: 0.98,
            same_top_uncertainty: 0.0044,
        };
        let k = KldReport::new("f32.kld", 32, 1020, &KldSummary::default());
        let s = kld_table(&k, &t);
        for line in [
            "KL divergence against f32.kld (top 32 ids per token), 1020 tokens",
            "Mean PPL(Q)                   : 216.128712 ±  16.424631",
            "Cor(ln(PPL(Q)), ln(PPL(base))):  99.87%",
            "Mean PPL(Q)-PPL(base)         :   0.628712 ±   0.032100",
            "Mean    KLD:   0.001234 ±   0.000012",
            "Maximum KLD:   0.013000",
            "99.9%   KLD:   0.012000",
            "Median  KLD:   0.007000",
            " 0.1%   KLD:   0.002000",
            "Minimum KLD:   0.001000",
            "Mean    Δp: -0.012 ± 0.004 %",
            "75.0%   Δp:  8.000%",
            "25.0%   Δp:  6.000%",
            "Minimum Δp:  1.000%",
            "RMS Δp    :  1.230 ± 0.040 %",
            "Same top p: 98.000 ± 0.440 %",
        ] {
            assert!(s.lines().any(|l| l == line), "no line {line:?} in\n{s}");
        }
        // The KLD block has no quartiles, the Δp block has both.
        assert!(!s.contains("75.0%   KLD"));
        assert_eq!(s.matches(" Δp: ").count(), 14);
        let none = KldTable {
            ln_ppl_correlation: None,
            ..t
        };
        assert!(kld_table(&k, &none).contains("Cor(ln(PPL(Q)), ln(PPL(base))):    n/a"));
    }
}
