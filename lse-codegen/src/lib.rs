//! LOOM IR to LLVM 19: AMDGPU code objects, NVIDIA PTX and host CPU machine code.
//!
//! Both targets go through one LLVM IR *text* emitter (module `emit`); the text is parsed with
//! inkwell, verified, optimised with `default<O3>` and emitted as assembly and an object.
//! AMDGPU objects are linked into HSA code objects with `ld.lld -shared`; host objects are
//! collected into the static archive `libloom_host.a` by [`build_all`].

mod amdgpu;
mod driver;
mod emit;
mod error;
mod gpu;
mod host;
mod inspect;
mod link;
mod llvm;
mod math;
mod nvptx;
#[cfg(test)]
mod tests;

pub use driver::{build_all, BuildStats};
pub use error::{CodegenError, Stage};
pub use inspect::{inspect_code_object, ArgInfo, CodeObjectInfo, KernelInfo, SymbolInfo};

use lse_dsl::ir::Kernel;
use lse_dsl::wil::WilKernel;

/// The unoptimised LLVM IR text of `k` for AMDGPU `arch`. If the kernel cannot be lowered
/// (or `arch` is unknown to LLVM), the text starts with `; LOOM emit error: ...` and is not
/// valid LLVM IR; [`compile_amdgpu`] reports such errors as `CodegenError`s.
pub fn amdgpu_llvm_text(k: &Kernel, arch: &str) -> String {
    try_amdgpu_text(k, arch)
        .unwrap_or_else(|e| format!("; LOOM emit error: {e}\nloom_emit_error\n"))
}

/// The unoptimised NVPTX LLVM IR text of `k` for NVIDIA `sm` (`sm_80` or `sm_90`). Errors
/// are reported as in [`amdgpu_llvm_text`].
pub fn nvptx_llvm_text(k: &Kernel, sm: &str) -> String {
    try_nvptx_text(k, sm).unwrap_or_else(|e| format!("; LOOM emit error: {e}\nloom_emit_error\n"))
}

fn try_nvptx_text(k: &Kernel, sm: &str) -> Result<String, CodegenError> {
    let err = |(stage, msg): (Stage, String)| CodegenError::compile(&k.fn_name, sm, stage, msg);
    let features = nvptx::ptx_features(sm).map_err(|m| err((Stage::Target, m)))?;
    let dl = llvm::data_layout_with(llvm::NVPTX_TRIPLE, sm, features).map_err(err)?;
    nvptx::module_text(k, sm, &dl).map_err(|m| err((Stage::Emit, m)))
}

/// One kernel lowered to PTX for one NVIDIA architecture.
#[derive(Clone, Debug)]
pub struct CompiledPtx {
    /// `sm_80` or `sm_90`.
    pub sm: String,
    /// NVPTX LLVM IR after `default<O3>`.
    pub llvm_ir_opt: String,
    /// The PTX text (the target machine's assembly output).
    pub ptx: String,
}

/// Compiles `k` to PTX for NVIDIA `sm` (`sm_80` or `sm_90`).
pub fn compile_nvptx(k: &Kernel, sm: &str) -> Result<CompiledPtx, CodegenError> {
    let text = try_nvptx_text(k, sm)?;
    let err = |(stage, msg): (Stage, String)| CodegenError::compile(&k.fn_name, sm, stage, msg);
    let features = nvptx::ptx_features(sm).map_err(|m| err((Stage::Target, m)))?;
    let (llvm_ir_opt, ptx) =
        llvm::compile_text_asm(&text, &k.fn_name, llvm::NVPTX_TRIPLE, sm, features).map_err(err)?;
    Ok(CompiledPtx {
        sm: sm.to_string(),
        llvm_ir_opt,
        ptx,
    })
}

/// The unoptimised LLVM IR text of the host entry of `w` for host `cpu` (an LLVM x86 cpu
/// name such as `x86-64-v3`). Errors are reported as in [`amdgpu_llvm_text`].
pub fn host_llvm_text(w: &WilKernel, cpu: &str) -> String {
    try_host_text(w, cpu).unwrap_or_else(|e| format!("; LOOM emit error: {e}\nloom_emit_error\n"))
}

fn try_amdgpu_text(k: &Kernel, arch: &str) -> Result<String, CodegenError> {
    let err = |(stage, msg): (Stage, String)| CodegenError::compile(&k.fn_name, arch, stage, msg);
    inspect::check_arch(arch).map_err(|m| err((Stage::Target, m)))?;
    let dl = llvm::data_layout(llvm::AMDGPU_TRIPLE, arch).map_err(err)?;
    amdgpu::module_text(k, arch, &dl).map_err(|m| err((Stage::Emit, m)))
}

fn try_host_text(w: &WilKernel, cpu: &str) -> Result<String, CodegenError> {
    let k = w.kernel;
    let err = |(stage, msg): (Stage, String)| CodegenError::compile(&k.fn_name, cpu, stage, msg);
    if !lse_dsl::rt::HOST_CPUS.contains(&cpu) {
        return Err(err((
            Stage::Target,
            format!(
                "unknown host cpu `{cpu}`, expected one of {:?}",
                lse_dsl::rt::HOST_CPUS
            ),
        )));
    }
    let (llvm_cpu, features) = lse_dsl::rt::host_level_target(cpu).unwrap_or((cpu, ""));
    let dl = llvm::data_layout_with(llvm::HOST_TRIPLE, llvm_cpu, features).map_err(err)?;
    host::module_text(w, cpu, &dl).map_err(|m| err((Stage::Emit, m)))
}

/// One kernel compiled for one AMDGPU architecture.
#[derive(Clone, Debug)]
pub struct CompiledGpu {
    /// e.g. `gfx1201`.
    pub arch: String,
    /// LLVM IR after `default<O3>`.
    pub llvm_ir_opt: String,
    /// AMDGCN assembly.
    pub asm: String,
    /// The linked HSA code object (ELF, `ET_DYN`).
    pub code_object: Vec<u8>,
    /// [`CodeObjectInfo`] of the code object, as JSON.
    pub metadata_json: String,
}

/// Compiles `k` for AMDGPU `arch` into a linked code object (code object v5).
pub fn compile_amdgpu(k: &Kernel, arch: &str) -> Result<CompiledGpu, CodegenError> {
    let text = try_amdgpu_text(k, arch)?;
    let err = |(stage, msg): (Stage, String)| CodegenError::compile(&k.fn_name, arch, stage, msg);
    let c = llvm::compile_text(&text, &k.fn_name, llvm::AMDGPU_TRIPLE, arch, "").map_err(err)?;
    let code_object =
        link::link_code_object(&c.object, &k.fn_name).map_err(|m| err((Stage::Link, m)))?;
    let info = inspect_code_object(&code_object).map_err(|m| err((Stage::Inspect, m)))?;
    let metadata_json =
        serde_json::to_string_pretty(&info).map_err(|e| err((Stage::Inspect, e.to_string())))?;
    Ok(CompiledGpu {
        arch: arch.to_string(),
        llvm_ir_opt: c.ir_opt,
        asm: c.asm,
        code_object,
        metadata_json,
    })
}

/// One kernel's host entry compiled for one host cpu.
#[derive(Clone, Debug)]
pub struct CompiledHost {
    /// One of `lse_dsl::rt::HOST_CPUS`.
    pub cpu: String,
    /// LLVM IR after `default<O3>` and the prefetches of masked loads and stores.
    pub llvm_ir_opt: String,
    /// x86-64 assembly.
    pub asm: String,
    /// A relocatable (PIC) ELF object defining `lse_dsl::rt::host_symbol(fn_name, cpu)`.
    pub object: Vec<u8>,
}

/// Compiles the work-item-loop form `w` for host `cpu` into an object file.
pub fn compile_host(w: &WilKernel, cpu: &str) -> Result<CompiledHost, CodegenError> {
    let text = try_host_text(w, cpu)?;
    let k = w.kernel;
    let (llvm_cpu, features) = lse_dsl::rt::host_level_target(cpu).unwrap_or((cpu, ""));
    let c = llvm::compile_text(&text, &k.fn_name, llvm::HOST_TRIPLE, llvm_cpu, features)
        .map_err(|(stage, msg)| CodegenError::compile(&k.fn_name, cpu, stage, msg))?;
    Ok(CompiledHost {
        cpu: cpu.to_string(),
        llvm_ir_opt: c.ir_opt,
        asm: c.asm,
        object: c.object,
    })
}
