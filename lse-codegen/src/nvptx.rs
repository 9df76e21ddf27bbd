//! NVPTX lowering: one PTX `.entry` per LOOM kernel, for `sm_80` and `sm_90`.
//!
//! Buffers are `ptr addrspace(1)` parameters (noalias; readonly when read-only), scalars by
//! value, both in declaration order. The kernel is marked with `!nvvm.annotations`
//! (`kernel`, `reqntidx` = workgroup size; not also `maxntidx`, which ptxas rejects). Work-item and group ids come from the
//! `llvm.nvvm.read.ptx.sreg.*` intrinsics; shared arrays and tiles are `addrspace(3)`
//! globals, or, past the 48 KiB of static shared memory ptxas allows, offsets in one `extern`
//! block of dynamic shared memory that the launch sizes
//! (`KernelDef::nvidia_dynamic_shared_bytes`); a
//! barrier is `llvm.nvvm.barrier0` (`bar.sync 0`, which orders CTA memory). A kernel with
//! dynamic shared memory also says how many of its blocks that memory lets an SM hold
//! (`minctasm`, PTX's `.minnctapersm`): ptxas cannot see the dynamic size, assumes many
//! resident blocks and caps the registers for them (at 168 on sm_80, spilling
//! `attention.prefill_<ty>.v4`), where the memory allows only two or three. Collectives use
//! the same shared-memory tree as AMDGPU ([`crate::amdgpu::GpuSync`]). `exp`/`log` on f32 go
//! through [`crate::math`], as on every target (NVPTX could not select the LLVM intrinsics).

use crate::emit::{Emitter, ModuleText};
use crate::gpu::matrix::MatrixUnit;
use crate::gpu::subgroup::Lanes;
use crate::gpu::{self, GpuKernel};
use lse_dsl::ir::Kernel;

/// LLVM target features for `sm`: the lowest PTX ISA version that supports it.
pub(crate) fn ptx_features(sm: &str) -> Result<&'static str, String> {
    match sm {
        "sm_80" => Ok("+ptx70"),
        "sm_90" => Ok("+ptx78"),
        _ => Err(format!(
            "unknown NVIDIA architecture `{sm}`, expected one of {:?}",
            lse_dsl::rt::PTX_ARCHS
        )),
    }
}

/// Shared memory of one SM of `sm` that CUDA lets the resident blocks use in all, in bytes.
fn shared_per_sm(sm: &str) -> u32 {
    match sm {
        "sm_80" => 164 * 1024,
        // sm_90 ([`module_text`] refuses other archs first).
        _ => 228 * 1024,
    }
}

/// Shared memory CUDA reserves per resident block (sm_80 and later), in bytes.
const RESERVED_PER_BLOCK: u32 = 1024;

/// How many blocks with `dynamic` bytes of dynamic shared memory one SM of `sm` holds at
/// once (at least 1).
fn resident_blocks(sm: &str, dynamic: u32) -> u32 {
    (shared_per_sm(sm) / (dynamic + RESERVED_PER_BLOCK)).max(1)
}

fn barrier(e: &mut Emitter) {
    e.b.declare("declare void @llvm.nvvm.barrier0()");
    e.b.ins("call void @llvm.nvvm.barrier0()");
}

/// Lowers `k` to an NVPTX LLVM module for `sm`; `data_layout` comes from the target machine.
pub(crate) fn module_text(k: &Kernel, sm: &str, data_layout: &str) -> Result<String, String> {
    let features = ptx_features(sm)?;
    let dynamic = k.nvidia_dynamic_shared_bytes();
    let GpuKernel {
        mut e,
        params,
        mut globals,
        wg,
    } = gpu::prologue(k, "ptr", dynamic > 0)?;
    e.lid = e.b.call("i32", "llvm.nvvm.read.ptx.sreg.tid.x", &[]);
    for d in 0..3 {
        let axis = ["x", "y", "z"][d];
        e.group_id[d] =
            e.b.call("i32", &format!("llvm.nvvm.read.ptx.sreg.ctaid.{axis}"), &[]);
        e.num_groups[d] = e.b.call(
            "i32",
            &format!("llvm.nvvm.read.ptx.sreg.nctaid.{axis}"),
            &[],
        );
    }
    gpu::body(
        &mut e,
        k,
        wg,
        barrier,
        Some(MatrixUnit::MmaSync),
        Lanes::Nvidia,
        &mut globals,
    )?;

    let name = &k.fn_name;
    let comment = format!("; LOOM kernel {} ({name}) for {sm}", k.id());
    let define = format!("define void @{name}({}) #0 {{", params.join(", "));
    // `.reqntid` only: ptxas rejects a kernel that has both `.reqntid` and `.maxntid`.
    let mut notes = vec![
        format!("!{{ptr @{name}, !\"kernel\", i32 1}}"),
        format!("!{{ptr @{name}, !\"reqntidx\", i32 {wg}}}"),
    ];
    if dynamic > 0 {
        let blocks = resident_blocks(sm, dynamic);
        notes.push(format!("!{{ptr @{name}, !\"minctasm\", i32 {blocks}}}"));
    }
    let ids: Vec<String> = (0..notes.len()).map(|i| format!("!{i}")).collect();
    let mut trailer = format!(
        "attributes #0 = {{ nounwind \"target-cpu\"=\"{sm}\" \"target-features\"=\"{features}\" }}\n\n\
         !nvvm.annotations = !{{{}}}\n",
        ids.join(", ")
    );
    for (id, note) in ids.iter().zip(&notes) {
        trailer.push_str(&format!("{id} = {note}\n"));
    }
    let out = e.b.module(ModuleText {
        comment: &comment,
        data_layout,
        triple: crate::llvm::NVPTX_TRIPLE,
        globals: &globals,
        define: &define,
        trailer: &trailer,
    });
    Ok(out)
}
