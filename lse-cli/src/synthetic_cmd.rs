//! `lse synthetic-model`: writes a Qwen3.5-architecture model with deterministic random
//! weights, for benchmarks and demos on machines with no checkpoint (nothing is downloaded).

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use lse_runtime::model::synthetic::{write_random_model, SyntheticSpec};

#[derive(Clone, Copy, ValueEnum)]
pub enum Shape {
    /// Qwen3.5-0.8B: hidden 1024, 24 layers (3 linear : 1 full), vocab 248,320, tied head, bf16.
    #[value(name = "qwen35-0.8b")]
    Qwen35_0_8b,
    /// A few-MB model with the same architecture.
    Tiny,
}

#[derive(Args)]
pub struct SyntheticArgs {
    /// Model shape.
    #[arg(long, value_enum, default_value = "qwen35-0.8b")]
    shape: Shape,
    /// Directory to write (created if missing).
    #[arg(long)]
    out: PathBuf,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Copy tokenizer.json and tokenizer_config.json from this directory, so the model scores text.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
}

pub fn run(args: SyntheticArgs) -> Result<(), String> {
    let spec = match args.shape {
        Shape::Qwen35_0_8b => SyntheticSpec::qwen35_0_8b(),
        Shape::Tiny => SyntheticSpec::tiny(),
    };
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    write_random_model(&args.out, &spec, args.seed).map_err(|e| e.to_string())?;
    if let Some(dir) = &args.tokenizer {
        for name in ["tokenizer.json", "tokenizer_config.json"] {
            let from = dir.join(name);
            std::fs::copy(&from, args.out.join(name))
                .map_err(|e| format!("{}: {e}", from.display()))?;
        }
    }
    eprintln!("wrote {}", args.out.display());
    Ok(())
}
