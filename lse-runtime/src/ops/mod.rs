//! Typed, shape-checked entry points for the scoring kernels.
//!
//! Each op checks its slices against the shapes it is given, then launches the LOOM kernel on
//! the device. The kernels trust their inputs (a GPU has no bounds checks), so every check a
//! kernel's contract needs happens here.

mod lm_head;
mod lse_pick;
mod topk_pairs;

pub use lm_head::{lm_head, HeadWeight};
pub use lse_pick::{lse_pick, LsePick};
pub use topk_pairs::{topk_pairs, TopK, MAX_TOP_K};

use crate::device::LaunchError;

/// An op called with inconsistent shapes, or a launch that failed.
#[derive(Debug, thiserror::Error)]
pub enum OpError {
    #[error("{op}: {what} has {got} elements, expected {expected}")]
    Shape {
        op: &'static str,
        what: &'static str,
        got: usize,
        expected: usize,
    },
    #[error("{op}: {message}")]
    Invalid { op: &'static str, message: String },
    #[error(transparent)]
    Launch(#[from] LaunchError),
}

fn check_len(
    op: &'static str,
    what: &'static str,
    got: usize,
    expected: usize,
) -> Result<(), OpError> {
    if got == expected {
        Ok(())
    } else {
        Err(OpError::Shape {
            op,
            what,
            got,
            expected,
        })
    }
}

fn to_u32(op: &'static str, what: &str, v: usize) -> Result<u32, OpError> {
    u32::try_from(v).map_err(|_| OpError::Invalid {
        op,
        message: format!("{what} = {v} does not fit in 32 bits"),
    })
}
