//! `lse report`: one self-contained HTML file from one or more `lse perplexity` JSON
//! reports; the first is the reference the others are compared with.

mod html;
mod load;
mod svg;

use std::path::{Path, PathBuf};

use clap::Args;
use lse_runtime::scoring;

/// Options of `lse report`.
#[derive(Args)]
pub struct ReportArgs {
    /// `lse perplexity` JSON reports; the first is the reference for comparisons.
    #[arg(required = true, value_name = "RUN.json")]
    runs: Vec<PathBuf>,
    /// Where to write the HTML (written whole or not at all).
    #[arg(short, long, value_name = "PATH", default_value = "report.html")]
    output: PathBuf,
}

/// Refuses an output that is one of the inputs (it would replace a report with the page),
/// by the file the paths lead to (symlinks, hard links and spellings included).
fn check_not_an_input(output: &Path, runs: &[PathBuf]) -> Result<(), String> {
    match runs.iter().find(|r| scoring::same_file(output, r)) {
        Some(run) => Err(format!(
            "--output {} is the input {}: the page would replace the report; choose another output",
            output.display(),
            run.display()
        )),
        None => Ok(()),
    }
}

/// Reads and checks every run, then writes the page atomically and says where it is.
pub fn run(args: ReportArgs) -> Result<(), String> {
    check_not_an_input(&args.output, &args.runs)?;
    scoring::check_writable(&args.output).map_err(|e| e.to_string())?;
    let runs = args
        .runs
        .iter()
        .map(|p| load::load(p))
        .collect::<Result<Vec<_>, _>>()?;
    for other in &runs[1..] {
        load::check_comparable(&runs[0], other)?;
    }
    let page = html::document(&runs);
    scoring::atomic::write_atomic(&args.output, page.as_bytes()).map_err(|e| e.to_string())?;
    eprintln!("report written to {}", args.output.display());
    Ok(())
}

#[cfg(test)]
mod fuzz_tests {
    //! Short structural fuzzing of the whole `lse report` path (parse, check, compare,
    //! render) on mutations of real reports (`fuzz/corpus/report_json`): it must never
    //! panic, and a report it accepts renders.

    use super::*;
    use serde_json::Value;

    /// Mutations per seed: well under a second.
    const MUTATIONS: usize = 3000;

    use lse_runtime::fuzz_targets::Rng;

    fn replacement(rng: &mut Rng) -> Value {
        let choices = [
            Value::from(0),
            Value::from(-1),
            Value::from(u64::MAX),
            Value::from(1u64 << 53),
            Value::from(1e308),
            Value::from(-1e308),
            Value::from(5e-324),
            Value::from(0.5),
            Value::from("x"),
            Value::Null,
            Value::Array(Vec::new()),
            Value::Object(Default::default()),
        ];
        choices[rng.below(choices.len())].clone()
    }

    /// Replaces, removes or duplicates one randomly chosen node of `v`.
    fn mutate(rng: &mut Rng, v: &mut Value, depth: usize) {
        let descend = depth < 6 && rng.below(3) != 0;
        match v {
            Value::Object(map) if !map.is_empty() => {
                let key = map
                    .keys()
                    .nth(rng.below(map.len()))
                    .cloned()
                    .unwrap_or_default();
                if descend {
                    if let Some(child) = map.get_mut(&key) {
                        return mutate(rng, child, depth + 1);
                    }
                }
                if rng.below(4) == 0 {
                    map.remove(&key);
                } else {
                    map.insert(key, replacement(rng));
                }
            }
            Value::Array(items) if !items.is_empty() => {
                let i = rng.below(items.len());
                if descend {
                    return mutate(rng, &mut items[i], depth + 1);
                }
                match rng.below(3) {
                    0 => {
                        items.remove(i);
                    }
                    1 => {
                        let copy = items[i].clone();
                        items.push(copy);
                    }
                    _ => items[i] = replacement(rng),
                }
            }
            _ => *v = replacement(rng),
        }
    }

    fn seeds() -> Vec<(PathBuf, Value)> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/report_json");
        let mut seeds: Vec<(PathBuf, Value)> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| {
                let path = e.unwrap().path();
                let value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
                (path, value)
            })
            .collect();
        seeds.sort_by(|a, b| a.0.cmp(&b.0));
        seeds
    }

    #[test]
    fn the_report_path_survives_mutated_reports() {
        let seeds = seeds();
        assert!(seeds.len() >= 2);
        let mut rng = Rng(0x5eed_1234_abcd_ef01);
        let mut accepted = 0;
        for (path, seed) in &seeds {
            let reference = load::parse(&serde_json::to_vec(seed).unwrap(), path).unwrap();
            html::document(std::slice::from_ref(&reference));
            for _ in 0..MUTATIONS {
                let mut v = seed.clone();
                for _ in 0..1 + rng.below(3) {
                    mutate(&mut rng, &mut v, 0);
                }
                let bytes = serde_json::to_vec(&v).unwrap();
                let outcome = std::panic::catch_unwind(|| {
                    let Ok(run) = load::parse(&bytes, Path::new("mutated.json")) else {
                        return false;
                    };
                    let again = load::parse(&bytes, Path::new("again.json")).unwrap();
                    let _ = load::check_comparable(&run, &again);
                    let page = html::document(&[run, again]);
                    assert!(page.contains("</html>"));
                    true
                });
                match outcome {
                    Ok(ok) => accepted += usize::from(ok),
                    Err(_) => panic!(
                        "lse report panicked on a mutation of {}: {}",
                        path.display(),
                        String::from_utf8_lossy(&bytes)
                    ),
                }
            }
        }
        // Some mutations keep a valid report (a changed statistic), so rendering is reached.
        assert!(accepted > 0);
    }
}
