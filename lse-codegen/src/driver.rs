//! The build-script driver: compile every kernel for its AMDGPU targets, every host cpu and
//! every PTX arch, in parallel, and write the artefacts the kernels crate embeds. A job whose
//! outputs an earlier build left for the same kernel IR and the same codegen is not run again,
//! so editing one kernel recompiles that kernel only.

use crate::error::CodegenError;
use lse_dsl::ir::Kernel;
use lse_dsl::rt::{pack, PACKED_ASM, PACKED_LL, PACKED_PTX};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// What [`build_all`] did with its jobs (one kernel on one target each).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BuildStats {
    /// Jobs run through LLVM.
    pub compiled: usize,
    /// Jobs whose outputs from an earlier build were current and kept.
    pub reused: usize,
}

/// One unit of work: a kernel on one target.
#[derive(Clone, Copy)]
struct Job<'a> {
    kernel: &'a Kernel,
    /// The kernel's IR hash ([`lse_dsl::text::ir_hash`]).
    ir_hash: &'a str,
    target: Target<'a>,
}

#[derive(Clone, Copy)]
enum Target<'a> {
    Gpu(&'a str),
    Host(&'static str),
    Ptx(&'static str),
}

/// What a job leaves: the host object's path for host jobs, and whether it ran.
type JobResult = Result<(Option<PathBuf>, bool), CodegenError>;

fn write(path: &Path, data: impl AsRef<[u8]>) -> Result<(), CodegenError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| CodegenError::io(dir, e))?;
    }
    std::fs::write(path, data).map_err(|e| CodegenError::io(path, e))
}

impl Job<'_> {
    /// The kernel's output folder.
    fn dir(&self, out_dir: &Path) -> PathBuf {
        out_dir.join("loom").join(&self.kernel.fn_name)
    }

    /// The target's name in file names: the AMDGPU arch, the PTX arch or `host-<cpu>`.
    fn label(&self) -> String {
        match self.target {
            Target::Gpu(arch) => arch.to_string(),
            Target::Ptx(sm) => sm.to_string(),
            Target::Host(cpu) => format!("host-{cpu}"),
        }
    }

    /// The host object's path.
    fn object(&self, out_dir: &Path, cpu: &str) -> PathBuf {
        out_dir
            .join("loom-host-obj")
            .join(format!("{}-{cpu}.o", self.kernel.fn_name))
    }

    /// Every file the job writes.
    fn outputs(&self, out_dir: &Path) -> Vec<PathBuf> {
        let (dir, label) = (self.dir(out_dir), self.label());
        let exts: &[&str] = match self.target {
            Target::Gpu(_) => &["hsaco", PACKED_LL, PACKED_ASM, "json"],
            Target::Ptx(_) => &[PACKED_PTX, PACKED_LL],
            Target::Host(_) => &[PACKED_LL, PACKED_ASM],
        };
        let mut files: Vec<PathBuf> = exts
            .iter()
            .map(|ext| dir.join(format!("{label}.{ext}")))
            .collect();
        if let Target::Host(cpu) = self.target {
            files.push(self.object(out_dir, cpu));
        }
        files
    }

    /// The file recording which kernel IR and codegen wrote the outputs, written after them.
    fn stamp(&self, out_dir: &Path) -> PathBuf {
        self.dir(out_dir).join(format!("{}.stamp", self.label()))
    }

    /// Compiles the job and writes its outputs.
    fn compile(&self, out_dir: &Path) -> Result<(), CodegenError> {
        let k = self.kernel;
        let files = self.outputs(out_dir);
        // In the order of `outputs`.
        let texts: Vec<Vec<u8>> = match self.target {
            Target::Gpu(arch) => {
                let c = crate::compile_amdgpu(k, arch)?;
                vec![
                    c.code_object,
                    pack(&c.llvm_ir_opt),
                    pack(&c.asm),
                    c.metadata_json.into_bytes(),
                ]
            }
            Target::Ptx(sm) => {
                let c = crate::compile_nvptx(k, sm)?;
                vec![pack(&c.ptx), pack(&c.llvm_ir_opt)]
            }
            Target::Host(cpu) => {
                let c = crate::compile_host(&lse_dsl::wil::transform(k), cpu)?;
                vec![pack(&c.llvm_ir_opt), pack(&c.asm), c.object]
            }
        };
        debug_assert_eq!(files.len(), texts.len());
        for (path, data) in files.iter().zip(texts) {
            write(path, data)?;
        }
        Ok(())
    }

    /// Runs the job unless its stamp says its outputs are this kernel's under this codegen
    /// (`identity`; `None` reuses nothing) and they are all there.
    fn run(&self, out_dir: &Path, identity: Option<&str>) -> JobResult {
        let key = identity.map(|id| format!("{id} {}\n", self.ir_hash));
        let stamp = self.stamp(out_dir);
        let current = key.as_ref().is_some_and(|key| {
            std::fs::read_to_string(&stamp).is_ok_and(|s| s == *key)
                && self.outputs(out_dir).iter().all(|f| f.is_file())
        });
        if !current {
            // A failed job must not leave an earlier stamp beside half-written outputs.
            match std::fs::remove_file(&stamp) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(CodegenError::io(&stamp, e))
                }
                _ => {}
            }
            self.compile(out_dir)?;
            if let Some(key) = key {
                write(&stamp, key)?;
            }
        }
        let object = match self.target {
            Target::Host(cpu) => Some(self.object(out_dir, cpu)),
            _ => None,
        };
        Ok((object, !current))
    }
}

/// What identifies the code generator: a hash of the running executable (the build script,
/// which links this crate, `lse-dsl` and the LLVM bindings) and the LLVM library's version.
/// `None` (nothing reused) when the executable cannot be read.
fn codegen_identity() -> Option<String> {
    let exe = std::fs::read(std::env::current_exe().ok()?).ok()?;
    let (major, minor, patch) = inkwell::support::get_llvm_version();
    let digest = Sha256::digest(&exe);
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Some(format!("{hex}-llvm{major}.{minor}.{patch}"))
}

/// Compiles every kernel for each of its `targets` and for every `lse_dsl::rt::HOST_CPUS`
/// entry, and writes under `out_dir`:
/// - `loom/<fn_name>/<arch>.hsaco`, `<arch>.ll.deflate`, `<arch>.s.deflate`, `<arch>.json`
///   (metadata JSON);
/// - `loom/<fn_name>/host-<cpu>.ll.deflate`, `host-<cpu>.s.deflate`;
/// - `loom/<fn_name>/<sm>.ptx.deflate`, `<sm>.ll.deflate` for every `lse_dsl::rt::PTX_ARCHS`
///   entry;
///
/// (`.deflate`: the text packed by `lse_dsl::rt::pack`, which the binaries embed);
/// - `loom/<fn_name>/build.hash`: the kernel's IR hash, so stale outputs are recognisable;
/// - `loom/<fn_name>/<target>.stamp`: the codegen and IR hash that wrote that target's files;
/// - `libloom_host.a`: every host object (the objects themselves stay in `loom-host-obj/`).
///
/// A target whose stamp names this codegen and the kernel's IR, with all its files present,
/// keeps them (a build script's `out_dir` survives between builds). Work runs on all
/// available cores (each thread has its own LLVM context). Fails on the first error, or if
/// two kernels share a `fn_name`.
pub fn build_all(kernels: &[Kernel], out_dir: &Path) -> Result<BuildStats, CodegenError> {
    build_all_as(kernels, out_dir, codegen_identity().as_deref())
}

/// [`build_all`] with the codegen's identity given (`None`: compile everything).
pub(crate) fn build_all_as(
    kernels: &[Kernel],
    out_dir: &Path,
    identity: Option<&str>,
) -> Result<BuildStats, CodegenError> {
    let mut names = BTreeSet::new();
    for k in kernels {
        if !names.insert(k.fn_name.as_str()) {
            return Err(CodegenError::DuplicateKernel {
                fn_name: k.fn_name.clone(),
            });
        }
    }
    let hashes: Vec<String> = kernels.iter().map(lse_dsl::text::ir_hash).collect();
    let mut jobs = Vec::new();
    for (kernel, ir_hash) in kernels.iter().zip(&hashes) {
        let targets = kernel.targets.iter().map(|arch| Target::Gpu(arch));
        let hosts = lse_dsl::rt::HOST_CPUS.into_iter().map(Target::Host);
        let ptx = lse_dsl::rt::PTX_ARCHS.into_iter().map(Target::Ptx);
        jobs.extend(targets.chain(hosts).chain(ptx).map(|target| Job {
            kernel,
            ir_hash,
            target,
        }));
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
                let r = job.run(out_dir, identity);
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
    let mut stats = BuildStats::default();
    for (_, r) in results {
        let (object, compiled) = r?;
        objects.extend(object);
        if compiled {
            stats.compiled += 1;
        } else {
            stats.reused += 1;
        }
    }
    for (k, hash) in kernels.iter().zip(&hashes) {
        let path = out_dir.join("loom").join(&k.fn_name).join("build.hash");
        write(&path, hash)?;
    }
    let lib = out_dir.join("libloom_host.a");
    crate::link::archive(&lib, &objects).map_err(|m| CodegenError::Io {
        path: lib.clone(),
        message: m,
    })?;
    Ok(stats)
}
