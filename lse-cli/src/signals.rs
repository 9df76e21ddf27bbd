//! Interrupts: SIGINT (Ctrl-C), SIGTERM (`timeout`, Slurm, systemd) and SIGHUP (a closed
//! terminal) all remove the temporary files still being written, then exit with status 130,
//! so no partial output is left. A second signal while that runs exits at once.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Signals received so far.
static RECEIVED: AtomicUsize = AtomicUsize::new(0);

/// The exit status after an interrupt (128 + SIGINT, as shells report Ctrl-C).
pub const INTERRUPTED: i32 = 130;

/// Installs the handler for SIGINT, SIGTERM and SIGHUP.
pub fn install() {
    let _ = ctrlc::set_handler(|| {
        if RECEIVED.fetch_add(1, Ordering::SeqCst) > 0 {
            // The second signal: the cleanup is stuck or slow; leave now.
            std::process::exit(INTERRUPTED);
        }
        // Clean up on another thread so this one is free to take a second signal.
        std::thread::spawn(|| {
            lse_runtime::scoring::remove_in_flight_temp_files();
            std::process::exit(INTERRUPTED);
        });
    });
}
