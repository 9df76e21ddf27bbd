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

/// Refuses an output that is one of the inputs (it would replace a report with the page).
fn check_not_an_input(output: &Path, runs: &[PathBuf]) -> Result<(), String> {
    let Ok(out) = output.canonicalize() else {
        // Not there yet, so it is none of the inputs.
        return Ok(());
    };
    match runs
        .iter()
        .find(|r| r.canonicalize().is_ok_and(|r| r == out))
    {
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
