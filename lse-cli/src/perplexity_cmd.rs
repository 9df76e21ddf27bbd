//! `lse perplexity`: the brief's perplexity mode. Loads the model, scores, writes the JSON,
//! exits; no network port.

use std::io::Read;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use lse_runtime::device::Pool;
use lse_runtime::ops::FlashPrefillParams;
use lse_runtime::perplexity::{
    check_request, effective_settings, parse_token_ids, Engine, EngineSettings, FlashPrefill,
    GemmActivations, Input, KvDtype, Request, DEFAULT_FLASHPREFILL_MIN_KV_LEN,
};
use lse_runtime::scoring::{self, Method};

use crate::progress_bar::Bar;
use crate::stdout::{self, Stop};
use crate::summary::{kernel_times_table, launch_times_table, summary, LAUNCH_ROWS};

#[derive(Clone, Copy, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum MethodArg {
    Chunks,
    Sliding,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum KvDtypeArg {
    Bf16,
    F16,
    F32,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum GemmActivationsArg {
    Reference,
    WeightDtype,
    Bf16x3,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum Dialect {
    Loom,
}

/// Options of `lse perplexity`: the serving options, then the scoring ones.
#[derive(Args)]
pub struct PerplexityArgs {
    /// Hugging Face model directory (config.json, *.safetensors, tokenizer.json), or a
    /// llama.cpp GGUF file (qwen35 / qwen35moe; the first part of a split set).
    #[arg(long)]
    model: PathBuf,
    /// Device: host (LLVM-compiled LOOM kernels on this CPU), cpu (generated Rust), hip:N / hrx:N
    /// (AMD GPU via HIP), cuda:N (NVIDIA GPU via the CUDA driver).
    #[arg(long, default_value = "host")]
    pool: Pool,
    /// Kernel dialect (LOOM is the only one).
    #[arg(long, value_enum, default_value = "loom")]
    dialect: Dialect,
    /// Logical batch: most tokens per decode call.
    #[arg(long, default_value_t = 2048)]
    batch_size: usize,
    /// Physical batch: most tokens per compute pass (clamped to --batch-size, as llama.cpp
    /// does).
    #[arg(long, default_value_t = 512)]
    ubatch_size: usize,
    /// KV cache element type.
    #[arg(long, value_enum, default_value = "bf16")]
    kv_cache_dtype: KvDtypeArg,
    /// How activations meet 16-bit float weights in the matrix products: reference (as the
    /// checkpoint's reference computes: f32 for a Hugging Face or MLX directory, llama.cpp's
    /// rules for a GGUF file) or weight-dtype (rounded to a bf16/f16 weight's dtype, as
    /// llama.cpp does: faster on CPUs with AVX512-BF16 or AMX), or bf16x3 (f32 against bf16
    /// weights as under reference, but on a CPU with AMX as three exact bf16 pieces whose
    /// products run on AMX tiles: the f32 products at about twice the speed there, the sums
    /// in the tiles' order; elsewhere the same as reference). Under llama.cpp's rules the
    /// attention's queries also meet a bf16 KV cache rounded to bf16.
    #[arg(long, value_enum, default_value = "reference")]
    gemm_activations: GemmActivationsArg,
    /// KV cache capacity in tokens; each chunk or window must fit.
    #[arg(long, default_value_t = 8192)]
    kv_len: usize,
    /// Accepted for serving compatibility; scoring never uses MTP.
    #[arg(long)]
    no_mtp: bool,
    /// Sparse prefill attention (FlashPrefill V2): on or off. Unset, passes whose attention
    /// reads at least --flashprefill-min-kv-len cache rows run sparse, shorter ones dense.
    #[arg(long = "FlashPrefillV2", value_enum)]
    flash_prefill_v2: Option<OnOff>,
    /// FlashPrefill V2's threshold alpha: a key block is kept when its score is at least alpha
    /// times its row's best (0 keeps every block; larger is sparser).
    #[arg(long, default_value_t = FlashPrefillParams::default().alpha)]
    prefill_attention_scale: f32,
    /// FlashPrefill V2: tokens per query and key block (a multiple of 64).
    #[arg(long, default_value_t = FlashPrefillParams::default().block_size)]
    flashprefill_block_size: usize,
    /// FlashPrefill V2: leading key blocks every query block keeps.
    #[arg(long, default_value_t = FlashPrefillParams::default().sink_blocks)]
    flashprefill_sink_blocks: usize,
    /// FlashPrefill V2: key blocks kept left of and including the diagonal (at least 1).
    #[arg(long, default_value_t = FlashPrefillParams::default().window_blocks)]
    flashprefill_window_blocks: usize,
    /// FlashPrefill V2: the last query blocks of each pass attend densely.
    #[arg(long, default_value_t = FlashPrefillParams::default().last_full_blocks)]
    flashprefill_last_full_blocks: usize,
    /// FlashPrefill V2: best-scoring key blocks every query block keeps besides the threshold.
    #[arg(long, default_value_t = FlashPrefillParams::default().min_budget)]
    flashprefill_min_budget: usize,
    /// With --FlashPrefillV2 unset: the cache rows a pass's attention must read to run sparse.
    #[arg(long, default_value_t = DEFAULT_FLASHPREFILL_MIN_KV_LEN)]
    flashprefill_min_kv_len: usize,
    /// Fail instead of running any operation on the CPU backend (also LSE_REQUIRE_DEVICE_KERNELS=1).
    #[arg(long)]
    no_cpu_fallback: bool,

    /// UTF-8 text to score, tokenized whole like a prompt (no chat template); `-` reads
    /// standard input.
    #[arg(
        long = "perplexity",
        value_name = "FILE",
        required_unless_present = "tokens_file",
        conflicts_with = "tokens_file"
    )]
    text_file: Option<PathBuf>,
    /// A JSON array of token ids to score instead of text; `-` reads standard input.
    #[arg(long = "perplexity-tokens", value_name = "FILE")]
    tokens_file: Option<PathBuf>,
    /// chunks (llama.cpp's method) or sliding.
    #[arg(long = "perplexity-method", value_enum, default_value = "chunks")]
    method: MethodArg,
    /// Tokens per chunk or window (llama.cpp's -c).
    #[arg(long = "perplexity-ctx", default_value_t = 512)]
    ctx: usize,
    /// sliding only: tokens between window starts (default: the ctx).
    #[arg(long = "perplexity-stride")]
    stride: Option<usize>,
    /// Score only the first N chunks or windows.
    #[arg(long = "perplexity-chunks")]
    chunks: Option<usize>,
    /// Record a KL-divergence base here (a regular file, written atomically).
    #[arg(long = "perplexity-kld-base-out", value_name = "FILE")]
    kld_base_out: Option<PathBuf>,
    /// Token ids recorded per scored token in a base (1 to 32; default 32). With
    /// --perplexity-kld the base's is used, and a different value is an error.
    #[arg(long = "perplexity-kld-top-k")]
    kld_top_k: Option<usize>,
    /// Compare against a recorded base.
    #[arg(long = "perplexity-kld", value_name = "FILE")]
    kld_base: Option<PathBuf>,
    /// Where to write the JSON (default, or `-`: standard output); a regular file is
    /// written atomically (through a symlink, to its target), a FIFO or device straight.
    #[arg(long = "perplexity-output", value_name = "PATH")]
    output: Option<PathBuf>,
    /// Include the token ids in the JSON.
    #[arg(long = "perplexity-token-ids")]
    token_ids: bool,
    /// Include each scored token's NLL (and, with --perplexity-kld, its KLD and Δp) in the
    /// JSON's `token_stats`, for `lse report`'s per-token plots.
    #[arg(long = "perplexity-token-stats")]
    token_stats: bool,
    /// No progress bar and no closing summary on stderr.
    #[arg(long)]
    quiet: bool,
    /// After the run, print on stderr each kernel's launches and summed time, the largest
    /// first (on a GPU its own time by the device's events, on the CPU each launch's wall
    /// time); printed with --quiet too.
    #[arg(long = "kernel-times")]
    kernel_times: bool,
}

/// Reads a whole input file, or standard input for `-`.
fn read_bytes(path: &Path) -> Result<Vec<u8>, String> {
    let mut bytes = Vec::new();
    if path.as_os_str() == "-" {
        std::io::stdin()
            .lock()
            .read_to_end(&mut bytes)
            .map_err(|e| format!("standard input: {e}"))?;
        return Ok(bytes);
    }
    std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))
}

/// The name of an input in messages.
fn input_name(path: &Path) -> String {
    if path.as_os_str() == "-" {
        "standard input".to_string()
    } else {
        path.display().to_string()
    }
}

fn read_input(args: &PerplexityArgs) -> Result<Input, String> {
    if let Some(path) = &args.tokens_file {
        let bytes = read_bytes(path)?;
        return Ok(Input::Tokens(parse_token_ids(
            &bytes,
            Path::new(&input_name(path)),
        )?));
    }
    let path = args
        .text_file
        .as_ref()
        .ok_or("give --perplexity FILE or --perplexity-tokens FILE")?;
    let bytes = read_bytes(path)?;
    let text = String::from_utf8(bytes).map_err(|e| {
        format!(
            "{}: not valid UTF-8 (at byte {})",
            input_name(path),
            e.utf8_error().valid_up_to()
        )
    })?;
    Ok(Input::Text(text))
}

/// Refuses one file in two roles (an output over an input or over the other output), by
/// what the paths lead to, not how they are spelled.
fn check_roles(args: &PerplexityArgs) -> Result<(), String> {
    let roles: Vec<(&str, &PathBuf)> = [
        ("--perplexity", &args.text_file),
        ("--perplexity-tokens", &args.tokens_file),
        ("--perplexity-kld", &args.kld_base),
        ("--perplexity-kld-base-out", &args.kld_base_out),
        ("--perplexity-output", &args.output),
    ]
    .into_iter()
    .filter_map(|(role, path)| path.as_ref().map(|p| (role, p)))
    // `-` is standard input for the inputs and standard output for the outputs.
    .filter(|(_, path)| path.as_os_str() != "-")
    .collect();
    for (i, (a, pa)) in roles.iter().enumerate() {
        for (b, pb) in &roles[i + 1..] {
            if scoring::same_file(pa, pb) {
                return Err(format!(
                    "{a} {} and {b} {} are the same file: one file cannot play both roles \
                     (the run would overwrite it); give different paths",
                    pa.display(),
                    pb.display()
                ));
            }
        }
    }
    Ok(())
}

fn settings(args: &PerplexityArgs) -> EngineSettings {
    let mut settings = EngineSettings::new(args.model.clone());
    settings.pool = args.pool;
    settings.batch_size = args.batch_size;
    settings.ubatch_size = args.ubatch_size;
    settings.kv_cache_dtype = match args.kv_cache_dtype {
        KvDtypeArg::Bf16 => KvDtype::Bf16,
        KvDtypeArg::F16 => KvDtype::F16,
        KvDtypeArg::F32 => KvDtype::F32,
    };
    settings.gemm_activations = match args.gemm_activations {
        GemmActivationsArg::Reference => GemmActivations::Reference,
        GemmActivationsArg::WeightDtype => GemmActivations::WeightDtype,
        GemmActivationsArg::Bf16x3 => GemmActivations::Bf16x3,
    };
    settings.kv_len = args.kv_len;
    settings.flash_prefill = match args.flash_prefill_v2 {
        None => FlashPrefill::Auto,
        Some(OnOff::On) => FlashPrefill::On,
        Some(OnOff::Off) => FlashPrefill::Off,
    };
    settings.flashprefill = FlashPrefillParams {
        block_size: args.flashprefill_block_size,
        alpha: args.prefill_attention_scale,
        sink_blocks: args.flashprefill_sink_blocks,
        window_blocks: args.flashprefill_window_blocks,
        last_full_blocks: args.flashprefill_last_full_blocks,
        min_budget: args.flashprefill_min_budget,
    };
    settings.flashprefill_min_kv_len = args.flashprefill_min_kv_len;
    settings.no_cpu_fallback |= args.no_cpu_fallback;
    settings
}

/// The request, with its input still to be read.
fn request(args: &PerplexityArgs) -> Request {
    let mut request = Request::new(Input::Tokens(Vec::new()));
    request.method = match args.method {
        MethodArg::Chunks => Method::Chunks,
        MethodArg::Sliding => Method::Sliding,
    };
    request.ctx = args.ctx;
    request.stride = args.stride;
    request.chunks = args.chunks;
    request.kld_base_out = args.kld_base_out.clone();
    request.kld_top_k = args.kld_top_k;
    request.kld_base = args.kld_base.clone();
    request.include_token_ids = args.token_ids;
    request.include_token_stats = args.token_stats;
    request
}

pub fn run(args: PerplexityArgs) -> Result<(), Stop> {
    let Dialect::Loom = args.dialect;
    // Every check that needs neither the model nor the text comes first.
    check_roles(&args)?;
    if let Some(path) = &args.output {
        scoring::check_writable(path).map_err(|e| e.to_string())?;
    }
    let settings = effective_settings(&settings(&args)).map_err(|e| e.to_string())?;
    let mut request = request(&args);
    check_request(&settings, &request).map_err(|e| e.to_string())?;
    if settings.ubatch_size < args.ubatch_size && !args.quiet {
        eprintln!(
            "--ubatch-size {} is larger than --batch-size {}: running ubatches of {} (as \
             llama.cpp does)",
            args.ubatch_size, args.batch_size, settings.ubatch_size
        );
    }
    request.input = read_input(&args)?;

    let engine = Engine::open(settings).map_err(|e| e.to_string())?;
    if args.kernel_times {
        engine.device().record_kernel_times();
    }
    let bar = Bar::stderr(args.quiet);
    let result = engine.perplexity(&request, &bar);
    bar.finish();
    if args.kernel_times {
        let dev = engine.device();
        eprint!("{}", kernel_times_table(&dev.kernel_times(), &dev.arch()));
        eprint!("{}", launch_times_table(&dev.launch_times(), LAUNCH_ROWS));
    }
    let report = result.map_err(|e| e.to_string())?;
    let json = report
        .to_json()
        .map_err(|e| format!("could not serialise the report: {e}"))?;
    match &args.output {
        Some(path) => scoring::atomic::write_atomic(path, format!("{json}\n").as_bytes())
            .map_err(|e| e.to_string())?,
        None => stdout::print(&format!("{json}\n"))?,
    }
    if !args.quiet {
        eprint!("{}", summary(&report));
        if let Some(d) = report.prefill_attention_density {
            eprintln!(
                "prefill attention: flashprefill-v2, key-block density {:.2}%",
                100.0 * d
            );
        }
        if let Some(path) = &args.kld_base_out {
            eprintln!("KL-divergence base written to {}", path.display());
        }
        if let Some(path) = args.output.as_ref().filter(|p| p.as_os_str() != "-") {
            eprintln!("JSON report written to {}", path.display());
        }
    }
    Ok(())
}
