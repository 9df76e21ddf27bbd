//! Scoring arithmetic for `lse perplexity`, independent of the model and kernels: token
//! windows, perplexity and KL-divergence statistics, the KL-divergence base file, the JSON
//! report and atomic output files.

pub mod atomic;
pub mod kld_base;
pub mod kld_record;
pub mod kld_table;
pub mod output_path;
pub mod report;
pub mod stats;
pub mod windows;

pub use atomic::{
    check_regular_writable, check_writable, remove_in_flight_temp_files, track_temp, untrack_temp,
    AtomicFile, OutputError,
};
pub use kld_base::{KldBaseError, KldBaseHeader, KldBaseReader, KldBaseWriter};
pub use kld_table::{KldTable, Quantiles};
pub use output_path::same_file;
pub use report::{
    token_ids_digest, token_ids_sha256, KldReport, PerplexityReport, ReportConfig, TokenStats,
    WindowReport,
};
pub use stats::{
    base_record, compare_row, BaseRecord, DeviceRow, KldAccumulator, KldSummary, PplAccumulator,
    RowComparison, RowError,
};
pub use windows::{Method, Window, WindowError, WindowPlan};
