//! The inkwell part: parse LLVM IR text, verify it, run `default<O3>` with the target machine
//! attached (on host modules, then prefetch ahead of masked vector accesses), and emit
//! assembly and an object file. Every failure is a `(Stage, message)`;
//! nothing here lets an LLVM error reach `abort` on inputs we can check first.

use crate::error::Stage;
use inkwell::context::Context;
use inkwell::intrinsics::Intrinsic;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::module::Module;
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{
    CodeModel, FileType, InitializationConfig, RelocMode, Target, TargetMachine, TargetTriple,
};
use inkwell::values::{BasicValueEnum, CallSiteValue, Operand};
use inkwell::{AddressSpace, OptimizationLevel};
use std::sync::Once;

/// Triple of AMDGPU code objects.
pub(crate) const AMDGPU_TRIPLE: &str = "amdgcn-amd-amdhsa";
/// Triple of NVIDIA PTX.
pub(crate) const NVPTX_TRIPLE: &str = "nvptx64-nvidia-cuda";
/// Triple of host code.
pub(crate) const HOST_TRIPLE: &str = "x86_64-unknown-linux-gnu";

/// Output of [`compile_text`].
pub(crate) struct Compiled {
    pub ir_opt: String,
    pub asm: String,
    pub object: Vec<u8>,
}

fn init_targets() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let cfg = InitializationConfig::default();
        Target::initialize_amd_gpu(&cfg);
        Target::initialize_x86(&cfg);
        Target::initialize_nvptx(&cfg);
    });
}

/// An LLVM target machine for `triple`/`cpu` with target `features` (e.g. `+ptx78`).
pub(crate) fn target_machine_with(
    triple: &str,
    cpu: &str,
    features: &str,
) -> Result<TargetMachine, (Stage, String)> {
    init_targets();
    let t = TargetTriple::create(triple);
    let target = Target::from_triple(&t).map_err(|e| (Stage::Target, e.to_string()))?;
    target
        .create_target_machine(
            &t,
            cpu,
            features,
            OptimizationLevel::Aggressive,
            RelocMode::PIC,
            CodeModel::Default,
        )
        .ok_or_else(|| {
            (
                Stage::Target,
                format!("LLVM could not create a target machine for {triple} / {cpu}"),
            )
        })
}

/// The data layout string of `triple`/`cpu`, for the `target datalayout` line.
pub(crate) fn data_layout(triple: &str, cpu: &str) -> Result<String, (Stage, String)> {
    data_layout_with(triple, cpu, "")
}

/// [`data_layout`] with target `features`.
pub(crate) fn data_layout_with(
    triple: &str,
    cpu: &str,
    features: &str,
) -> Result<String, (Stage, String)> {
    let tm = target_machine_with(triple, cpu, features)?;
    let dl = tm.get_target_data().get_data_layout();
    Ok(dl.as_str().to_string_lossy().into_owned())
}

/// Parses, verifies and optimises `text` with `tm`; returns the module (in `ctx`). Host
/// modules then get [`prefetch_masked_access`] and are verified again.
fn optimise<'c>(
    ctx: &'c Context,
    tm: &TargetMachine,
    text: &str,
    name: &str,
) -> Result<Module<'c>, (Stage, String)> {
    let buf = MemoryBuffer::create_from_memory_range_copy(text.as_bytes(), name);
    let module = ctx
        .create_module_from_ir(buf)
        .map_err(|e| (Stage::Parse, e.to_string()))?;
    module
        .verify()
        .map_err(|e| (Stage::Verify, e.to_string()))?;
    module
        .run_passes("default<O3>", tm, PassBuilderOptions::create())
        .map_err(|e| (Stage::Passes, e.to_string()))?;
    if tm.get_triple().as_str().to_bytes() == HOST_TRIPLE.as_bytes() {
        prefetch_masked_access(ctx, &module)?;
        module
            .verify()
            .map_err(|e| (Stage::Verify, e.to_string()))?;
    }
    Ok(module)
}

/// How far ahead of a masked vector load or store [`prefetch_masked_access`] prefetches, in
/// bytes.
const MASKED_PREFETCH_BYTES: u64 = 2048;

/// Puts a prefetch of the address [`MASKED_PREFETCH_BYTES`] past each masked vector load's
/// and store's (`llvm.masked.load` and `llvm.masked.store`, which LLVM's vectoriser makes of a
/// work-item's guarded access) before it, for reading or for writing. Hardware prefetchers do
/// not follow masked accesses on every CPU: on Zen 5 a stream of masked loads read memory at
/// 16 GB/s against 40 for plain loads, and with the prefetch at 42, so memory-bound kernels
/// waited on every line (`lse_pick` ran at a sixth of the memory's speed). A prefetch never
/// faults, so one past the end of a buffer is harmless.
fn prefetch_masked_access(ctx: &Context, module: &Module<'_>) -> Result<(), (Stage, String)> {
    let err = |e: &dyn std::fmt::Display| (Stage::Passes, format!("prefetch: {e}"));
    let ptr = ctx.ptr_type(AddressSpace::default());
    let prefetch = Intrinsic::find("llvm.prefetch")
        .and_then(|i| i.get_declaration(module, &[ptr.into()]))
        .ok_or_else(|| err(&"LLVM has no llvm.prefetch for a pointer"))?;
    let (i8t, i32t) = (ctx.i8_type(), ctx.i32_type());
    let ahead = ctx.i64_type().const_int(MASKED_PREFETCH_BYTES, false);
    let builder = ctx.create_builder();
    for f in module.get_functions() {
        for bb in f.get_basic_blocks() {
            for ins in bb.get_instructions() {
                let Ok(call) = CallSiteValue::try_from(ins) else {
                    continue;
                };
                let Some(callee) = call.get_called_fn_value() else {
                    continue;
                };
                // The pointer's operand and the prefetch's read (0) or write (1) flag.
                let name = callee.get_name().to_bytes();
                let (at, write) = if name.starts_with(b"llvm.masked.load.") {
                    (0, 0)
                } else if name.starts_with(b"llvm.masked.store.") {
                    (1, 1)
                } else {
                    continue;
                };
                let Some(Operand::Value(BasicValueEnum::PointerValue(p))) = ins.get_operand(at)
                else {
                    continue;
                };
                builder.position_before(&ins);
                // SAFETY: an i8 GEP by a constant; the result is only prefetched, never loaded.
                let next = unsafe { builder.build_gep(i8t, p, &[ahead], "") };
                let next = next.map_err(|e| err(&e))?;
                let flag = |v| i32t.const_int(v, false).into();
                // Keep in all cache levels (3), data (1).
                let args = [next.into(), flag(write), flag(3), flag(1)];
                builder
                    .build_call(prefetch, &args, "")
                    .map_err(|e| err(&e))?;
            }
        }
    }
    Ok(())
}

/// Parses, verifies, optimises `text` for `triple`/`cpu`/`features` and emits assembly only
/// (targets without an object writer, such as NVPTX). Returns `(optimised IR, assembly)`.
pub(crate) fn compile_text_asm(
    text: &str,
    name: &str,
    triple: &str,
    cpu: &str,
    features: &str,
) -> Result<(String, String), (Stage, String)> {
    let tm = target_machine_with(triple, cpu, features)?;
    let ctx = Context::create();
    let module = optimise(&ctx, &tm, text, name)?;
    let ir_opt = module.print_to_string().to_string();
    let asm = tm
        .write_to_memory_buffer(&module, FileType::Assembly)
        .map_err(|e| (Stage::EmitObject, e.to_string()))?;
    Ok((ir_opt, String::from_utf8_lossy(asm.as_slice()).into_owned()))
}

/// Parses, verifies, optimises and emits `text` for `triple`/`cpu`/`features`. The assembly
/// comes from a clone of the module because object emission rewrites the module in place.
pub(crate) fn compile_text(
    text: &str,
    name: &str,
    triple: &str,
    cpu: &str,
    features: &str,
) -> Result<Compiled, (Stage, String)> {
    let tm = target_machine_with(triple, cpu, features)?;
    let ctx = Context::create();
    let module = optimise(&ctx, &tm, text, name)?;
    let ir_opt = module.print_to_string().to_string();
    let asm_module = module.clone();
    let asm = tm
        .write_to_memory_buffer(&asm_module, FileType::Assembly)
        .map_err(|e| (Stage::EmitObject, e.to_string()))?;
    let object = tm
        .write_to_memory_buffer(&module, FileType::Object)
        .map_err(|e| (Stage::EmitObject, e.to_string()))?;
    Ok(Compiled {
        ir_opt,
        asm: String::from_utf8_lossy(asm.as_slice()).into_owned(),
        object: object.as_slice().to_vec(),
    })
}
