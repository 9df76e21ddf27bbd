//! Progress on stderr for long runs: windows done, tokens/s, running perplexity, ETA.

use std::io::{IsTerminal, Write};
use std::time::Instant;

/// Where progress goes.
pub struct Progress {
    enabled: bool,
    start: Instant,
}

impl Progress {
    /// Progress lines on stderr when it is a terminal and `quiet` is false.
    pub fn stderr(quiet: bool) -> Progress {
        Progress {
            enabled: !quiet && std::io::stderr().is_terminal(),
            start: Instant::now(),
        }
    }

    /// No output.
    pub fn silent() -> Progress {
        Progress {
            enabled: false,
            start: Instant::now(),
        }
    }

    /// Reports that `done` of `total` windows have run, `tokens` prefill tokens so far.
    pub fn update(&self, done: usize, total: usize, tokens: usize, ppl: f64) {
        if !self.enabled {
            return;
        }
        let secs = self.start.elapsed().as_secs_f64();
        let rate = if secs > 0.0 {
            tokens as f64 / secs
        } else {
            0.0
        };
        let eta = if done > 0 {
            secs / done as f64 * (total - done) as f64
        } else {
            0.0
        };
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r[{done}/{total}] {rate:.1} tok/s  ppl {ppl:.4}  eta {eta:.0}s   "
        );
        if done == total {
            let _ = writeln!(err);
        }
    }
}
