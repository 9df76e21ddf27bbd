//! The `lse report` document: one self-contained HTML page (inline CSS and SVG, no scripts,
//! no links) with each run's configuration and results, per-window perplexity along the
//! text, and for comparisons the per-window Δ mean NLL against the first run, the
//! KL-divergence table and the per-token KLD histogram.

use std::fmt::Write as _;

use super::load::Run;
use super::svg::{bar_chart, esc, histogram, line_chart, short, Bin, Series, PALETTE};
use crate::summary::kld_table;

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:24px auto;max-width:920px;color:#222}\
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ccc}\
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}\
th{background:#f4f4f4}td{white-space:nowrap}tr[data-field=token_ids_sha256] td{white-space:normal;word-break:break-all}tr>th:first-child{white-space:nowrap}td.num{text-align:right;font-variant-numeric:tabular-nums}\
pre{background:#f8f8f8;padding:8px;font-size:.85em;overflow-x:auto}\
.chart text{font-size:11px;fill:#333}.chart .label{font-size:12px}.grid{stroke:#eee}\
.axis{stroke:#888}.zero{stroke:#444}.note{color:#666;font-size:.9em}";

/// The colour of run `i` (the palette repeats).
fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// The whole page for `runs`; the first run is the reference the others are compared with.
pub fn document(runs: &[Run]) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>LSE perplexity report</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>LSE perplexity report</h1>\n"
    );
    let names: Vec<String> = runs.iter().map(|r| esc(&r.name())).collect();
    let _ = writeln!(
        s,
        "<p>{} run(s): {}.{}</p>",
        runs.len(),
        names.join(", "),
        if runs.len() > 1 {
            format!(" The first, {}, is the reference.", names[0])
        } else {
            String::new()
        }
    );
    runs_table(&mut s, runs);
    per_window_perplexity(&mut s, runs);
    if runs.len() > 1 {
        delta_nll(&mut s, runs);
    }
    for (i, run) in runs.iter().enumerate() {
        kld_section(&mut s, i, run);
    }
    s.push_str("</body>\n</html>\n");
    s
}

/// One row per field, one column per run.
fn runs_table(s: &mut String, runs: &[Run]) {
    type Cell = fn(&Run) -> String;
    let rows: [(&str, &str, Cell); 23] = [
        ("perplexity", "PPL ± (llama.cpp)", |r| {
            format!(
                "{:.4} ± {:.5}",
                r.report.perplexity, r.report.perplexity_uncertainty
            )
        }),
        ("mean_nll", "mean NLL (nats)", |r| {
            r.report.mean_nll.to_string()
        }),
        ("tokens", "tokens in the text", |r| {
            r.report.tokens.to_string()
        }),
        ("token_ids_sha256", "token ids SHA-256", |r| {
            r.report.token_ids_sha256.clone()
        }),
        ("method", "method", |r| {
            serde_json::to_value(r.report.method)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default()
        }),
        ("ctx", "ctx", |r| r.report.ctx.to_string()),
        ("stride", "stride", |r| r.report.stride.to_string()),
        ("windows_scored", "windows scored", |r| {
            r.report.windows_scored.to_string()
        }),
        ("scored_tokens", "tokens scored", |r| {
            r.report.scored_tokens.to_string()
        }),
        ("elapsed_seconds", "elapsed (s)", |r| {
            format!("{:.2}", r.report.elapsed_seconds)
        }),
        ("prefill_tokens", "prefill tokens", |r| {
            r.report.prefill_tokens.to_string()
        }),
        ("prefill_tokens_per_second", "prefill tokens/s", |r| {
            format!("{:.1}", r.report.prefill_tokens_per_second)
        }),
        ("device_arch", "device", |r| {
            r.report.config.device_arch.clone()
        }),
        ("prefill_attention", "prefill attention", |r| {
            r.report.config.prefill_attention.clone()
        }),
        ("prefill_attention_scale", "FlashPrefill alpha", |r| {
            r.report.config.prefill_attention_scale.to_string()
        }),
        ("kv_cache_dtype", "KV cache dtype", |r| {
            r.report.config.kv_cache_dtype.clone()
        }),
        ("gemm_activations", "GEMM activations", |r| {
            r.report
                .config
                .gemm_activations
                .unwrap_or_default()
                .as_str()
                .into()
        }),
        ("kv_capacity", "KV capacity", |r| {
            r.report.config.kv_capacity.to_string()
        }),
        ("batch_size", "batch size", |r| {
            r.report.config.batch_size.to_string()
        }),
        ("ubatch_size", "ubatch size", |r| {
            r.report.config.ubatch_size.to_string()
        }),
        ("head_rows", "head rows", |r| {
            r.report.config.head_rows.to_string()
        }),
        ("cpu_fallback_allowed", "CPU fallback allowed", |r| {
            r.report.config.cpu_fallback_allowed.to_string()
        }),
        ("kld_base", "KL-divergence base", |r| {
            r.report
                .kld
                .as_ref()
                .map_or_else(|| "none".to_string(), |k| k.base.clone())
        }),
    ];
    s.push_str("<h2>Runs</h2>\n<table id=\"runs\">\n<tr><th>field</th>");
    for (i, r) in runs.iter().enumerate() {
        let _ = write!(
            s,
            "<th style=\"color:{}\">{}</th>",
            color(i),
            esc(&r.name())
        );
    }
    s.push_str("</tr>\n");
    for (field, label, cell) in rows {
        let _ = write!(s, "<tr data-field=\"{field}\"><th>{}</th>", esc(label));
        for r in runs {
            let _ = write!(s, "<td class=\"num\">{}</td>", esc(&cell(r)));
        }
        s.push_str("</tr>\n");
    }
    s.push_str("</table>\n");
}

fn per_window_perplexity(s: &mut String, runs: &[Run]) {
    let series: Vec<Series> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| Series {
            name: r.name(),
            color: color(i),
            points: r
                .windows()
                .iter()
                .map(|w| (w.first_target as f64, w.perplexity))
                .collect(),
            gaps: Vec::new(),
        })
        .collect();
    s.push_str("<h2>Perplexity along the text</h2>\n<p class=\"note\">One point per window: its perplexity, at the position of its first scored token.</p>\n");
    s.push_str(&line_chart(
        "ppl-by-window",
        "per-window perplexity",
        "first scored token of the window",
        "window perplexity",
        &series,
    ));
}

fn delta_nll(s: &mut String, runs: &[Run]) {
    let reference = &runs[0];
    let series: Vec<Series> = runs[1..]
        .iter()
        .enumerate()
        .map(|(i, r)| Series {
            name: format!("{} − {}", r.name(), reference.name()),
            color: color(i + 1),
            points: r
                .windows()
                .iter()
                .zip(reference.windows())
                .map(|(w, base)| (w.index as f64, w.mean_nll - base.mean_nll))
                .collect(),
            gaps: Vec::new(),
        })
        .collect();
    s.push_str("<h2>Where the runs moved: Δ mean NLL per window</h2>\n<p class=\"note\">Each window's mean NLL minus the reference's for the same window (nats per token; above zero, the run predicts that window worse).</p>\n");
    s.push_str(&bar_chart(
        "delta-nll-by-window",
        "per-window delta mean NLL",
        "window",
        "Δ mean NLL (nats)",
        &series,
    ));
    s.push_str("<table id=\"delta-nll\">\n<tr><th>run</th><th>Δ mean NLL over the run</th><th>largest |Δ| (window)</th></tr>\n");
    for (r, ser) in runs[1..].iter().zip(&series) {
        let largest = ser
            .points
            .iter()
            .copied()
            .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()));
        let largest = largest.map_or_else(String::new, |(w, d)| format!("{} ({w})", short(d)));
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{largest}</td></tr>",
            esc(&r.name()),
            short(r.report.mean_nll - reference.report.mean_nll)
        );
    }
    s.push_str("</table>\n");
}

/// Log-spaced bins, four per decade, over the positive values from 1e-12 up; smaller values
/// (exact agreement, rounding) share one first bin. Every value lands in exactly one bin:
/// lo ≤ v < hi, the last bin also holding its upper edge.
pub fn kld_bins(values: &[f64]) -> Vec<Bin> {
    const FLOOR: f64 = 1e-12;
    const PER_DECADE: i32 = 4;
    let positive = values.iter().copied().filter(|&v| v >= FLOOR);
    let (lo, hi) = positive.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    let mut edges = Vec::new();
    if lo.is_finite() {
        let e0 = lo.log10().floor() as i32;
        let e1 = (hi.log10().ceil() as i32).max(e0 + 1);
        edges.extend(
            (e0 * PER_DECADE..=e1 * PER_DECADE)
                .map(|k| 10f64.powf(f64::from(k) / f64::from(PER_DECADE))),
        );
        // Keep the outer edges around the values whatever pow rounds to.
        edges[0] = edges[0].min(lo);
        if let Some(last) = edges.last_mut() {
            *last = last.max(hi);
        }
    }
    let mut bins = Vec::new();
    let below = values.iter().filter(|&&v| v < FLOOR).count() as u64;
    if below > 0 || edges.is_empty() {
        bins.push(Bin {
            label: "< 1e-12".into(),
            lo: values.iter().copied().fold(0.0, f64::min),
            hi: FLOOR,
            count: below,
        });
    }
    for (k, pair) in edges.windows(2).enumerate() {
        let last = k + 2 == edges.len();
        let count = values
            .iter()
            .filter(|&&v| v >= pair[0] && (v < pair[1] || (last && v == pair[1])))
            .count() as u64;
        let decade = k as i32 % PER_DECADE == 0;
        bins.push(Bin {
            label: if decade {
                format!("1e{}", pair[0].log10().round())
            } else {
                String::new()
            },
            lo: pair[0],
            hi: pair[1],
            count,
        });
    }
    bins
}

/// Most points of a per-token chart.
const MAX_TOKEN_BINS: usize = 200;

/// Tokens per bin of a per-token chart over `n` tokens: at most about
/// [`MAX_TOKEN_BINS`] bins in all.
pub fn tokens_per_bin(n: usize) -> usize {
    n.div_ceil(MAX_TOKEN_BINS).max(1)
}

/// The mean and the maximum of `values` (one per scored token, in scoring order) over bins
/// of [`tokens_per_bin`] consecutive tokens of one window (a window's last bin may be
/// shorter), each at the text position of its first token; each window starts a new line.
/// The mean is drawn in `color`, the maximum in grey.
pub fn along_text(run: &Run, values: &[f64], color: &'static str) -> (Series, Series) {
    let per_bin = tokens_per_bin(values.len());
    let (mut mean, mut max, mut gaps) = (Vec::new(), Vec::new(), Vec::new());
    let mut rest = values;
    for w in run.windows() {
        let (here, next) = rest.split_at((w.scored as usize).min(rest.len()));
        rest = next;
        gaps.push(mean.len());
        for (k, bin) in here.chunks(per_bin).enumerate() {
            let x = w.first_target.saturating_add((k * per_bin) as u64) as f64;
            mean.push((x, bin.iter().sum::<f64>() / bin.len() as f64));
            max.push((x, bin.iter().copied().fold(f64::NEG_INFINITY, f64::max)));
        }
    }
    let series = |name: &str, color, points| Series {
        name: format!("{name} KLD per {per_bin} tokens"),
        color,
        points,
        gaps: gaps.clone(),
    };
    (series("mean", color, mean), series("max", "#999999", max))
}

fn kld_section(s: &mut String, i: usize, run: &Run) {
    let Some(kld) = &run.report.kld else {
        return;
    };
    let _ = writeln!(
        s,
        "<h2>KL divergence: {} against its base {}</h2>",
        esc(&run.name()),
        esc(&kld.base)
    );
    match &run.report.kld_statistics {
        Some(t) => {
            let _ = writeln!(
                s,
                "<pre class=\"kld-table\" id=\"kld-table-{i}\">{}</pre>",
                esc(&kld_table(kld, t))
            );
        }
        None => {
            let _ = writeln!(
                s,
                "<p id=\"kld-table-{i}\">mean KLD {} ± {}, 99th percentile {}, maximum {}, same top {:.3}%, PPL ratio {}</p>",
                short(kld.stats.mean_kld),
                short(kld.stats.mean_kld_uncertainty),
                short(kld.stats.kld_p99),
                short(kld.stats.kld_max),
                100.0 * kld.stats.same_top,
                kld.stats.perplexity_ratio
            );
        }
    }
    match run.report.token_stats.as_ref().and_then(|t| t.kld.as_ref()) {
        Some(values) => {
            let values: Vec<f64> = values.iter().map(|&v| f64::from(v)).collect();
            let _ = writeln!(
                s,
                "<p class=\"note\">Per-token KL divergence, {} tokens, log-spaced bins (four per decade).</p>",
                values.len()
            );
            s.push_str(&histogram(
                &format!("kld-histogram-{i}"),
                "per-token KL divergence histogram",
                "KL divergence (nats, log scale)",
                color(i),
                &kld_bins(&values),
            ));
            let (mean, max) = along_text(run, &values, color(i));
            let per_bin = tokens_per_bin(values.len());
            let _ = writeln!(
                s,
                "<p class=\"note\">Per-token KL divergence along the text: mean and maximum over each {per_bin} consecutive scored token(s) of a window, at the position of the first; one line per window.</p>"
            );
            s.push_str(&line_chart(
                &format!("kld-along-text-{i}"),
                "per-token KL divergence along the text",
                "text position of the scored token",
                "KL divergence (nats)",
                &[mean, max],
            ));
        }
        None => s.push_str("<p class=\"note\">No per-token values in this run: score it with <code>--perplexity-token-stats</code> for the KL-divergence histogram.</p>\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_lands_in_one_bin() {
        let values = [0.0, 3e-13, 1e-6, 2.5e-6, 1e-5, 0.0123, 0.5, 0.5];
        let bins = kld_bins(&values);
        assert_eq!(bins.iter().map(|b| b.count).sum::<u64>(), 8);
        assert_eq!(bins[0].count, 2);
        assert_eq!(bins[0].label, "< 1e-12");
        // 1e-6 .. 1e0 at four bins per decade.
        assert_eq!(bins.len(), 1 + 24);
        assert_eq!(bins[1].label, "1e-6");
        assert!(bins.last().unwrap().hi >= 0.5);
        for w in bins[1..].windows(2) {
            assert_eq!(w[0].hi, w[1].lo);
        }
        // Nothing below the floor: no floor bin.
        assert_eq!(kld_bins(&[0.1]).len(), 4);
        assert_eq!(kld_bins(&[]).len(), 1);
    }
}
