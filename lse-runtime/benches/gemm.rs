//! Benchmark of the LOOM GEMM (`gemm.xwt_bf16`) on every host level this CPU runs, run with
//! `cargo bench -p lse-runtime --bench gemm` (2 threads: `RAYON_NUM_THREADS=2`).
//!
//! Prints, in one run: the bf16 dot-product peaks of this CPU measured by a register-resident
//! `vdpbf16ps` loop (AVX512-BF16) and a tile-resident AMX `tdpbf16ps` loop (where the CPU has
//! AMX-BF16 and Linux grants the tile data), and the f32 peak of a register-resident `vfmadd`
//! loop, 16 lanes with AVX-512 or 8 with AVX2 (the bound of the f32-activation GEMM the
//! model's projections use), then GFLOP/s of `y = x · wᵀ` with bf16 weights for the
//! Qwen3.5-0.8B prefill shapes at M = 512, the LM head (248,320 x 1024) at M = 128, 127 (a
//! 512-token chunk's 255 scored rows are head calls of 128 and 127) and 256 and two of the
//! prefill shapes at M = 8192 (a ctx-8192 pass), Qwen3.5-35B-A3B's LM head (248,320 x 2048)
//! at M = 128, and one of its experts' gate (or up) and down products on 16 rows
//! (`gemm.xwt_narrow`; a call of 8 workgroups, so its launch weighs), on each host level,
//! with activations rounded to bf16 and with f32 activations (`bf16 / f32` per cell; on the
//! AMX level also f32 activations as three bf16 pieces, `--gemm-activations bf16x3`:
//! `bf16 / f32 / bf16x3`, and PyTorch's f32 `matmul` is its peer), and
//! each path's best level as a fraction of its peak (the bf16 path's of the f32 peak on a CPU
//! without AVX512-BF16, where it runs on `vfmadd` too). Every figure is the best of at least
//! 3 runs, more while they take under a second (peaks: half a second).
//! With `LSE_BENCH_PYTHON` naming a Python that has torch (a venv outside the repository),
//! each shape first runs `scripts/bench-torch-gemm.py` on it (PyTorch's bf16 `matmul`, the
//! same threads) and its row ends with PyTorch's GFLOP/s and the ratio of the best LOOM bf16
//! figure to it, so both are measured within the same minute; without torch it says so.
//! `LSE_BENCH_ROUNDS=R` (R > 1, with torch) then runs R paired rounds per shape, PyTorch and
//! the best LOOM level's bf16 GEMM in turn, and prints both medians and the ratio of the
//! medians: on a machine whose speed changes from second to second (the H200 machine's CPU
//! read its AMX peak anywhere from 1.6 to 4.7 TFLOP/s between runs seconds apart), one run of
//! each side compares two states of the machine, not the two GEMMs.
//! `LSE_BENCH_LEVELS=host-x86-64-v4-bf16,...` runs only the named levels,
//! `LSE_BENCH_SHAPES=512x1024x3584,...` (M x N x K) only the named shapes.
//!
//! `LSE_BENCH_POOL=cuda:0` (or `hip:0`) runs the same shapes on that GPU instead, operands
//! resident in its memory: TFLOP/s of the whole call (the activations' transpose and the
//! product, timed on the host around the synchronous launches) and of the product kernel
//! alone (the device's events), a sample of outputs checked against an f64 product, and
//! PyTorch's `matmul` on the same GPU beside each shape when `LSE_BENCH_PYTHON` is set
//! (`LSE_BENCH_POOL=host` runs that path on the host, as a dry run without kernel times).

mod common;

use half::bf16;
use lse_runtime::device::{Device, Pool};
use lse_runtime::ops::{self, Activations, GemmOut, HeadWeight};
use lse_runtime::scoring::kld_table::median;
use rayon::prelude::*;

use common::{best_within, random};

/// (name, M, N, K).
const SHAPES: [(&str, usize, usize, usize); 14] = [
    ("attn qkv+gate / deltanet qkvz", 512, 6144, 1024),
    ("deltanet in_proj_qkv", 512, 4096, 1024),
    ("attn o / q", 512, 2048, 1024),
    ("mlp gate / up", 512, 3584, 1024),
    ("mlp down", 512, 1024, 3584),
    ("attn o_proj", 512, 1024, 2048),
    ("lm head, M = 128", 128, 248_320, 1024),
    ("lm head, M = 127", 127, 248_320, 1024),
    ("lm head, M = 256", 256, 248_320, 1024),
    // Qwen3.5-35B-A3B's head (hidden 2048), 40% of the MoE-shaped model's kernel time.
    ("lm head, 35B-A3B, M = 128", 128, 248_320, 2048),
    ("qkvz, ctx 8192 in one pass", 8192, 6144, 1024),
    ("mlp down, ctx 8192", 8192, 1024, 3584),
    // One expert of Qwen3.5-35B-A3B on its average share of a pass of 512 tokens (512 x 8
    // choices over 256 experts).
    ("MoE expert gate / up, 35B-A3B", 16, 512, 2048),
    ("MoE expert down, 35B-A3B", 16, 2048, 512),
];

/// GFLOP/s of `f` run once per thread, `f` doing `flops` floating-point operations: the best
/// of several runs, as for the GEMMs.
fn per_thread_rate(flops: usize, f: impl Fn(f32) -> f32 + Sync) -> f64 {
    let threads = rayon::current_num_threads();
    let secs = best_within(5, 0.5, || {
        let sink: f32 = (0..threads)
            .into_par_iter()
            .map(|i| f(i as f32 + 0.5))
            .sum();
        std::hint::black_box(sink);
    });
    (threads * flops) as f64 / secs / 1e9
}

/// The sum of every lane of 16 accumulators (what a peak loop returns, so it is not
/// optimised away).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn lanes_sum(acc: [std::arch::x86_64::__m512; 16]) -> f32 {
    use std::arch::x86_64::*;
    let mut s = _mm512_setzero_ps();
    for c in acc {
        s = _mm512_add_ps(s, c);
    }
    _mm512_reduce_add_ps(s)
}

/// The f32 FMA peak of this CPU: GFLOP/s of `vfmadd` on independent register accumulators,
/// one loop per thread, on 16-lane vectors where the CPU has AVX-512 (16 accumulators),
/// else on 8-lane ones where it has AVX2 and FMA (12 accumulators: 16 registers in all).
/// Returns the vector width in lanes with the rate.
#[cfg(target_arch = "x86_64")]
fn fma_peak() -> Option<(u32, f64)> {
    use std::arch::x86_64::*;
    const ITERS: usize = 4_000_000;
    #[target_feature(enable = "avx512f")]
    fn spin512(seed: f32) -> f32 {
        let (a, b) = (_mm512_set1_ps(seed), _mm512_set1_ps(1e-9));
        let mut acc = [_mm512_setzero_ps(); 16];
        for _ in 0..ITERS {
            for c in acc.iter_mut() {
                *c = _mm512_fmadd_ps(a, b, *c);
            }
        }
        lanes_sum(acc)
    }
    #[target_feature(enable = "avx2,fma")]
    fn spin256(seed: f32) -> f32 {
        let (a, b) = (_mm256_set1_ps(seed), _mm256_set1_ps(1e-9));
        let mut acc = [_mm256_setzero_ps(); 12];
        for _ in 0..ITERS {
            for c in acc.iter_mut() {
                *c = _mm256_fmadd_ps(a, b, *c);
            }
        }
        let mut lanes = [0.0f32; 8];
        let s = acc
            .iter()
            .fold(_mm256_setzero_ps(), |s, &c| _mm256_add_ps(s, c));
        // SAFETY: `lanes` holds 8 floats; the store is unaligned.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), s) };
        lanes.iter().sum()
    }
    if is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F (checked above). Each vfmadd: 16 lanes x 2 flops.
        Some((
            16,
            per_thread_rate(ITERS * 16 * 32, |x| unsafe { spin512(x) }),
        ))
    } else if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // SAFETY: the CPU has AVX2 and FMA (checked above). Each vfmadd: 8 lanes x 2 flops.
        Some((
            8,
            per_thread_rate(ITERS * 12 * 16, |x| unsafe { spin256(x) }),
        ))
    } else {
        None
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn fma_peak() -> Option<(u32, f64)> {
    None
}

/// GFLOP/s of `vdpbf16ps` on 16 independent register accumulators, one loop per thread.
#[cfg(target_arch = "x86_64")]
fn dpbf16_peak() -> Option<f64> {
    use std::arch::x86_64::*;
    if !is_x86_feature_detected!("avx512bf16") {
        return None;
    }
    const ITERS: usize = 4_000_000;
    #[target_feature(enable = "avx512f,avx512bf16")]
    fn spin(seed: f32) -> f32 {
        let a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(seed), _mm512_set1_ps(1.0));
        let b = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-9), _mm512_set1_ps(seed));
        let mut acc = [_mm512_setzero_ps(); 16];
        for _ in 0..ITERS {
            for c in acc.iter_mut() {
                *c = _mm512_dpbf16_ps(*c, a, b);
            }
        }
        lanes_sum(acc)
    }
    // SAFETY: the CPU has AVX512-BF16 (checked above). Each vdpbf16ps: 16 lanes x 2
    // products x 2 flops.
    Some(per_thread_rate(ITERS * 16 * 64, |x| unsafe { spin(x) }))
}

#[cfg(not(target_arch = "x86_64"))]
fn dpbf16_peak() -> Option<f64> {
    None
}

/// GFLOP/s of AMX `tdpbf16ps` on four accumulator tiles (16 x 16 f32 each, two `a` and two
/// `b` tiles of 16 x 32 bf16 loaded once), one loop per thread; `None` where the CPU has no
/// AMX-BF16 or Linux refuses the tile data permission (`lse_dsl::rt::cpu_supports` asks).
#[cfg(target_arch = "x86_64")]
fn amx_peak() -> Option<f64> {
    if !lse_dsl::rt::cpu_supports("x86-64-v4-amx") {
        return None;
    }
    const ITERS: usize = 1_000_000;
    // Palette 1; tiles 0 to 7 all 16 rows of 64 bytes (bytes 16.. the rows' widths, two
    // bytes a tile; bytes 48.. the row counts).
    let mut cfg = [0u8; 64];
    cfg[0] = 1;
    for t in 0..8 {
        cfg[16 + 2 * t] = 64;
        cfg[48 + t] = 16;
    }
    // 16 rows of 32 bf16 ones (0x3f80), 64 bytes apart.
    let ones: Vec<u8> = [0x80u8, 0x3f].repeat(16 * 32);
    let spin = |seed: f32| {
        // SAFETY: the CPU has AMX-TILE and AMX-BF16 and this process has the tile data
        // permission (checked above); `cfg` is a valid 64-byte configuration and every tile
        // load reads 16 rows of 64 bytes of `ones` (1,024 bytes). The asm touches no other
        // memory and releases the tiles before it ends.
        unsafe {
            std::arch::asm!(
                "ldtilecfg [{cfg}]",
                "tileloadd tmm4, [{a} + {stride}]",
                "tileloadd tmm5, [{a} + {stride}]",
                "tileloadd tmm6, [{a} + {stride}]",
                "tileloadd tmm7, [{a} + {stride}]",
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                "2:",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                "dec {n}",
                "jnz 2b",
                "tilerelease",
                cfg = in(reg) cfg.as_ptr(),
                a = in(reg) ones.as_ptr(),
                stride = in(reg) 64usize,
                n = inout(reg) ITERS => _,
                options(nostack),
            );
        }
        seed
    };
    // Each tdpbf16ps: 16 x 16 outputs x 32 products x 2 flops.
    Some(per_thread_rate(ITERS * 4 * 16 * 16 * 32 * 2, spin))
}

#[cfg(not(target_arch = "x86_64"))]
fn amx_peak() -> Option<f64> {
    None
}

/// The Python `LSE_BENCH_PYTHON` names, which runs `scripts/bench-torch-gemm.py`.
const TORCH_PYTHON: &str = "LSE_BENCH_PYTHON";

/// PyTorch's GFLOP/s on one shape: `matmul` bf16 in and out, f32 in and out as LSE's
/// GEMM takes them (`x` rounded to bf16 and `y` widened inside the timed call), and f32 `x`
/// by the weight widened to f32 (an SGEMM: the peer of the f32-activation paths).
struct TorchRates {
    bf16: f64,
    f32: f64,
    sgemm: Option<f64>,
}

/// One run of `scripts/bench-torch-gemm.py` by `python` on shape `m x n x k` with `threads`
/// threads: torch's version and its rates, or why there are none.
fn torch_rates(
    python: &str,
    device: &str,
    threads: usize,
    [m, n, k]: [usize; 3],
) -> Result<(String, TorchRates), String> {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/bench-torch-gemm.py"
    );
    let out = std::process::Command::new(python)
        .arg(script)
        .args(["--threads", &threads.to_string(), "--device", device])
        .args(["--shapes", &format!("{m}x{n}x{k}"), "--json"])
        .output()
        .map_err(|e| format!("cannot run {python} ({TORCH_PYTHON}): {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let why = [text.trim(), String::from_utf8_lossy(&out.stderr).trim()].join(" ");
        return Err(format!("{script} failed: {}", why.trim()));
    }
    let parse =
        |line: Option<&str>| -> Option<serde_json::Value> { serde_json::from_str(line?).ok() };
    let mut lines = text.lines();
    let (head, row) = (parse(lines.next()), parse(lines.next()));
    let version = head.as_ref().and_then(|h| h["torch"].as_str());
    let rate = |key: &str| row.as_ref().and_then(|r| r[key].as_f64());
    match (version, rate("bf16"), rate("f32")) {
        (Some(v), Some(bf16), Some(f32)) => {
            let sgemm = rate("sgemm");
            Ok((v.to_string(), TorchRates { bf16, f32, sgemm }))
        }
        _ => Err(format!(
            "{script} printed no JSON rate (expected a version line and a shape line): {}",
            text.trim()
        )),
    }
}

fn main() {
    if let Ok(pool) = std::env::var("LSE_BENCH_POOL") {
        return gpu_main(&pool);
    }
    let levels: Vec<Device> = lse_dsl::rt::HOST_CPUS
        .iter()
        .filter_map(|c| Device::host_variant(c))
        .filter(|d| d.arch() != "host-x86-64")
        .filter(|d| {
            std::env::var("LSE_BENCH_LEVELS")
                .map_or(true, |names| names.split(',').any(|n| n == d.arch()))
        })
        .collect();
    if levels.is_empty() {
        eprintln!("no host level of this CPU is named in LSE_BENCH_LEVELS");
        std::process::exit(2);
    }
    let names: Vec<String> = levels.iter().map(|d| d.arch()).collect();
    println!(
        "{} threads; host levels: {}",
        rayon::current_num_threads(),
        names.join(", ")
    );
    let peak = dpbf16_peak();
    match peak {
        Some(p) => println!("vdpbf16ps peak (register-resident): {p:.0} GFLOP/s"),
        None => println!("vdpbf16ps peak: this CPU has no AVX512-BF16"),
    }
    let amx = amx_peak();
    match amx {
        Some(p) => println!("AMX-BF16 peak (tdpbf16ps, tile-resident): {p:.0} GFLOP/s"),
        None => println!("AMX-BF16 peak: not measured, this CPU (or its OS) gives no AMX-BF16"),
    }
    let f32_peak = fma_peak().map(|(lanes, p)| {
        println!("vfmadd f32 peak ({lanes} lanes, register-resident): {p:.0} GFLOP/s");
        p
    });
    if f32_peak.is_none() {
        println!("vfmadd f32 peak: this CPU has neither AVX-512 nor AVX2 with FMA");
    }
    println!(
        "{:<30} {:>6} {:>7} {:>5}  {}",
        "shape",
        "M",
        "N",
        "K",
        levels
            .iter()
            .map(|d| {
                let cells = if d.runs_amx() {
                    "bf16 / f32 / bf16x3"
                } else {
                    "bf16 / f32"
                };
                format!("{:>34}", format!("{} ({cells})", d.arch()))
            })
            .collect::<Vec<_>>()
            .join("")
    );
    let rounds = paired_rounds();
    let mut torch = std::env::var(TORCH_PYTHON).ok();
    if torch.is_none() {
        println!(
            "PyTorch: not run ({TORCH_PYTHON}=/path/to/venv/bin/python runs scripts/bench-torch-gemm.py beside each shape)"
        );
    }
    let mut torch_named = false;
    let threads = rayon::current_num_threads();
    for (name, m, n, k) in SHAPES.into_iter().filter(|&(_, m, n, k)| wanted(m, n, k)) {
        // PyTorch first, before this process allocates the shape's operands.
        let torch_rate =
            torch_beside(&mut torch, "cpu", threads, [m, n, k]).map(|(version, rate)| {
                if !torch_named {
                    println!("PyTorch: torch {version}, {threads} threads, matmul per shape");
                    torch_named = true;
                }
                rate
            });
        let (x, w) = operands([m, n, k]);
        let mut y = vec![0.0f32; m * n];
        let flops = 2.0 * (m * n * k) as f64;
        let mut row = format!("{name:<30} {m:>6} {n:>7} {k:>5}  ");
        let mut best = 0.0f64;
        let mut run = |dev: &Device, act: Activations| {
            let t = best_within(3, 1.0, || {
                let w = HeadWeight::Bf16(&w);
                ops::gemm(dev, &x, k, w, n, &mut y, GemmOut::Overwrite, act).unwrap()
            });
            flops / t / 1e9
        };
        let mut best_exact = 0.0f64;
        let mut best_level = &levels[0];
        let mut best_x3: Option<f64> = None;
        for dev in &levels {
            let g = run(dev, Activations::RoundedToWeight);
            let exact = run(dev, Activations::F32);
            if g > best {
                (best, best_level) = (g, dev);
            }
            best_exact = best_exact.max(exact);
            let cell = if dev.runs_amx() {
                let x3 = run(dev, Activations::Bf16x3);
                best_x3 = Some(best_x3.unwrap_or(0.0).max(x3));
                format!("{g:.1} / {exact:.1} / {x3:.1}")
            } else {
                format!("{g:.1} / {exact:.1}")
            };
            row.push_str(&format!("{cell:>34}"));
        }
        row.push_str("  GFLOP/s");
        // Without AVX512-BF16 the bf16 path runs on `vfmadd` too.
        match (peak, f32_peak) {
            (Some(p), _) => row.push_str(&format!("   bf16: {:.0}% of peak", 100.0 * best / p)),
            (None, Some(p)) => {
                row.push_str(&format!("   bf16: {:.0}% of f32 peak", 100.0 * best / p))
            }
            (None, None) => {}
        }
        if let Some(p) = amx {
            row.push_str(&format!(", {:.0}% of AMX peak", 100.0 * best / p));
        }
        if let Some(p) = f32_peak {
            row.push_str(&format!(
                ", f32: {:.0}% of f32 peak",
                100.0 * best_exact / p
            ));
        }
        if let Some(t) = &torch_rate {
            row.push_str(&format!(
                "   PyTorch bf16 {:.1} (f32 in and out {:.1}), LOOM bf16 / PyTorch bf16 {:.2}",
                t.bf16,
                t.f32,
                best / t.bf16
            ));
            if let Some(sgemm) = t.sgemm {
                row.push_str(&format!(
                    "; PyTorch sgemm {sgemm:.1}, LOOM f32 / PyTorch sgemm {:.2}",
                    best_exact / sgemm
                ));
                if let Some(x3) = best_x3 {
                    row.push_str(&format!(", LOOM bf16x3 / PyTorch sgemm {:.2}", x3 / sgemm));
                }
            }
        }
        println!("{row}");
        if torch_rate.is_some() && rounds > 1 {
            let (mut loom, mut theirs) = (Vec::new(), Vec::new());
            for _ in 0..rounds {
                let Some((_, t)) = torch_beside(&mut torch, "cpu", threads, [m, n, k]) else {
                    break;
                };
                theirs.push(t.bf16);
                loom.push(run(best_level, Activations::RoundedToWeight));
            }
            loom.sort_by(f64::total_cmp);
            theirs.sort_by(f64::total_cmp);
            if !loom.is_empty() {
                let (l, t) = (median(&loom), median(&theirs));
                println!(
                    "  {} paired rounds on {}: LOOM bf16 median {l:.1}, PyTorch bf16 median {t:.1}, ratio of medians {:.2} (LOOM {:.1} to {:.1}, PyTorch {:.1} to {:.1})",
                    loom.len(),
                    best_level.arch(),
                    l / t,
                    loom[0],
                    loom[loom.len() - 1],
                    theirs[0],
                    theirs[theirs.len() - 1]
                );
            }
        }
    }
}

/// `LSE_BENCH_ROUNDS`: how many paired rounds of PyTorch and LOOM each shape runs after its
/// row (1, the default: none beyond the row). Exits with a message on anything but a
/// positive integer.
fn paired_rounds() -> usize {
    match std::env::var("LSE_BENCH_ROUNDS") {
        Err(_) => 1,
        Ok(v) => match v.parse::<usize>() {
            Ok(r) if r >= 1 => r,
            _ => {
                eprintln!("LSE_BENCH_ROUNDS: expected a positive integer, got {v:?}");
                std::process::exit(2);
            }
        },
    }
}

/// PyTorch's rates on `[m, n, k]` from `torch` (the Python, if any) on `device`; when it
/// fails, says why and clears `torch`, so later shapes do not try again.
fn torch_beside(
    torch: &mut Option<String>,
    device: &str,
    threads: usize,
    mnk: [usize; 3],
) -> Option<(String, TorchRates)> {
    match torch_rates(torch.as_deref()?, device, threads, mnk) {
        Ok(rates) => Some(rates),
        Err(why) => {
            println!("PyTorch: not run: {why}");
            *torch = None;
            None
        }
    }
}

/// The bench's deterministic operands of a GEMM `[m, n, k]`: `x` `[m, k]` in [-1, 1) and the
/// bf16 weight `[n, k]` in [-0.05, 0.05).
fn operands([m, n, k]: [usize; 3]) -> (Vec<f32>, Vec<bf16>) {
    let x = random(m * k, 1, 1.0);
    let w = random(n * k, 2, 0.05)
        .into_iter()
        .map(bf16::from_f32)
        .collect();
    (x, w)
}

/// Whether `LSE_BENCH_SHAPES` (unset: every shape) names `m x n x k`.
fn wanted(m: usize, n: usize, k: usize) -> bool {
    std::env::var("LSE_BENCH_SHAPES").map_or(true, |shapes| {
        shapes.split(',').any(|s| s == format!("{m}x{n}x{k}"))
    })
}

/// The bench on the GPU `pool` names (`LSE_BENCH_POOL`): every shape with its operands in
/// the GPU's memory, bf16 and f32 activations, against PyTorch on the same GPU.
fn gpu_main(pool: &str) {
    let fail = |what: String| -> ! {
        eprintln!("LSE_BENCH_POOL={pool}: {what}");
        std::process::exit(2);
    };
    let parsed: Pool = pool.parse().unwrap_or_else(|e| fail(format!("{e}")));
    let dev = Device::open(parsed).unwrap_or_else(|e| fail(format!("{e}")));
    println!(
        "GEMM on {pool} ({}), operands resident on the device",
        dev.arch()
    );
    let mut torch = std::env::var(TORCH_PYTHON).ok();
    if torch.is_none() {
        println!("PyTorch: not run ({TORCH_PYTHON}=/path/to/python with torch runs it)");
    }
    // PyTorch names AMD GPUs `cuda` too.
    let torch_device = match parsed {
        Pool::Cuda(i) | Pool::Hip(i) => format!("cuda:{i}"),
        Pool::Cpu | Pool::Host => "cpu".to_string(),
    };
    println!(
        "{:<30} {:>6} {:>7} {:>5}  {:>22} {:>22}  TFLOP/s",
        "shape", "M", "N", "K", "bf16 call / kernel", "f32 call / kernel"
    );
    for (name, m, n, k) in SHAPES.into_iter().filter(|&(_, m, n, k)| wanted(m, n, k)) {
        let threads = rayon::current_num_threads();
        let torch_rate = torch_beside(&mut torch, &torch_device, threads, [m, n, k]);
        let (x, w) = operands([m, n, k]);
        let xd = dev
            .buffer_from(&x)
            .unwrap_or_else(|e| fail(format!("x: {e}")));
        let wd = dev
            .buffer_from(&w)
            .unwrap_or_else(|e| fail(format!("w: {e}")));
        let mut yd = dev
            .alloc::<f32>(m * n)
            .unwrap_or_else(|e| fail(format!("y: {e}")));
        let flops = 2.0 * (m * n * k) as f64;
        let mut row = format!("{name:<30} {m:>6} {n:>7} {k:>5}  ");
        let mut worst = 0.0f64;
        for act in [Activations::RoundedToWeight, Activations::F32] {
            let mut kernel_ms: Option<f32> = None;
            let call = best_within(5, 1.0, || {
                ops::gemm(
                    &dev,
                    &xd,
                    k,
                    ops::WeightView::Bf16(wd.view()),
                    n,
                    &mut yd,
                    GemmOut::Overwrite,
                    act,
                )
                .unwrap_or_else(|e| fail(format!("gemm {m}x{n}x{k}: {e}")));
                if let Some(t) = dev.last_gpu_kernel_ms() {
                    kernel_ms = Some(kernel_ms.map_or(t, |best| best.min(t)));
                }
            });
            let y = yd.to_vec().unwrap_or_else(|e| fail(format!("y: {e}")));
            worst = worst.max(sample_error(&x, &w, &y, [m, n, k], act));
            let kernel = kernel_ms.map_or("n/a".to_string(), |t| {
                format!("{:.1}", flops / (f64::from(t) / 1e3) / 1e12)
            });
            let cell = format!("{:.1} / {kernel}", flops / call / 1e12);
            row.push_str(&format!(" {cell:>22}"));
        }
        row.push_str(&format!(
            "  (sampled outputs vs f64: max rel. error {worst:.1e})"
        ));
        if let Some((version, t)) = torch_rate {
            row.push_str(&format!(
                "   PyTorch {version} bf16 {:.1}, f32 in and out {:.1}",
                t.bf16 / 1e3,
                t.f32 / 1e3
            ));
        }
        println!("{row}");
    }
}

/// The largest error of 61 outputs of `y` (spread over rows and columns) relative to the
/// sum of the magnitudes of its products, against an f64 product of the same operands
/// (`x` rounded to bf16 first where `act` says so).
fn sample_error(x: &[f32], w: &[bf16], y: &[f32], [m, n, k]: [usize; 3], act: Activations) -> f64 {
    (0..61usize)
        .map(|i| {
            let (r, c) = (i * 7919 % m, i * 104_729 % n);
            let (mut dot, mut mag) = (0.0f64, 0.0f64);
            for j in 0..k {
                let a = match act {
                    Activations::RoundedToWeight => bf16::from_f32(x[r * k + j]).to_f64(),
                    _ => f64::from(x[r * k + j]),
                };
                let p = a * w[c * k + j].to_f64();
                dot += p;
                mag += p.abs();
            }
            (f64::from(y[r * n + c]) - dot).abs() / mag.max(f64::MIN_POSITIVE)
        })
        .fold(0.0, f64::max)
}
