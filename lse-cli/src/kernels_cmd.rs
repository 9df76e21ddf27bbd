//! `lse kernels list` and `lse kernels show`: every stage of a LOOM kernel, one command away.

use std::fmt::Write as _;

use clap::{Subcommand, ValueEnum};
use lse_dsl::rt::KernelDef;

use crate::stdout::{self, Stop};

#[derive(Subcommand)]
pub enum KernelsCommand {
    /// One line per kernel: id, IR hash, workgroup size, shared memory, targets (AMDGPU and
    /// PTX archs) and the
    /// registers each AMDGPU code object uses.
    List,
    /// Print one stage of a kernel.
    Show {
        /// Kernel id (`logits.lse_pick.v1`), name (`logits.lse_pick`) or Rust function name.
        name: String,
        /// Which stage to print.
        #[arg(long, value_enum, default_value = "ir")]
        emit: Emit,
        /// AMDGPU arch for `llvm`/`asm` (e.g. gfx1201), NVIDIA arch for `ptx`/`llvm`
        /// (sm_80, sm_90), or a host level for `llvm`/`asm` (x86-64, x86-64-v3, x86-64-v4,
        /// x86-64-v4-bf16, x86-64-v4-amx; each is built whatever this CPU has); without it,
        /// the host code this CPU runs.
        #[arg(long)]
        arch: Option<String>,
    },
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Emit {
    /// The LOOM IR.
    Ir,
    /// Optimised LLVM IR.
    Llvm,
    /// Machine assembly.
    Asm,
    /// The generated Rust CPU code.
    Rust,
    /// NVIDIA PTX (needs `--arch sm_80` or `--arch sm_90`).
    Ptx,
}

pub fn run(cmd: KernelsCommand) -> Result<(), Stop> {
    match cmd {
        KernelsCommand::List => stdout::print(&list()),
        KernelsCommand::Show { name, emit, arch } => {
            let kernel = lse_kernels::find(&name).ok_or_else(|| {
                let known: Vec<&str> = lse_kernels::ALL.iter().map(|k| k.id).collect();
                format!(
                    "no kernel named {name:?}; known kernels: {}",
                    known.join(", ")
                )
            })?;
            stdout::print(&show(kernel, emit, arch.as_deref())?)
        }
    }
}

/// Registers and LDS of one code object, from its metadata summary.
fn registers(meta_json: &str) -> String {
    let v: serde_json::Value = match serde_json::from_str(meta_json) {
        Ok(v) => v,
        Err(_) => return "?".into(),
    };
    let k = v.get("kernels").and_then(|k| k.get(0)).unwrap_or(&v);
    let field = |name: &str| {
        k.get(name)
            .and_then(|x| x.as_u64())
            .map_or("?".to_string(), |x| x.to_string())
    };
    format!(
        "sgpr {} vgpr {} lds {} scratch {}",
        field("sgpr_count"),
        field("vgpr_count"),
        field("group_segment_fixed_size"),
        field("private_segment_fixed_size")
    )
}

fn list() -> String {
    let mut out = String::new();
    for k in lse_kernels::ALL {
        let targets: Vec<&str> = k
            .gpu
            .iter()
            .map(|g| g.arch)
            .chain(k.ptx.iter().map(|m| m.arch))
            .collect();
        let _ = writeln!(
            out,
            "{}  ir {}  workgroup {}  shared {} B  targets {}",
            k.id,
            &k.ir_hash[..12.min(k.ir_hash.len())],
            k.workgroup_size,
            k.shared_bytes,
            if targets.is_empty() {
                "-".to_string()
            } else {
                targets.join(",")
            }
        );
        for g in k.gpu {
            let _ = writeln!(out, "    {:8} {}", g.arch, registers(g.metadata_json));
        }
    }
    out
}

/// The PTX archs `k` was lowered for (or `-`).
fn ptx_archs(k: &KernelDef) -> Vec<&'static str> {
    let v: Vec<&'static str> = k.ptx.iter().map(|m| m.arch).collect();
    if v.is_empty() {
        vec!["-"]
    } else {
        v
    }
}

fn show(k: &KernelDef, emit: Emit, arch: Option<&str>) -> Result<String, String> {
    let text = match (emit, arch) {
        (Emit::Ir, _) => k.ir_text.to_string(),
        (Emit::Rust, _) => k.rust_src.to_string(),
        (Emit::Ptx, None) => {
            return Err(format!(
                "--emit ptx needs --arch, one of: {}",
                ptx_archs(k).join(", ")
            ))
        }
        (Emit::Ptx | Emit::Llvm, Some(arch)) if arch.starts_with("sm_") => {
            let m = k.ptx.iter().find(|m| m.arch == arch).ok_or_else(|| {
                format!(
                    "{} has no PTX for {arch}; built for: {}",
                    k.id,
                    ptx_archs(k).join(", ")
                )
            })?;
            if matches!(emit, Emit::Ptx) {
                m.ptx
            } else {
                m.llvm_ir
            }
            .unpack()?
        }
        (Emit::Ptx, Some(arch)) => {
            return Err(format!(
                "--emit ptx needs an NVIDIA --arch, not {arch}; one of: {}",
                ptx_archs(k).join(", ")
            ))
        }
        (Emit::Llvm | Emit::Asm, Some(level)) if level.starts_with("x86-64") => {
            host_stage(k, emit, level)?
        }
        (Emit::Llvm | Emit::Asm, Some(arch)) => {
            let obj = k.gpu.iter().find(|g| g.arch == arch).ok_or_else(|| {
                let archs: Vec<&str> = k.gpu.iter().map(|g| g.arch).collect();
                format!(
                    "{} has no code object for {arch}; built for: {}",
                    k.id,
                    archs.join(", ")
                )
            })?;
            if matches!(emit, Emit::Llvm) {
                obj.llvm_ir
            } else {
                obj.asm
            }
            .unpack()?
        }
        (Emit::Llvm | Emit::Asm, None) => host_stage(k, emit, lse_runtime::device::host_cpu())?,
    };
    Ok(text)
}

/// The optimised LLVM IR or assembly of host level `level`.
fn host_stage(k: &KernelDef, emit: Emit, level: &str) -> Result<String, String> {
    let v = k.host.iter().find(|v| v.cpu == level).ok_or_else(|| {
        let levels: Vec<&str> = k.host.iter().map(|v| v.cpu).collect();
        format!(
            "{} has no host code for {level}; built for: {}",
            k.id,
            levels.join(", ")
        )
    })?;
    if matches!(emit, Emit::Llvm) {
        v.llvm_ir
    } else {
        v.asm
    }
    .unpack()
}
