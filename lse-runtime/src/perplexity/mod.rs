//! `lse perplexity`: llama.cpp-exact perplexity and KL divergence, scored through the same
//! prefill the engine serves with and the LOOM scoring kernels.
//!
//! [`Engine`] holds the model and the device; [`Engine::perplexity`] tokenizes, plans the
//! windows, runs each window in a fresh session through the prefill pass plan, applies the
//! head stage ([`head`]) after every pass, and assembles the report. The CLI and the C API
//! both call it.

mod checks;
mod engine;
mod fifo;
pub mod head;
mod progress;
mod run;
pub mod settings;
mod token_file;

pub use crate::model::GemmActivations;
pub use checks::{
    check_request, effective_settings, require_device_kernels_env, REQUIRE_DEVICE_KERNELS_ENV,
};
pub use engine::{Engine, EngineError};
pub use progress::{Progress, ProgressUpdate, Silent};
pub use settings::{
    EngineSettings, FlashPrefill, Input, KvDtype, Request, DEFAULT_FLASHPREFILL_MIN_KV_LEN,
};
pub use token_file::parse_token_ids;
