//! Standard output for the commands that print their result there. A reader that closes the
//! pipe early (`lse kernels show .. | head`) is not a failure of `lse`, and must not become a
//! panic: the command stops quietly with the status a program killed by SIGPIPE reports, so
//! `set -o pipefail` still sees that the output was cut short. Any other write error (a full
//! disk behind a redirect) is an error message like any other.

use std::io::{ErrorKind, Write};
use std::process::ExitCode;

/// Why a command ended without success.
pub enum Stop {
    /// A failure, with the message `lse` prints.
    Failed(String),
    /// Standard output's reader has gone.
    ReaderGone,
}

impl From<String> for Stop {
    fn from(message: String) -> Self {
        Stop::Failed(message)
    }
}

impl Stop {
    /// Prints the message of a failure, and gives the process's exit status.
    pub fn report(self) -> ExitCode {
        match self {
            Stop::Failed(message) => {
                eprintln!("lse: {message}");
                ExitCode::FAILURE
            }
            // 128 + SIGPIPE (13), as shells report a writer the signal stopped.
            Stop::ReaderGone => ExitCode::from(141),
        }
    }
}

/// Writes `text` to standard output and flushes it.
pub fn print(text: &str) -> Result<(), Stop> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Err(Stop::ReaderGone),
        Err(e) => Err(Stop::Failed(format!(
            "could not write to standard output: {e}"
        ))),
    }
}
