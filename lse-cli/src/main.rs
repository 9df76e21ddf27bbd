//! `lse`: LSE's command line.

mod allocator;
mod kernels_cmd;
mod perplexity_cmd;
mod progress_bar;
mod report;
mod signals;
mod stdout;
mod summary;
mod synthetic_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use stdout::Stop;

#[derive(Parser)]
#[command(
    name = "lse",
    version,
    about = "Score text with Qwen3.5 hybrid models through LOOM kernels"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Inspect the LOOM kernels built into this binary.
    #[command(subcommand)]
    Kernels(kernels_cmd::KernelsCommand),
    /// Score a text's perplexity (and KL divergence against a base), as llama-perplexity does.
    Perplexity(Box<perplexity_cmd::PerplexityArgs>),
    /// Write one self-contained HTML report from `lse perplexity` JSON files.
    Report(report::ReportArgs),
    /// Write a Qwen3.5-architecture model with deterministic random weights.
    SyntheticModel(synthetic_cmd::SyntheticArgs),
}

fn main() -> ExitCode {
    allocator::keep_freed_memory();
    // Ctrl-C, TERM and HUP leave no partial output: remove in-flight temporary files, exit.
    signals::install();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Kernels(cmd) => kernels_cmd::run(cmd),
        Command::Perplexity(args) => perplexity_cmd::run(*args),
        Command::Report(args) => report::run(args).map_err(Stop::Failed),
        Command::SyntheticModel(args) => synthetic_cmd::run(args).map_err(Stop::Failed),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(stop) => stop.report(),
    }
}
