//! What the two GPU lowerings (AMDGPU and NVPTX) share: the workgroup-size check, the kernel
//! parameter list (buffers as `noalias` global pointers, `readonly` when the kernel only reads
//! them, scalars by value, all in declaration order), shared arrays and tiles as addrspace(3)
//! globals (or offsets in one block of dynamic shared memory), and one private slot per kernel
//! variable. Tiles: [`tiles`]; `tile_dot` on matrix units: [`matrix`].

pub(crate) mod matrix;
pub(crate) mod subgroup;
pub(crate) mod tiles;

use crate::amdgpu::GpuSync;
use crate::emit::{lty, Emitter};
use lse_dsl::ir::{Access, Kernel, Param};
use matrix::MatrixUnit;

/// A GPU kernel function being built.
pub(crate) struct GpuKernel<'k> {
    pub e: Emitter<'k>,
    /// The function's parameters, as LLVM IR text.
    pub params: Vec<String>,
    /// Module-level globals (the shared arrays).
    pub globals: String,
    /// Work-items per workgroup.
    pub wg: u32,
}

/// The `extern` shared-memory block of a kernel whose arrays and tiles are dynamic shared
/// memory (NVPTX past its static limit: [`Kernel::nvidia_dynamic_shared_bytes`]).
const DYNAMIC_SHARED: &str = "@loom_dynamic_shared";

/// Starts a GPU kernel; `private_ptr` is the pointer type of the target's allocas. With
/// `dynamic_shared`, the shared arrays and tiles lie in one `extern` block of dynamic shared
/// memory at the offsets of [`Kernel::workgroup_block`]; else each is a global of its own.
pub(crate) fn prologue<'k>(
    k: &'k Kernel,
    private_ptr: &'static str,
    dynamic_shared: bool,
) -> Result<GpuKernel<'k>, String> {
    let wg = k.workgroup_size;
    if wg == 0 || !wg.is_power_of_two() || wg > 1024 {
        return Err(format!(
            "workgroup size {wg} is not a power of two in 1..=1024"
        ));
    }
    let mut e = Emitter::new(k, private_ptr, "ptr addrspace(1)", "ptr addrspace(3)");
    let mut params = Vec::new();
    for (i, p) in k.params.iter().enumerate() {
        let name = format!("%p{i}");
        match p {
            Param::Buffer { elem, access, .. } => {
                let ro = if *access == Access::Read {
                    " readonly"
                } else {
                    ""
                };
                params.push(format!(
                    "ptr addrspace(1) noalias{ro} align {} {name}",
                    elem.size_bytes()
                ));
                e.bufs[i] = Some(name);
            }
            Param::Scalar { ty, .. } => {
                params.push(format!("{} {name}", lty(*ty)));
                e.scalars[i] = Some(name);
            }
        }
    }
    let mut globals = String::new();
    if dynamic_shared {
        // One `extern` block, sized by the launch; each array and tile a constant offset in it.
        globals.push_str(&format!(
            "{DYNAMIC_SHARED} = external addrspace(3) global [0 x i8], align 16\n"
        ));
        let block = k.workgroup_block();
        let at = |off: &u32| {
            format!("getelementptr inbounds (i8, ptr addrspace(3) {DYNAMIC_SHARED}, i32 {off})")
        };
        e.shared = block.shared.iter().map(at).collect();
        e.tiles = block.tiles.iter().map(at).collect();
    } else {
        for (i, s) in k.shared.iter().enumerate() {
            globals.push_str(&format!(
                "@loom_shared_{i} = internal addrspace(3) global [{} x {}] undef, align 4\n",
                s.len,
                lty(s.elem)
            ));
            e.shared.push(format!("@loom_shared_{i}"));
        }
        globals.push_str(&tiles::globals(k));
        e.tiles = (0..k.tiles.len() as u32).map(tiles::global).collect();
    }
    for l in &k.locals {
        let loc = e.scalar_var(l.ty);
        e.vars.push(loc);
    }
    Ok(GpuKernel {
        e,
        params,
        globals,
        wg,
    })
}

/// Lowers the kernel body with the shared-memory collectives of [`GpuSync`] and `barrier`,
/// tile dots on `unit` where they fit and subgroup built-ins with `lanes`, ends the
/// function, and adds the collectives' scratch arrays to `globals`.
pub(crate) fn body(
    e: &mut Emitter,
    k: &Kernel,
    wg: u32,
    barrier: fn(&mut Emitter),
    unit: Option<MatrixUnit>,
    lanes: subgroup::Lanes,
    globals: &mut String,
) -> Result<(), String> {
    let mut sync = GpuSync::new(wg, barrier, unit, lanes);
    tiles::zero_all(e, wg, barrier);
    e.block(&mut sync, &k.body)?;
    e.b.ins("ret void");
    globals.push_str(&sync.scratch_globals());
    Ok(())
}
