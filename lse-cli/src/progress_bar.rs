//! The progress bar of `lse perplexity` (indicatif): windows done, prefill tokens/s, running
//! perplexity and ETA, drawn only when stderr is a terminal.

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
                    "{bar:30.cyan/blue} {pos}/{len} windows  {msg}  eta {eta}",
                )
                .expect("the template is valid")
                .progress_chars("=> "),
            );
            bar.set_message("scoring the first window");
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

/// The bar's message after a window: tokens/s and the running perplexity.
pub fn message(update: &ProgressUpdate) -> String {
    format!(
        "{:.1} tok/s  ppl {:.4}",
        update.tokens_per_second(),
        update.perplexity
    )
}

impl Progress for Bar {
    fn window_done(&self, update: &ProgressUpdate) {
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
        assert_eq!(message(&u), "128.0 tok/s  ppl 216.1287");
    }

    #[test]
    fn quiet_bar_draws_nothing() {
        let bar = Bar::stderr(true);
        assert!(bar.bar.is_none());
        bar.window_done(&ProgressUpdate {
            done: 1,
            total: 1,
            prefill_tokens: 1,
            elapsed_seconds: 1.0,
            perplexity: 1.0,
        });
        bar.finish();
    }
}
