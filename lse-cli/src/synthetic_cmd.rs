//! `lse synthetic-model`: writes a Qwen3.5-architecture model with deterministic random
//! weights, for benchmarks and demos on machines with no checkpoint (nothing is downloaded).
//!
//! The model is written into a fresh temporary directory next to `--out`, then renamed into
//! place: an interrupted or failed run leaves no half-written model, nothing is written
//! through a symlink, and an existing non-empty directory is replaced only with `--force`.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use lse_runtime::model::synthetic::{write_random_model, SyntheticSpec};
use lse_runtime::scoring::{output_path::parent_dir, track_temp, untrack_temp};

#[derive(Clone, Copy, ValueEnum)]
pub enum Shape {
    /// Qwen3.5-0.8B: hidden 1024, 24 layers (3 linear : 1 full), vocab 248,320, tied head, bf16.
    #[value(name = "qwen35-0.8b")]
    Qwen35_0_8b,
    /// Qwen3.5-35B-A3B's widths and 256 experts (8 routed) on 4 of its 40 layers, untied head, bf16: 8.8 GB.
    #[value(name = "qwen35-35b-a3b-4l")]
    Qwen35_35bA3b4l,
    /// A few-MB model with the same architecture.
    Tiny,
}

#[derive(Args)]
pub struct SyntheticArgs {
    /// Model shape.
    #[arg(long, value_enum, default_value = "qwen35-0.8b")]
    shape: Shape,
    /// Directory to write: must not exist yet or be empty (see --force); never a symlink.
    #[arg(long)]
    out: PathBuf,
    /// Replace a non-empty --out directory (its old contents are deleted).
    #[arg(long)]
    force: bool,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Copy tokenizer.json and tokenizer_config.json from this directory, so the model scores text.
    #[arg(long)]
    tokenizer: Option<PathBuf>,
}

/// What is at `--out` now.
enum Existing {
    Nothing,
    EmptyDir,
    FullDir,
}

/// Refuses an `--out` that is a symlink, not a directory, or (without `--force`) a
/// non-empty directory.
fn check_out(out: &Path, force: bool) -> Result<Existing, String> {
    let shown = out.display();
    let meta = match fs::symlink_metadata(out) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Existing::Nothing),
        Err(e) => return Err(format!("{shown}: {e}")),
    };
    if meta.file_type().is_symlink() {
        return Err(format!(
            "--out {shown} is a symlink: synthetic-model never writes through one; give the \
             directory's real path"
        ));
    }
    if !meta.is_dir() {
        return Err(format!(
            "--out {shown} exists and is not a directory: give a new or empty directory"
        ));
    }
    let entries = fs::read_dir(out)
        .map_err(|e| format!("{shown}: {e}"))?
        .count();
    match (entries, force) {
        (0, _) => Ok(Existing::EmptyDir),
        (_, true) => Ok(Existing::FullDir),
        (n, false) => Err(format!(
            "--out {shown} is not empty ({n} entries): pass --force to replace it, or give a \
             new directory"
        )),
    }
}

/// A fresh sibling of `out` named `.NAME.PID.TAG`.
fn sibling(out: &Path, tag: &str) -> Result<PathBuf, String> {
    let name = out
        .file_name()
        .ok_or_else(|| format!("--out {} does not name a directory", out.display()))?;
    let mut temp = OsString::from(".");
    temp.push(name);
    temp.push(format!(".{}.{tag}", std::process::id()));
    Ok(parent_dir(out).join(temp))
}

/// Writes the model and tokenizer files into the new directory `dir`.
fn write_model(dir: &Path, args: &SyntheticArgs, spec: &SyntheticSpec) -> Result<(), String> {
    write_random_model(dir, spec, args.seed).map_err(|e| e.to_string())?;
    if let Some(from_dir) = &args.tokenizer {
        for name in ["tokenizer.json", "tokenizer_config.json"] {
            let from = from_dir.join(name);
            fs::copy(&from, dir.join(name)).map_err(|e| format!("{}: {e}", from.display()))?;
        }
    }
    Ok(())
}

/// Moves the finished `temp` directory onto `out`.
fn commit(temp: &Path, out: &Path, existing: Existing) -> Result<(), String> {
    let fail = |e: std::io::Error| format!("cannot move the model into {}: {e}", out.display());
    match existing {
        // rename(2) replaces an empty directory in one step.
        Existing::Nothing | Existing::EmptyDir => fs::rename(temp, out).map_err(fail),
        Existing::FullDir => {
            let old = sibling(out, "lse-old")?;
            fs::rename(out, &old).map_err(fail)?;
            if let Err(e) = fs::rename(temp, out) {
                let _ = fs::rename(&old, out);
                return Err(fail(e));
            }
            fs::remove_dir_all(&old)
                .map_err(|e| format!("{}: cannot remove the old model: {e}", old.display()))
        }
    }
}

pub fn run(args: SyntheticArgs) -> Result<(), String> {
    let spec = match args.shape {
        Shape::Qwen35_0_8b => SyntheticSpec::qwen35_0_8b(),
        Shape::Qwen35_35bA3b4l => SyntheticSpec::qwen35_35b_a3b_4l(),
        Shape::Tiny => SyntheticSpec::tiny(),
    };
    let existing = check_out(&args.out, args.force)?;
    let parent = parent_dir(&args.out);
    if !parent.is_dir() {
        return Err(format!(
            "--out {}: directory {} does not exist",
            args.out.display(),
            parent.display()
        ));
    }
    let temp = sibling(&args.out, "lse-tmp")?;
    fs::create_dir(&temp).map_err(|e| format!("{}: {e}", temp.display()))?;
    track_temp(&temp);
    let result = write_model(&temp, &args, &spec).and_then(|()| commit(&temp, &args.out, existing));
    if result.is_err() {
        let _ = fs::remove_dir_all(&temp);
    }
    untrack_temp(&temp);
    result?;
    eprintln!("wrote {}", args.out.display());
    Ok(())
}
