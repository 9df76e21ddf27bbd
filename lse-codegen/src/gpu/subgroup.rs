//! The `subgroup_*` built-ins on GPUs. A subgroup that fits in one wave (warp) exchanges
//! values through the target's lane shuffle (`ds_bpermute` on AMDGPU, `shfl.sync.idx` on
//! NVPTX); a wider one goes through the workgroup's LDS scratch array with barriers, like the
//! workgroup collectives. Either way a reduction follows `ir::tree_steps` within the subgroup,
//! the same order as the generated Rust and the host: every lane combines its value with the
//! one `s` lanes above it, and lane 0's result is read by the whole subgroup.

use crate::amdgpu::GpuSync;
use crate::emit::{combine, Emitter, Lowered};
use lse_dsl::ir::{tree_steps, CollectiveOp, Expr, Ty};

/// How the target reads another lane's value within a wave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lanes {
    /// `llvm.amdgcn.ds.bpermute`, waves of `wave` lanes.
    Amd { wave: u32 },
    /// `llvm.nvvm.shfl.sync.idx.i32`, warps of 32.
    Nvidia,
}

impl Lanes {
    /// The lane model of AMDGPU `arch`: wave64 on GCN/CDNA (gfx9), wave32 from gfx10 on.
    pub fn for_amdgpu(arch: &str) -> Self {
        let wave = if arch.starts_with("gfx9") { 64 } else { 32 };
        Lanes::Amd { wave }
    }

    fn wave(self) -> u32 {
        match self {
            Lanes::Amd { wave } => wave,
            Lanes::Nvidia => 32,
        }
    }

    /// The i32 `v` of wave lane `src` (lanes of a workgroup fill its waves in order; a
    /// workgroup smaller than a warp has only its own lanes in the warp's mask).
    fn read(self, e: &mut Emitter, wg: u32, v: &str, src: &str) -> String {
        match self {
            Lanes::Amd { wave } => {
                let lane = e.b.op(format!("and i32 {src}, {}", wave - 1));
                let addr = e.b.op(format!("shl i32 {lane}, 2"));
                e.b.call(
                    "i32",
                    "llvm.amdgcn.ds.bpermute",
                    &[("i32", &addr), ("i32", v)],
                )
            }
            Lanes::Nvidia => {
                let mask = if wg >= 32 {
                    -1i32
                } else {
                    ((1u32 << wg) - 1) as i32
                };
                e.b.call(
                    "i32",
                    "llvm.nvvm.shfl.sync.idx.i32",
                    &[
                        ("i32", &mask.to_string()),
                        ("i32", v),
                        ("i32", src),
                        ("i32", "31"),
                    ],
                )
            }
        }
    }
}

/// `v` of LOOM type `ty` (f32, i32, u32) as i32 bits, and back.
fn to_bits(e: &mut Emitter, ty: Ty, v: &str) -> String {
    if ty == Ty::F32 {
        e.b.op(format!("bitcast float {v} to i32"))
    } else {
        v.to_string()
    }
}

fn from_bits(e: &mut Emitter, ty: Ty, v: &str) -> String {
    if ty == Ty::F32 {
        e.b.op(format!("bitcast i32 {v} to float"))
    } else {
        v.to_string()
    }
}

/// Lowers subgroup op `op` (arguments checked) of width `width` into `dst`.
pub(crate) fn lower(
    sync: &mut GpuSync,
    e: &mut Emitter,
    op: CollectiveOp,
    width: u32,
    ty: Ty,
    dst: &[u32],
    args: &[Expr],
) -> Lowered<()> {
    let lanes = sync.lanes;
    let v = e.expr(&args[0])?;
    let lid = e.lid.clone();
    let r = if width <= lanes.wave() {
        let wave_lane = e.b.op(format!("and i32 {lid}, {}", lanes.wave() - 1));
        let wave_base =
            e.b.op(format!("and i32 {wave_lane}, {}", !(width - 1) as i32));
        let wg = sync.wg;
        if op == CollectiveOp::SubgroupShuffle {
            let lane = e.expr(&args[1])?;
            let lane = e.b.op(format!("and i32 {lane}, {}", width - 1));
            let src = e.b.op(format!("or i32 {wave_base}, {lane}"));
            let bits = to_bits(e, ty, &v);
            let r = lanes.read(e, wg, &bits, &src);
            from_bits(e, ty, &r)
        } else {
            let mut acc = v;
            for s in tree_steps(width) {
                let src = e.b.op(format!("add i32 {wave_lane}, {s}"));
                let bits = to_bits(e, ty, &acc);
                let other = lanes.read(e, wg, &bits, &src);
                let other = from_bits(e, ty, &other);
                acc = combine(&mut e.b, op.reduction(), ty, &acc, &other)
                    .expect("subgroup reductions take f32, i32 or u32");
            }
            let bits = to_bits(e, ty, &acc);
            let r = lanes.read(e, wg, &bits, &wave_base);
            from_bits(e, ty, &r)
        }
    } else {
        // The subgroup's first work-item.
        let base = e.b.op(format!("and i32 {lid}, {}", !(width - 1) as i32));
        sync.store_value(e, ty, &lid, &v);
        sync.barrier(e);
        let r = if op == CollectiveOp::SubgroupShuffle {
            let lane = e.expr(&args[1])?;
            let lane = e.b.op(format!("and i32 {lane}, {}", width - 1));
            let src = e.b.op(format!("or i32 {base}, {lane}"));
            sync.load_value(e, ty, &src)
        } else {
            sync.tree(e, width, |sync, e, i, j| {
                let a = sync.load_value(e, ty, i);
                let b = sync.load_value(e, ty, j);
                let r = combine(&mut e.b, op.reduction(), ty, &a, &b)
                    .expect("subgroup reductions take f32, i32 or u32");
                sync.store_value(e, ty, i, &r);
            });
            sync.load_value(e, ty, &base)
        };
        sync.barrier(e);
        r
    };
    e.write_var(dst[0], &r)
}
