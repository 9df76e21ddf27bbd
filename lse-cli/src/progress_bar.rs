//! The progress bar of `lse perplexity` (indicatif): windows done, prefill tokens/s, running
//! perplexity and ETA at the mean pace per window, in under 80 columns, with a spinner that
//! shows the run is alive between windows; drawn only when stderr is a terminal.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use lse_runtime::perplexity::{Progress, ProgressUpdate};

/// A bar on stderr, or nothing when stderr is not a terminal or `--quiet` was given.
pub struct Bar {
    bar: Option<ProgressBar>,
}

impl Bar {
    /// A bar on stderr when it is a terminal and `quiet` is false; otherwise one that draws
    /// nothing, so redirected stderr holds only whole lines.
    pub fn stderr(quiet: bool) -> Bar {
        let bar = (!quiet && std::io::stderr().is_terminal()).then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} {bar:20.cyan/blue} {pos}/{len} windows  {msg}",
                )
                .expect("the template is valid")
                .progress_chars("=> "),
            );
            bar.set_message("tokenizing");
            bar.enable_steady_tick(Duration::from_secs(1));
            bar
        });
        Bar { bar }
    }

    /// Removes the bar from the terminal (before the summary is printed).
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// The bar's message: tokens/s, the running perplexity and the ETA once a window is done.
pub fn message(update: &ProgressUpdate) -> String {
    match update.eta_seconds() {
        None => "scoring the first window".to_string(),
        Some(eta) => format!(
            "{:.1} tok/s  ppl {:.4}  eta {eta:.0}s",
            update.tokens_per_second(),
            update.perplexity
        ),
    }
}

impl Progress for Bar {
    fn update(&self, update: &ProgressUpdate) {
        if let Some(bar) = &self.bar {
            bar.set_length(update.total as u64);
            bar.set_position(update.done as u64);
            bar.set_message(message(update));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_shows_rate_and_running_perplexity() {
        let u = ProgressUpdate {
            done: 2,
            total: 8,
            prefill_tokens: 1024,
            elapsed_seconds: 8.0,
            perplexity: 216.12871,
        };
        assert_eq!(message(&u), "128.0 tok/s  ppl 216.1287  eta 24s");
        let first = ProgressUpdate { done: 0, ..u };
        assert_eq!(message(&first), "scoring the first window");
    }

    #[test]
    fn quiet_bar_draws_nothing() {
        let bar = Bar::stderr(true);
        assert!(bar.bar.is_none());
        bar.update(&ProgressUpdate {
            done: 1,
            total: 1,
            prefill_tokens: 1,
            elapsed_seconds: 1.0,
            perplexity: 1.0,
        });
        bar.finish();
    }
}
