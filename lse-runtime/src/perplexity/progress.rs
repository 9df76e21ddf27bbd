//! Progress of a scoring run, reported once the windows are planned and after every window
//! to whoever displays it (the CLI draws a progress bar; the C API shows nothing).

/// The state of a run after one more window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ProgressUpdate {
    /// Windows finished.
    pub done: usize,
    /// Windows in the run.
    pub total: usize,
    /// Tokens sent through prefill so far, context included.
    pub prefill_tokens: usize,
    /// Seconds since the run started.
    pub elapsed_seconds: f64,
    /// Perplexity over every token scored so far (1 before any).
    pub perplexity: f64,
}

impl ProgressUpdate {
    /// Prefill tokens per second so far (0 before any time has passed).
    pub fn tokens_per_second(&self) -> f64 {
        crate::scoring::report::rate(self.prefill_tokens as u64, self.elapsed_seconds)
    }

    /// Seconds until the last window at the mean pace so far; `None` before the first.
    pub fn eta_seconds(&self) -> Option<f64> {
        (self.done > 0).then(|| {
            self.elapsed_seconds / self.done as f64 * self.total.saturating_sub(self.done) as f64
        })
    }
}

/// Receives a [`ProgressUpdate`] once the windows are planned (`done` 0) and after every
/// window.
pub trait Progress {
    /// Called with `done` = 0, 1, …, `total`, in order.
    fn update(&self, update: &ProgressUpdate);
}

/// Shows nothing.
pub struct Silent;

impl Progress for Silent {
    fn update(&self, _update: &ProgressUpdate) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_of_an_update() {
        let mut u = ProgressUpdate {
            done: 1,
            total: 4,
            prefill_tokens: 512,
            elapsed_seconds: 2.0,
            perplexity: 10.0,
        };
        assert_eq!(u.tokens_per_second(), 256.0);
        assert_eq!(u.eta_seconds(), Some(6.0));
        u.elapsed_seconds = 0.0;
        assert_eq!(u.tokens_per_second(), 0.0);
        u.done = 0;
        assert_eq!(u.eta_seconds(), None);
    }
}
