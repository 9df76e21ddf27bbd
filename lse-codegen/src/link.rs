//! External LLVM tools: `ld.lld -shared` for AMDGPU code objects and `llvm-ar` for the host
//! archive, found under `$LLVM_SYS_191_PREFIX/bin`, then as `*-19` on `PATH`, then under
//! `/usr/lib/llvm-19/bin`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Finds an LLVM tool (`ld.lld`, `llvm-ar`).
pub(crate) fn find_tool(name: &str) -> Result<PathBuf, String> {
    let mut candidates = Vec::new();
    if let Some(prefix) = std::env::var_os("LLVM_SYS_191_PREFIX") {
        candidates.push(Path::new(&prefix).join("bin").join(name));
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            candidates.push(dir.join(format!("{name}-19")));
        }
    }
    candidates.push(Path::new("/usr/lib/llvm-19/bin").join(name));
    candidates.into_iter().find(|p| p.is_file()).ok_or_else(|| {
        format!("could not find `{name}` (looked in $LLVM_SYS_191_PREFIX/bin, `{name}-19` on PATH, /usr/lib/llvm-19/bin)")
    })
}

/// Runs `cmd`, turning a spawn failure or non-zero exit into a message with its stderr.
fn run(mut cmd: Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("running {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Links one AMDGPU relocatable object into a shared HSA code object.
pub(crate) fn link_code_object(object: &[u8], name: &str) -> Result<Vec<u8>, String> {
    let lld = find_tool("ld.lld")?;
    let dir = tempfile::tempdir().map_err(|e| format!("creating a temp dir: {e}"))?;
    let obj = dir.path().join(format!("{name}.o"));
    let out = dir.path().join(format!("{name}.hsaco"));
    std::fs::write(&obj, object).map_err(|e| format!("writing {}: {e}", obj.display()))?;
    let mut cmd = Command::new(lld);
    cmd.arg("--threads=1")
        .arg("-shared")
        .arg(&obj)
        .arg("-o")
        .arg(&out);
    run(cmd)?;
    std::fs::read(&out).map_err(|e| format!("reading {}: {e}", out.display()))
}

/// Creates (replacing) the static archive `archive` from `objects`.
pub(crate) fn archive(archive: &Path, objects: &[PathBuf]) -> Result<(), String> {
    let ar = find_tool("llvm-ar")?;
    if archive.exists() {
        std::fs::remove_file(archive)
            .map_err(|e| format!("removing {}: {e}", archive.display()))?;
    }
    let mut cmd = Command::new(ar);
    cmd.arg("rcs").arg(archive).args(objects);
    run(cmd)
}
