//! Offline checks of every AMDGPU code object of every kernel, for every target arch: no GPU
//! needed. The ELF header names the arch and the HSA ABI, the notes describe the kernel with
//! the arguments LOOM declared, the kernel descriptor exists, and the scoring kernels use no
//! scratch memory. Every kernel's PTX has the structure a CUDA launch needs and assembles with
//! NVIDIA's `ptxas` without spills. Also: the build script and the proc-macro lowered the
//! same IR.

use lse_codegen::inspect_code_object;
use lse_dsl::rt::ParamKind;

/// `e_flags & 0xff` (EF_AMDGPU_MACH) for each arch we build.
fn mach(arch: &str) -> u32 {
    match arch {
        "gfx1201" => 0x4e,
        "gfx1100" => 0x41,
        "gfx942" => 0x4c,
        other => panic!("no EF_AMDGPU_MACH value recorded for {other}"),
    }
}

#[test]
fn every_code_object_is_a_valid_hsa_kernel_for_its_arch() {
    for k in lse_kernels::ALL {
        assert!(!k.gpu.is_empty(), "{} has no code objects", k.id);
        for obj in k.gpu {
            let what = format!("{} {}", k.id, obj.arch);
            let info =
                inspect_code_object(obj.code_object).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(
                info.e_flags & 0xff,
                mach(obj.arch),
                "{what}: e_flags {:#x}",
                info.e_flags
            );
            assert_eq!(info.os_abi, 64, "{what}: OS/ABI is not AMDGPU HSA");
            assert_eq!(info.abi_version, 3, "{what}: not code object v5");
            assert_eq!(
                info.elf_type, 3,
                "{what}: not ET_DYN (linked shared object)"
            );
            assert_eq!(
                info.target,
                format!("amdgcn-amd-amdhsa--{}", obj.arch),
                "{what}"
            );

            let descriptor = format!("{}.kd", k.fn_name);
            let kd = info
                .symbols
                .iter()
                .find(|s| s.name == descriptor)
                .unwrap_or_else(|| panic!("{what}: no {descriptor}"));
            assert_eq!(kd.size, 64, "{what}: kernel descriptor size");

            assert_eq!(info.kernels.len(), 1, "{what}");
            let meta = &info.kernels[0];
            assert_eq!(meta.symbol, descriptor, "{what}");
            assert_eq!(meta.args.len(), k.params.len(), "{what}: {:?}", meta.args);
            for (arg, param) in meta.args.iter().zip(k.params) {
                let (kind, size) = match param.kind {
                    ParamKind::Buffer { .. } => ("global_buffer", 8),
                    ParamKind::Scalar { .. } => ("by_value", 4),
                };
                assert_eq!(
                    (arg.value_kind.as_str(), arg.size),
                    (kind, size),
                    "{what}: argument {}",
                    param.name
                );
            }
            assert!(
                u64::from(k.shared_bytes) <= meta.group_segment_fixed_size,
                "{what}: LDS"
            );
            let wave = if obj.arch.starts_with("gfx9") { 64 } else { 32 };
            assert_eq!(meta.wavefront_size, wave, "{what}");
            assert_eq!(
                meta.max_flat_workgroup_size,
                u64::from(k.workgroup_size),
                "{what}"
            );
            assert_eq!(
                meta.private_segment_fixed_size, 0,
                "{what}: uses scratch memory"
            );
        }
    }
}

#[test]
fn barriers_use_workgroup_scope_fences_on_gfx1201() {
    for id in ["logits.lse_pick.v1", "topk_pairs.v1"] {
        let k = lse_kernels::find(id).unwrap();
        let asm = text(k.gpu.iter().find(|g| g.arch == "gfx1201").unwrap().asm);
        assert!(asm.contains("s_barrier"), "{id}: no barrier");
        assert!(
            !asm.contains("SCOPE_SYS"),
            "{id}: a system-scope fence where workgroup scope is enough"
        );
        assert!(
            asm.contains("ds_"),
            "{id}: collectives should go through LDS"
        );
    }
}

#[test]
fn build_script_and_macro_lowered_the_same_ir() {
    assert_eq!(lse_kernels::BUILD_IR_HASHES.len(), lse_kernels::ALL.len());
    for (build, kernel) in lse_kernels::BUILD_IR_HASHES.iter().zip(lse_kernels::ALL) {
        assert_eq!(*build, kernel.ir_hash, "{}", kernel.id);
    }
}

/// An embedded artefact's text.
fn text(packed: lse_dsl::rt::PackedText) -> String {
    packed.unpack().unwrap_or_else(|e| panic!("{e}"))
}

/// The `.param` types of the one `.visible .entry <name>(` of `ptx`, in order.
fn ptx_entry_params(ptx: &str, name: &str, what: &str) -> Vec<String> {
    let head = format!(".visible .entry {name}(");
    assert_eq!(ptx.matches(&head).count(), 1, "{what}: one `{head}`");
    let start = ptx.find(&head).unwrap() + head.len();
    let end = start + ptx[start..].find(')').expect("closing parenthesis");
    ptx[start..end]
        .split(',')
        .map(|p| p.split_whitespace().nth(1).unwrap_or("").to_string())
        .collect()
}

/// Bytes of the static `.shared` arrays `ptx` declares (`.shared .align A .b8 name[N];`).
fn ptx_static_shared_bytes(ptx: &str, what: &str) -> u64 {
    ptx.lines()
        .map(str::trim)
        .filter(|l| l.starts_with(".shared "))
        .map(|l| {
            let n = l.rsplit_once('[').and_then(|(_, n)| n.strip_suffix("];"));
            n.and_then(|n| n.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("{what}: unexpected `{l}`"))
        })
        .sum()
}

/// Every kernel's PTX: the ABI, barriers and memory accesses it needs, and at most 48 KiB of
/// static shared memory (what ptxas accepts); a kernel with more workgroup memory declares
/// it `extern` (dynamic, sized by the launch) instead.
#[test]
fn every_kernel_has_valid_ptx_for_sm_80_and_sm_90() {
    for k in lse_kernels::ALL {
        let archs: Vec<&str> = k.ptx.iter().map(|m| m.arch).collect();
        assert_eq!(archs, lse_dsl::rt::PTX_ARCHS, "{}", k.id);
        let syncs = k.ir_text.contains("barrier")
            || k.ir_text.contains("reduce_")
            || k.ir_text.contains("argmax")
            || k.ir_text.contains("broadcast");
        for m in k.ptx {
            let what = format!("{} {}", k.id, m.arch);
            let ptx = &text(m.ptx);
            assert!(ptx.contains(".version "), "{what}");
            assert!(ptx.contains(&format!(".target {}", m.arch)), "{what}");
            assert!(ptx.contains(".address_size 64"), "{what}");
            assert!(
                ptx.contains(&format!(".reqntid {}", k.workgroup_size)),
                "{what}"
            );
            assert!(
                !ptx.contains(".maxntid"),
                "{what}: ptxas rejects .maxntid with .reqntid"
            );
            let want: Vec<&str> = k
                .params
                .iter()
                .map(|p| match p.kind {
                    ParamKind::Buffer { .. } => ".u64",
                    ParamKind::Scalar { ty: "f32" } => ".f32",
                    ParamKind::Scalar { .. } => ".u32",
                })
                .collect();
            assert_eq!(ptx_entry_params(ptx, k.fn_name, &what), want, "{what}");
            if syncs {
                assert!(ptx.contains("bar.sync"), "{what}: no bar.sync");
            }
            if k.shared_bytes > 0 {
                assert!(ptx.contains(".shared"), "{what}: no .shared");
            }
            let static_shared = ptx_static_shared_bytes(ptx, &what);
            assert!(
                static_shared <= 48 * 1024,
                "{what}: {static_shared} bytes of static shared memory; ptxas allows 48 KiB"
            );
            let dynamic = ptx.contains(".extern .shared");
            assert_eq!(dynamic, k.nvidia_dynamic_shared_bytes > 0, "{what}");
            assert!(ptx.contains("ld.global"), "{what}: no ld.global");
            assert!(ptx.contains("st.global"), "{what}: no st.global");
            assert!(text(m.llvm_ir).contains("nvptx64-nvidia-cuda"), "{what}");
        }
    }
}

/// Every `N` of `N bytes <what>` in `ptxas -v`'s report (one per function it assembled).
fn ptxas_bytes(report: &str, what: &str) -> Vec<u64> {
    let what = format!(" bytes {what}");
    report
        .match_indices(&what)
        .filter_map(|(at, _)| {
            let digits = report[..at].rsplit(|c: char| !c.is_ascii_digit()).next()?;
            digits.parse().ok()
        })
        .collect()
}

/// Every kernel's PTX assembles with NVIDIA's `ptxas` for its arch (what the driver does when
/// it loads the module, so PTX that ptxas rejects would fail every launch on a GPU), with no
/// registers spilled to local memory. `ptxas` comes from `$LSE_PTXAS`, which
/// `scripts/fetch-ptxas.sh` fetches and `scripts/env.sh` sets; without it the test says so
/// and checks nothing.
#[test]
fn every_kernel_assembles_with_ptxas_without_spills() {
    let Some(ptxas) = std::env::var_os("LSE_PTXAS") else {
        eprintln!("LSE_PTXAS is not set (scripts/fetch-ptxas.sh): PTX not assembled");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let jobs: Vec<(&lse_dsl::rt::KernelDef, &lse_dsl::rt::PtxModule)> = lse_kernels::ALL
        .iter()
        .flat_map(|k| k.ptx.iter().map(move |m| (*k, m)))
        .collect();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    std::thread::scope(|s| {
        for chunk in jobs.chunks(jobs.len().div_ceil(threads)) {
            let (ptxas, dir) = (&ptxas, dir.path());
            s.spawn(move || {
                for (k, m) in chunk {
                    let what = format!("{} {}", k.id, m.arch);
                    let stem = dir.join(format!("{}.{}", k.id, m.arch));
                    let (ptx, cubin) = (stem.with_extension("ptx"), stem.with_extension("cubin"));
                    std::fs::write(&ptx, text(m.ptx)).unwrap();
                    let out = std::process::Command::new(ptxas)
                        .arg(format!("-arch={}", m.arch))
                        .arg("-v")
                        .arg(&ptx)
                        .arg("-o")
                        .arg(&cubin)
                        .output()
                        .unwrap_or_else(|e| panic!("running LSE_PTXAS={ptxas:?}: {e}"));
                    let report = String::from_utf8_lossy(&out.stderr);
                    assert!(out.status.success(), "{what}: ptxas failed:\n{report}");
                    assert!(cubin.exists(), "{what}: ptxas wrote no cubin");
                    for spill in ["spill stores", "spill loads"] {
                        let bytes = ptxas_bytes(&report, spill);
                        assert!(!bytes.is_empty(), "{what}: no `{spill}` in:\n{report}");
                        assert!(
                            bytes.iter().all(|&b| b == 0),
                            "{what}: {bytes:?} bytes of {spill}:\n{report}"
                        );
                    }
                }
            });
        }
    });
}

/// The GEMM's matrix instructions are where the host levels promise them, checked in the
/// assembly the build produced (the AMX level cannot run on a CPU without AMX, so this is the
/// check it gets there): `tdpbf16ps` (with `ldtilecfg`) on `x86-64-v4-amx`, `vdpbf16ps` on
/// `x86-64-v4-bf16`, neither below; f32 products keep to FMA (`vfmadd`) everywhere. The same
/// for the instances of few rows (`gemm.xwt_narrow`, `gemm.xwt_exact_narrow`).
#[test]
fn gemm_host_levels_use_their_matrix_instructions() {
    use lse_kernels::gemm::{gemm_xwt_bf16, gemm_xwt_exact_bf16};
    use lse_kernels::gemm_narrow::{gemm_xwt_exact_narrow_bf16, gemm_xwt_narrow_bf16};
    let asm = |k: &lse_dsl::rt::KernelDef, cpu: &str| {
        text(
            k.host
                .iter()
                .find(|v| v.cpu == cpu)
                .unwrap_or_else(|| panic!("{} has no {cpu} code", k.id))
                .asm,
        )
    };
    for k in [&gemm_xwt_bf16::KERNEL, &gemm_xwt_narrow_bf16::KERNEL] {
        let amx = asm(k, "x86-64-v4-amx");
        assert!(
            amx.contains("tdpbf16ps") && amx.contains("ldtilecfg"),
            "{}",
            k.id
        );
        assert!(asm(k, "x86-64-v4-bf16").contains("vdpbf16ps"), "{}", k.id);
        for cpu in ["x86-64", "x86-64-v3", "x86-64-v4"] {
            let a = asm(k, cpu);
            assert!(
                !a.contains("dpbf16ps") && !a.contains("tileloadd"),
                "{} {cpu}",
                k.id
            );
        }
    }
    for k in [
        &gemm_xwt_exact_bf16::KERNEL,
        &gemm_xwt_exact_narrow_bf16::KERNEL,
    ] {
        for cpu in ["x86-64-v3", "x86-64-v4", "x86-64-v4-bf16"] {
            let a = asm(k, cpu);
            assert!(
                a.contains("vfmadd") && !a.contains("dpbf16ps"),
                "{} {cpu}",
                k.id
            );
        }
    }
}

/// The integer GEMMs' instances of 64 and 16 rows per workgroup (`gemm.xwt_<q>_q8_k_bm*`,
/// `gemm.xwt_q8_0_q8_0_bm*`) multiply bytes with `vpdpbusd` on the host levels with
/// AVX512-VNNI, and on no host level read the weight through vector gathers: each access
/// reads the expert's index from the table where it forms the address, so consecutive
/// work-items read consecutive words (kept in a variable, the index made those loads gathers).
#[test]
fn integer_gemm_instances_take_byte_dots_and_no_gathers() {
    use lse_kernels::gemm_int::*;
    for k in [
        &gemm_xwt_q4_k_q8_k_bm64::KERNEL,
        &gemm_xwt_q4_k_q8_k_bm16::KERNEL,
        &gemm_xwt_q5_k_q8_k_bm64::KERNEL,
        &gemm_xwt_q5_k_q8_k_bm16::KERNEL,
        &gemm_xwt_q6_k_q8_k_bm64::KERNEL,
        &gemm_xwt_q6_k_q8_k_bm16::KERNEL,
        &gemm_xwt_q8_0_q8_0_bm64::KERNEL,
        &gemm_xwt_q8_0_q8_0_bm16::KERNEL,
    ] {
        for v in k.host {
            let asm = text(v.asm);
            assert!(!asm.contains("gather"), "{} {}: a gather", k.id, v.cpu);
            if v.cpu.ends_with("-bf16") || v.cpu.ends_with("-amx") {
                assert!(asm.contains("vpdpbusd"), "{} {}: no vpdpbusd", k.id, v.cpu);
            }
        }
    }
}

/// The 16-bit GEMM's dots run on each GPU's matrix unit, checked in the assembly the build
/// produced (no GPU here): MFMA on gfx942, WMMA on gfx1100 and gfx1201, `mma.sync` with
/// `ldmatrix` operand loads in the PTX of sm_80 and sm_90. The f32-activation GEMM has f32
/// operand tiles, which no matrix unit here multiplies, so its dots keep the portable
/// lowering. Both load whole blocks with 16-byte vectors. The instances of few rows
/// (`gemm.xwt_narrow_<ty>`) take the same matrix units.
#[test]
fn gemm_gpu_targets_use_their_matrix_units() {
    use lse_kernels::gemm::{gemm_xwt_bf16, gemm_xwt_exact_bf16, gemm_xwt_f16};
    use lse_kernels::gemm_narrow::{gemm_xwt_narrow_bf16, gemm_xwt_narrow_f16};
    for k in [
        &gemm_xwt_bf16::KERNEL,
        &gemm_xwt_f16::KERNEL,
        &gemm_xwt_narrow_bf16::KERNEL,
        &gemm_xwt_narrow_f16::KERNEL,
    ] {
        let ty = if k.id.contains("bf16") { "bf16" } else { "f16" };
        for obj in k.gpu {
            let want = match obj.arch {
                "gfx942" => format!("v_mfma_f32_16x16x16_{ty}"),
                _ => format!("v_wmma_f32_16x16x16_{ty}"),
            };
            assert!(
                text(obj.asm).contains(&want),
                "{} {}: no {want}",
                k.id,
                obj.arch
            );
        }
        for m in k.ptx {
            let ptx = text(m.ptx);
            let want = format!("mma.sync.aligned.m16n8k16.row.col.f32.{ty}.{ty}.f32");
            assert!(ptx.contains(&want), "{} {}: no {want}", k.id, m.arch);
            // Operands come from shared memory through ldmatrix (`.trans` for B).
            for want in [
                "ldmatrix.sync.aligned.m8n8.x4.shared.b16",
                "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16",
            ] {
                assert!(ptx.contains(want), "{} {}: no {want}", k.id, m.arch);
            }
        }
    }
    let exact = &gemm_xwt_exact_bf16::KERNEL;
    for obj in exact.gpu {
        let asm = text(obj.asm);
        assert!(!asm.contains("v_mfma") && !asm.contains("v_wmma"));
    }
    for m in exact.ptx {
        assert!(!text(m.ptx).contains("mma.sync"), "{}", m.arch);
    }
    // Whole, aligned operand blocks come from global memory 16 bytes at a time: the weight
    // and pair-layout activations of `gemm.xwt`, the f32 activations of `gemm.xwt_exact`.
    for (k, want) in [
        (&gemm_xwt_bf16::KERNEL, "ld.global.nc.v4.u32"),
        (exact, "ld.global.nc.v4.f32"),
    ] {
        for m in k.ptx {
            assert!(text(m.ptx).contains(want), "{} {}: no {want}", k.id, m.arch);
        }
    }
}
