//! AMDGPU lowering: one `amdgpu_kernel` function per LOOM kernel, code object v5.
//!
//! Buffers are `ptr addrspace(1)` kernargs, scalars by-value kernargs, both in declaration
//! order. Shared arrays are internal LDS globals. Barriers are workgroup-scope release fence,
//! `s_barrier`, workgroup-scope acquire fence. Collectives go through an LDS scratch array of
//! WG words and the fixed reduction tree of `lse_dsl::ir`.

use crate::emit::{combine, combine_argmax, lty, Emitter, Lowered, ModuleText, TargetStmts};
use crate::gpu::matrix::MatrixUnit;
use crate::gpu::subgroup::Lanes;
use crate::gpu::{self, GpuKernel};
use lse_dsl::ir::{tree_steps, CollectiveOp, Kernel, Stmt, Ty};

const RED_V: &str = "@loom_red_v";
const RED_I: &str = "@loom_red_i";

/// Lowers `k` to an LLVM module for `arch`; `data_layout` comes from the target machine.
pub(crate) fn module_text(k: &Kernel, arch: &str, data_layout: &str) -> Result<String, String> {
    let GpuKernel {
        mut e,
        params,
        mut globals,
        wg,
    } = gpu::prologue(k, "ptr addrspace(5)", false)?;
    e.lid = e.b.call("i32", "llvm.amdgcn.workitem.id.x", &[]);
    for d in 0..3 {
        let axis = ["x", "y", "z"][d];
        e.group_id[d] =
            e.b.call("i32", &format!("llvm.amdgcn.workgroup.id.{axis}"), &[]);
    }
    let dp =
        e.b.call("ptr addrspace(4)", "llvm.amdgcn.dispatch.ptr", &[]);
    for d in 0..3 {
        let off = 12 + 4 * d;
        let p = e.b.op(format!(
            "getelementptr inbounds i8, ptr addrspace(4) {dp}, i64 {off}"
        ));
        let grid = e.b.op(format!(
            "load i32, ptr addrspace(4) {p}, align 4, !invariant.load !2"
        ));
        e.num_groups[d] = e.b.op(format!("udiv i32 {grid}, {wg}"));
    }
    let unit = MatrixUnit::for_amdgpu(arch);
    let lanes = Lanes::for_amdgpu(arch);
    gpu::body(&mut e, k, wg, barrier, unit, lanes, &mut globals)?;

    let comment = format!("; LOOM kernel {} ({}) for {arch}", k.id(), k.fn_name);
    let define = format!(
        "define amdgpu_kernel void @{}({}) #0 !reqd_work_group_size !0 {{",
        k.fn_name,
        params.join(", ")
    );
    let trailer = format!(
        "attributes #0 = {{ nounwind \"amdgpu-flat-work-group-size\"=\"1,{wg}\" \
         \"uniform-work-group-size\"=\"true\" \"target-cpu\"=\"{arch}\" }}\n\n\
         !llvm.module.flags = !{{!1}}\n\
         !0 = !{{i32 {wg}, i32 1, i32 1}}\n\
         !1 = !{{i32 1, !\"amdhsa_code_object_version\", i32 500}}\n\
         !2 = !{{}}\n"
    );
    let out = e.b.module(ModuleText {
        comment: &comment,
        data_layout,
        triple: crate::llvm::AMDGPU_TRIPLE,
        globals: &globals,
        define: &define,
        trailer: &trailer,
    });
    Ok(out)
}

/// Barriers and collectives on a GPU (AMDGPU and NVPTX share the shared-memory tree; only
/// the barrier differs).
pub(crate) struct GpuSync {
    pub wg: u32,
    /// Whether the value / index scratch arrays were used (the module must define them).
    pub uses_red_v: bool,
    pub uses_red_i: bool,
    /// Emits one workgroup barrier (with the memory ordering the target needs).
    barrier: fn(&mut Emitter),
    /// The matrix unit `tile_dot` uses where it fits.
    unit: Option<MatrixUnit>,
    /// How the subgroup built-ins read other lanes.
    pub lanes: Lanes,
}

fn barrier(e: &mut Emitter) {
    e.b.ins("fence syncscope(\"workgroup\") release");
    e.b.declare("declare void @llvm.amdgcn.s.barrier()");
    e.b.ins("call void @llvm.amdgcn.s.barrier()");
    e.b.ins("fence syncscope(\"workgroup\") acquire");
}

/// `&scratch[idx]` in LDS.
fn slot(e: &mut Emitter, arr: &str, ty: Ty, idx: &str) -> String {
    e.b.op(format!(
        "getelementptr inbounds {}, ptr addrspace(3) {arr}, i32 {idx}",
        lty(ty)
    ))
}

fn load(e: &mut Emitter, arr: &str, ty: Ty, idx: &str) -> String {
    let p = slot(e, arr, ty, idx);
    e.b.op(format!("load {}, ptr addrspace(3) {p}, align 4", lty(ty)))
}

fn store(e: &mut Emitter, arr: &str, ty: Ty, idx: &str, v: &str) {
    let p = slot(e, arr, ty, idx);
    e.b.ins(format!(
        "store {} {v}, ptr addrspace(3) {p}, align 4",
        lty(ty)
    ));
}

impl GpuSync {
    /// Collectives over workgroups of `wg` items, synchronised by `barrier`; tile dots on
    /// `unit` where they fit.
    pub fn new(wg: u32, barrier: fn(&mut Emitter), unit: Option<MatrixUnit>, lanes: Lanes) -> Self {
        GpuSync {
            wg,
            uses_red_v: false,
            uses_red_i: false,
            barrier,
            unit,
            lanes,
        }
    }

    /// One workgroup barrier.
    pub fn barrier(&self, e: &mut Emitter) {
        (self.barrier)(e)
    }

    /// Stores `v` (of `ty`) to the value scratch array at `idx`.
    pub fn store_value(&mut self, e: &mut Emitter, ty: Ty, idx: &str, v: &str) {
        self.uses_red_v = true;
        store(e, RED_V, ty, idx, v);
    }

    /// Loads the value scratch array at `idx` as `ty`.
    pub fn load_value(&mut self, e: &mut Emitter, ty: Ty, idx: &str) -> String {
        self.uses_red_v = true;
        load(e, RED_V, ty, idx)
    }

    /// The scratch array globals (`addrspace(3)`, WG words each) the lowering used.
    pub fn scratch_globals(&self) -> String {
        let wg = self.wg;
        let mut g = String::new();
        if self.uses_red_v {
            g.push_str(&format!(
                "{RED_V} = internal addrspace(3) global [{wg} x i32] undef, align 4\n"
            ));
        }
        if self.uses_red_i {
            g.push_str(&format!(
                "{RED_I} = internal addrspace(3) global [{wg} x i32] undef, align 4\n"
            ));
        }
        g
    }

    /// The tree of `ir::tree_steps` within each group of `width` work-items: at step `s`,
    /// work-items whose index in their group is below `s` combine slots `lid` and `lid + s`,
    /// with a barrier after every step.
    pub fn tree(
        &mut self,
        e: &mut Emitter,
        width: u32,
        mut step: impl FnMut(&mut Self, &mut Emitter, &str, &str),
    ) {
        for s in tree_steps(width) {
            let lid = e.lid.clone();
            let in_group = if width == self.wg {
                lid.clone()
            } else {
                e.b.op(format!("and i32 {lid}, {}", width - 1))
            };
            let c = e.b.op(format!("icmp ult i32 {in_group}, {s}"));
            let (go, next) = (e.b.label("tree.step"), e.b.label("tree.next"));
            e.b.cbr(&c, &go, &next);
            e.b.start(&go);
            let other = e.b.op(format!("add i32 {lid}, {s}"));
            step(self, e, &lid, &other);
            e.b.br(&next);
            e.b.start(&next);
            (self.barrier)(e);
        }
    }
}

impl TargetStmts for GpuSync {
    fn sync_stmt(&mut self, e: &mut Emitter, s: &Stmt) -> Lowered<()> {
        let (op, dst, args) = match s {
            Stmt::Collective { op, dst, args } => (op, dst, args),
            Stmt::Tile(t) => {
                return crate::gpu::tiles::lower(e, self.wg, self.barrier, self.unit, t)
            }
            _ => {
                (self.barrier)(e);
                return Ok(());
            }
        };
        let ty = e.check_collective(*op, dst, args)?;
        if op.is_subgroup() {
            let width = op.width(e.k);
            return crate::gpu::subgroup::lower(self, e, *op, width, ty, dst, args);
        }
        let lid = e.lid.clone();
        let wg = self.wg;
        self.uses_red_v = true;
        match op {
            CollectiveOp::ReduceSum | CollectiveOp::ReduceMax | CollectiveOp::ReduceMin => {
                let v = e.expr(&args[0])?;
                store(e, RED_V, ty, &lid, &v);
                (self.barrier)(e);
                self.tree(e, wg, |_, e, i, j| {
                    let a = load(e, RED_V, ty, i);
                    let b = load(e, RED_V, ty, j);
                    let r = combine(&mut e.b, *op, ty, &a, &b)
                        .expect("check_collective admits only f32, i32 and u32");
                    store(e, RED_V, ty, i, &r);
                });
                let r = load(e, RED_V, ty, "0");
                (self.barrier)(e);
                e.write_var(dst[0], &r)?;
            }
            CollectiveOp::Argmax => {
                self.uses_red_i = true;
                let v = e.expr(&args[0])?;
                let idx = e.expr(&args[1])?;
                store(e, RED_V, Ty::F32, &lid, &v);
                store(e, RED_I, Ty::U32, &lid, &idx);
                (self.barrier)(e);
                self.tree(e, wg, |_, e, i, j| {
                    let (av, ai) = (load(e, RED_V, Ty::F32, i), load(e, RED_I, Ty::U32, i));
                    let (bv, bi) = (load(e, RED_V, Ty::F32, j), load(e, RED_I, Ty::U32, j));
                    let (v, x) = combine_argmax(&mut e.b, &av, &ai, &bv, &bi);
                    store(e, RED_V, Ty::F32, i, &v);
                    store(e, RED_I, Ty::U32, i, &x);
                });
                let v = load(e, RED_V, Ty::F32, "0");
                let x = load(e, RED_I, Ty::U32, "0");
                (self.barrier)(e);
                e.write_var(dst[0], &v)?;
                e.write_var(dst[1], &x)?;
            }
            CollectiveOp::Broadcast => {
                let v = e.expr(&args[0])?;
                let lane = e.expr(&args[1])?;
                store(e, RED_V, ty, &lid, &v);
                (self.barrier)(e);
                let r = load(e, RED_V, ty, &lane);
                (self.barrier)(e);
                e.write_var(dst[0], &r)?;
            }
            CollectiveOp::SubgroupSum
            | CollectiveOp::SubgroupMax
            | CollectiveOp::SubgroupMin
            | CollectiveOp::SubgroupShuffle => unreachable!("lowered above"),
        }
        Ok(())
    }
}
