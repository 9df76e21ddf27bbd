//! Token windows for perplexity scoring: which tokens each chunk or window feeds the model
//! and which of them it scores.
//!
//! `chunks` reproduces llama.cpp's `llama-perplexity` exactly (floor(n / ctx) non-overlapping
//! chunks, the first ctx/2 tokens of each context only, ctx - ctx/2 - 1 tokens scored per
//! chunk). `sliding` cuts windows of ctx tokens every stride tokens and scores, in each
//! window, only the tokens no earlier window scored.

use std::fmt;
use std::ops::Range;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How the token stream is cut into windows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// llama.cpp's method: non-overlapping chunks, second half scored.
    Chunks,
    /// Windows every `stride` tokens; each scores the tokens no earlier window scored.
    Sliding,
}

impl Method {
    /// The name used on the command line and in the JSON report.
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Chunks => "chunks",
            Method::Sliding => "sliding",
        }
    }

    /// Stable numeric code, used in the KL-divergence base file header.
    pub fn code(self) -> u32 {
        match self {
            Method::Chunks => 0,
            Method::Sliding => 1,
        }
    }

    /// Inverse of [`Method::code`]; `None` for an unknown code.
    pub fn from_code(code: u32) -> Option<Method> {
        match code {
            0 => Some(Method::Chunks),
            1 => Some(Method::Sliding),
            _ => None,
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Method {
    type Err = WindowError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "chunks" => Ok(Method::Chunks),
            "sliding" => Ok(Method::Sliding),
            other => Err(WindowError::UnknownMethod(other.to_string())),
        }
    }
}

/// Why a window plan cannot be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// The method name is not `chunks` or `sliding`.
    #[error("unknown perplexity method `{0}`: expected `chunks` or `sliding`")]
    UnknownMethod(String),
    /// ctx leaves no token to score.
    #[error(
        "perplexity ctx {ctx} is too small for method {method}: it must be at least {min} \
         (so that each {unit} scores at least one token)"
    )]
    CtxTooSmall {
        /// Requested ctx.
        ctx: usize,
        /// Method in use.
        method: Method,
        /// Smallest ctx that works.
        min: usize,
        /// "chunk" or "window".
        unit: &'static str,
    },
    /// stride is zero or larger than ctx (sliding).
    #[error("perplexity stride {stride} is invalid: it must be between 1 and the ctx ({ctx})")]
    BadStride {
        /// Requested stride.
        stride: usize,
        /// Requested ctx.
        ctx: usize,
    },
    /// A stride other than ctx was given with the chunks method.
    #[error(
        "perplexity stride {stride} applies only to method sliding; method chunks always \
         uses stride = ctx ({ctx})"
    )]
    StrideWithChunks {
        /// Requested stride.
        stride: usize,
        /// Requested ctx.
        ctx: usize,
    },
    /// A chunk limit of 0 was given.
    #[error("perplexity chunk limit must be at least 1 (omit it to score every chunk or window)")]
    ZeroChunkLimit,
    /// The text has too few tokens for the method.
    #[error(
        "too little text: {n_tokens} tokens, but method {method} with ctx {ctx} needs at least \
         {needed} tokens"
    )]
    TooLittleText {
        /// Tokens in the text.
        n_tokens: usize,
        /// Method in use.
        method: Method,
        /// Requested ctx.
        ctx: usize,
        /// Tokens needed.
        needed: usize,
    },
}

/// One chunk or window: the model is fed `tokens[begin..end]` in a fresh session, and the
/// `scored` tokens `tokens[first_target..first_target + scored]` are predicted and scored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Window {
    /// Position of this window in the plan (0-based).
    pub index: usize,
    /// Index in the text of the window's first token.
    pub begin: usize,
    /// Index in the text one past the window's last token.
    pub end: usize,
    /// Index in the text of the first token that is predicted and scored.
    pub first_target: usize,
    /// How many consecutive tokens from `first_target` are scored.
    pub scored: usize,
}

impl Window {
    /// Number of tokens fed to the model for this window.
    pub fn len(&self) -> usize {
        self.end - self.begin
    }

    /// True when the window feeds no token (never the case in a plan).
    pub fn is_empty(&self) -> bool {
        self.end == self.begin
    }

    /// Indices in the text of the scored (target) tokens.
    pub fn targets(&self) -> Range<usize> {
        self.first_target..self.first_target + self.scored
    }

    /// Positions within the window (0 = `begin`) whose logits predict the targets: row `r`
    /// of this range predicts the token at text index `r + begin + 1`.
    pub fn logit_rows(&self) -> Range<usize> {
        let first = self.first_target - self.begin - 1;
        first..first + self.scored
    }
}

/// The full list of windows for one text, method and settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowPlan {
    /// Method used.
    pub method: Method,
    /// Tokens per chunk or window.
    pub ctx: usize,
    /// Tokens between window starts (equal to ctx for chunks).
    pub stride: usize,
    /// Tokens in the whole text.
    pub n_tokens: usize,
    /// The chunk limit in effect: the one asked for when it left windows out, `None` when
    /// none was asked for or the text has no more windows than it allows (so a base recorded
    /// with `--perplexity-chunks 1000` on a 580-chunk text matches one recorded without).
    pub chunk_limit: Option<usize>,
    /// The windows, in order.
    pub windows: Vec<Window>,
}

impl WindowPlan {
    /// Plans the windows for a text of `n_tokens` tokens.
    ///
    /// `stride` must equal `ctx` for [`Method::Chunks`] and lie in `1..=ctx` for
    /// [`Method::Sliding`]. `chunk_limit` (llama.cpp's `--chunks`) keeps only the first N
    /// chunks or windows; `None` keeps all.
    pub fn new(
        n_tokens: usize,
        method: Method,
        ctx: usize,
        stride: usize,
        chunk_limit: Option<usize>,
    ) -> Result<WindowPlan, WindowError> {
        Self::check_settings(method, ctx, stride, chunk_limit)?;
        let limit = chunk_limit.unwrap_or(usize::MAX);
        // One window past the limit tells whether the limit left any out.
        let probe = limit.saturating_add(1);
        let mut windows = match method {
            Method::Chunks => chunk_windows(n_tokens, ctx, stride, probe)?,
            Method::Sliding => sliding_windows(n_tokens, ctx, stride, probe)?,
        };
        let chunk_limit = if windows.len() > limit {
            windows.truncate(limit);
            chunk_limit
        } else {
            None
        };
        Ok(WindowPlan {
            method,
            ctx,
            stride,
            n_tokens,
            chunk_limit,
            windows,
        })
    }

    /// Checks the settings that do not depend on the text: the ctx is large enough for the
    /// method, the stride fits it, the chunk limit is not 0.
    pub fn check_settings(
        method: Method,
        ctx: usize,
        stride: usize,
        chunk_limit: Option<usize>,
    ) -> Result<(), WindowError> {
        if chunk_limit == Some(0) {
            return Err(WindowError::ZeroChunkLimit);
        }
        match method {
            Method::Chunks if ctx < 3 => Err(WindowError::CtxTooSmall {
                ctx,
                method,
                min: 3,
                unit: "chunk",
            }),
            Method::Chunks if stride != ctx => Err(WindowError::StrideWithChunks { stride, ctx }),
            Method::Sliding if ctx < 2 => Err(WindowError::CtxTooSmall {
                ctx,
                method,
                min: 2,
                unit: "window",
            }),
            Method::Sliding if stride == 0 || stride > ctx => {
                Err(WindowError::BadStride { stride, ctx })
            }
            _ => Ok(()),
        }
    }

    /// Total number of scored tokens over all windows.
    pub fn scored_tokens(&self) -> usize {
        self.windows.iter().map(|w| w.scored).sum()
    }

    /// Total number of tokens fed through prefill, context included.
    pub fn prefill_tokens(&self) -> usize {
        self.windows.iter().map(Window::len).sum()
    }
}

/// llama.cpp's chunks: `floor(n / ctx)` chunks (capped by the limit), each scoring the
/// tokens after its first `ctx / 2`; at least `2 * ctx` tokens required.
fn chunk_windows(
    n_tokens: usize,
    ctx: usize,
    stride: usize,
    limit: usize,
) -> Result<Vec<Window>, WindowError> {
    if ctx < 3 {
        return Err(WindowError::CtxTooSmall {
            ctx,
            method: Method::Chunks,
            min: 3,
            unit: "chunk",
        });
    }
    if stride != ctx {
        return Err(WindowError::StrideWithChunks { stride, ctx });
    }
    let needed = ctx.saturating_mul(2);
    if n_tokens < needed {
        return Err(WindowError::TooLittleText {
            n_tokens,
            method: Method::Chunks,
            ctx,
            needed,
        });
    }
    let first = ctx / 2;
    let scored = ctx - 1 - first;
    let count = (n_tokens / ctx).min(limit);
    Ok((0..count)
        .map(|index| {
            let begin = index * ctx;
            Window {
                index,
                begin,
                end: begin + ctx,
                first_target: begin + first + 1,
                scored,
            }
        })
        .collect())
}

/// Sliding windows starting every `stride` tokens; each scores the tokens after
/// `max(begin + 1, previous end)` up to its end, until the text's last token is scored.
fn sliding_windows(
    n_tokens: usize,
    ctx: usize,
    stride: usize,
    limit: usize,
) -> Result<Vec<Window>, WindowError> {
    if ctx < 2 {
        return Err(WindowError::CtxTooSmall {
            ctx,
            method: Method::Sliding,
            min: 2,
            unit: "window",
        });
    }
    if stride == 0 || stride > ctx {
        return Err(WindowError::BadStride { stride, ctx });
    }
    if n_tokens < 2 {
        return Err(WindowError::TooLittleText {
            n_tokens,
            method: Method::Sliding,
            ctx,
            needed: 2,
        });
    }
    let mut windows = Vec::new();
    let mut prev_end = 0;
    let mut begin: usize = 0;
    while prev_end < n_tokens && windows.len() < limit {
        let end = begin.saturating_add(ctx).min(n_tokens);
        let first_target = (begin + 1).max(prev_end);
        if end > first_target {
            windows.push(Window {
                index: windows.len(),
                begin,
                end,
                first_target,
                scored: end - first_target,
            });
        }
        prev_end = end;
        begin = begin.saturating_add(stride);
    }
    Ok(windows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(index: usize, begin: usize, end: usize, first_target: usize, scored: usize) -> Window {
        Window {
            index,
            begin,
            end,
            first_target,
            scored,
        }
    }

    #[test]
    fn method_names_round_trip() {
        for m in [Method::Chunks, Method::Sliding] {
            assert_eq!(m.as_str().parse::<Method>().unwrap(), m);
            assert_eq!(Method::from_code(m.code()), Some(m));
            assert_eq!(m.to_string(), m.as_str());
        }
        assert_eq!(Method::from_code(7), None);
        let err = "chunk".parse::<Method>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown perplexity method `chunk`: expected `chunks` or `sliding`"
        );
        assert_eq!(
            serde_json::to_string(&Method::Sliding).unwrap(),
            "\"sliding\""
        );
    }

    #[test]
    fn chunks_match_the_brief_at_ctx_512() {
        // wiki.test.raw with the Qwen3.5 tokenizer: 297,193 tokens -> 580 chunks.
        let plan = WindowPlan::new(297_193, Method::Chunks, 512, 512, None).unwrap();
        assert_eq!(plan.windows.len(), 580);
        assert_eq!(plan.windows[0], w(0, 0, 512, 257, 255));
        assert_eq!(plan.windows[1], w(1, 512, 1024, 769, 255));
        assert_eq!(plan.windows[579], w(579, 296_448, 296_960, 296_705, 255));
        assert_eq!(plan.scored_tokens(), 147_900);
        assert_eq!(plan.prefill_tokens(), 296_960);
        assert_eq!(plan.windows[0].logit_rows(), 256..511);
        assert_eq!(plan.windows[1].targets(), 769..1024);
    }

    #[test]
    fn chunks_odd_ctx_and_limit() {
        // ctx 7: first = 3, scored = 7 - 1 - 3 = 3; 23 tokens -> 3 chunks, 2 dropped.
        let plan = WindowPlan::new(23, Method::Chunks, 7, 7, None).unwrap();
        assert_eq!(
            plan.windows,
            vec![w(0, 0, 7, 4, 3), w(1, 7, 14, 11, 3), w(2, 14, 21, 18, 3)]
        );
        assert_eq!(plan.windows[2].logit_rows(), 3..6);
        let limited = WindowPlan::new(23, Method::Chunks, 7, 7, Some(2)).unwrap();
        assert_eq!(limited.windows, plan.windows[..2].to_vec());
        // A limit above the number of chunks keeps all of them (llama.cpp's min()).
        let big = WindowPlan::new(23, Method::Chunks, 7, 7, Some(100)).unwrap();
        assert_eq!(big.windows.len(), 3);
        // ... and is not the limit in effect: the plan equals the one without a limit.
        assert_eq!(big, plan);
        assert_eq!(limited.chunk_limit, Some(2));
        let exact = WindowPlan::new(23, Method::Chunks, 7, 7, Some(3)).unwrap();
        assert_eq!(exact, plan);
        let sliding = WindowPlan::new(23, Method::Sliding, 7, 3, None).unwrap();
        let n = sliding.windows.len();
        let capped = WindowPlan::new(23, Method::Sliding, 7, 3, Some(n - 1)).unwrap();
        assert_eq!(capped.chunk_limit, Some(n - 1));
        let loose = WindowPlan::new(23, Method::Sliding, 7, 3, Some(n + 5)).unwrap();
        assert_eq!(loose, sliding);
        let huge = WindowPlan::new(23, Method::Sliding, usize::MAX, 3, Some(usize::MAX));
        assert_eq!(huge.unwrap().windows.len(), 1);
        // Smallest useful ctx.
        let tiny = WindowPlan::new(6, Method::Chunks, 3, 3, None).unwrap();
        assert_eq!(tiny.windows, vec![w(0, 0, 3, 2, 1), w(1, 3, 6, 5, 1)]);
    }

    #[test]
    fn chunks_need_two_chunks_of_text() {
        assert!(WindowPlan::new(1024, Method::Chunks, 512, 512, None).is_ok());
        let err = WindowPlan::new(1023, Method::Chunks, 512, 512, Some(1)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "too little text: 1023 tokens, but method chunks with ctx 512 needs at least \
             1024 tokens"
        );
    }

    #[test]
    fn chunk_refusals() {
        let err = WindowPlan::new(100, Method::Chunks, 2, 2, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "perplexity ctx 2 is too small for method chunks: it must be at least 3 \
             (so that each chunk scores at least one token)"
        );
        let err = WindowPlan::new(5000, Method::Chunks, 512, 256, None).unwrap_err();
        assert_eq!(
            err,
            WindowError::StrideWithChunks {
                stride: 256,
                ctx: 512
            }
        );
        assert!(err.to_string().contains("applies only to method sliding"));
        let err = WindowPlan::new(5000, Method::Chunks, 512, 512, Some(0)).unwrap_err();
        assert_eq!(err, WindowError::ZeroChunkLimit);
        assert!(err.to_string().contains("at least 1"));
    }

    #[test]
    fn sliding_stride_equal_ctx_scores_all_but_first_of_each_window() {
        // 10 tokens, ctx 4: [0,4) scores 1..4, [4,8) scores 5..8, [8,10) scores 9.
        let plan = WindowPlan::new(10, Method::Sliding, 4, 4, None).unwrap();
        assert_eq!(
            plan.windows,
            vec![w(0, 0, 4, 1, 3), w(1, 4, 8, 5, 3), w(2, 8, 10, 9, 1)]
        );
        assert_eq!(plan.scored_tokens(), 7);
        assert_eq!(plan.prefill_tokens(), 10);
        // 9 tokens: the last window would hold one token and score nothing: dropped.
        let plan = WindowPlan::new(9, Method::Sliding, 4, 4, None).unwrap();
        assert_eq!(plan.windows, vec![w(0, 0, 4, 1, 3), w(1, 4, 8, 5, 3)]);
    }

    #[test]
    fn sliding_stride_below_ctx_scores_every_token_once() {
        // 10 tokens, ctx 4, stride 2.
        let plan = WindowPlan::new(10, Method::Sliding, 4, 2, None).unwrap();
        assert_eq!(
            plan.windows,
            vec![
                w(0, 0, 4, 1, 3),
                w(1, 2, 6, 4, 2),
                w(2, 4, 8, 6, 2),
                w(3, 6, 10, 8, 2),
            ]
        );
        assert_eq!(plan.scored_tokens(), 9);
        assert_eq!(plan.windows[1].logit_rows(), 1..3);
    }

    #[test]
    fn sliding_coverage_property() {
        for n in 2..40 {
            for ctx in 2..9 {
                for stride in 1..=ctx {
                    let plan = WindowPlan::new(n, Method::Sliding, ctx, stride, None).unwrap();
                    let mut seen = vec![0u32; n];
                    for (i, win) in plan.windows.iter().enumerate() {
                        assert_eq!(win.index, i);
                        assert_eq!(win.begin, i * stride);
                        assert!(win.len() <= ctx && win.scored >= 1);
                        assert!(win.first_target > win.begin && win.end <= n);
                        for t in win.targets() {
                            seen[t] += 1;
                            if i > 0 && stride < ctx {
                                assert!(t - win.begin >= ctx - stride);
                            }
                        }
                    }
                    if stride < ctx {
                        assert_eq!(seen[0], 0);
                        assert!(
                            seen[1..].iter().all(|&c| c == 1),
                            "n {n} ctx {ctx} s {stride}"
                        );
                    } else {
                        for (t, &c) in seen.iter().enumerate() {
                            assert_eq!(c, u32::from(t % ctx != 0), "n {n} ctx {ctx} t {t}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn sliding_limit_and_refusals() {
        let plan = WindowPlan::new(10, Method::Sliding, 4, 2, Some(2)).unwrap();
        assert_eq!(plan.windows, vec![w(0, 0, 4, 1, 3), w(1, 2, 6, 4, 2)]);
        // Text shorter than ctx: one short window.
        let plan = WindowPlan::new(3, Method::Sliding, 512, 256, None).unwrap();
        assert_eq!(plan.windows, vec![w(0, 0, 3, 1, 2)]);

        let err = WindowPlan::new(10, Method::Sliding, 4, 0, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "perplexity stride 0 is invalid: it must be between 1 and the ctx (4)"
        );
        let err = WindowPlan::new(10, Method::Sliding, 4, 5, None).unwrap_err();
        assert_eq!(err, WindowError::BadStride { stride: 5, ctx: 4 });
        let err = WindowPlan::new(10, Method::Sliding, 1, 1, None).unwrap_err();
        assert!(err.to_string().contains("at least 2"), "{err}");
        let err = WindowPlan::new(1, Method::Sliding, 4, 4, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "too little text: 1 tokens, but method sliding with ctx 4 needs at least 2 tokens"
        );
        let err = WindowPlan::new(10, Method::Sliding, 4, 4, Some(0)).unwrap_err();
        assert_eq!(err, WindowError::ZeroChunkLimit);
    }
}
