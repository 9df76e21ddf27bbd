//! `build_all`: the files it writes, what a rebuild keeps and the errors it reports.

use super::kernels;
use crate::driver::build_all_as;
use crate::{build_all, BuildStats, CodegenError};
use lse_dsl::ir::Kernel;
use lse_dsl::rt::{PackedText, HOST_CPUS, PACKED_ASM, PACKED_LL, PTX_ARCHS};

#[test]
fn build_all_writes_every_artifact() {
    let mut a = kernels::store_id();
    a.targets = vec!["gfx1201".into()];
    let b = kernels::reduce();
    let dir = tempfile::tempdir().unwrap();
    let first = build_all(&[a.clone(), b.clone()], dir.path()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(first.reused, 0);
    // The running executable names the codegen, so the same build again keeps everything.
    let again = build_all(&[a.clone(), b.clone()], dir.path()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(again.compiled, 0);
    assert_eq!(again.reused, first.compiled);
    for (k, archs) in [
        (&a, vec!["gfx1201"]),
        (&b, vec!["gfx1201", "gfx1100", "gfx942"]),
    ] {
        let d = dir.path().join("loom").join(&k.fn_name);
        for arch in archs {
            for ext in ["hsaco", PACKED_LL, PACKED_ASM, "json"] {
                assert!(
                    d.join(format!("{arch}.{ext}")).is_file(),
                    "{} {arch}.{ext}",
                    k.fn_name
                );
            }
        }
        assert!(!d.join("gfx1100.hsaco").is_file() || k.fn_name != a.fn_name);
        for cpu in lse_dsl::rt::HOST_CPUS {
            assert!(d.join(format!("host-{cpu}.{PACKED_LL}")).is_file());
            let asm = std::fs::read(d.join(format!("host-{cpu}.{PACKED_ASM}"))).unwrap();
            let asm = PackedText(asm.leak()).unpack().unwrap();
            assert!(
                asm.contains(&lse_dsl::rt::host_symbol(&k.fn_name, cpu)),
                "{asm}"
            );
        }
        let hash = std::fs::read_to_string(d.join("build.hash")).unwrap();
        assert_eq!(hash, lse_dsl::text::ir_hash(k));
    }
    let lib = std::fs::read(dir.path().join("libloom_host.a")).unwrap();
    assert!(lib.starts_with(b"!<arch>\n"));
    let text = String::from_utf8_lossy(&lib);
    for k in [&a, &b] {
        for cpu in lse_dsl::rt::HOST_CPUS {
            assert!(
                text.contains(&lse_dsl::rt::host_symbol(&k.fn_name, cpu)),
                "{} {cpu}",
                k.fn_name
            );
        }
    }
}

/// A second build of the same kernels by the same codegen keeps every output; a changed
/// kernel, a missing output, a damaged stamp or another codegen recompiles what they touch,
/// and the archive always holds every kernel.
#[test]
fn a_rebuild_compiles_only_what_changed() {
    let a = kernels::store_id();
    let b = kernels::reduce();
    let dir = tempfile::tempdir().unwrap();
    let jobs = |k: &Kernel| k.targets.len() + HOST_CPUS.len() + PTX_ARCHS.len();
    let all = jobs(&a) + jobs(&b);
    let build = |ks: &[Kernel], identity: Option<&str>| {
        let stats = build_all_as(ks, dir.path(), identity).unwrap_or_else(|e| panic!("{e}"));
        let lib = std::fs::read(dir.path().join("libloom_host.a")).unwrap();
        let text = String::from_utf8_lossy(&lib);
        for k in ks {
            for cpu in HOST_CPUS {
                let symbol = lse_dsl::rt::host_symbol(&k.fn_name, cpu);
                assert!(text.contains(&symbol), "{symbol}");
            }
        }
        stats
    };
    let stats = |compiled, reused| BuildStats { compiled, reused };
    let both = [a.clone(), b.clone()];
    assert_eq!(build(&both, Some("one")), stats(all, 0));
    let asm = dir
        .path()
        .join("loom")
        .join(&a.fn_name)
        .join(format!("host-x86-64.{PACKED_ASM}"));
    let first = std::fs::read(&asm).unwrap();
    assert_eq!(build(&both, Some("one")), stats(0, all));

    let mut a2 = a.clone();
    a2.version = 2;
    let changed = [a2.clone(), b.clone()];
    assert_eq!(build(&changed, Some("one")), stats(jobs(&a), jobs(&b)));
    let hash = dir.path().join("loom").join(&a.fn_name).join("build.hash");
    assert_eq!(
        std::fs::read_to_string(hash).unwrap(),
        lse_dsl::text::ir_hash(&a2)
    );

    std::fs::remove_file(&asm).unwrap();
    assert_eq!(build(&changed, Some("one")), stats(1, all - 1));
    assert_eq!(std::fs::read(&asm).unwrap(), first);

    let stamp = dir.path().join("loom").join(&b.fn_name).join("sm_90.stamp");
    std::fs::write(stamp, "damaged").unwrap();
    assert_eq!(build(&changed, Some("one")), stats(1, all - 1));

    assert_eq!(build(&changed, Some("two")), stats(all, 0));
    assert_eq!(build(&changed, None), stats(all, 0));
}

#[test]
fn duplicate_names_and_bad_kernels_fail_the_build() {
    let dir = tempfile::tempdir().unwrap();
    let k = kernels::store_id();
    let e = build_all(&[k.clone(), k.clone()], dir.path()).unwrap_err();
    assert_eq!(
        e,
        CodegenError::DuplicateKernel {
            fn_name: k.fn_name.clone()
        }
    );
    let mut bad = kernels::store_id();
    bad.targets = vec!["gfx1234".into()];
    let e = build_all(&[bad], dir.path()).unwrap_err();
    assert!(e.to_string().contains("gfx1234"), "{e}");
}

/// A malformed kernel stops the lowering at its first error, on every target, and no module
/// reaches LLVM: the error names the first problem only.
#[test]
fn an_emission_error_stops_the_lowering_at_once() {
    let k = super::kernels::two_emit_errors();
    let errors = [
        crate::compile_host(&lse_dsl::wil::transform(&k), "x86-64-v3").map(|_| ()),
        crate::compile_amdgpu(&k, "gfx1100").map(|_| ()),
        crate::compile_nvptx(&k, "sm_90").map(|_| ()),
    ];
    for err in errors {
        let msg = err.unwrap_err().to_string();
        assert!(
            msg.contains("parameter 1 is indexed but is not a buffer"),
            "{msg}"
        );
        assert!(!msg.contains("Not"), "{msg}");
    }
}
