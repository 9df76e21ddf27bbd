//! Scoring statistics in f64: perplexity with llama.cpp's "±", the KL-divergence comparison
//! statistics with llama.cpp's uncertainty formulas, and the per-row arithmetic that turns
//! one row's device results (max, sum of exponentials, picked logits, argmax) into
//! log-likelihoods and a coarsened KL divergence.

use serde::{Deserialize, Serialize};

/// Floor for the comparison run's probability outside the base's top-k ids.
///
/// When the current run puts (numerically) all its mass on those ids, `1 - Σq` rounds to
/// zero or below; f32 device sums carry about 1e-7 relative error, so anything under this
/// floor is rounding noise and would otherwise make the rest term infinite.
pub const REST_MASS_FLOOR: f64 = 1e-9;

/// How far below 1 a row's Σ exp(logit − max) may round (approximate device `exp`, merged
/// partial sums) before the row is refused.
pub const SUM_EXP_TOLERANCE: f64 = 1e-4;

/// Why one row's device results cannot be scored.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RowError {
    /// A device value is NaN or infinite.
    #[error("row {what} is not finite ({value}): the device returned NaN or infinity")]
    NonFinite {
        /// Which value ("max logit", "sum of exponentials", ...).
        what: &'static str,
        /// The value.
        value: f64,
    },
    /// The sum of exp(logit - max) is below 1 (beyond [`SUM_EXP_TOLERANCE`]), impossible
    /// since the maximum itself contributes exp(0) = 1.
    #[error("row sum of exp(logit - max) is {0}, below 1: the device reduction is wrong")]
    BadSum(f64),
    /// The number of picked logits differs from the base record's top-k.
    #[error("row has {got} picked logits but the base record has {expected} top-k ids")]
    PickCount {
        /// Logits given.
        got: usize,
        /// Ids in the base record.
        expected: usize,
    },
    /// The base record is unusable (no ids or non-finite values).
    #[error("base record is unusable: {0}")]
    BadBase(&'static str),
}

/// One row's results as they come back from the device (`lse_pick` + argmax).
#[derive(Clone, Copy, Debug)]
pub struct DeviceRow<'a> {
    /// The row's maximum logit m.
    pub max_logit: f64,
    /// Σ exp(logit - m) over the whole vocabulary.
    pub sum_exp: f64,
    /// Logit of the target (next) token.
    pub target_logit: f64,
    /// Logits of the base's top-k ids, in the base record's order (empty when not
    /// comparing); when recording a base, the row's own top-k logits.
    pub picked_logits: &'a [f32],
    /// The row's argmax token id, computed on the device.
    pub argmax: u32,
}

/// What the base run recorded for one scored token.
#[derive(Clone, Debug, PartialEq)]
pub struct BaseRecord {
    /// The base run's NLL of the target token (nats).
    pub nll: f64,
    /// The base run's top-k token ids, most likely first.
    pub ids: Vec<u32>,
    /// The base run's log-probabilities of `ids`, same order (non-increasing).
    pub log_probs: Vec<f32>,
}

/// One scored token compared against the base.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RowComparison {
    /// Current NLL of the target.
    pub nll: f64,
    /// Base NLL of the target.
    pub base_nll: f64,
    /// KL(base || current) over the 33 outcomes {top-k ids, rest}.
    pub kld: f64,
    /// p_current(target) - p_base(target).
    pub delta_p: f64,
    /// Whether the device argmax equals the base's top-1 id.
    pub same_top: bool,
    /// Σ p_base over the base's top-k ids.
    pub base_top_mass: f64,
}

fn finite(what: &'static str, value: f64) -> Result<f64, RowError> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(RowError::NonFinite { what, value })
    }
}

/// The log normalizer m + ln Σ exp(l - m) of a row, after validating its inputs.
fn log_normalizer(max_logit: f64, sum_exp: f64) -> Result<f64, RowError> {
    let m = finite("max logit", max_logit)?;
    let s = finite("sum of exponentials", sum_exp)?;
    if s < 1.0 - SUM_EXP_TOLERANCE {
        return Err(RowError::BadSum(s));
    }
    Ok(m + s.ln())
}

/// NLL of the target: ln(sum) + m - logit_target, in f64.
pub fn row_nll(max_logit: f64, sum_exp: f64, target_logit: f64) -> Result<f64, RowError> {
    let norm = log_normalizer(max_logit, sum_exp)?;
    Ok(norm - finite("target logit", target_logit)?)
}

/// Log-probabilities of the picked logits: logit - m - ln(sum), in f64.
pub fn row_log_probs(
    max_logit: f64,
    sum_exp: f64,
    picked_logits: &[f32],
) -> Result<Vec<f64>, RowError> {
    let norm = log_normalizer(max_logit, sum_exp)?;
    picked_logits
        .iter()
        .map(|&l| Ok(finite("picked logit", f64::from(l))? - norm))
        .collect()
}

/// The base-file record of one row while recording a base: the target's NLL and the
/// log-probabilities of the row's top-k ids `top_ids`, whose logits are
/// `row.picked_logits` (most likely first).
pub fn base_record(row: &DeviceRow<'_>, top_ids: &[u32]) -> Result<BaseRecord, RowError> {
    if row.picked_logits.len() != top_ids.len() {
        return Err(RowError::PickCount {
            got: row.picked_logits.len(),
            expected: top_ids.len(),
        });
    }
    let nll = row_nll(row.max_logit, row.sum_exp, row.target_logit)?;
    let log_probs = row_log_probs(row.max_logit, row.sum_exp, row.picked_logits)?;
    Ok(BaseRecord {
        nll,
        ids: top_ids.to_vec(),
        log_probs: log_probs.into_iter().map(|lp| lp as f32).collect(),
    })
}

/// KL(p || q) over the outcomes {each id, rest}, from log-probabilities of the same ids.
///
/// The rest masses are 1 - Σ exp(log p) clamped at 0 (q's also floored at
/// [`REST_MASS_FLOOR`]); terms with p = 0 contribute 0.
pub fn coarse_kld(base_log_probs: &[f64], cur_log_probs: &[f64]) -> f64 {
    let mut kld = 0.0;
    let mut p_sum = 0.0;
    let mut q_sum = 0.0;
    for (&lp, &lq) in base_log_probs.iter().zip(cur_log_probs) {
        let p = lp.exp();
        p_sum += p;
        q_sum += lq.exp();
        if p > 0.0 {
            kld += p * (lp - lq);
        }
    }
    let p_rest = (1.0 - p_sum).max(0.0);
    let q_rest = (1.0 - q_sum).max(REST_MASS_FLOOR);
    if p_rest > 0.0 {
        kld += p_rest * (p_rest.ln() - q_rest.ln());
    }
    kld
}

/// Compares one row of the current run with the base's record for the same token.
pub fn compare_row(row: &DeviceRow<'_>, base: &BaseRecord) -> Result<RowComparison, RowError> {
    if base.ids.is_empty() || base.ids.len() != base.log_probs.len() {
        return Err(RowError::BadBase(
            "it needs one or more ids, each with a log-prob",
        ));
    }
    if row.picked_logits.len() != base.ids.len() {
        return Err(RowError::PickCount {
            got: row.picked_logits.len(),
            expected: base.ids.len(),
        });
    }
    if !base.nll.is_finite() || base.log_probs.iter().any(|lp| !lp.is_finite()) {
        return Err(RowError::BadBase("its NLL or a log-prob is not finite"));
    }
    let nll = row_nll(row.max_logit, row.sum_exp, row.target_logit)?;
    let cur = row_log_probs(row.max_logit, row.sum_exp, row.picked_logits)?;
    let base_lp: Vec<f64> = base.log_probs.iter().map(|&lp| f64::from(lp)).collect();
    Ok(RowComparison {
        nll,
        base_nll: base.nll,
        kld: coarse_kld(&base_lp, &cur),
        delta_p: (-nll).exp() - (-base.nll).exp(),
        same_top: row.argmax == base.ids[0],
        base_top_mass: base_lp.iter().map(|lp| lp.exp()).sum(),
    })
}

/// llama.cpp's `mean_and_uncertainty`: the mean of n values from Σx and Σx², and the
/// standard error of that mean, which is 0 unless n > 10 and the variance is positive.
pub fn mean_and_uncertainty(sum: f64, sum_sq: f64, n: u64) -> (f64, f64) {
    if n < 1 {
        return (0.0, 0.0);
    }
    let nf = n as f64;
    let mean = sum / nf;
    let var = sum_sq / nf - mean * mean;
    let unc = if var > 0.0 && n > 10 {
        (var / (nf - 1.0)).sqrt()
    } else {
        0.0
    };
    (mean, unc)
}

/// llama.cpp's `covariance` of two means: 0 for n < 10.
pub fn covariance_of_means(sum_a: f64, sum_b: f64, sum_ab: f64, n: u64) -> f64 {
    if n < 10 {
        return 0.0;
    }
    let nf = n as f64;
    (sum_ab / nf - (sum_a / nf) * (sum_b / nf)) / (nf - 1.0)
}

/// Linear-interpolated percentile of sorted values (llama.cpp's definition, in f64):
/// p = f·(N−1), result (1−w)·v[⌊p⌋] + w·v[⌊p⌋+1]. 0 for an empty slice.
pub fn percentile(sorted: &[f64], fraction: f64) -> f64 {
    let Some(&last) = sorted.last() else {
        return 0.0;
    };
    if fraction <= 0.0 {
        return sorted[0];
    }
    if fraction >= 1.0 {
        return last;
    }
    let p = fraction * (sorted.len() - 1) as f64;
    let ip = p.floor() as usize;
    let w = p - ip as f64;
    let hi = sorted[(ip + 1).min(sorted.len() - 1)];
    (1.0 - w) * sorted[ip] + w * hi
}

/// Running sums for perplexity: Σnll and Σnll² in f64.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PplAccumulator {
    /// Tokens added.
    pub count: u64,
    /// Σ nll.
    pub sum: f64,
    /// Σ nll².
    pub sum_sq: f64,
}

impl PplAccumulator {
    /// Adds one token's NLL.
    pub fn add(&mut self, nll: f64) {
        self.count += 1;
        self.sum += nll;
        self.sum_sq += nll * nll;
    }

    /// Adds another accumulator's tokens (e.g. one window's into the run's).
    pub fn merge(&mut self, other: &PplAccumulator) {
        self.count += other.count;
        self.sum += other.sum;
        self.sum_sq += other.sum_sq;
    }

    /// Mean NLL in nats per token (0 when empty).
    pub fn mean_nll(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.sum / self.count as f64
        }
    }

    /// exp(mean NLL).
    pub fn perplexity(&self) -> f64 {
        self.mean_nll().exp()
    }

    /// llama.cpp's "±": sqrt(v / (N − 1)) · PPL with v = Σnll²/N − mean²; 0 when N < 2 or
    /// v ≤ 0 (where llama.cpp prints no ±).
    pub fn perplexity_uncertainty(&self) -> f64 {
        if self.count < 2 {
            return 0.0;
        }
        let n = self.count as f64;
        let mean = self.sum / n;
        let var = self.sum_sq / n - mean * mean;
        if var <= 0.0 {
            return 0.0;
        }
        (var / (n - 1.0)).sqrt() * mean.exp()
    }
}

/// Running sums for the KL-divergence comparison, as llama.cpp keeps them, plus every
/// per-token KLD and Δp for the percentiles (the brief's `kld` block and the full table of
/// [`super::kld_table`]).
#[derive(Clone, Debug, Default)]
pub struct KldAccumulator {
    pub(super) count: u64,
    pub(super) sum_nll: f64,
    pub(super) sum_nll_sq: f64,
    pub(super) sum_base_nll: f64,
    pub(super) sum_base_nll_sq: f64,
    pub(super) sum_nll_base_nll: f64,
    pub(super) sum_kld: f64,
    pub(super) sum_kld_sq: f64,
    pub(super) klds: Vec<f64>,
    pub(super) same_top: u64,
    pub(super) sum_dp: f64,
    pub(super) sum_dp_sq: f64,
    pub(super) sum_dp4: f64,
    pub(super) delta_ps: Vec<f64>,
    pub(super) sum_base_top_mass: f64,
}

/// The `kld` block's statistics (the JSON adds `base`, `top_k` and `tokens`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct KldSummary {
    /// exp(mean base NLL).
    pub base_perplexity: f64,
    /// exp(mean current NLL).
    pub perplexity: f64,
    /// perplexity − base_perplexity.
    pub delta_perplexity: f64,
    /// exp(mean_log_ratio) = perplexity / base_perplexity.
    pub perplexity_ratio: f64,
    /// mean(nll − base nll) = ln(PPL / base PPL).
    pub mean_log_ratio: f64,
    /// sqrt(σ² + σ_b² − 2·cov) (llama.cpp).
    pub mean_log_ratio_uncertainty: f64,
    /// Mean coarsened KL divergence.
    pub mean_kld: f64,
    /// Standard error of `mean_kld`.
    pub mean_kld_uncertainty: f64,
    /// 99th percentile of the per-token KLD.
    pub kld_p99: f64,
    /// Largest per-token KLD.
    pub kld_max: f64,
    /// Fraction of tokens whose top-1 id agrees.
    pub same_top: f64,
    /// sqrt(s(1 − s) / (N − 1)).
    pub same_top_uncertainty: f64,
    /// Mean change in the probability of the correct token.
    pub mean_delta_p: f64,
    /// Standard error of `mean_delta_p`.
    pub mean_delta_p_uncertainty: f64,
    /// sqrt(mean Δp²).
    pub rms_delta_p: f64,
    /// Mean probability mass the base's top-k ids hold.
    pub mean_base_top_mass: f64,
}

impl KldAccumulator {
    /// Adds one compared token.
    pub fn add(&mut self, row: &RowComparison) {
        self.count += 1;
        self.sum_nll += row.nll;
        self.sum_nll_sq += row.nll * row.nll;
        self.sum_base_nll += row.base_nll;
        self.sum_base_nll_sq += row.base_nll * row.base_nll;
        self.sum_nll_base_nll += row.nll * row.base_nll;
        self.sum_kld += row.kld;
        self.sum_kld_sq += row.kld * row.kld;
        self.klds.push(row.kld);
        self.same_top += u64::from(row.same_top);
        self.sum_dp += row.delta_p;
        self.sum_dp_sq += row.delta_p * row.delta_p;
        self.sum_dp4 += row.delta_p.powi(4);
        self.delta_ps.push(row.delta_p);
        self.sum_base_top_mass += row.base_top_mass;
    }

    /// Tokens added.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Every added token's KL divergence, in the order added.
    pub fn klds(&self) -> &[f64] {
        &self.klds
    }

    /// Every added token's Δp, in the order added.
    pub fn delta_ps(&self) -> &[f64] {
        &self.delta_ps
    }

    /// The statistics over every token added so far (all zero when empty).
    pub fn summary(&self) -> KldSummary {
        let n = self.count;
        if n == 0 {
            return KldSummary::default();
        }
        let nf = n as f64;
        let (mu, sigma) = mean_and_uncertainty(self.sum_nll, self.sum_nll_sq, n);
        let (mu_b, sigma_b) = mean_and_uncertainty(self.sum_base_nll, self.sum_base_nll_sq, n);
        let cov = covariance_of_means(self.sum_nll, self.sum_base_nll, self.sum_nll_base_nll, n);
        let log_ratio_var = sigma * sigma + sigma_b * sigma_b - 2.0 * cov;
        let (mean_kld, mean_kld_uncertainty) =
            mean_and_uncertainty(self.sum_kld, self.sum_kld_sq, n);
        let (mean_delta_p, mean_delta_p_uncertainty) =
            mean_and_uncertainty(self.sum_dp, self.sum_dp_sq, n);
        let mut sorted = self.klds.clone();
        sorted.sort_by(f64::total_cmp);
        let same = self.same_top as f64 / nf;
        let same_top_uncertainty = if n > 1 {
            (same * (1.0 - same) / (nf - 1.0)).sqrt()
        } else {
            0.0
        };
        KldSummary {
            base_perplexity: mu_b.exp(),
            perplexity: mu.exp(),
            delta_perplexity: mu.exp() - mu_b.exp(),
            perplexity_ratio: (mu - mu_b).exp(),
            mean_log_ratio: mu - mu_b,
            mean_log_ratio_uncertainty: log_ratio_var.max(0.0).sqrt(),
            mean_kld,
            mean_kld_uncertainty,
            kld_p99: percentile(&sorted, 0.99),
            kld_max: sorted.last().copied().unwrap_or(0.0),
            same_top: same,
            same_top_uncertainty,
            mean_delta_p,
            mean_delta_p_uncertainty,
            rms_delta_p: (self.sum_dp_sq / nf).sqrt(),
            mean_base_top_mass: self.sum_base_top_mass / nf,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) {
        assert!((a - b).abs() <= tol, "{a} vs {b} (tol {tol})");
    }

    #[test]
    fn nll_from_device_scalars() {
        // logits [2, 1, 0]: m = 2, sum = 1 + e^-1 + e^-2.
        let s = 1.0 + (-1.0f64).exp() + (-2.0f64).exp();
        let nll = row_nll(2.0, s, 1.0).unwrap();
        close(nll, 1.0 + s.ln(), 1e-15);
        // Equals -ln softmax(target) computed directly.
        let direct = -((1.0f64).exp() / (2f64.exp() + 1f64.exp() + 1.0)).ln();
        close(nll, direct, 1e-14);
        let lps = row_log_probs(2.0, s, &[2.0, 0.0]).unwrap();
        close(lps[0], -s.ln(), 1e-15);
        close(lps[1], -2.0 - s.ln(), 1e-15);
    }

    #[test]
    fn row_refusals() {
        assert_eq!(row_nll(2.0, 0.5, 1.0), Err(RowError::BadSum(0.5)));
        assert_eq!(row_nll(2.0, 0.9998, 1.0), Err(RowError::BadSum(0.9998)));
        // Rounding just below 1 is accepted.
        close(
            row_nll(2.0, 1.0 - 1e-7, 2.0).unwrap(),
            (1.0f64 - 1e-7).ln(),
            1e-15,
        );
        let err = row_nll(f64::NAN, 2.0, 1.0).unwrap_err();
        assert!(
            err.to_string().starts_with("row max logit is not finite"),
            "{err}"
        );
        let err = row_nll(0.0, f64::INFINITY, 1.0).unwrap_err();
        assert!(err.to_string().contains("sum of exponentials"), "{err}");
        let err = row_log_probs(0.0, 2.0, &[1.0, f32::NEG_INFINITY]).unwrap_err();
        assert!(err.to_string().contains("picked logit"), "{err}");
        let base = BaseRecord {
            nll: 1.0,
            ids: vec![3, 4],
            log_probs: vec![-0.5, -1.0],
        };
        let row = DeviceRow {
            max_logit: 0.0,
            sum_exp: 2.0,
            target_logit: 0.0,
            picked_logits: &[0.0],
            argmax: 3,
        };
        assert_eq!(
            compare_row(&row, &base),
            Err(RowError::PickCount {
                got: 1,
                expected: 2
            })
        );
        let bad = BaseRecord {
            nll: f64::NAN,
            ..base.clone()
        };
        let row2 = DeviceRow {
            picked_logits: &[0.0, -1.0],
            ..row
        };
        assert!(matches!(
            compare_row(&row2, &bad),
            Err(RowError::BadBase(_))
        ));
    }

    #[test]
    fn coarse_kld_hand_values() {
        // p = (0.5, 0.25) rest 0.25; q = (0.25, 0.25) rest 0.5.
        // KL = 0.5 ln 2 + 0 + 0.25 ln 0.5 = 0.25 ln 2.
        let p = [0.5f64.ln(), 0.25f64.ln()];
        let q = [0.25f64.ln(), 0.25f64.ln()];
        close(coarse_kld(&p, &q), 0.25 * 2f64.ln(), 1e-15);
        // Identical distributions: 0.
        close(coarse_kld(&p, &p), 0.0, 1e-15);
        // Base holds all mass on its ids: the rest term is 0·log 0 = 0.
        let p_all = [0.75f64.ln(), 0.25f64.ln()];
        let q2 = [0.5f64.ln(), 0.25f64.ln()];
        close(coarse_kld(&p_all, &q2), 0.75 * (1.5f64).ln(), 1e-15);
        // Current holds all mass on the ids but the base does not: q rest floored.
        // KL = .5 ln(.5/.5) + .25 ln(.25/.5) + .25 ln(.25/floor).
        let q_all = [0.5f64.ln(), 0.5f64.ln()];
        let expect = 0.25 * 0.5f64.ln() + 0.25 * (0.25f64 / REST_MASS_FLOOR).ln();
        close(coarse_kld(&p, &q_all), expect, 1e-12);
    }

    /// Deterministic pseudo-random logits in [-8, 8).
    fn logits(seed: &mut u64, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                *seed ^= *seed << 13;
                *seed ^= *seed >> 7;
                *seed ^= *seed << 17;
                (*seed >> 40) as f32 / (1u64 << 24) as f32 * 16.0 - 8.0
            })
            .collect()
    }

    fn device_scalars(l: &[f32]) -> (f64, f64) {
        let m = l.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let s = l.iter().map(|&x| f64::from(x - m).exp()).sum();
        (f64::from(m), s)
    }

    #[test]
    fn coarse_kld_is_bounded_by_full_kl_on_random_rows() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for trial in 0..200 {
            let n = 40;
            let base = logits(&mut seed, n);
            let mut cur = base.clone();
            // Perturb the current row by a trial-dependent amount.
            let noise = logits(&mut seed, n);
            let scale = (trial % 10) as f32 * 0.05;
            for (c, e) in cur.iter_mut().zip(&noise) {
                *c += scale * e;
            }
            let (mb, sb) = device_scalars(&base);
            let (mc, sc) = device_scalars(&cur);
            let lp = |l: f32, m: f64, s: f64| f64::from(l) - m - s.ln();
            let full: f64 = (0..n)
                .map(|i| {
                    let p = lp(base[i], mb, sb);
                    p.exp() * (p - lp(cur[i], mc, sc))
                })
                .sum();
            // The base's top-8 ids.
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&a, &b| base[b].total_cmp(&base[a]).then(a.cmp(&b)));
            let top: Vec<usize> = order[..8].to_vec();
            let base_lp: Vec<f64> = top.iter().map(|&i| lp(base[i], mb, sb)).collect();
            let picked: Vec<f32> = top.iter().map(|&i| cur[i]).collect();
            let cur_lp = row_log_probs(mc, sc, &picked).unwrap();
            let coarse = coarse_kld(&base_lp, &cur_lp);
            assert!(coarse >= -1e-12, "trial {trial}: {coarse}");
            assert!(coarse <= full + 1e-12, "trial {trial}: {coarse} > {full}");
            if scale == 0.0 {
                assert!(coarse.abs() < 1e-12 && full.abs() < 1e-12);
            }
            // compare_row agrees with the direct computation.
            let target = top[3];
            let argmax = order[0] as u32;
            let row = DeviceRow {
                max_logit: mc,
                sum_exp: sc,
                target_logit: f64::from(cur[target]),
                picked_logits: &picked,
                argmax,
            };
            let rec = BaseRecord {
                nll: -lp(base[target], mb, sb),
                ids: top.iter().map(|&i| i as u32).collect(),
                log_probs: base_lp.iter().map(|&x| x as f32).collect(),
            };
            let c = compare_row(&row, &rec).unwrap();
            close(c.nll, -lp(cur[target], mc, sc), 1e-12);
            close(
                c.delta_p,
                lp(cur[target], mc, sc).exp() - lp(base[target], mb, sb).exp(),
                1e-12,
            );
            close(c.kld, coarse, 1e-5);
            assert!(c.same_top);
        }
    }

    #[test]
    fn compare_row_hand_values() {
        // Current logits over a vocab of 4: [ln 4, ln 2, ln 1, ln 1] -> q = (.5, .25, .125,
        // .125); m = ln 4, sum = 1 + .5 + .25 + .25 = 2.
        let ln = f64::ln;
        let row = DeviceRow {
            max_logit: ln(4.0),
            sum_exp: 2.0,
            target_logit: ln(2.0),
            picked_logits: &[2f32.ln(), 4f32.ln()],
            argmax: 0,
        };
        // Base: top-2 ids (1, 0) with p (0.5, 0.25), target prob 0.5.
        let base = BaseRecord {
            nll: ln(2.0),
            ids: vec![1, 0],
            log_probs: vec![0.5f32.ln(), 0.25f32.ln()],
        };
        let c = compare_row(&row, &base).unwrap();
        close(c.nll, ln(4.0), 1e-15); // q(target = id 1) = 0.25
        close(c.base_nll, ln(2.0), 0.0);
        close(c.delta_p, 0.25 - 0.5, 1e-15);
        assert!(!c.same_top); // device argmax 0, base top-1 id 1
        close(c.base_top_mass, 0.75, 1e-7);
        // p = (.5, .25, rest .25), q = (.25, .5, rest .25):
        // KL = .5 ln 2 + .25 ln .5 + 0 = .25 ln 2.
        close(c.kld, 0.25 * ln(2.0), 1e-6);
        let same = DeviceRow { argmax: 1, ..row };
        assert!(compare_row(&same, &base).unwrap().same_top);
    }

    #[test]
    fn base_record_from_device_row() {
        // Same row as above; its own top-2 are ids 0 (logit ln 4) and 1 (logit ln 2).
        let ln = f64::ln;
        let row = DeviceRow {
            max_logit: ln(4.0),
            sum_exp: 2.0,
            target_logit: ln(2.0),
            picked_logits: &[4f32.ln(), 2f32.ln()],
            argmax: 0,
        };
        let rec = base_record(&row, &[0, 1]).unwrap();
        close(rec.nll, ln(4.0), 1e-15);
        assert_eq!(rec.ids, vec![0, 1]);
        close(f64::from(rec.log_probs[0]), ln(0.5), 1e-6);
        close(f64::from(rec.log_probs[1]), ln(0.25), 1e-6);
        assert_eq!(
            base_record(&row, &[0]),
            Err(RowError::PickCount {
                got: 2,
                expected: 1
            })
        );
        let bad = DeviceRow {
            sum_exp: f64::NAN,
            ..row
        };
        assert!(base_record(&bad, &[0, 1]).is_err());
    }

    #[test]
    fn helpers_match_llama_cpp_definitions() {
        assert_eq!(mean_and_uncertainty(5.0, 9.0, 0), (0.0, 0.0));
        // n <= 10: no uncertainty.
        let (m, u) = mean_and_uncertainty(10.0, 30.0, 5);
        assert_eq!((m, u), (2.0, 0.0));
        // 11 values: mean 1, Σx² = 21 -> var = 21/11 - 1 = 10/11, unc = sqrt(10/11/10).
        let (m, u) = mean_and_uncertainty(11.0, 21.0, 11);
        close(m, 1.0, 1e-15);
        close(u, (1.0f64 / 11.0).sqrt(), 1e-15);
        assert_eq!(covariance_of_means(1.0, 2.0, 3.0, 9), 0.0);
        // n = 10, Σa = 10, Σb = 20, Σab = 30: (3 - 1·2) / 9.
        close(covariance_of_means(10.0, 20.0, 30.0, 10), 1.0 / 9.0, 1e-15);
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(percentile(&v, 0.0), 1.0);
        assert_eq!(percentile(&v, 1.0), 5.0);
        close(percentile(&v, 0.5), 3.0, 1e-15);
        close(percentile(&v, 0.99), 4.96, 1e-12); // p = 3.96
        assert_eq!(percentile(&[], 0.99), 0.0);
        assert_eq!(percentile(&[7.0], 0.99), 7.0);
    }

    #[test]
    fn perplexity_and_uncertainty() {
        let mut acc = PplAccumulator::default();
        assert_eq!(acc.perplexity_uncertainty(), 0.0);
        assert_eq!(acc.mean_nll(), 0.0);
        for x in [1.0, 2.0, 3.0, 4.0] {
            acc.add(x);
        }
        // mean 2.5, Σx² = 30, v = 7.5 - 6.25 = 1.25, σ = sqrt(1.25/3).
        close(acc.mean_nll(), 2.5, 1e-15);
        close(acc.perplexity(), 2.5f64.exp(), 1e-12);
        close(
            acc.perplexity_uncertainty(),
            (1.25f64 / 3.0).sqrt() * 2.5f64.exp(),
            1e-12,
        );
        // Constant NLL: zero variance -> no ±.
        let mut flat = PplAccumulator::default();
        flat.add(0.7);
        flat.add(0.7);
        assert_eq!(flat.perplexity_uncertainty(), 0.0);
        let mut merged = PplAccumulator::default();
        merged.merge(&acc);
        merged.merge(&flat);
        assert_eq!(merged.count, 6);
        close(merged.sum, 11.4, 1e-12);
        close(merged.sum_sq, 30.98, 1e-12);
    }

    fn cmp(nll: f64, base_nll: f64, kld: f64, delta_p: f64, same_top: bool) -> RowComparison {
        RowComparison {
            nll,
            base_nll,
            kld,
            delta_p,
            same_top,
            base_top_mass: 0.9,
        }
    }

    #[test]
    fn kld_summary_hand_values() {
        assert_eq!(KldAccumulator::default().summary(), KldSummary::default());
        // 12 tokens: nll_i = 1 + i/10, base nll = 1 + i/20 for i = 0..11; kld = i/100;
        // delta_p = ±0.1 alternating; same_top for even i (6 of 12).
        let mut acc = KldAccumulator::default();
        for i in 0..12 {
            let x = i as f64;
            let dp = if i % 2 == 0 { 0.1 } else { -0.1 };
            acc.add(&cmp(
                1.0 + x / 10.0,
                1.0 + x / 20.0,
                x / 100.0,
                dp,
                i % 2 == 0,
            ));
        }
        assert_eq!(acc.count(), 12);
        let s = acc.summary();
        // mean nll = 1 + 5.5/10 = 1.55; mean base = 1 + 5.5/20 = 1.275.
        close(s.perplexity, 1.55f64.exp(), 1e-12);
        close(s.base_perplexity, 1.275f64.exp(), 1e-12);
        close(s.delta_perplexity, 1.55f64.exp() - 1.275f64.exp(), 1e-12);
        close(s.mean_log_ratio, 0.275, 1e-12);
        close(s.perplexity_ratio, 0.275f64.exp(), 1e-12);
        // Var(i) over 0..11 = 143/12. Var(nll) = 143/1200, Var(base) = 143/4800,
        // Cov = 143/2400. σ² = 143/1200/11, σ_b² = 143/4800/11, cov of means = 143/2400/11.
        // σ² + σ_b² − 2cov = 143/11 · (1/1200 + 1/4800 − 2/2400) = 143/11/4800.
        close(
            s.mean_log_ratio_uncertainty,
            (143.0f64 / 11.0 / 4800.0).sqrt(),
            1e-12,
        );
        // KLD: mean 0.055, var = 143/12/1e4, unc = sqrt(var/11).
        close(s.mean_kld, 0.055, 1e-12);
        close(
            s.mean_kld_uncertainty,
            (143.0f64 / 12.0 / 1e4 / 11.0).sqrt(),
            1e-12,
        );
        // p99 of 0.00..0.11: p = 0.99·11 = 10.89 -> 0.10 + 0.89·0.01.
        close(s.kld_p99, 0.1089, 1e-12);
        close(s.kld_max, 0.11, 1e-15);
        close(s.same_top, 0.5, 0.0);
        close(s.same_top_uncertainty, (0.25f64 / 11.0).sqrt(), 1e-15);
        // Δp: mean 0, Σdp² = 0.12, var 0.01, unc = sqrt(0.01/11); rms = 0.1.
        close(s.mean_delta_p, 0.0, 1e-15);
        close(s.mean_delta_p_uncertainty, (0.01f64 / 11.0).sqrt(), 1e-12);
        close(s.rms_delta_p, 0.1, 1e-12);
        close(s.mean_base_top_mass, 0.9, 1e-12);
    }
}
