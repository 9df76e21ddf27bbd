//! `lse report`: one self-contained HTML file from one or more `lse perplexity` JSON
//! reports; the first is the reference the others are compared with.

mod html;
mod load;
mod svg;

use std::path::PathBuf;

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

/// Reads and checks every run, then writes the page atomically and says where it is.
pub fn run(args: ReportArgs) -> Result<(), String> {
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
