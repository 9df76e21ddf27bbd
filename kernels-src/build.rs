//! Compiles every LOOM kernel in `src/` through LLVM at build time: AMDGPU code objects and
//! host machine code, written under `$OUT_DIR` where `#[loom::kernel]` picks them up, plus
//! the static archive `libloom_host.a` with every host entry point.

use std::path::{Path, PathBuf};

fn run() -> Result<(), String> {
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").ok_or("CARGO_MANIFEST_DIR is not set")?;
    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").ok_or("OUT_DIR is not set")?);
    let src_dir = Path::new(&manifest).join("src");
    println!("cargo:rerun-if-changed={}", src_dir.display());
    println!("cargo:rerun-if-env-changed=LLVM_SYS_191_PREFIX");
    let paths = lse_dsl::frontend::rust_files(&src_dir)
        .map_err(|e| format!("listing {}: {e}", src_dir.display()))?;
    let mut files = Vec::new();
    for path in paths {
        println!("cargo:rerun-if-changed={}", path.display());
        let src = std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        files.push((path, src));
    }
    let kernels = lse_dsl::frontend::kernels_in_crate(&files)?;
    let stats = lse_codegen::build_all(&kernels, &out_dir).map_err(|e| e.to_string())?;
    // Shown by `cargo build -vv`: how much of the codegen an edit cost.
    println!(
        "LOOM kernels: {} jobs compiled, {} kept from the last build",
        stats.compiled, stats.reused
    );
    println!("cargo:rustc-link-search=native={}", out_dir.display());
    println!("cargo:rustc-link-lib=static=loom_host");
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: LOOM kernel build failed:\n{e}");
        std::process::exit(1);
    }
}
