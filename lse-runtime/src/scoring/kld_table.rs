//! The full table of statistics `llama-perplexity --kl-divergence` prints at the end of a
//! run ("Perplexity statistics", "KL divergence statistics", "Token probability
//! statistics"), computed with llama.cpp's formulas from a [`KldAccumulator`]. The JSON
//! carries it as the added `kld_statistics` object; the brief's `kld` block is unchanged.

use serde::{Deserialize, Serialize};

use super::stats::{covariance_of_means, mean_and_uncertainty, percentile, KldAccumulator};

/// The quantiles llama.cpp prints for per-token KLD and Δp: the maximum, the 99.9, 99, 95,
/// 90, 75 percentiles, the median, the 25, 10, 5, 1, 0.1 percentiles and the minimum.
/// (llama.cpp prints the 75th and 25th for Δp only; the JSON has them for both.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    /// Largest value.
    pub max: f64,
    /// 99.9th percentile.
    #[serde(rename = "p99.9")]
    pub p99_9: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 75th percentile.
    pub p75: f64,
    /// Median: the mean of the two middle values when the count is even.
    pub median: f64,
    /// 25th percentile.
    pub p25: f64,
    /// 10th percentile.
    pub p10: f64,
    /// 5th percentile.
    pub p5: f64,
    /// 1st percentile.
    pub p1: f64,
    /// 0.1th percentile.
    #[serde(rename = "p0.1")]
    pub p0_1: f64,
    /// Smallest value.
    pub min: f64,
}

/// llama.cpp's median of sorted values: the middle one, or the mean of the two middle ones
/// for an even count; 0 when empty.
pub fn median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    match n {
        0 => 0.0,
        _ if n % 2 == 1 => sorted[n / 2],
        _ => 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]),
    }
}

impl Quantiles {
    /// The quantiles of `sorted` (ascending) with [`percentile`]'s interpolation; all zero
    /// when empty.
    pub fn of_sorted(sorted: &[f64]) -> Quantiles {
        let p = |f| percentile(sorted, f);
        Quantiles {
            max: sorted.last().copied().unwrap_or(0.0),
            p99_9: p(0.999),
            p99: p(0.99),
            p95: p(0.95),
            p90: p(0.90),
            p75: p(0.75),
            median: median(sorted),
            p25: p(0.25),
            p10: p(0.10),
            p5: p(0.05),
            p1: p(0.01),
            p0_1: p(0.001),
            min: sorted.first().copied().unwrap_or(0.0),
        }
    }
}

/// Every statistic of llama.cpp's final KL-divergence report. Probabilities and Δp are
/// fractions (llama.cpp prints them ×100 as percentages).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KldTable {
    /// Tokens compared (N).
    pub tokens: u64,
    /// `Mean PPL(Q)`: exp(μ), μ the mean NLL of this run.
    pub mean_ppl: f64,
    /// Its ±: exp(μ)·σ, σ the standard error of μ.
    pub mean_ppl_uncertainty: f64,
    /// `Mean PPL(base)`: exp(μ_b).
    pub base_mean_ppl: f64,
    /// Its ±: exp(μ_b)·σ_b.
    pub base_mean_ppl_uncertainty: f64,
    /// `Cor(ln(PPL(Q)), ln(PPL(base)))` as a fraction: c/(σ·σ_b), c the covariance of the
    /// two means; `None` (JSON null) when σ or σ_b is 0.
    pub ln_ppl_correlation: Option<f64>,
    /// `Mean ln(PPL(Q)/PPL(base))`: μ − μ_b.
    pub mean_ln_ratio: f64,
    /// Its ±: sqrt(σ² + σ_b² − 2c).
    pub mean_ln_ratio_uncertainty: f64,
    /// `Mean PPL(Q)/PPL(base)`: r = exp(μ − μ_b).
    pub ppl_ratio: f64,
    /// Its ±: r·sqrt(σ² + σ_b² − 2c).
    pub ppl_ratio_uncertainty: f64,
    /// `Mean PPL(Q)-PPL(base)`: exp(μ) − exp(μ_b).
    pub delta_ppl: f64,
    /// Its ±: sqrt(u² + u_b² − 2·exp(μ)·exp(μ_b)·c), u and u_b the two PPL ±.
    pub delta_ppl_uncertainty: f64,
    /// `Mean KLD`.
    pub mean_kld: f64,
    /// Its ± (standard error of the mean).
    pub mean_kld_uncertainty: f64,
    /// `Maximum KLD` down to `Minimum KLD`.
    pub kld_quantiles: Quantiles,
    /// `Mean Δp`.
    pub mean_delta_p: f64,
    /// Its ± (standard error of the mean).
    pub mean_delta_p_uncertainty: f64,
    /// `RMS Δp`: R = sqrt(ΣΔp²/N).
    pub rms_delta_p: f64,
    /// Its ±: (0.5/R)·sqrt((ΣΔp⁴/N − (ΣΔp²/N)²)/(N − 1)).
    pub rms_delta_p_uncertainty: f64,
    /// `Maximum Δp` down to `Minimum Δp` (signed Δp).
    pub delta_p_quantiles: Quantiles,
    /// `Same top p`: s, the fraction of tokens whose top-1 id agrees.
    pub same_top: f64,
    /// Its ±: sqrt(s(1 − s)/(N − 1)).
    pub same_top_uncertainty: f64,
}

fn sorted(values: &[f64]) -> Vec<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    v
}

impl KldAccumulator {
    /// llama.cpp's full table over every token added so far (all zero when empty).
    pub fn table(&self) -> KldTable {
        let n = self.count;
        if n == 0 {
            return KldTable::default();
        }
        let nf = n as f64;
        let (mu, sigma) = mean_and_uncertainty(self.sum_nll, self.sum_nll_sq, n);
        let (mu_b, sigma_b) = mean_and_uncertainty(self.sum_base_nll, self.sum_base_nll_sq, n);
        let cov = covariance_of_means(self.sum_nll, self.sum_base_nll, self.sum_nll_base_nll, n);
        let (ppl, ppl_b) = (mu.exp(), mu_b.exp());
        let (u, u_b) = (ppl * sigma, ppl_b * sigma_b);
        let ln_ratio_unc = (sigma * sigma + sigma_b * sigma_b - 2.0 * cov)
            .max(0.0)
            .sqrt();
        let ratio = (mu - mu_b).exp();
        let (mean_kld, mean_kld_uncertainty) =
            mean_and_uncertainty(self.sum_kld, self.sum_kld_sq, n);
        let (mean_delta_p, mean_delta_p_uncertainty) =
            mean_and_uncertainty(self.sum_dp, self.sum_dp_sq, n);
        let mean_dp_sq = self.sum_dp_sq / nf;
        let rms = mean_dp_sq.sqrt();
        let rms_unc = if rms > 0.0 && n > 1 {
            0.5 / rms * ((self.sum_dp4 / nf - mean_dp_sq * mean_dp_sq).max(0.0) / (nf - 1.0)).sqrt()
        } else {
            0.0
        };
        let same = self.same_top as f64 / nf;
        let same_unc = if n > 1 {
            (same * (1.0 - same) / (nf - 1.0)).sqrt()
        } else {
            0.0
        };
        KldTable {
            tokens: n,
            mean_ppl: ppl,
            mean_ppl_uncertainty: u,
            base_mean_ppl: ppl_b,
            base_mean_ppl_uncertainty: u_b,
            ln_ppl_correlation: (sigma > 0.0 && sigma_b > 0.0).then(|| cov / (sigma * sigma_b)),
            mean_ln_ratio: mu - mu_b,
            mean_ln_ratio_uncertainty: ln_ratio_unc,
            ppl_ratio: ratio,
            ppl_ratio_uncertainty: ratio * ln_ratio_unc,
            delta_ppl: ppl - ppl_b,
            delta_ppl_uncertainty: (u * u + u_b * u_b - 2.0 * ppl * ppl_b * cov)
                .max(0.0)
                .sqrt(),
            mean_kld,
            mean_kld_uncertainty,
            kld_quantiles: Quantiles::of_sorted(&sorted(&self.klds)),
            mean_delta_p,
            mean_delta_p_uncertainty,
            rms_delta_p: rms,
            rms_delta_p_uncertainty: rms_unc,
            delta_p_quantiles: Quantiles::of_sorted(&sorted(&self.delta_ps)),
            same_top: same,
            same_top_uncertainty: same_unc,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scoring::RowComparison;

    fn close(got: f64, want: f64, what: &str) {
        let tol = 1e-10 * want.abs().max(1e-6);
        assert!(
            (got - want).abs() <= tol,
            "{what}: {got} vs independent {want}"
        );
    }

    /// 157 compared tokens (odd, over llama.cpp's 100-token minimum) from a fixed generator:
    /// correlated NLLs, KLDs over four decades, signed Δp, top-1 agreement about 70%.
    fn rows() -> Vec<RowComparison> {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64
        };
        (0..157)
            .map(|_| {
                let base_nll = 6.0 * next();
                let nll = base_nll + 0.4 * (next() - 0.45);
                RowComparison {
                    nll,
                    base_nll,
                    kld: 10f64.powf(-5.0 + 4.0 * next()),
                    delta_p: (-nll).exp() - (-base_nll).exp(),
                    same_top: next() < 0.7,
                    base_top_mass: 0.9,
                }
            })
            .collect()
    }

    fn mean(v: &[f64]) -> f64 {
        v.iter().sum::<f64>() / v.len() as f64
    }

    /// Two-pass standard error of the mean: sqrt(Σ(x − x̄)² / (N(N − 1))).
    fn std_err(v: &[f64]) -> f64 {
        let m = mean(v);
        let n = v.len() as f64;
        (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n * (n - 1.0))).sqrt()
    }

    /// numpy's default ("linear") quantile, written from its definition.
    fn quantile(v: &[f64], q: f64) -> f64 {
        let mut s = v.to_vec();
        s.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let h = (s.len() - 1) as f64 * q;
        let (lo, hi) = (h.floor() as usize, h.ceil() as usize);
        s[lo] + (h - h.floor()) * (s[hi] - s[lo])
    }

    fn check_quantiles(got: &Quantiles, v: &[f64], what: &str) {
        let pairs = [
            (got.p99_9, 0.999),
            (got.p99, 0.99),
            (got.p95, 0.95),
            (got.p90, 0.90),
            (got.p75, 0.75),
            (got.median, 0.5),
            (got.p25, 0.25),
            (got.p10, 0.10),
            (got.p5, 0.05),
            (got.p1, 0.01),
            (got.p0_1, 0.001),
        ];
        for (g, q) in pairs {
            close(g, quantile(v, q), &format!("{what} quantile {q}"));
        }
        close(
            got.max,
            v.iter().cloned().fold(f64::MIN, f64::max),
            &format!("{what} max"),
        );
        close(
            got.min,
            v.iter().cloned().fold(f64::MAX, f64::min),
            &format!("{what} min"),
        );
    }

    #[test]
    fn every_statistic_matches_an_independent_computation() {
        let rows = rows();
        let mut acc = KldAccumulator::default();
        rows.iter().for_each(|r| acc.add(r));
        let t = acc.table();
        let col = |f: fn(&RowComparison) -> f64| rows.iter().map(f).collect::<Vec<f64>>();
        let (nll, base) = (col(|r| r.nll), col(|r| r.base_nll));
        let (kld, dp) = (col(|r| r.kld), col(|r| r.delta_p));
        let n = rows.len() as f64;
        assert_eq!(t.tokens, 157);

        // Perplexity statistics.
        let (mu, mu_b) = (mean(&nll), mean(&base));
        let (s, s_b) = (std_err(&nll), std_err(&base));
        let cov = nll
            .iter()
            .zip(&base)
            .map(|(a, b)| (a - mu) * (b - mu_b))
            .sum::<f64>()
            / (n * (n - 1.0));
        close(t.mean_ppl, mu.exp(), "PPL(Q)");
        close(t.mean_ppl_uncertainty, mu.exp() * s, "PPL(Q) ±");
        close(t.base_mean_ppl, mu_b.exp(), "PPL(base)");
        close(t.base_mean_ppl_uncertainty, mu_b.exp() * s_b, "PPL(base) ±");
        // Pearson's r of the per-token NLLs equals the correlation of the two means.
        let pearson = nll
            .iter()
            .zip(&base)
            .map(|(a, b)| (a - mu) * (b - mu_b))
            .sum::<f64>()
            / (nll.iter().map(|a| (a - mu).powi(2)).sum::<f64>()
                * base.iter().map(|b| (b - mu_b).powi(2)).sum::<f64>())
            .sqrt();
        close(t.ln_ppl_correlation.unwrap(), pearson, "Cor");
        let diff: Vec<f64> = nll.iter().zip(&base).map(|(a, b)| a - b).collect();
        close(t.mean_ln_ratio, mean(&diff), "ln ratio");
        // The ± of the mean difference is the standard error of the per-token differences.
        close(t.mean_ln_ratio_uncertainty, std_err(&diff), "ln ratio ±");
        close(t.ppl_ratio, mean(&diff).exp(), "PPL ratio");
        close(
            t.ppl_ratio_uncertainty,
            mean(&diff).exp() * std_err(&diff),
            "PPL ratio ±",
        );
        close(t.delta_ppl, mu.exp() - mu_b.exp(), "ΔPPL");
        let (u, u_b) = (mu.exp() * s, mu_b.exp() * s_b);
        close(
            t.delta_ppl_uncertainty,
            (u * u + u_b * u_b - 2.0 * mu.exp() * mu_b.exp() * cov).sqrt(),
            "ΔPPL ±",
        );

        // KL divergence statistics.
        close(t.mean_kld, mean(&kld), "mean KLD");
        close(t.mean_kld_uncertainty, std_err(&kld), "mean KLD ±");
        check_quantiles(&t.kld_quantiles, &kld, "KLD");

        // Token probability statistics.
        close(t.mean_delta_p, mean(&dp), "mean Δp");
        close(t.mean_delta_p_uncertainty, std_err(&dp), "mean Δp ±");
        check_quantiles(&t.delta_p_quantiles, &dp, "Δp");
        let sq: Vec<f64> = dp.iter().map(|d| d * d).collect();
        let rms = mean(&sq).sqrt();
        close(t.rms_delta_p, rms, "RMS Δp");
        // Delta method: d sqrt(m)/dm = 1/(2 sqrt(m)), times the standard error of mean(Δp²).
        close(
            t.rms_delta_p_uncertainty,
            std_err(&sq) / (2.0 * rms),
            "RMS Δp ±",
        );
        let same = rows.iter().filter(|r| r.same_top).count() as f64 / n;
        let same_v: Vec<f64> = rows
            .iter()
            .map(|r| f64::from(u8::from(r.same_top)))
            .collect();
        close(t.same_top, same, "same top");
        close(t.same_top_uncertainty, std_err(&same_v), "same top ±");
    }

    #[test]
    fn hand_values_on_four_tokens() {
        let mut acc = KldAccumulator::default();
        for (kld, dp, same) in [
            (0.4, -0.1, true),
            (0.1, 0.2, false),
            (0.3, 0.0, true),
            (0.2, 0.3, true),
        ] {
            acc.add(&RowComparison {
                nll: 1.0,
                base_nll: 1.0,
                kld,
                delta_p: dp,
                same_top: same,
                base_top_mass: 1.0,
            });
        }
        let t = acc.table();
        // Sorted KLD 0.1 0.2 0.3 0.4: even count, median (0.2 + 0.3)/2; p90 at 0.9·3 = 2.7.
        close(t.kld_quantiles.median, 0.25, "median");
        close(t.kld_quantiles.p90, 0.3 + 0.7 * 0.1, "p90");
        close(t.kld_quantiles.max, 0.4, "max");
        close(t.kld_quantiles.min, 0.1, "min");
        // Signed Δp: −0.1 0 0.2 0.3.
        close(t.delta_p_quantiles.min, -0.1, "Δp min");
        close(t.delta_p_quantiles.median, 0.1, "Δp median");
        close(t.same_top, 0.75, "same top");
        close(
            t.same_top_uncertainty,
            (0.75f64 * 0.25 / 3.0).sqrt(),
            "same top ±",
        );
        // Identical NLLs: no spread, so no correlation, zero ratio ±.
        assert_eq!(t.ln_ppl_correlation, None);
        assert_eq!(t.mean_ln_ratio, 0.0);
        assert_eq!(t.ppl_ratio, 1.0);
        assert_eq!(t.mean_ln_ratio_uncertainty, 0.0);
        // n ≤ 10: llama.cpp's mean_and_uncertainty gives no ±.
        assert_eq!(t.mean_kld_uncertainty, 0.0);
    }

    #[test]
    fn empty_and_odd_medians() {
        assert_eq!(KldAccumulator::default().table(), KldTable::default());
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[1.0, 5.0, 9.0]), 5.0);
        assert_eq!(median(&[1.0, 5.0, 9.0, 11.0]), 7.0);
    }

    #[test]
    fn json_names_the_quantiles_like_llama_cpp() {
        let v = serde_json::to_value(Quantiles::of_sorted(&[1.0, 2.0])).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "max", "median", "min", "p0.1", "p1", "p10", "p25", "p5", "p75", "p90", "p95",
                "p99", "p99.9"
            ]
        );
    }
}
