//! The build-script driver: compile every kernel for its AMDGPU targets, every host cpu and
//! every PTX arch,
//! in parallel, and write the artefacts the kernels crate embeds.

use crate::error::CodegenError;
use lse_dsl::ir::Kernel;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// What a job leaves: the host object's path for host jobs.
type JobResult = Result<Option<PathBuf>, CodegenError>;

/// One unit of work: a kernel on one target.
#[derive(Clone, Copy)]
enum Job<'a> {
    Gpu(&'a Kernel, &'a str),
    Host(&'a Kernel, &'static str),
    Ptx(&'a Kernel, &'static str),
}

fn write(path: &Path, data: impl AsRef<[u8]>) -> Result<(), CodegenError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| CodegenError::io(dir, e))?;
    }
    std::fs::write(path, data).map_err(|e| CodegenError::io(path, e))
}

/// Runs one job, writing its files; returns the host object's path for host jobs.
fn run_job(job: Job, out_dir: &Path) -> JobResult {
    match job {
        Job::Gpu(k, arch) => {
            let c = crate::compile_amdgpu(k, arch)?;
            let dir = out_dir.join("loom").join(&k.fn_name);
            write(&dir.join(format!("{arch}.hsaco")), &c.code_object)?;
            write(&dir.join(format!("{arch}.ll")), &c.llvm_ir_opt)?;
            write(&dir.join(format!("{arch}.s")), &c.asm)?;
            write(&dir.join(format!("{arch}.json")), &c.metadata_json)?;
            Ok(None)
        }
        Job::Ptx(k, sm) => {
            let c = crate::compile_nvptx(k, sm)?;
            let dir = out_dir.join("loom").join(&k.fn_name);
            write(&dir.join(format!("{sm}.ptx")), &c.ptx)?;
            write(&dir.join(format!("{sm}.ll")), &c.llvm_ir_opt)?;
            Ok(None)
        }
        Job::Host(k, cpu) => {
            let w = lse_dsl::wil::transform(k);
            let c = crate::compile_host(&w, cpu)?;
            let dir = out_dir.join("loom").join(&k.fn_name);
            write(&dir.join(format!("host-{cpu}.ll")), &c.llvm_ir_opt)?;
            write(&dir.join(format!("host-{cpu}.s")), &c.asm)?;
            let obj = out_dir
                .join("loom-host-obj")
                .join(format!("{}-{cpu}.o", k.fn_name));
            write(&obj, &c.object)?;
            Ok(Some(obj))
        }
    }
}

/// Compiles every kernel for each of its `targets` and for every `lse_dsl::rt::HOST_CPUS`
/// entry, and writes under `out_dir`:
/// - `loom/<fn_name>/<arch>.hsaco`, `<arch>.ll`, `<arch>.s`, `<arch>.json` (metadata JSON);
/// - `loom/<fn_name>/host-<cpu>.ll`, `host-<cpu>.s`;
/// - `loom/<fn_name>/<sm>.ptx`, `<sm>.ll` for every `lse_dsl::rt::PTX_ARCHS` entry;
/// - `loom/<fn_name>/build.hash`: the kernel's IR hash, so stale outputs are recognisable;
/// - `libloom_host.a`: every host object (the objects themselves stay in `loom-host-obj/`).
///
/// Work runs on all available cores (each thread has its own LLVM context). Fails on the
/// first error, or if two kernels share a `fn_name`.
pub fn build_all(kernels: &[Kernel], out_dir: &Path) -> Result<(), CodegenError> {
    let mut names = BTreeSet::new();
    for k in kernels {
        if !names.insert(k.fn_name.as_str()) {
            return Err(CodegenError::DuplicateKernel {
                fn_name: k.fn_name.clone(),
            });
        }
    }
    let mut jobs = Vec::new();
    for k in kernels {
        for arch in &k.targets {
            jobs.push(Job::Gpu(k, arch));
        }
        for cpu in lse_dsl::rt::HOST_CPUS {
            jobs.push(Job::Host(k, cpu));
        }
        for sm in lse_dsl::rt::PTX_ARCHS {
            jobs.push(Job::Ptx(k, sm));
        }
    }
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .min(jobs.len().max(1));
    let queue = Mutex::new(jobs.iter().enumerate());
    let results: Mutex<Vec<(usize, JobResult)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let next = queue.lock().unwrap_or_else(|p| p.into_inner()).next();
                let Some((i, job)) = next else { break };
                let r = run_job(*job, out_dir);
                results
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push((i, r));
            });
        }
    });
    let mut results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    results.sort_by_key(|(i, _)| *i);
    let mut objects = Vec::new();
    for (_, r) in results {
        if let Some(obj) = r? {
            objects.push(obj);
        }
    }
    for k in kernels {
        let path = out_dir.join("loom").join(&k.fn_name).join("build.hash");
        write(&path, kernel_hash(k))?;
    }
    let lib = out_dir.join("libloom_host.a");
    crate::link::archive(&lib, &objects).map_err(|m| CodegenError::Io {
        path: lib.clone(),
        message: m,
    })?;
    Ok(())
}

/// The hash written to `build.hash`.
fn kernel_hash(k: &Kernel) -> String {
    lse_dsl::text::ir_hash(k)
}
