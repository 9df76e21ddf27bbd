//! One scoring run: windows in fresh sessions, each through the prefill pass plan, the head
//! stage after every pass, then the report.

use std::time::Instant;

use super::checks::check_top_k;
use super::engine::{base_name, EngineError};
use super::head::{HeadStage, KldMode, HEAD_ROWS};
use super::progress::{Progress, ProgressUpdate};
use super::settings::{EngineSettings, Request};
use crate::device::Device;
use crate::generator::Generator;
use crate::model::{HybridLM, PrefillAttention};
use crate::scoring::kld_base::MAX_TOP_K;
use crate::scoring::report::{rate, REPORT_OBJECT};
use crate::scoring::{
    token_ids_sha256, KldAccumulator, KldBaseHeader, KldBaseReader, KldBaseWriter, KldReport,
    PerplexityReport, PplAccumulator, ReportConfig, TokenStats, Window, WindowPlan, WindowReport,
};

pub(super) fn run(
    model: &HybridLM,
    dev: &Device,
    settings: &EngineSettings,
    request: &Request,
    tokens: &[u32],
    mut config: ReportConfig,
    progress: &dyn Progress,
) -> Result<PerplexityReport, EngineError> {
    let start = Instant::now();
    let cfg = model.config();
    let (vocab, dim) = (cfg.vocab_size, cfg.hidden_size);
    let stride = request.stride.unwrap_or(request.ctx);
    let plan = WindowPlan::new(
        tokens.len(),
        request.method,
        request.ctx,
        stride,
        request.chunks,
    )?;

    let mut mode = if let Some(path) = &request.kld_base_out {
        let k = request.kld_top_k.unwrap_or(MAX_TOP_K as usize);
        if !(1..=MAX_TOP_K as usize).contains(&k) || k > vocab {
            return Err(EngineError::Invalid(format!(
                "--perplexity-kld-top-k {k} must be in 1..={MAX_TOP_K} and at most the vocabulary ({vocab})"
            )));
        }
        let header = KldBaseHeader::for_plan(tokens, &plan, k as u32, vocab as u32);
        KldMode::Record {
            writer: KldBaseWriter::create(path, header)?,
            top_k: k,
        }
    } else if let Some(path) = &request.kld_base {
        let reader = KldBaseReader::open(path)?;
        let top_k = reader.header().top_k;
        check_top_k(request, top_k, path)?;
        reader.check_compatible(&KldBaseHeader::for_plan(tokens, &plan, top_k, vocab as u32))?;
        KldMode::Compare {
            reader,
            top_k: top_k as usize,
            acc: KldAccumulator::default(),
        }
    } else {
        KldMode::Off
    };

    let attn = PrefillAttention::new(
        dev,
        settings
            .flash_prefill
            .sparse_when(settings.flashprefill_min_kv_len),
        settings.flashprefill,
    );
    let mut head = HeadStage::new(dev, model.head_view(), model.head_act(), vocab, dim)?;
    let mut total = PplAccumulator::default();
    let mut windows = Vec::with_capacity(plan.windows.len());
    let mut token_nlls = request.include_token_stats.then(Vec::new);
    let mut fed = 0;
    progress.update(&ProgressUpdate {
        done: 0,
        total: plan.windows.len(),
        prefill_tokens: 0,
        elapsed_seconds: start.elapsed().as_secs_f64(),
        perplexity: 1.0,
    });
    for (i, w) in plan.windows.iter().enumerate() {
        let t0 = Instant::now();
        // On a worker of the thread pool, so that each host launch's parallel loop starts on
        // this thread at once instead of waking a worker and sleeping until it is done (about
        // 15 us a launch on the 2-core VM: a tenth of a pass of the 35B-A3B-shaped MoE, whose
        // experts take thousands of small launches).
        let acc = rayon::scope(|_| {
            score_window(
                model,
                &attn,
                settings,
                &mut head,
                &mut mode,
                tokens,
                w,
                token_nlls.as_mut(),
            )
        })?;
        total.merge(&acc);
        fed += w.len();
        windows.push(WindowReport::new(w, &acc, t0.elapsed().as_secs_f64()));
        progress.update(&ProgressUpdate {
            done: i + 1,
            total: plan.windows.len(),
            prefill_tokens: fed,
            elapsed_seconds: start.elapsed().as_secs_f64(),
            perplexity: total.perplexity(),
        });
    }

    let mut token_stats = token_nlls.map(|nll| TokenStats {
        nll,
        kld: None,
        delta_p: None,
    });
    let mut kld_statistics = None;
    let kld = match mode {
        KldMode::Off => None,
        KldMode::Record { writer, .. } => {
            writer.finish()?;
            None
        }
        KldMode::Compare { reader, top_k, acc } => {
            if reader.remaining() != 0 {
                return Err(EngineError::Invalid(format!(
                    "KL-divergence base {} holds {} more records than this run scored",
                    reader.path().display(),
                    reader.remaining()
                )));
            }
            if let Some(stats) = token_stats.as_mut() {
                let f32s = |v: &[f64]| v.iter().map(|&x| x as f32).collect();
                stats.kld = Some(f32s(acc.klds()));
                stats.delta_p = Some(f32s(acc.delta_ps()));
            }
            kld_statistics = Some(acc.table());
            Some(KldReport::new(
                &base_name(reader.path()),
                top_k as u32,
                acc.count(),
                &acc.summary(),
            ))
        }
    };

    let density = attn.density();
    if density.is_some() {
        config.prefill_attention = "flashprefill-v2".into();
    }
    let elapsed = start.elapsed().as_secs_f64();
    let prefill_tokens = plan.prefill_tokens() as u64;
    Ok(PerplexityReport {
        object: REPORT_OBJECT.to_string(),
        tokens: tokens.len() as u64,
        token_ids_sha256: token_ids_sha256(tokens),
        method: plan.method,
        ctx: plan.ctx as u64,
        stride: plan.stride as u64,
        windows_scored: plan.windows.len() as u64,
        scored_tokens: total.count,
        mean_nll: total.mean_nll(),
        perplexity: total.perplexity(),
        perplexity_uncertainty: total.perplexity_uncertainty(),
        elapsed_seconds: elapsed,
        prefill_tokens,
        prefill_tokens_per_second: rate(prefill_tokens, elapsed),
        prefill_attention_density: density,
        config,
        kld,
        kld_statistics,
        windows: request.include_windows.then_some(windows),
        token_ids: request.include_token_ids.then(|| tokens.to_vec()),
        token_stats,
    })
}

/// Runs one window in a fresh session through `Generator::score` and scores its targets,
/// appending each target's NLL to `token_nlls` when given.
#[allow(clippy::too_many_arguments)]
fn score_window(
    model: &HybridLM,
    attn: &PrefillAttention,
    settings: &EngineSettings,
    head: &mut HeadStage<'_>,
    mode: &mut KldMode,
    tokens: &[u32],
    w: &Window,
    mut token_nlls: Option<&mut Vec<f32>>,
) -> Result<PplAccumulator, EngineError> {
    let mut generator = Generator::new(
        model,
        attn,
        settings.kv_cache_dtype.dtype(),
        settings.kv_len,
    )?;
    let window = &tokens[w.begin..w.end];
    let mut acc = PplAccumulator::default();
    generator.score(
        window,
        w.logit_rows(),
        settings.batch_size,
        settings.ubatch_size,
        HEAD_ROWS,
        |hidden, rows| {
            head.score_block(
                hidden,
                &window[rows.start + 1..rows.end + 1],
                mode,
                &mut acc,
                token_nlls.as_deref_mut(),
            )
        },
    )?;
    Ok(acc)
}
