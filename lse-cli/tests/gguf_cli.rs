//! `lse perplexity` on GGUF files that llama.cpp's converter and quantizer made
//! (`tests/goldens/make_gguf_models.py`), against the perplexities `llama-perplexity` computed
//! on the same files, text and windows (`tests/data/gguf/wide.llama-perplexity.json`), and
//! against the Hugging Face checkpoints they were converted from.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `lse perplexity --model model <args> --quiet --perplexity-output out`; the parsed report.
fn perplexity(model: &Path, args: &[&OsStr], out: &Path) -> Value {
    let run = Command::new(env!("CARGO_BIN_EXE_lse"))
        .args(["perplexity", "--model"])
        .arg(model)
        .args(args)
        .args(["--quiet", "--perplexity-output"])
        .arg(out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{} {args:?}: {}",
        model.display(),
        String::from_utf8_lossy(&run.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(out).unwrap()).unwrap()
}

/// Every quantized file scores within 2e-3 (relative) of llama-perplexity's estimate. LSE
/// dequantizes the weights exactly and quantizes the activations as llama.cpp's CPU backend
/// does (Q8_0 and Q8_K blocks), and multiplies Q8_0 and K-quant weights in integers with
/// `d_x · d_w` formed first, as llama.cpp does; what is left is f32 summation order, amplified
/// where it flips an activation's 8-bit rounding. Observed (2026-12-05, AVX-512 host): Q8_0
/// 1.0e-4, Q4_K_M 3.2e-4, Q5_K_M 1.4e-3 with the K-quants' minimum terms summed apart and
/// added at the end, as llama.cpp does (2.5e-4 and 1.6e-4 with them added per block, the
/// GEMMs' RMS error against the exact product 3.0e-9 of `Σ |x·w|` in both: the same
/// precision, another rounding pattern; 2.9e-4, 1.4e-3 and 2.2e-4 with the scales applied
/// one after the other and, 2026-12-02, 2.9e-4, 1.06e-3, 1.18e-3 on the f32 path); llama.cpp
/// itself moves by 5.7e-4 and 6.8e-4 on the Q8_0 and Q4_K_M files between its
/// flash-attention and plain attention paths. Without the activation quantization the gaps
/// are 3.9e-4, 4.1e-3 and 5.0e-3. Q4_0 and Q5_0 (their projections on the integer GEMM
/// since 2026-12-07, the head Q6_K): 1.77e-3 and 5.3e-5, where the f32 GEMM on their
/// dequantized blocks gave 1.85e-3 and 3.3e-5.
#[test]
fn quantized_gguf_files_score_as_llama_perplexity_does() {
    let gguf = repo().join("tests/data/gguf");
    let golden: Value = serde_json::from_str(
        &std::fs::read_to_string(gguf.join("wide.llama-perplexity.json")).unwrap(),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    for file in [
        "wide-q8_0.gguf",
        "wide-q4_k_m.gguf",
        "wide-q5_k_m.gguf",
        "wide-q4_0.gguf",
        "wide-q5_0.gguf",
    ] {
        let want = golden["files"][file]["ppl"].as_f64().unwrap();
        // llama-perplexity's settings of the goldens: ctx 128, 8 chunks, batch 128, an f16 KV
        // cache (llama.cpp's default).
        let text = repo().join("data/wikitext-2-raw/wiki.test.raw");
        let args = [
            "--perplexity".as_ref(),
            text.as_os_str(),
            "--perplexity-ctx".as_ref(),
            "128".as_ref(),
            "--perplexity-chunks".as_ref(),
            "8".as_ref(),
            "--batch-size".as_ref(),
            "128".as_ref(),
            "--kv-cache-dtype".as_ref(),
            "f16".as_ref(),
        ];
        let report = perplexity(&gguf.join(file), &args, &dir.path().join("out.json"));
        let got = report["perplexity"].as_f64().unwrap();
        let rel = (got - want).abs() / want;
        println!("{file}: lse {got} llama-perplexity {want} relative {rel:.2e}");
        assert!(rel < 2e-3, "{file}: lse {got} vs llama-perplexity {want}");
        assert_eq!(report["windows_scored"], 8, "{file}");
    }
}

/// `lse perplexity` on `model` over `tokens` (ctx 128, a KV cache of dtype `kv`) with
/// `--gemm-activations act`; the parsed report.
fn score_tokens(model: &Path, tokens: &Path, act: &str, kv: &str, out: &Path) -> Value {
    let args = [
        "--perplexity-tokens".as_ref(),
        tokens.as_os_str(),
        "--perplexity-ctx".as_ref(),
        "128".as_ref(),
        "--batch-size".as_ref(),
        "128".as_ref(),
        "--kv-cache-dtype".as_ref(),
        kv.as_ref(),
        "--gemm-activations".as_ref(),
        act.as_ref(),
    ];
    perplexity(model, &args, out)
}

/// A token-id file in `dir` of nine windows of 128 ids below the test models' vocabulary of
/// 512, from a linear congruential generator.
fn nine_windows(dir: &Path) -> PathBuf {
    let tokens = dir.join("tokens.json");
    let mut state = 12_345u32;
    let ids: Vec<u32> = (0..9 * 128)
        .map(|_| {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (state >> 16) % 512
        })
        .collect();
    std::fs::write(&tokens, serde_json::to_string(&ids).unwrap()).unwrap();
    tokens
}

/// Each window's NLL sum relative to the same window's in `base`, smallest first.
fn window_gaps(run: &Value, base: &Value) -> Vec<f64> {
    let sums = |r: &Value| -> Vec<f64> {
        r["windows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["nll_sum"].as_f64().unwrap())
            .collect()
    };
    let mut gaps: Vec<f64> = sums(run)
        .iter()
        .zip(sums(base))
        .map(|(x, y)| (x - y).abs() / y.abs())
        .collect();
    gaps.sort_by(f64::total_cmp);
    gaps
}

/// `--gemm-activations weight-dtype` makes a Hugging Face bf16 checkpoint score as its llama.cpp
/// BF16 conversion does (activations rounded to bf16 before every product with a bf16 weight,
/// ggml's rule). Not bit for bit in every window: the conversion reorders the DeltaNet value
/// heads, so `out_proj` sums its inputs in another order, and a one-ulp change that flips an
/// activation's bf16 rounding is amplified by these random weights. So the test takes the
/// median window of nine: observed (2026-12-05, host levels x86-64 to x86-64-v4-bf16) seven
/// windows bit for bit with weight-dtype, a median of 5.9e-4 with the default's f32 products;
/// the bounds are 1e-5 and 1e-4.
/// The option leaves a GGUF file's own rule as it was.
#[test]
fn weight_dtype_activations_score_a_bf16_checkpoint_as_its_llama_cpp_conversion() {
    let data = repo().join("tests/data");
    let hf = data.join("models/dense_untied_bf16");
    let gguf = data.join("gguf/dense_untied_bf16-bf16.gguf");
    let dir = tempfile::tempdir().unwrap();
    let tokens = nine_windows(dir.path());
    let out = dir.path().join("out.json");
    let hf_rounded = score_tokens(&hf, &tokens, "weight-dtype", "f32", &out);
    let hf_reference = score_tokens(&hf, &tokens, "reference", "f32", &out);
    let gguf_reference = score_tokens(&gguf, &tokens, "reference", "f32", &out);
    let gguf_rounded = score_tokens(&gguf, &tokens, "weight-dtype", "f32", &out);

    assert_eq!(hf_rounded["config"]["gemm_activations"], "weight-dtype");
    assert!(hf_reference["config"].get("gemm_activations").is_none());
    assert_eq!(hf_rounded["windows_scored"], 9);
    let rounded = window_gaps(&hf_rounded, &gguf_reference);
    let reference = window_gaps(&hf_reference, &gguf_reference);
    println!("against the BF16 file: weight-dtype {rounded:?}, reference {reference:?}");
    assert!(rounded[4] < 1e-5, "weight-dtype: {rounded:?}");
    assert!(reference[4] > 1e-4, "reference: {reference:?}");
    assert_eq!(window_gaps(&gguf_rounded, &gguf_reference), [0.0; 9]);
}

/// llama.cpp's flash attention casts an f32 KV cache's keys and values to f16 before reading
/// them, so llama-perplexity scores a file alike with `-ctk f32` and `-ctk f16` (observed
/// 2026-12-06 on the 0.8B-shaped BF16 file: 368930.7292 with both, ctx 512, 8 chunks). A GGUF
/// file in LSE takes its f32 cache through f16 too: every window's NLL sum is the f16 cache's.
/// A Hugging Face checkpoint keeps its f32 cache's values, which move the sums.
#[test]
fn a_gguf_file_scores_alike_with_f32_and_f16_caches_as_llama_perplexity_does() {
    let data = repo().join("tests/data");
    let dir = tempfile::tempdir().unwrap();
    let tokens = nine_windows(dir.path());
    let out = dir.path().join("out.json");
    let gguf = data.join("gguf/dense_untied_bf16-bf16.gguf");
    let f32_cache = score_tokens(&gguf, &tokens, "reference", "f32", &out);
    let f16_cache = score_tokens(&gguf, &tokens, "reference", "f16", &out);
    assert_eq!(f32_cache["config"]["kv_cache_dtype"], "f32");
    assert_eq!(window_gaps(&f32_cache, &f16_cache), [0.0; 9]);
    let hf = data.join("models/dense_untied_bf16");
    let f32_cache = score_tokens(&hf, &tokens, "reference", "f32", &out);
    let f16_cache = score_tokens(&hf, &tokens, "reference", "f16", &out);
    let gaps = window_gaps(&f32_cache, &f16_cache);
    println!("Hugging Face checkpoint, f32 against f16 cache: {gaps:?}");
    assert!(gaps[8] > 0.0, "{gaps:?}");
}
