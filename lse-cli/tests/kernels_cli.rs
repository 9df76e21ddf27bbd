//! `lse kernels list` and `lse kernels show`: every stage of every kernel is one command away.

use std::process::Command;

/// Runs `lse` with `args`: (success, stdout, stderr).
fn lse(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_lse"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `lse kernels show NAME --emit EMIT [--arch ARCH]`.
fn show(name: &str, emit: &str, arch: Option<&str>) -> (bool, String, String) {
    let mut args = vec!["kernels", "show", name, "--emit", emit];
    args.extend(arch.iter().flat_map(|a| ["--arch", a]));
    lse(&args)
}

/// The `lse kernels list` line of kernel `id`.
fn list_line(id: &str) -> String {
    let (ok, out, err) = lse(&["kernels", "list"]);
    assert!(ok, "{err}");
    out.lines()
        .find(|l| l.starts_with(id))
        .unwrap_or_else(|| panic!("{id} missing:\n{out}"))
        .to_string()
}

#[test]
fn list_shows_each_kernel_with_registers_per_arch() {
    for id in [
        "logits.lse_pick.v1",
        "topk_pairs.v1",
        "gemm.xwt_exact_bf16.v8",
        "lm_head.matvec_f32.v1",
    ] {
        let line = list_line(id);
        assert!(
            line.contains("workgroup") && line.contains("gfx1201,gfx1100,gfx942"),
            "{line}"
        );
    }
    let (_, out, _) = lse(&["kernels", "list"]);
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with("gfx942") && l.contains("vgpr")),
        "{out}"
    );
}

#[test]
fn show_prints_every_stage() {
    let (ok, ir, _) = show("logits.lse_pick.v1", "ir", None);
    assert!(
        ok && ir.contains("kernel logits.lse_pick version 1"),
        "{ir}"
    );
    let (ok, rust, _) = show("topk_pairs", "rust", None);
    assert!(ok && rust.contains("pub fn topk_pairs("), "{rust}");
    let (ok, llvm, _) = show("topk_pairs", "llvm", None);
    assert!(
        ok && llvm.contains("define") && llvm.contains("loom_host_topk_pairs"),
        "{llvm}"
    );
    let (ok, asm, _) = show("logits.lse_pick", "asm", Some("gfx1201"));
    assert!(ok && asm.contains("s_endpgm"), "{asm}");
}

#[test]
fn unknown_kernels_and_archs_are_named() {
    let (ok, _, err) = lse(&["kernels", "show", "nope"]);
    assert!(
        !ok && err.contains("no kernel named \"nope\"") && err.contains("topk_pairs.v1"),
        "{err}"
    );
    let (ok, _, err) = show("topk_pairs", "asm", Some("gfx803"));
    assert!(
        !ok && err.contains("gfx803") && err.contains("gfx1201"),
        "{err}"
    );
}

#[test]
fn ptx_is_listed_and_shown_per_sm_arch() {
    let line = list_line("topk_pairs.v1");
    assert!(line.contains("gfx942,sm_80,sm_90"), "{line}");
    let (ok, ptx, err) = show("topk_pairs", "ptx", Some("sm_90"));
    assert!(ok, "{err}");
    assert!(
        ptx.contains(".target sm_90") && ptx.contains(".visible .entry topk_pairs("),
        "{ptx}"
    );
    let (ok, _, err) = show("topk_pairs", "ptx", None);
    assert!(
        !ok && err.contains("--arch") && err.contains("sm_80"),
        "{err}"
    );
    let (ok, _, err) = show("topk_pairs", "ptx", Some("sm_70"));
    assert!(
        !ok && err.contains("sm_70") && err.contains("sm_90"),
        "{err}"
    );
}

/// The matrix instructions of the GEMM, one command away for every target whatever this
/// machine has: AMX and `vdpbf16ps` host levels, MFMA and WMMA code objects, `mma.sync` PTX.
#[test]
fn the_gemm_shows_each_targets_matrix_instruction() {
    for (emit, arch, want) in [
        ("asm", "x86-64-v4-amx", "tdpbf16ps"),
        ("asm", "x86-64-v4-bf16", "vdpbf16ps"),
        ("asm", "gfx942", "v_mfma_f32_16x16x16_bf16"),
        ("asm", "gfx1100", "v_wmma_f32_16x16x16_bf16"),
        ("asm", "gfx1201", "v_wmma_f32_16x16x16_bf16"),
        ("ptx", "sm_90", "mma.sync.aligned.m16n8k16"),
    ] {
        let (ok, out, err) = show("gemm.xwt_bf16.v9", emit, Some(arch));
        assert!(ok, "{arch}: {err}");
        assert!(out.contains(want), "{arch}: no {want}");
    }
    let (ok, _, err) = show("gemm.xwt_bf16.v9", "asm", Some("x86-64-v9"));
    assert!(!ok);
    assert!(
        err.contains("no host code for x86-64-v9") && err.contains("x86-64-v4-amx"),
        "{err}"
    );
}

/// Runs `lse` with `args` and its standard output a pipe whose reader has already closed:
/// (exit status code, stderr).
fn to_a_closed_reader(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lse"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_reader_that_closes_early_stops_lse_quietly_with_the_sigpipe_status() {
    for args in [
        &["kernels", "list"][..],
        &[
            "kernels",
            "show",
            "gemm.xwt_bf16",
            "--emit",
            "asm",
            "--arch",
            "x86-64-v4-amx",
        ],
    ] {
        let (code, err) = to_a_closed_reader(args);
        assert_eq!(code, Some(141), "{args:?}: {err}");
        assert!(err.is_empty(), "{args:?}: {err}");
    }
}

#[test]
fn a_full_disk_behind_standard_output_is_an_error_not_a_panic() {
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full (Linux)");
    let out = Command::new(env!("CARGO_BIN_EXE_lse"))
        .args(["kernels", "list"])
        .stdout(full)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("could not write to standard output") && !err.contains("panicked"),
        "{err}"
    );
}
