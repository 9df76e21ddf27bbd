//! AMDGPU: compile hand-built kernels for three archs and check the code objects.

use super::kernels;
use crate::{amdgpu_llvm_text, compile_amdgpu, inspect_code_object, CodegenError, Stage};

const ARCHES: [(&str, u32, u64); 3] = [
    ("gfx1201", 0x4e, 32),
    ("gfx1100", 0x41, 32),
    ("gfx942", 0x4c, 64),
];

fn check_common(k: &lse_dsl::ir::Kernel, arch: &str, mach: u32, wave: u64) -> crate::CompiledGpu {
    let c = compile_amdgpu(k, arch).unwrap_or_else(|e| panic!("{e}"));
    let info = inspect_code_object(&c.code_object).unwrap();
    assert_eq!(info.e_flags & 0xff, mach, "{arch}");
    assert_eq!(info.arch, arch);
    assert_eq!(info.os_abi, 64);
    assert_eq!(info.abi_version, 3);
    assert_eq!(info.elf_type, 3, "ET_DYN");
    assert!(
        info.target
            .starts_with(&format!("amdgcn-amd-amdhsa--{arch}")),
        "{}",
        info.target
    );
    let names: Vec<&str> = info.symbols.iter().map(|s| s.name.as_str()).collect();
    assert!(names.contains(&k.fn_name.as_str()), "{names:?}");
    let kd = format!("{}.kd", k.fn_name);
    let kd_sym = info
        .symbols
        .iter()
        .find(|s| s.name == kd)
        .expect("kernel descriptor symbol");
    assert_eq!(kd_sym.size, 64);
    assert_eq!(info.kernels.len(), 1);
    let m = &info.kernels[0];
    assert_eq!(m.name, k.fn_name);
    assert_eq!(m.symbol, kd);
    assert_eq!(m.wavefront_size, wave, "{arch}");
    assert_eq!(m.max_flat_workgroup_size, k.workgroup_size as u64);
    assert_eq!(m.private_segment_fixed_size, 0, "no scratch on {arch}");
    assert!(m.group_segment_fixed_size >= k.shared_bytes() as u64);
    // Explicit args come first, in declaration order.
    let mut offset: u64 = 0;
    for (a, p) in m.args.iter().zip(&k.params) {
        let (size, kind) = match p {
            lse_dsl::ir::Param::Buffer { .. } => (8, "global_buffer"),
            lse_dsl::ir::Param::Scalar { .. } => (4, "by_value"),
        };
        offset = offset.div_ceil(size) * size;
        assert_eq!(
            (a.offset, a.size, a.value_kind.as_str()),
            (offset, size, kind),
            "{arch} {p:?}"
        );
        offset += size;
    }
    assert!(m.args.len() >= k.params.len());
    let json: serde_json::Value = serde_json::from_str(&c.metadata_json).unwrap();
    assert_eq!(json["kernels"][0]["symbol"], kd.as_str());
    c
}

#[test]
fn store_id_code_objects() {
    let k = kernels::store_id();
    for (arch, mach, wave) in ARCHES {
        let c = check_common(&k, arch, mach, wave);
        let m = &inspect_code_object(&c.code_object).unwrap().kernels[0];
        assert_eq!(m.args.len(), 3, "no hidden args remain: {:?}", m.args);
        assert_eq!(m.kernarg_segment_size, 16);
        assert!(c.asm.contains("global_store"), "{arch}");
        assert!(c.llvm_ir_opt.contains("amdgpu_kernel"));
    }
}

#[test]
fn reduce_code_objects() {
    let k = kernels::reduce();
    for (arch, mach, wave) in ARCHES {
        let c = check_common(&k, arch, mach, wave);
        let m = &inspect_code_object(&c.code_object).unwrap().kernels[0];
        // tile + two scratch arrays of WG words.
        assert!(
            m.group_segment_fixed_size >= (3 * 64 * 4) as u64,
            "{}",
            m.group_segment_fixed_size
        );
        assert!(
            c.asm.contains("ds_store") || c.asm.contains("ds_write"),
            "{arch}"
        );
        assert!(
            c.asm.contains("ds_load") || c.asm.contains("ds_read"),
            "{arch}"
        );
        if arch == "gfx1201" {
            assert!(c.asm.contains("s_barrier"), "gfx1201 barrier");
            assert!(c.asm.contains("SCOPE_SE"), "workgroup-scope fence");
            assert!(!c.asm.contains("SCOPE_SYS"), "no system-scope fence");
        } else if wave == 32 {
            assert!(c.asm.contains("s_barrier"), "{arch} barrier");
        }
        // On gfx942 a 64-item workgroup is one wave64, and LLVM drops the barrier itself.
    }
}

#[test]
fn halves_code_objects() {
    let k = kernels::halves();
    for (arch, mach, wave) in ARCHES {
        let c = check_common(&k, arch, mach, wave);
        assert!(
            c.asm.contains("global_load_u16") || c.asm.contains("global_load_ushort"),
            "{arch}: 16-bit loads"
        );
        assert!(
            c.asm.contains("global_store_b16") || c.asm.contains("global_store_short"),
            "{arch}: 16-bit stores"
        );
    }
}

#[test]
fn unoptimised_text_has_the_kernel_abi() {
    let t = amdgpu_llvm_text(&kernels::store_id(), "gfx1201");
    assert!(t.starts_with("; LOOM kernel"), "{t}");
    assert!(t.contains("target triple = \"amdgcn-amd-amdhsa\""));
    assert!(t.contains("define amdgpu_kernel void @k_store_id(ptr addrspace(1) noalias align 4 %p0, i32 %p1, i32 %p2)"));
    assert!(t.contains("\"amdgpu-flat-work-group-size\"=\"1,64\""));
    assert!(t.contains("!reqd_work_group_size !0"));
    assert!(t.contains("amdhsa_code_object_version\", i32 500"));
    assert!(!t.contains("inreg"));
    let r = amdgpu_llvm_text(&kernels::reduce(), "gfx1201");
    assert!(r.contains("fence syncscope(\"workgroup\") release"));
    assert!(r.contains("addrspace(3) global [64 x float]"));
}

#[test]
fn bad_inputs_are_errors() {
    let k = kernels::store_id();
    let e = compile_amdgpu(&k, "gfx9999").unwrap_err();
    assert!(
        matches!(
            e,
            CodegenError::Compile {
                stage: Stage::Target,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("gfx9999"));
    let mut bad = k.clone();
    bad.workgroup_size = 48;
    let e = compile_amdgpu(&bad, "gfx1201").unwrap_err();
    assert!(
        matches!(
            e,
            CodegenError::Compile {
                stage: Stage::Emit,
                ..
            }
        ),
        "{e}"
    );
    assert!(amdgpu_llvm_text(&bad, "gfx1201").starts_with("; LOOM emit error"));
}

#[test]
fn malformed_llvm_text_is_an_error_not_an_abort() {
    let type_error = "define void @f(i32 %x) {\n  %y = fadd float %x, 1.0\n  ret void\n}\n";
    let r = crate::llvm::compile_text(type_error, "bad", crate::llvm::HOST_TRIPLE, "x86-64", "");
    assert!(matches!(r, Err((Stage::Parse, _))));
    let bad_ssa = "define i32 @f(i32 %x) {\nentry:\n  br label %b\nb:\n  ret i32 %z\nc:\n  %z = add i32 %x, 1\n  br label %b\n}\n";
    let r = crate::llvm::compile_text(bad_ssa, "bad", crate::llvm::HOST_TRIPLE, "x86-64", "");
    assert!(matches!(r, Err((Stage::Verify, _))), "{:?}", r.err());
    assert!(crate::link::link_code_object(b"garbage", "bad").is_err());
}

/// The elementwise and row tile statements lower for every AMDGPU arch (LDS loops between
/// barriers; LOOM's `exp` inline, no libcall).
#[test]
fn tile_ops_code_objects() {
    let k = kernels::tile_ops();
    for (arch, mach, wave) in ARCHES {
        let c = check_common(&k, arch, mach, wave);
        assert!(!c.asm.contains("expf"), "{arch}: a libcall");
        assert!(c.asm.contains("ds_"), "{arch}: no LDS access");
    }
}

/// `prefetch` takes no code and no barrier on a GPU: the copy around it has none.
#[test]
fn prefetch_code_objects_have_no_barrier() {
    let k = kernels::from_source(kernels::PREFETCH_SRC);
    for (arch, mach, wave) in ARCHES {
        let c = check_common(&k, arch, mach, wave);
        assert!(!c.asm.contains("s_barrier"), "{arch}:\n{}", c.asm);
        assert!(!c.llvm_ir_opt.contains("@llvm.prefetch"), "{arch}");
    }
}

/// bf16 and f16 arithmetic lowers for every AMDGPU arch.
#[test]
fn half_values_code_objects() {
    let k = kernels::from_source(kernels::HALF_VALUES_SRC);
    for (arch, mach, wave) in ARCHES {
        check_common(&k, arch, mach, wave);
    }
}

/// Subgroups that fit a wave use the lane shuffle (`ds_bpermute`); a subgroup wider than an
/// RDNA wave goes through LDS with barriers.
#[test]
fn subgroup_code_objects() {
    let k = kernels::from_source(kernels::SUBGROUPS_SRC);
    let wide = kernels::from_source(kernels::WIDE_SUBGROUPS_SRC);
    let whole = kernels::from_source(kernels::WHOLE_SUBGROUP_SRC);
    for (arch, mach, wave) in ARCHES {
        check_common(&whole, arch, mach, wave);
        let c = check_common(&k, arch, mach, wave);
        assert!(c.asm.contains("ds_bpermute"), "{arch}: no lane shuffle");
        let c = check_common(&wide, arch, mach, wave);
        if wave == 64 {
            assert!(c.asm.contains("ds_bpermute"), "{arch}: no lane shuffle");
        } else {
            assert!(c.asm.contains("s_barrier"), "{arch}: no barrier");
        }
    }
}

/// Tile windows on shared arrays (LDS) lower for every AMDGPU arch: the f32 loads, stores
/// and transposed windows, and a dequantising bf16 GEMM block whose `b` operand comes from
/// LDS and whose dot takes the arch's matrix instruction.
#[test]
fn shared_array_window_code_objects() {
    let k = kernels::from_source(kernels::TILE_SHARED_SRC);
    let gemm = kernels::from_source(kernels::TILE_SHARED_BF16_SRC);
    for (arch, mach, wave) in ARCHES {
        let c = check_common(&k, arch, mach, wave);
        assert!(c.asm.contains("ds_"), "{arch}: no LDS access");
        let c = check_common(&gemm, arch, mach, wave);
        let unit = if wave == 64 { "v_mfma" } else { "v_wmma" };
        assert!(c.asm.contains(unit), "{arch}: no {unit}");
    }
}

/// Integer tiles lower for every AMDGPU arch: i16 operands and i32 accumulators in LDS, the
/// dot on the portable path (no matrix instruction takes i16).
#[test]
fn integer_tile_code_objects() {
    let k = kernels::from_source(kernels::TILE_INT_DOT_SRC);
    for (arch, mach, wave) in ARCHES {
        let c = check_common(&k, arch, mach, wave);
        assert!(
            c.asm.contains("ds_read_i16")
                || c.asm.contains("ds_read_u16")
                || c.asm.contains("ds_load_i16")
                || c.asm.contains("ds_load_u16"),
            "{arch}: no 16-bit LDS read"
        );
        assert!(
            c.asm.contains("v_mad_i32_i24")
                || c.asm.contains("v_mul_lo")
                || c.asm.contains("v_mad_u32_u24")
                || c.asm.contains("v_mul_i32"),
            "{arch}: no integer multiply"
        );
    }
}

/// Byte tiles lower for every AMDGPU arch: 8-bit operands in LDS, the dot (scaled,
/// dequantized or not) on the portable path.
#[test]
fn byte_tile_code_objects() {
    for src in [kernels::TILE_BYTE_DOT_SRC, kernels::TILE_DEQUANT_DOT_SRC] {
        let k = kernels::from_source(src);
        for (arch, mach, wave) in ARCHES {
            let c = check_common(&k, arch, mach, wave);
            assert!(
                ["ds_read_i8", "ds_read_u8", "ds_load_i8", "ds_load_u8"]
                    .iter()
                    .any(|i| c.asm.contains(i)),
                "{} {arch}: no 8-bit LDS read",
                k.name
            );
        }
    }
}

/// A packed byte store lowers for every AMDGPU arch as one byte store per element.
#[test]
fn packed_byte_store_code_objects() {
    let k = kernels::from_source(kernels::TILE_PACKED_STORE_SRC);
    for (arch, mach, wave) in ARCHES {
        let c = check_common(&k, arch, mach, wave);
        assert!(
            [
                "global_store_byte",
                "global_store_b8",
                "buffer_store_byte",
                "buffer_store_b8"
            ]
            .iter()
            .any(|i| c.asm.contains(i)),
            "{arch}: no byte store"
        );
    }
}
