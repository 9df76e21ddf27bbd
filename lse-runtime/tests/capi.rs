//! The C API from C: compile a program against `include/lse/lse.h` and the shared library
//! with the system C compiler, run it with two threads scoring on one engine, check output.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `target/<profile>/deps/`, beside this test's executable: where `cargo test` builds
/// `liblse_runtime.so` with the library this test links (`cargo build` also copies it one
/// folder up, `cargo test` does not).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().to_path_buf()
}

#[test]
fn c_program_scores_from_two_threads_and_gets_errors() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let repo = crate_dir.parent().unwrap();
    let lib_dir = lib_dir();
    assert!(
        lib_dir.join("liblse_runtime.so").exists(),
        "liblse_runtime.so not found in {}: `cargo test` builds it there with the tests",
        lib_dir.display()
    );

    let work = tempfile::tempdir().unwrap();
    let exe = work.path().join("two_threads");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .arg(crate_dir.join("tests/c/two_threads.c"))
        .arg("-I")
        .arg(crate_dir.join("include"))
        .arg("-L")
        .arg(&lib_dir)
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .args(["-llse_runtime", "-lpthread", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .status()
        .unwrap();
    assert!(status.success(), "{cc} failed");

    let golden: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo.join("tests/data/models/big_vocab_bf16/ppl_golden.json"))
            .unwrap(),
    )
    .unwrap();
    let config = serde_json::json!({
        "model": repo.join("tests/data/models/big_vocab_bf16"),
        "pool": "host",
        "kv_cache_dtype": "f32",
    });
    let request = serde_json::json!({
        "tokens": golden["token_ids"],
        "ctx": 64,
        "chunks": 3,
        "include_windows": false,
        "include_token_stats": true,
    });
    let out = Command::new(&exe)
        .arg(config.to_string())
        .arg(request.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "C program failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );

    // Two reports, each followed by a `----` line, then the error line.
    let lines: Vec<&str> = stdout.split("\n----\n").collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    let want = &golden["chunks"]["windows"];
    let want_nll: f64 = (0..3)
        .map(|i| want[i]["nll_sum"].as_f64().unwrap())
        .sum::<f64>()
        / (3.0 * 31.0);
    for line in &lines[..2] {
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(r["object"], "lse.perplexity");
        assert_eq!(r["scored_tokens"], 93);
        assert!(r.get("windows").is_none());
        assert_eq!(r["token_stats"]["nll"].as_array().map(Vec::len), Some(93));
        let nll = r["mean_nll"].as_f64().unwrap();
        assert!(
            (nll - want_nll).abs() < 1e-4,
            "mean_nll {nll}, transformers {want_nll}"
        );
    }
    assert!(
        lines[2].starts_with("error 1:") && lines[2].contains("bogus"),
        "{}",
        lines[2]
    );
}
