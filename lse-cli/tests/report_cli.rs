//! End-to-end tests of `lse report`: the HTML/SVG structure of the page and the numbers in
//! it against the JSON reports it was made from, and every refusal of bad input.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn lse(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lse"))
        .args(args)
        .output()
        .unwrap()
}

/// Two real runs on the big-vocabulary golden model, made once for every test here: a base
/// (f32 KV cache, cpu device) and a comparison against it (bf16 KV cache, host device),
/// both with per-token values.
struct Runs {
    _dir: tempfile::TempDir,
    base: PathBuf,
    cmp: PathBuf,
}

fn runs() -> &'static Runs {
    static RUNS: OnceLock<Runs> = OnceLock::new();
    RUNS.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let model = repo().join("tests/data/models/big_vocab_bf16");
        let golden: Value =
            serde_json::from_str(&std::fs::read_to_string(model.join("ppl_golden.json")).unwrap())
                .unwrap();
        let text = dir.path().join("sample.txt");
        std::fs::write(&text, golden["text"].as_str().unwrap()).unwrap();
        let p = |name: &str| dir.path().join(name);
        let (base, cmp, kld) = (p("base.json"), p("cmp.json"), p("base.kld"));
        let s = |p: &Path| p.to_str().unwrap().to_string();
        let common = [
            "perplexity",
            "--model",
            &s(&model),
            "--perplexity",
            &s(&text),
            "--perplexity-ctx",
            "32",
            "--perplexity-token-stats",
            "--quiet",
        ]
        .map(str::to_string);
        for extra in [
            vec!["--pool", "cpu", "--kv-cache-dtype", "f32"]
                .into_iter()
                .map(str::to_string)
                .chain(["--perplexity-kld-base-out".into(), s(&kld)])
                .chain(["--perplexity-output".into(), s(&base)])
                .collect::<Vec<_>>(),
            vec!["--pool", "host", "--kv-cache-dtype", "bf16"]
                .into_iter()
                .map(str::to_string)
                .chain(["--perplexity-kld".into(), s(&kld)])
                .chain(["--perplexity-output".into(), s(&cmp)])
                .collect(),
        ] {
            let args: Vec<String> = common.iter().cloned().chain(extra).collect();
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = lse(&args);
            assert!(
                out.status.success(),
                "{args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Runs {
            _dir: dir,
            base,
            cmp,
        }
    })
}

fn json(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The `<svg …>…</svg>` element with this id.
fn svg<'a>(html: &'a str, id: &str) -> &'a str {
    let start = html
        .find(&format!("<svg class=\"chart\" id=\"{id}\""))
        .unwrap_or_else(|| panic!("no chart {id}"));
    let end = start + html[start..].find("</svg>").unwrap();
    &html[start..end]
}

/// Every value of attribute `attr` in `part`, in order.
fn attrs<'a>(part: &'a str, attr: &str) -> Vec<&'a str> {
    let key = format!(" {attr}=\"");
    part.match_indices(&key)
        .map(|(i, _)| {
            let rest = &part[i + key.len()..];
            &rest[..rest.find('"').unwrap()]
        })
        .collect()
}

fn numbers(part: &str, attr: &str) -> Vec<f64> {
    attrs(part, attr)
        .into_iter()
        .map(|v| v.parse().unwrap())
        .collect()
}

/// The marks of one series (`data-series="i"`) in a chart, as (x, value).
fn series(chart: &str, i: usize) -> Vec<(f64, f64)> {
    chart
        .lines()
        .filter(|l| l.contains(&format!("data-series=\"{i}\"")))
        .map(|l| (numbers(l, "data-x")[0], numbers(l, "data-value")[0]))
        .collect()
}

fn report(args: &[&str]) -> Output {
    lse(&[&["report"], args].concat())
}

#[test]
fn report_page_is_self_contained_and_its_numbers_are_the_runs() {
    let r = runs();
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    let out = report(&[
        r.base.to_str().unwrap(),
        r.cmp.to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("report written to"));
    let html = std::fs::read_to_string(&page).unwrap();
    let (base, cmp) = (json(&r.base), json(&r.cmp));

    // Self-contained: no scripts, no links, nothing fetched.
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.trim_end().ends_with("</html>"));
    for banned in [
        "<script", "http:", "https:", "src=", "href=", "<link", "@import", "url(",
    ] {
        assert!(!html.contains(banned), "the page contains {banned}");
    }
    assert_eq!(html.matches("<svg").count(), html.matches("</svg>").count());
    // Per-window perplexity, delta NLL, and for the comparison (only it has a base) the KLD
    // histogram and the KLD along the text.
    assert_eq!(html.matches("<svg class=\"chart\"").count(), 4);

    // The runs table: llama.cpp's PPL ± and the configuration, one column per run.
    let row = |field: &str| {
        let start = html.find(&format!("<tr data-field=\"{field}\">")).unwrap();
        &html[start..start + html[start..].find("</tr>").unwrap()]
    };
    let cells = |field: &str| -> Vec<String> {
        row(field)
            .split("<td class=\"num\">")
            .skip(1)
            .map(|c| c[..c.find("</td>").unwrap()].to_string())
            .collect()
    };
    for (i, run) in [&base, &cmp].into_iter().enumerate() {
        let ppl = format!(
            "{:.4} ± {:.5}",
            run["perplexity"].as_f64().unwrap(),
            run["perplexity_uncertainty"].as_f64().unwrap()
        );
        assert_eq!(cells("perplexity")[i], ppl);
        assert_eq!(
            cells("kv_cache_dtype")[i],
            run["config"]["kv_cache_dtype"].as_str().unwrap()
        );
        assert_eq!(
            cells("gemm_activations")[i],
            run["config"]["gemm_activations"]
                .as_str()
                .unwrap_or("reference")
        );
        assert_eq!(
            cells("device_arch")[i],
            run["config"]["device_arch"].as_str().unwrap()
        );
        assert_eq!(
            cells("windows_scored")[i],
            run["windows_scored"].to_string()
        );
    }

    // Per-window perplexity: one marker per window per run, at the first scored token.
    let chart = svg(&html, "ppl-by-window");
    for (i, run) in [&base, &cmp].into_iter().enumerate() {
        let want: Vec<(f64, f64)> = run["windows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| {
                (
                    w["first_target"].as_f64().unwrap(),
                    w["perplexity"].as_f64().unwrap(),
                )
            })
            .collect();
        assert!(want.len() > 2);
        assert_eq!(series(chart, i), want, "run {i}");
    }

    // Δ mean NLL per window: the comparison minus the base, window by window.
    let chart = svg(&html, "delta-nll-by-window");
    let want: Vec<(f64, f64)> = cmp["windows"]
        .as_array()
        .unwrap()
        .iter()
        .zip(base["windows"].as_array().unwrap())
        .map(|(c, b)| {
            (
                c["index"].as_f64().unwrap(),
                c["mean_nll"].as_f64().unwrap() - b["mean_nll"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(series(chart, 0), want);
    assert!(
        want.iter().any(|&(_, d)| d != 0.0),
        "bf16 KV moves something"
    );

    // The KLD histogram holds every token once, each in the bin its value falls in.
    let chart = svg(&html, "kld-histogram-1");
    let (lo, hi, count) = (
        numbers(chart, "data-lo"),
        numbers(chart, "data-hi"),
        numbers(chart, "data-count"),
    );
    let klds: Vec<f64> = cmp["token_stats"]["kld"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32 as f64)
        .collect();
    assert_eq!(klds.len() as u64, cmp["scored_tokens"].as_u64().unwrap());
    assert_eq!(count.iter().sum::<f64>(), klds.len() as f64);
    for b in 0..count.len() {
        let last = b + 1 == count.len();
        let n = klds
            .iter()
            .filter(|&&v| v >= lo[b] && (v < hi[b] || (last && v == hi[b])))
            .count();
        assert_eq!(n as f64, count[b], "bin {b} [{}, {})", lo[b], hi[b]);
    }
    // KLD along the text: mean and maximum over bins of consecutive scored tokens of one
    // window, each at the text position of its first token; one line per window.
    let per_bin = klds.len().div_ceil(200);
    let (mut mean, mut max) = (Vec::new(), Vec::new());
    let mut next = 0;
    for w in cmp["windows"].as_array().unwrap() {
        let first = w["first_target"].as_u64().unwrap() as usize;
        let scored = w["scored"].as_u64().unwrap() as usize;
        let mut start = 0;
        while start < scored {
            let end = (start + per_bin).min(scored);
            let bin = &klds[next + start..next + end];
            let x = (first + start) as f64;
            mean.push((x, bin.iter().sum::<f64>() / bin.len() as f64));
            max.push((x, bin.iter().cloned().fold(f64::NEG_INFINITY, f64::max)));
            start = end;
        }
        next += scored;
    }
    let chart = svg(&html, "kld-along-text-1");
    assert_eq!(
        chart.matches("<polyline").count(),
        2 * cmp["windows"].as_array().unwrap().len()
    );
    assert_eq!(series(chart, 1), max);
    let got = series(chart, 0);
    assert_eq!(got.len(), mean.len());
    for (g, w) in got.iter().zip(&mean) {
        assert_eq!(g.0, w.0);
        assert!((g.1 - w.1).abs() <= 1e-12 * w.1.abs(), "{g:?} vs {w:?}");
    }

    // And the llama.cpp table of the comparison, as stderr prints it.
    let mean_kld = cmp["kld_statistics"]["mean_kld"].as_f64().unwrap();
    assert!(
        html.contains(&format!("Mean    KLD: {mean_kld:10.6}")),
        "{html}"
    );
}

#[test]
fn one_run_makes_a_page_without_comparison_charts() {
    let r = runs();
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("one.html");
    let out = report(&[r.base.to_str().unwrap(), "--output", page.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let html = std::fs::read_to_string(&page).unwrap();
    assert_eq!(html.matches("<svg class=\"chart\"").count(), 1);
    assert!(!html.contains("kld-histogram") && !html.contains("kld-along-text"));
    assert!(!html.contains("delta-nll"));
    assert!(
        !html.contains("KL divergence:"),
        "the base run compared nothing"
    );
}

fn refused(args: &[&str], page: &Path) -> String {
    let mut all = args.to_vec();
    all.extend(["-o", page.to_str().unwrap()]);
    let out = report(&all);
    assert!(!out.status.success(), "lse report {args:?} succeeded");
    assert!(!page.exists(), "a refused report wrote {}", page.display());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn bad_inputs_are_refused_naming_file_and_field() {
    let r = runs();
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("report.html");
    let write = |name: &str, v: &Value| {
        let p = dir.path().join(name);
        std::fs::write(&p, serde_json::to_string(v).unwrap()).unwrap();
        p.to_str().unwrap().to_string()
    };
    let base = json(&r.base);
    let base_path = r.base.to_str().unwrap();

    let err = refused(&["/nonexistent/a.json"], &page);
    assert!(err.contains("/nonexistent/a.json: cannot read"), "{err}");

    let not_json = dir.path().join("not.json");
    std::fs::write(&not_json, "perplexity 12.3\n").unwrap();
    let err = refused(&[not_json.to_str().unwrap()], &page);
    assert!(err.contains("not.json: not JSON"), "{err}");

    let mut other = base.clone();
    other["object"] = "something.else".into();
    let err = refused(&[&write("object.json", &other)], &page);
    assert!(
        err.contains(
            "object.json: field `object` is \"something.else\", expected \"lse.perplexity\""
        ),
        "{err}"
    );

    let mut missing = base.clone();
    missing["config"]
        .as_object_mut()
        .unwrap()
        .remove("device_arch");
    let err = refused(&[&write("missing.json", &missing)], &page);
    assert!(
        err.contains("missing.json") && err.contains("`config`") && err.contains("device_arch"),
        "{err}"
    );

    let mut wrong_type = base.clone();
    wrong_type["ctx"] = "thirty-two".into();
    let err = refused(&[&write("type.json", &wrong_type)], &page);
    assert!(
        err.contains("type.json") && err.contains("`ctx`") && err.contains("expected u64"),
        "{err}"
    );

    let mut activations = base.clone();
    activations["config"]["gemm_activations"] = "fast".into();
    let err = refused(&[&write("act.json", &activations)], &page);
    assert!(
        err.contains("act.json")
            && err.contains("`config.gemm_activations`")
            && err.contains("expected one of `reference`, `weight-dtype`, `bf16x3`"),
        "{err}"
    );

    let mut no_windows = base.clone();
    no_windows.as_object_mut().unwrap().remove("windows");
    let err = refused(&[&write("nowin.json", &no_windows)], &page);
    assert!(
        err.contains("nowin.json: field `windows` is missing"),
        "{err}"
    );

    let mut short = base.clone();
    short["windows"].as_array_mut().unwrap().pop();
    let err = refused(&[&write("short.json", &short)], &page);
    assert!(err.contains("short.json: field `windows` holds"), "{err}");

    // Window counts whose sum overflows a u64: refused, not a panic.
    let mut huge = base.clone();
    for (i, w) in huge["windows"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .enumerate()
    {
        w["scored"] = if i < 2 { u64::MAX.into() } else { 0.into() };
    }
    let err = refused(&[&write("huge.json", &huge)], &page);
    assert!(
        err.contains("huge.json: the windows' `scored` add up to more than 2^64"),
        "{err}"
    );

    let mut tokens = base.clone();
    tokens["token_stats"]["nll"].as_array_mut().unwrap().pop();
    let err = refused(&[&write("tokens.json", &tokens)], &page);
    assert!(
        err.contains("tokens.json: field `token_stats.nll` holds"),
        "{err}"
    );

    // Runs over other tokens or windows cannot be compared.
    let mut other_text = base.clone();
    other_text["token_ids_sha256"] = "00".repeat(32).into();
    let err = refused(&[base_path, &write("text.json", &other_text)], &page);
    assert!(
        err.contains("text.json cannot be compared with") && err.contains("`token_ids_sha256`"),
        "{err}"
    );
    let mut other_ctx = base.clone();
    other_ctx["ctx"] = 64.into();
    let err = refused(&[base_path, &write("ctx.json", &other_ctx)], &page);
    assert!(
        err.contains("field `ctx` is 64 there, expected 32"),
        "{err}"
    );

    // The output must not be one of the inputs.
    let copy = dir.path().join("copy.json");
    std::fs::copy(&r.base, &copy).unwrap();
    let before = std::fs::read(&copy).unwrap();
    let out = report(&[copy.to_str().unwrap(), "-o", copy.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("is the input") && err.contains("copy.json"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(&copy).unwrap(),
        before,
        "the input was overwritten"
    );

    // ... also through a symlink to it.
    let alias = dir.path().join("alias.html");
    std::os::unix::fs::symlink(&copy, &alias).unwrap();
    let out = report(&[copy.to_str().unwrap(), "-o", alias.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("is the input"));
    assert_eq!(std::fs::read(&copy).unwrap(), before);

    // An output that cannot be written is refused before anything is read.
    let err = refused(&[base_path], &dir.path().join("no/such/dir/r.html"));
    assert!(err.contains("no/such/dir"), "{err}");

    // No file at all: clap's usage error.
    let out = report(&[]);
    assert!(!out.status.success());
}
