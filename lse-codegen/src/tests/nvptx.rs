//! NVPTX: lower hand-built kernels to PTX for sm_80 / sm_90 and check the PTX text.

use super::kernels::{self, buffer, builtin, load, math, scalar};
use crate::{compile_nvptx, nvptx_llvm_text, CodegenError, Stage};
use lse_dsl::ir::{Access, Builtin, Kernel, MathFn, Param, Stmt, Ty};

/// `out[lid] = exp(x[lid]) + log(x[lid]) * s` (WG = 32), params `(x, out, s)`.
fn exp_log() -> Kernel {
    let x = || load(0, builtin(Builtin::LocalId), Ty::F32);
    let mut k = kernels::store_id();
    k.fn_name = "k_exp_log".into();
    k.workgroup_size = 32;
    k.params = vec![
        buffer("x", Ty::F32, Access::Read),
        buffer("out", Ty::F32, Access::ReadWrite),
        scalar("s", Ty::F32),
    ];
    k.locals = vec![];
    let e = math(MathFn::Exp, vec![x()], Ty::F32);
    let l = math(MathFn::Log, vec![x()], Ty::F32);
    let ls = kernels::bin(lse_dsl::ir::BinOp::Mul, l, kernels::param(2, Ty::F32));
    k.body = vec![Stmt::Store {
        buf: 1,
        index: builtin(Builtin::LocalId),
        value: kernels::bin(lse_dsl::ir::BinOp::Add, e, ls),
    }];
    k
}

/// The `.param` types of the `.entry`'s parameter list, in order.
fn entry_params(ptx: &str, name: &str) -> Vec<String> {
    let head = format!(".visible .entry {name}(");
    assert_eq!(ptx.matches(&head).count(), 1, "{ptx}");
    let start = ptx.find(&head).unwrap() + head.len();
    let end = start + ptx[start..].find(')').unwrap();
    ptx[start..end]
        .split(',')
        .map(|p| p.split_whitespace().nth(1).unwrap_or("").to_string())
        .collect()
}

/// The checks every kernel's PTX must pass (also used for `lse_kernels::ALL` elsewhere).
fn check_ptx(k: &Kernel, sm: &str) -> String {
    let c = compile_nvptx(k, sm).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.sm, sm);
    let ptx = &c.ptx;
    assert!(ptx.contains(".version "), "{ptx}");
    assert!(ptx.contains(&format!(".target {sm}")), "{ptx}");
    assert!(ptx.contains(".address_size 64"), "{ptx}");
    let want: Vec<&str> = k
        .params
        .iter()
        .map(|p| match p {
            Param::Buffer { .. } => ".u64",
            Param::Scalar { ty: Ty::F32, .. } => ".f32",
            Param::Scalar { .. } => ".u32",
        })
        .collect();
    assert_eq!(entry_params(ptx, &k.fn_name), want, "{ptx}");
    assert!(
        ptx.contains(&format!(".reqntid {}", k.workgroup_size)),
        "{ptx}"
    );
    assert!(
        !ptx.contains(".maxntid"),
        "ptxas rejects .maxntid with .reqntid: {ptx}"
    );
    assert!(ptx.contains("st.global"), "{ptx}");
    assert!(c.llvm_ir_opt.contains("nvptx64-nvidia-cuda"));
    c.ptx
}

/// `prefetch` takes no code and no barrier in PTX.
#[test]
fn prefetch_ptx_has_no_barrier() {
    let k = super::kernels::from_source(super::kernels::PREFETCH_SRC);
    for sm in ["sm_80", "sm_90"] {
        let ptx = check_ptx(&k, sm);
        assert!(
            !ptx.contains("bar.sync") && !ptx.contains("prefetch."),
            "{ptx}"
        );
    }
}

#[test]
fn store_id_ptx() {
    for sm in ["sm_80", "sm_90"] {
        let ptx = check_ptx(&kernels::store_id(), sm);
        assert!(!ptx.contains("bar.sync"), "{ptx}");
        assert!(ptx.contains("%tid.x") && ptx.contains("%ctaid.x"), "{ptx}");
    }
}

#[test]
fn reduce_ptx_has_shared_memory_and_barriers() {
    for sm in ["sm_80", "sm_90"] {
        let ptx = check_ptx(&kernels::reduce(), sm);
        assert!(ptx.contains("bar.sync"), "{ptx}");
        assert!(ptx.contains(".shared"), "{ptx}");
        assert!(ptx.contains("ld.global"), "{ptx}");
        assert!(
            ptx.contains("ld.shared") && ptx.contains("st.shared"),
            "{ptx}"
        );
    }
}

#[test]
fn exp_and_log_lower_without_libcalls() {
    let k = exp_log();
    let text = nvptx_llvm_text(&k, "sm_90");
    assert!(text.contains("call float @loom_expf(float"), "{text}");
    assert!(text.contains("call float @loom_logf(float"), "{text}");
    assert!(!text.contains("@llvm.exp.f32"), "{text}");
    for sm in ["sm_80", "sm_90"] {
        let ptx = check_ptx(&k, sm);
        assert!(ptx.contains("ld.global"), "{ptx}");
        assert!(!ptx.contains("call"), "helpers are inlined: {ptx}");
        assert!(ptx.contains("fma.rn.f32"), "{ptx}");
    }
}

#[test]
fn unoptimised_text_has_the_nvptx_abi() {
    let t = nvptx_llvm_text(&kernels::store_id(), "sm_80");
    assert!(t.contains("target triple = \"nvptx64-nvidia-cuda\""), "{t}");
    assert!(
        t.contains(
            "define void @k_store_id(ptr addrspace(1) noalias align 4 %p0, i32 %p1, i32 %p2)"
        ),
        "{t}"
    );
    assert!(t.contains("!{ptr @k_store_id, !\"kernel\", i32 1}"), "{t}");
    assert!(t.contains("!\"reqntidx\", i32 64"), "{t}");
    assert!(t.contains("\"target-features\"=\"+ptx70\""), "{t}");
}

#[test]
fn bad_inputs_are_errors() {
    let err = compile_nvptx(&kernels::store_id(), "sm_70").unwrap_err();
    match &err {
        CodegenError::Compile { stage, message, .. } => {
            assert_eq!(*stage, Stage::Target);
            assert!(message.contains("sm_70"), "{message}");
        }
        e => panic!("{e:?}"),
    }
    let t = nvptx_llvm_text(&kernels::store_id(), "sm_70");
    assert!(t.starts_with("; LOOM emit error:"), "{t}");
    let mut k = kernels::store_id();
    k.workgroup_size = 48;
    assert!(compile_nvptx(&k, "sm_90").is_err());
}

#[test]
fn tile_ops_ptx_uses_shared_memory_and_barriers() {
    let k = super::kernels::tile_ops();
    for sm in lse_dsl::rt::PTX_ARCHS {
        let ptx = check_ptx(&k, sm);
        assert!(ptx.contains(".shared"), "{sm}: no shared tiles");
        assert!(ptx.contains("bar.sync"), "{sm}: no barrier");
    }
}

#[test]
fn half_values_ptx() {
    let k = super::kernels::from_source(super::kernels::HALF_VALUES_SRC);
    for sm in lse_dsl::rt::PTX_ARCHS {
        check_ptx(&k, sm);
    }
}

#[test]
fn subgroups_use_warp_shuffles_or_shared_memory() {
    let k = super::kernels::from_source(super::kernels::SUBGROUPS_SRC);
    let wide = super::kernels::from_source(super::kernels::WIDE_SUBGROUPS_SRC);
    for sm in lse_dsl::rt::PTX_ARCHS {
        let ptx = check_ptx(&k, sm);
        assert!(ptx.contains("shfl.sync.idx"), "{sm}: no warp shuffle");
        let ptx = check_ptx(&wide, sm);
        assert!(ptx.contains("bar.sync"), "{sm}: no barrier");
        let whole = super::kernels::from_source(super::kernels::WHOLE_SUBGROUP_SRC);
        // 16 threads: the shuffle's member mask names only them.
        assert!(check_ptx(&whole, sm).contains("shfl.sync.idx.b32"), "{sm}");
    }
}

/// Tile windows on shared arrays lower to PTX: shared-memory loads and stores between
/// barriers, and the dequantising bf16 GEMM block's dot on `mma.sync`, its operands loaded
/// by `ldmatrix`.
#[test]
fn shared_array_windows_ptx() {
    let k = super::kernels::from_source(super::kernels::TILE_SHARED_SRC);
    let gemm = super::kernels::from_source(super::kernels::TILE_SHARED_BF16_SRC);
    for sm in lse_dsl::rt::PTX_ARCHS {
        let ptx = check_ptx(&k, sm);
        assert!(
            ptx.contains("ld.shared") && ptx.contains("st.shared"),
            "{sm}: {ptx}"
        );
        assert!(ptx.contains("bar.sync"), "{sm}: no barrier");
        let ptx = check_ptx(&gemm, sm);
        assert!(
            ptx.contains("mma.sync.aligned.m16n8k16"),
            "{sm}: no mma.sync"
        );
        assert!(
            ptx.contains("ldmatrix.sync.aligned.m8n8.x4.shared.b16")
                && ptx.contains("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16"),
            "{sm}: operands not loaded by ldmatrix"
        );
    }
}

/// Integer tiles lower to PTX: 16-bit shared-memory operands, 32-bit integer products.
#[test]
fn integer_tiles_ptx() {
    let k = super::kernels::from_source(super::kernels::TILE_INT_DOT_SRC);
    for sm in lse_dsl::rt::PTX_ARCHS {
        let ptx = check_ptx(&k, sm);
        assert!(
            ptx.contains("ld.shared.u16")
                || ptx.contains("ld.shared.s16")
                || ptx.contains("ld.shared.b16"),
            "{sm}: {ptx}"
        );
        assert!(
            ptx.contains("mad.lo.s32") || ptx.contains("mul.lo.s32"),
            "{sm}: no integer product"
        );
    }
}

/// Byte tiles lower to PTX: 8-bit shared-memory operands, 32-bit integer products (dequantized
/// dots too).
#[test]
fn byte_tiles_ptx() {
    use super::kernels::{from_source, TILE_BYTE_DOT_SRC, TILE_DEQUANT_DOT_SRC};
    for k in [
        from_source(TILE_BYTE_DOT_SRC),
        from_source(TILE_DEQUANT_DOT_SRC),
    ] {
        for sm in lse_dsl::rt::PTX_ARCHS {
            let ptx = check_ptx(&k, sm);
            assert!(
                ptx.contains("ld.shared.u8") || ptx.contains("ld.shared.s8"),
                "{} {sm}: {ptx}",
                k.name
            );
            assert!(
                ptx.contains("mad.lo.s32") || ptx.contains("mul.lo.s32"),
                "{} {sm}: no integer product",
                k.name
            );
        }
    }
}

/// Shared arrays and tiles over 48 KiB (ptxas refuses more static shared memory) lie in one
/// `extern` block of dynamic shared memory, the size the launch gives
/// (`Kernel::nvidia_dynamic_shared_bytes`), with no static array of their own; a kernel within
/// 48 KiB keeps its static arrays and needs no dynamic memory. The first says how many of
/// its blocks an SM's shared memory holds (`.minnctapersm`), which ptxas cannot see.
#[test]
fn workgroup_memory_past_48_kib_is_dynamic_shared_memory() {
    let wide = super::kernels::from_source(super::kernels::WIDE_WORKGROUP_MEMORY_SRC);
    assert_eq!(wide.nvidia_dynamic_shared_bytes(), 8192 + 3 * 16384);
    let small = super::kernels::tile_ops();
    assert_eq!(small.nvidia_dynamic_shared_bytes(), 0);
    for sm in lse_dsl::rt::PTX_ARCHS {
        let ptx = check_ptx(&wide, sm);
        let shared: Vec<&str> = ptx
            .lines()
            .filter(|l| l.contains(".shared .align"))
            .collect();
        assert_eq!(
            shared,
            [".extern .shared .align 16 .b8 loom_dynamic_shared[];"],
            "{sm}: {ptx}"
        );
        assert!(
            ptx.contains("ld.shared") && ptx.contains("st.shared"),
            "{sm}"
        );
        // 56 KiB and CUDA's 1 KiB per block: 2 blocks in sm_80's 164 KiB, 4 in sm_90's 228.
        let blocks = if sm == "sm_80" { 2 } else { 4 };
        assert!(
            ptx.contains(&format!(".minnctapersm {blocks}")),
            "{sm}: {ptx}"
        );
        let ptx = check_ptx(&small, sm);
        assert!(!ptx.contains(".extern .shared"), "{sm}: {ptx}");
        assert!(!ptx.contains(".minnctapersm"), "{sm}: {ptx}");
        assert!(
            ptx.contains(".shared .align 16 .b8 loom_tile_0"),
            "{sm}: {ptx}"
        );
    }
}

/// A packed byte store lowers to PTX as byte stores to global memory.
#[test]
fn packed_byte_store_ptx() {
    let k = super::kernels::from_source(super::kernels::TILE_PACKED_STORE_SRC);
    for sm in lse_dsl::rt::PTX_ARCHS {
        let ptx = check_ptx(&k, sm);
        assert!(
            ptx.contains("st.global.u8") || ptx.contains("st.global.b8"),
            "{sm}: {ptx}"
        );
    }
}
