//! The KL-divergence base file: what a base run recorded per scored token, for a later
//! comparison run.
//!
//! Layout, all little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `LSEKLDB\0` |
//! | 8 | 4 | format version (u32, 2) |
//! | 12 | 4 | method (u32: 0 chunks, 1 sliding) |
//! | 16 | 32 | SHA-256 of the text's token ids (little-endian u32s) |
//! | 48 | 8 | ctx (u64) |
//! | 56 | 8 | stride (u64) |
//! | 64 | 8 | chunk limit in effect (u64, 0 = all) |
//! | 72 | 4 | top_k (u32, 1 to 32) |
//! | 76 | 4 | vocabulary size (u32) |
//! | 80 | 8 | number of scored tokens (u64) |
//! | 88 | 32 | SHA-256 of every record's bytes, in file order |
//! | 120 | 8 + 8·top_k each | per scored token, in scoring order: base NLL (f64), then top_k pairs (u32 id, f32 log-prob), most likely first |
//!
//! At top_k = 32 a record is 264 bytes. Version 1 (no record checksum, 88-byte header) is
//! refused with a message saying to record the base again. A reader checks the whole file
//! (header, size, every record and the checksum) before a comparison scores anything.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::atomic::{AtomicFile, OutputError};
use super::kld_record::{self, RecordDigest};
use super::output_path::special_kind;
use super::report::token_ids_digest;
use super::stats::BaseRecord;
use super::windows::{Method, WindowPlan};

pub use super::kld_record::record_len;

/// First 8 bytes of every base file.
pub const MAGIC: [u8; 8] = *b"LSEKLDB\0";
/// The format version this code writes and reads.
pub const FORMAT_VERSION: u32 = 2;
/// Bytes before the first record.
pub const HEADER_LEN: usize = 120;
/// Offset of the records' SHA-256 in the header.
pub const RECORDS_SHA256_OFFSET: usize = 88;
/// Largest top_k a base may record.
pub const MAX_TOP_K: u32 = 32;

/// What a base file was recorded for: the comparison run must match every field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KldBaseHeader {
    /// SHA-256 of the text's token ids as little-endian u32s.
    pub token_ids_sha256: [u8; 32],
    /// Windowing method.
    pub method: Method,
    /// Tokens per chunk or window.
    pub ctx: u64,
    /// Tokens between window starts.
    pub stride: u64,
    /// Chunk or window limit; 0 means all.
    pub chunk_limit: u64,
    /// Token ids recorded per scored token (1 to 32).
    pub top_k: u32,
    /// Vocabulary size (logit row length) of the base model.
    pub vocab_size: u32,
    /// Number of records (scored tokens).
    pub scored_tokens: u64,
    /// SHA-256 of every record's bytes in file order (the writer fills it in when it
    /// finishes; a comparison run's expected header leaves it zero and
    /// [`KldBaseHeader::differences`] ignores it).
    pub records_sha256: [u8; 32],
}

/// Why a base file cannot be written, read or used.
#[derive(Debug, thiserror::Error)]
pub enum KldBaseError {
    /// Reading or writing failed.
    #[error("KL-divergence base `{path}`: cannot {action}: {source}")]
    Io {
        /// The base file.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The underlying error.
        source: io::Error,
    },
    /// The output file could not be created or committed.
    #[error("KL-divergence base: {0}")]
    Output(#[from] OutputError),
    /// The file does not start with the magic bytes.
    #[error(
        "`{path}` is not an LSE KL-divergence base file (bad magic bytes; expected `LSEKLDB`)"
    )]
    NotABaseFile {
        /// The file.
        path: PathBuf,
    },
    /// The path is a directory, FIFO, device or socket.
    #[error(
        "KL-divergence base `{path}` is not a regular file ({kind}): give the path of a base \
         file written by --perplexity-kld-base-out"
    )]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What it is instead.
        kind: &'static str,
    },
    /// The file's format version is not the one this build reads.
    #[error(
        "KL-divergence base `{path}` has format version {found}, this build reads version \
         {supported}{}: record the base again with this build",
        if *.found == 1 { " (version 1 files carry no checksum of their records)" } else { "" }
    )]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// Version in the file.
        found: u32,
        /// Version this build reads.
        supported: u32,
    },
    /// The file is shorter than its header says.
    #[error("KL-divergence base `{path}` is truncated: {what}")]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Details.
        what: String,
    },
    /// A header field or the file size is invalid.
    #[error("KL-divergence base `{path}` is corrupt: {what}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Details.
        what: String,
    },
    /// A header given to the writer is invalid.
    #[error("cannot record KL-divergence base `{path}`: {what}")]
    BadHeader {
        /// The file.
        path: PathBuf,
        /// Details.
        what: String,
    },
    /// A record is invalid (read from the file or given to the writer).
    #[error("KL-divergence base `{path}`: record {index} is invalid: {what}")]
    BadRecord {
        /// The file.
        path: PathBuf,
        /// 0-based record (scored token) index.
        index: u64,
        /// Details.
        what: String,
    },
    /// The writer got a different number of records than the header promises.
    #[error(
        "KL-divergence base `{path}`: {written} records written, but the header promises \
         {expected}"
    )]
    RecordCount {
        /// The file.
        path: PathBuf,
        /// Records written.
        written: u64,
        /// Records promised.
        expected: u64,
    },
    /// The base was recorded for a different run.
    #[error(
        "KL-divergence base `{path}` does not match this run ({}): record the base with the \
         same text, method, ctx, stride, chunk limit and top-k",
        .differences.join("; ")
    )]
    Mismatch {
        /// The file.
        path: PathBuf,
        /// One entry per differing field: "field: base X, this run Y".
        differences: Vec<String>,
    },
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn limit_name(limit: u64) -> String {
    if limit == 0 {
        "all".to_string()
    } else {
        limit.to_string()
    }
}

impl KldBaseHeader {
    /// The header for scoring `token_ids` with `plan`, recording `top_k` ids of a
    /// `vocab_size`-entry vocabulary per scored token. The chunk limit is the one in effect
    /// ([`WindowPlan::chunk_limit`]); the records' checksum is left zero.
    pub fn for_plan(token_ids: &[u32], plan: &WindowPlan, top_k: u32, vocab_size: u32) -> Self {
        KldBaseHeader {
            token_ids_sha256: token_ids_digest(token_ids),
            method: plan.method,
            ctx: plan.ctx as u64,
            stride: plan.stride as u64,
            chunk_limit: plan.chunk_limit.unwrap_or(0) as u64,
            top_k,
            vocab_size,
            scored_tokens: plan.scored_tokens() as u64,
            records_sha256: [0; 32],
        }
    }

    /// Encodes the header to its 120 bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = [0u8; HEADER_LEN];
        b[0..8].copy_from_slice(&MAGIC);
        b[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        b[12..16].copy_from_slice(&self.method.code().to_le_bytes());
        b[16..48].copy_from_slice(&self.token_ids_sha256);
        b[48..56].copy_from_slice(&self.ctx.to_le_bytes());
        b[56..64].copy_from_slice(&self.stride.to_le_bytes());
        b[64..72].copy_from_slice(&self.chunk_limit.to_le_bytes());
        b[72..76].copy_from_slice(&self.top_k.to_le_bytes());
        b[76..80].copy_from_slice(&self.vocab_size.to_le_bytes());
        b[80..88].copy_from_slice(&self.scored_tokens.to_le_bytes());
        b[RECORDS_SHA256_OFFSET..HEADER_LEN].copy_from_slice(&self.records_sha256);
        b
    }

    /// Checks the magic bytes and the format version of a file's first bytes (at least 12).
    fn check_magic_and_version(b: &[u8], path: &Path) -> Result<(), KldBaseError> {
        if b.len() < 8 || b[0..8] != MAGIC {
            return Err(KldBaseError::NotABaseFile {
                path: path.to_path_buf(),
            });
        }
        if b.len() < 12 {
            return Err(KldBaseError::Truncated {
                path: path.to_path_buf(),
                what: format!(
                    "it is {} bytes, shorter than the {HEADER_LEN}-byte header",
                    b.len()
                ),
            });
        }
        let version = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        if version != FORMAT_VERSION {
            return Err(KldBaseError::UnsupportedVersion {
                path: path.to_path_buf(),
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        Ok(())
    }

    /// Decodes and validates a header read from `path`.
    pub fn from_bytes(b: &[u8; HEADER_LEN], path: &Path) -> Result<Self, KldBaseError> {
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        Self::check_magic_and_version(b, path)?;
        let method_code = u32_at(12);
        let method = Method::from_code(method_code).ok_or_else(|| KldBaseError::Corrupt {
            path: path.to_path_buf(),
            what: format!("unknown method code {method_code} (expected 0 or 1)"),
        })?;
        let mut token_ids_sha256 = [0u8; 32];
        token_ids_sha256.copy_from_slice(&b[16..48]);
        let mut records_sha256 = [0u8; 32];
        records_sha256.copy_from_slice(&b[RECORDS_SHA256_OFFSET..HEADER_LEN]);
        let header = KldBaseHeader {
            token_ids_sha256,
            method,
            ctx: u64_at(48),
            stride: u64_at(56),
            chunk_limit: u64_at(64),
            top_k: u32_at(72),
            vocab_size: u32_at(76),
            scored_tokens: u64_at(80),
            records_sha256,
        };
        header.validate().map_err(|what| KldBaseError::Corrupt {
            path: path.to_path_buf(),
            what,
        })?;
        Ok(header)
    }

    /// Checks the field ranges; the message names the bad field.
    pub fn validate(&self) -> Result<(), String> {
        if self.top_k == 0 || self.top_k > MAX_TOP_K {
            return Err(format!(
                "top_k is {}, expected 1 to {MAX_TOP_K}",
                self.top_k
            ));
        }
        if self.vocab_size < self.top_k {
            return Err(format!(
                "vocabulary size {} is smaller than top_k {}",
                self.vocab_size, self.top_k
            ));
        }
        if self.ctx < 2 {
            return Err(format!("ctx is {}, expected at least 2", self.ctx));
        }
        if self.stride == 0 || self.stride > self.ctx {
            return Err(format!(
                "stride is {}, expected 1 to the ctx ({})",
                self.stride, self.ctx
            ));
        }
        Ok(())
    }

    /// Total file size this header implies, or `None` on overflow.
    pub fn file_len(&self) -> Option<u64> {
        (record_len(self.top_k) as u64)
            .checked_mul(self.scored_tokens)?
            .checked_add(HEADER_LEN as u64)
    }

    /// Every field where `self` (the base) differs from `run`, as "field: base X, this run Y"
    /// (the records' checksum is not compared: it describes the file, not the run).
    pub fn differences(&self, run: &KldBaseHeader) -> Vec<String> {
        let mut out = Vec::new();
        let mut diff = |field: &str, base: String, this: String| {
            if base != this {
                out.push(format!("{field}: base {base}, this run {this}"));
            }
        };
        diff(
            "token ids sha256",
            hex(&self.token_ids_sha256),
            hex(&run.token_ids_sha256),
        );
        diff("method", self.method.to_string(), run.method.to_string());
        diff("ctx", self.ctx.to_string(), run.ctx.to_string());
        diff("stride", self.stride.to_string(), run.stride.to_string());
        diff(
            "chunk limit",
            limit_name(self.chunk_limit),
            limit_name(run.chunk_limit),
        );
        diff(
            "vocabulary size",
            self.vocab_size.to_string(),
            run.vocab_size.to_string(),
        );
        diff("top-k", self.top_k.to_string(), run.top_k.to_string());
        diff(
            "scored tokens",
            self.scored_tokens.to_string(),
            run.scored_tokens.to_string(),
        );
        out
    }
}

/// Streams records into a new base file, written atomically: the file appears at its path
/// only when [`KldBaseWriter::finish`] succeeds, with the records' checksum in its header.
#[derive(Debug)]
pub struct KldBaseWriter {
    file: AtomicFile,
    header: KldBaseHeader,
    written: u64,
    digest: RecordDigest,
    buf: Vec<u8>,
}

impl KldBaseWriter {
    /// Validates `header`, creates the temporary file and writes the header (its checksum
    /// is filled in by [`KldBaseWriter::finish`]).
    pub fn create(path: &Path, mut header: KldBaseHeader) -> Result<Self, KldBaseError> {
        header.validate().map_err(|what| KldBaseError::BadHeader {
            path: path.to_path_buf(),
            what,
        })?;
        if header.file_len().is_none() {
            return Err(KldBaseError::BadHeader {
                path: path.to_path_buf(),
                what: format!("{} scored tokens is too many", header.scored_tokens),
            });
        }
        header.records_sha256 = [0; 32];
        let mut file = AtomicFile::create(path)?;
        file.write_all(&header.to_bytes())
            .map_err(|source| KldBaseError::Io {
                path: path.to_path_buf(),
                action: "write the header",
                source,
            })?;
        Ok(KldBaseWriter {
            file,
            header,
            written: 0,
            digest: RecordDigest::default(),
            buf: Vec::with_capacity(record_len(header.top_k)),
        })
    }

    /// The header being written.
    pub fn header(&self) -> &KldBaseHeader {
        &self.header
    }

    /// Records written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Appends the record of the next scored token: its NLL and the top-k ids with their
    /// log-probabilities, most likely first.
    pub fn write_record(
        &mut self,
        nll: f64,
        ids: &[u32],
        log_probs: &[f32],
    ) -> Result<(), KldBaseError> {
        let bad = |what: String| KldBaseError::BadRecord {
            path: self.file.target().to_path_buf(),
            index: self.written,
            what,
        };
        if self.written >= self.header.scored_tokens {
            return Err(bad(format!(
                "the header promises only {} records",
                self.header.scored_tokens
            )));
        }
        kld_record::validate(&self.header, nll, ids, log_probs).map_err(bad)?;
        kld_record::encode(nll, ids, log_probs, &mut self.buf);
        self.file
            .write_all(&self.buf)
            .map_err(|source| KldBaseError::Io {
                path: self.file.target().to_path_buf(),
                action: "write a record",
                source,
            })?;
        self.digest.update(&self.buf);
        self.written += 1;
        Ok(())
    }

    /// Appends a [`BaseRecord`].
    pub fn write(&mut self, record: &BaseRecord) -> Result<(), KldBaseError> {
        self.write_record(record.nll, &record.ids, &record.log_probs)
    }

    /// Checks that every promised record was written, writes the records' checksum into
    /// the header, then commits the file.
    pub fn finish(mut self) -> Result<(), KldBaseError> {
        if self.written != self.header.scored_tokens {
            return Err(KldBaseError::RecordCount {
                path: self.file.target().to_path_buf(),
                written: self.written,
                expected: self.header.scored_tokens,
            });
        }
        let digest = self.digest.clone().finish();
        self.file
            .write_at(RECORDS_SHA256_OFFSET as u64, &digest)
            .map_err(|source| KldBaseError::Io {
                path: self.file.target().to_path_buf(),
                action: "write the records' checksum",
                source,
            })?;
        self.header.records_sha256 = digest;
        self.file.commit()?;
        Ok(())
    }
}

/// What a file's metadata says it is, when not a regular file.
fn non_regular_kind(meta: &std::fs::Metadata) -> Option<&'static str> {
    if meta.is_dir() {
        Some("a directory")
    } else {
        special_kind(meta)
    }
}

/// Decodes the header from a file's first bytes (`prefix`, as many as the file has up to
/// [`HEADER_LEN`]) and checks that the file's size `actual` is what the header implies.
fn header_for_size(prefix: &[u8], actual: u64, path: &Path) -> Result<KldBaseHeader, KldBaseError> {
    KldBaseHeader::check_magic_and_version(prefix, path)?;
    let Ok(raw) = <&[u8; HEADER_LEN]>::try_from(prefix) else {
        return Err(KldBaseError::Truncated {
            path: path.to_path_buf(),
            what: format!("it is {actual} bytes, shorter than the {HEADER_LEN}-byte header"),
        });
    };
    let header = KldBaseHeader::from_bytes(raw, path)?;
    let expected = header.file_len().ok_or_else(|| KldBaseError::Corrupt {
        path: path.to_path_buf(),
        what: format!(
            "the header's scored token count {} is impossibly large",
            header.scored_tokens
        ),
    })?;
    let what = format!(
        "the header promises {} records of {} bytes ({expected} bytes in all), but the file \
         is {actual} bytes",
        header.scored_tokens,
        record_len(header.top_k)
    );
    if actual < expected {
        return Err(KldBaseError::Truncated {
            path: path.to_path_buf(),
            what,
        });
    }
    if actual > expected {
        return Err(KldBaseError::Corrupt {
            path: path.to_path_buf(),
            what,
        });
    }
    Ok(header)
}

/// Checks every record of a base and its checksum, record bytes coming from `next`
/// (which fills the buffer it is given, or says why it cannot: a premature end, an I/O error).
fn check_records(
    header: &KldBaseHeader,
    path: &Path,
    mut next: impl FnMut(&mut [u8]) -> Result<(), KldBaseError>,
) -> Result<(), KldBaseError> {
    let mut buf = vec![0u8; record_len(header.top_k)];
    let mut digest = RecordDigest::default();
    let (mut ids, mut log_probs) = (Vec::new(), Vec::new());
    for index in 0..header.scored_tokens {
        next(&mut buf)?;
        let nll = kld_record::decode(&buf, &mut ids, &mut log_probs);
        kld_record::validate(header, nll, &ids, &log_probs).map_err(|what| {
            KldBaseError::BadRecord {
                path: path.to_path_buf(),
                index,
                what,
            }
        })?;
        digest.update(&buf);
    }
    let found = digest.finish();
    if found != header.records_sha256 {
        return Err(KldBaseError::Corrupt {
            path: path.to_path_buf(),
            what: format!(
                "the records' SHA-256 is {}, the header says {}: the file changed after it \
                 was written",
                hex(&found),
                hex(&header.records_sha256)
            ),
        });
    }
    Ok(())
}

/// Checks a whole base file held in memory (header, size, every record, checksum), as
/// [`KldBaseReader::open`] checks a file; `path` names it in errors. Returns the header.
pub fn check_bytes(bytes: &[u8], path: &Path) -> Result<KldBaseHeader, KldBaseError> {
    let prefix = &bytes[..bytes.len().min(HEADER_LEN)];
    let header = header_for_size(prefix, bytes.len() as u64, path)?;
    let mut rest = &bytes[HEADER_LEN..];
    check_records(&header, path, |buf| {
        let (record, tail) = rest.split_at(buf.len().min(rest.len()));
        if record.len() < buf.len() {
            return Err(KldBaseError::Truncated {
                path: path.to_path_buf(),
                what: "a record ends early".into(),
            });
        }
        buf.copy_from_slice(record);
        rest = tail;
        Ok(())
    })?;
    Ok(header)
}

/// Reads a base file record by record after checking the whole file.
#[derive(Debug)]
pub struct KldBaseReader {
    path: PathBuf,
    header: KldBaseHeader,
    reader: BufReader<File>,
    next: u64,
    buf: Vec<u8>,
}

impl KldBaseReader {
    /// Opens `path` and checks all of it before any record is handed out: that it is a
    /// regular file, its magic, version and header fields, that its size is exactly what
    /// the header implies, every record, and the records' checksum.
    pub fn open(path: &Path) -> Result<Self, KldBaseError> {
        let io_err = |action| {
            move |source| KldBaseError::Io {
                path: path.to_path_buf(),
                action,
                source,
            }
        };
        let file = File::open(path).map_err(io_err("open it"))?;
        let meta = file.metadata().map_err(io_err("read its size"))?;
        if let Some(kind) = non_regular_kind(&meta) {
            return Err(KldBaseError::NotRegular {
                path: path.to_path_buf(),
                kind,
            });
        }
        let actual = meta.len();
        let mut reader = BufReader::with_capacity(1 << 20, file);
        let mut prefix = Vec::with_capacity(HEADER_LEN);
        (&mut reader)
            .take(HEADER_LEN as u64)
            .read_to_end(&mut prefix)
            .map_err(io_err("read the header"))?;
        let header = header_for_size(&prefix, actual, path)?;
        let shrank = |e: io::Error| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                KldBaseError::Truncated {
                    path: path.to_path_buf(),
                    what: "a record ends early (the file shrank while reading)".into(),
                }
            } else {
                KldBaseError::Io {
                    path: path.to_path_buf(),
                    action: "read a record",
                    source: e,
                }
            }
        };
        check_records(&header, path, |buf| reader.read_exact(buf).map_err(shrank))?;
        reader
            .seek(SeekFrom::Start(HEADER_LEN as u64))
            .map_err(io_err("rewind it"))?;
        Ok(KldBaseReader {
            path: path.to_path_buf(),
            header,
            reader,
            next: 0,
            buf: vec![0u8; record_len(header.top_k)],
        })
    }

    /// The file's header.
    pub fn header(&self) -> &KldBaseHeader {
        &self.header
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records not read yet.
    pub fn remaining(&self) -> u64 {
        self.header.scored_tokens.saturating_sub(self.next)
    }

    /// Refuses a base recorded for a different run, listing every field that differs.
    pub fn check_compatible(&self, expected: &KldBaseHeader) -> Result<(), KldBaseError> {
        let differences = self.header.differences(expected);
        if differences.is_empty() {
            Ok(())
        } else {
            Err(KldBaseError::Mismatch {
                path: self.path.clone(),
                differences,
            })
        }
    }

    /// Reads the next record into `record` (reusing its buffers); `false` after the last.
    pub fn read_into(&mut self, record: &mut BaseRecord) -> Result<bool, KldBaseError> {
        if self.next >= self.header.scored_tokens {
            return Ok(false);
        }
        let index = self.next;
        self.reader.read_exact(&mut self.buf).map_err(|e| {
            if e.kind() == io::ErrorKind::UnexpectedEof {
                KldBaseError::Truncated {
                    path: self.path.clone(),
                    what: format!("record {index} ends early (the file shrank while reading)"),
                }
            } else {
                KldBaseError::Io {
                    path: self.path.clone(),
                    action: "read a record",
                    source: e,
                }
            }
        })?;
        record.nll = kld_record::decode(&self.buf, &mut record.ids, &mut record.log_probs);
        // Checked again: the file may have changed since it was opened.
        kld_record::validate(&self.header, record.nll, &record.ids, &record.log_probs).map_err(
            |what| KldBaseError::BadRecord {
                path: self.path.clone(),
                index,
                what,
            },
        )?;
        self.next += 1;
        Ok(true)
    }

    /// Reads the next record; `None` after the last.
    pub fn next_record(&mut self) -> Result<Option<BaseRecord>, KldBaseError> {
        let mut record = BaseRecord {
            nll: 0.0,
            ids: Vec::new(),
            log_probs: Vec::new(),
        };
        Ok(self.read_into(&mut record)?.then_some(record))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scoring::atomic::TEST_FILES;
    use std::fs;

    fn shared() -> std::sync::RwLockReadGuard<'static, ()> {
        TEST_FILES.read().unwrap_or_else(|p| p.into_inner())
    }

    fn header(top_k: u32, scored: u64) -> KldBaseHeader {
        KldBaseHeader {
            token_ids_sha256: [0xab; 32],
            method: Method::Chunks,
            ctx: 512,
            stride: 512,
            chunk_limit: 0,
            top_k,
            vocab_size: 1000,
            scored_tokens: scored,
            records_sha256: [0; 32],
        }
    }

    fn record(i: u32, k: u32) -> BaseRecord {
        BaseRecord {
            nll: 1.5 + f64::from(i),
            ids: (0..k).map(|r| (i * 7 + r * 13) % 1000).collect(),
            log_probs: (0..k).map(|r| -0.5 * r as f32 - 1.5).collect(),
        }
    }

    fn write_base(path: &Path, h: KldBaseHeader, n: u32) {
        let mut w = KldBaseWriter::create(path, h).unwrap();
        for i in 0..n {
            w.write(&record(i, h.top_k)).unwrap();
        }
        assert_eq!(w.written(), u64::from(n));
        w.finish().unwrap();
    }

    #[test]
    fn record_size_matches_the_brief() {
        assert_eq!(record_len(32), 264);
        assert_eq!(header(32, 147_900).file_len(), Some(120 + 264 * 147_900));
    }

    #[test]
    fn header_for_plan() {
        let ids: Vec<u32> = (0..23).collect();
        let plan = WindowPlan::new(23, Method::Chunks, 7, 7, Some(2)).unwrap();
        // A limit that leaves nothing out is recorded as none (the windows are the same).
        let all_three = WindowPlan::new(23, Method::Chunks, 7, 7, Some(1000)).unwrap();
        let h = KldBaseHeader::for_plan(&ids, &all_three, 32, 248_320);
        assert_eq!(h.chunk_limit, 0);
        let h = KldBaseHeader::for_plan(&ids, &plan, 32, 248_320);
        assert_eq!(h.token_ids_sha256, token_ids_digest(&ids));
        assert_eq!(
            (h.method, h.ctx, h.stride, h.chunk_limit),
            (Method::Chunks, 7, 7, 2)
        );
        assert_eq!((h.top_k, h.vocab_size, h.scored_tokens), (32, 248_320, 6));
        let all = WindowPlan::new(23, Method::Sliding, 7, 3, None).unwrap();
        let h = KldBaseHeader::for_plan(&ids, &all, 4, 100);
        assert_eq!((h.method, h.stride, h.chunk_limit), (Method::Sliding, 3, 0));
        assert_eq!(h.scored_tokens, 22);
    }

    #[test]
    fn header_layout_is_pinned() {
        let h = KldBaseHeader {
            token_ids_sha256: [7; 32],
            method: Method::Sliding,
            ctx: 0x0102,
            stride: 0x0101,
            chunk_limit: 40,
            top_k: 32,
            vocab_size: 248_320,
            scored_tokens: 5,
            records_sha256: [9; 32],
        };
        let b = h.to_bytes();
        assert_eq!(b.len(), 120);
        assert_eq!(&b[0..8], b"LSEKLDB\0");
        assert_eq!(&b[8..12], &[2, 0, 0, 0]);
        assert_eq!(&b[12..16], &[1, 0, 0, 0]);
        assert_eq!(&b[16..48], &[7u8; 32]);
        assert_eq!(&b[48..56], &[2, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[56..58], &[1, 1]);
        assert_eq!(b[64], 40);
        assert_eq!(b[72], 32);
        assert_eq!(&b[76..80], &248_320u32.to_le_bytes());
        assert_eq!(b[80], 5);
        assert_eq!(&b[88..120], &[9u8; 32]);
        assert_eq!(KldBaseHeader::from_bytes(&b, Path::new("x")).unwrap(), h);
    }

    #[test]
    fn round_trip() {
        let _g = shared();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("base.kld");
        let h = header(4, 3);
        write_base(&path, h, 3);
        assert_eq!(fs::metadata(&path).unwrap().len(), 120 + 3 * 40);
        let bytes = fs::read(&path).unwrap();
        // First record: nll 1.5 then (id 0, -1.5).
        assert_eq!(&bytes[120..128], &1.5f64.to_le_bytes());
        assert_eq!(&bytes[128..132], &0u32.to_le_bytes());
        assert_eq!(&bytes[132..136], &(-1.5f32).to_le_bytes());
        // The header carries the records' SHA-256.
        let digest: [u8; 32] = {
            use sha2::Digest;
            sha2::Sha256::digest(&bytes[120..]).into()
        };
        assert_eq!(&bytes[88..120], &digest);

        let mut r = KldBaseReader::open(&path).unwrap();
        assert_eq!(
            r.header(),
            &KldBaseHeader {
                records_sha256: digest,
                ..h
            }
        );
        assert_eq!(r.path(), path.as_path());
        r.check_compatible(&h).unwrap();
        for i in 0..3 {
            assert_eq!(r.remaining(), 3 - u64::from(i));
            assert_eq!(r.next_record().unwrap(), Some(record(i, 4)));
        }
        assert_eq!(r.next_record().unwrap(), None);
    }

    #[test]
    fn mismatch_lists_every_differing_field() {
        let _g = shared();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dense.kld");
        write_base(&path, header(2, 1), 1);
        let r = KldBaseReader::open(&path).unwrap();
        let mut run = header(2, 1);
        run.token_ids_sha256[0] = 0xcd;
        run.method = Method::Sliding;
        run.ctx = 256;
        run.stride = 128;
        run.chunk_limit = 40;
        run.vocab_size = 2000;
        run.top_k = 3;
        let err = r.check_compatible(&run).unwrap_err();
        let KldBaseError::Mismatch { differences, .. } = &err else {
            panic!("{err}");
        };
        let fields: Vec<&str> = differences
            .iter()
            .map(|d| d.split(':').next().unwrap())
            .collect();
        assert_eq!(
            fields,
            [
                "token ids sha256",
                "method",
                "ctx",
                "stride",
                "chunk limit",
                "vocabulary size",
                "top-k"
            ]
        );
        let msg = err.to_string();
        assert!(msg.contains("dense.kld"), "{msg}");
        assert!(msg.contains("chunk limit: base all, this run 40"), "{msg}");
        assert!(msg.contains("ctx: base 512, this run 256"), "{msg}");
        assert!(msg.contains(&format!("base {}", "ab".repeat(32))), "{msg}");
        // One field only.
        let mut run = header(2, 1);
        run.scored_tokens = 2;
        let err = r.check_compatible(&run).unwrap_err();
        assert!(
            err.to_string()
                .contains("(scored tokens: base 1, this run 2)"),
            "{err}"
        );
    }

    #[test]
    fn reader_refuses_damaged_files() {
        let _g = shared();
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good.kld");
        write_base(&good, header(2, 2), 2);
        let bytes = fs::read(&good).unwrap();
        let open_bytes = |name: &str, data: &[u8]| {
            let p = dir.path().join(name);
            fs::write(&p, data).unwrap();
            KldBaseReader::open(&p).unwrap_err().to_string()
        };

        let msg = open_bytes("short.kld", &bytes[..40]);
        assert!(
            msg.contains("short.kld") && msg.contains("is truncated"),
            "{msg}"
        );
        assert!(msg.contains("shorter than the 120-byte header"), "{msg}");

        let msg = open_bytes("cut.kld", &bytes[..bytes.len() - 1]);
        assert!(msg.contains("cut.kld` is truncated"), "{msg}");
        assert!(
            msg.contains("promises 2 records of 24 bytes (168 bytes in all)"),
            "{msg}"
        );

        let mut long = bytes.clone();
        long.push(0);
        let msg = open_bytes("long.kld", &long);
        assert!(
            msg.contains("long.kld` is corrupt") && msg.contains("169 bytes"),
            "{msg}"
        );

        let mut magic = bytes.clone();
        magic[0] = b'X';
        let msg = open_bytes("magic.kld", &magic);
        assert!(
            msg.contains("is not an LSE KL-divergence base file"),
            "{msg}"
        );

        let mut version = bytes.clone();
        version[8] = 9;
        let msg = open_bytes("version.kld", &version);
        assert!(
            msg.contains("format version 9, this build reads version 2"),
            "{msg}"
        );
        let mut v1 = bytes[..88].to_vec();
        v1[8] = 1;
        v1.extend_from_slice(&bytes[120..]);
        let msg = open_bytes("v1.kld", &v1);
        assert!(
            msg.contains("format version 1, this build reads version 2 (version 1 files")
                && msg.contains("record the base again"),
            "{msg}"
        );

        let mut flipped = bytes.clone();
        flipped[120 + 12] ^= 1;
        let msg = open_bytes("flipped.kld", &flipped);
        assert!(
            msg.contains("flipped.kld` is corrupt: the records' SHA-256 is"),
            "{msg}"
        );

        let mut method = bytes.clone();
        method[12] = 5;
        let msg = open_bytes("method.kld", &method);
        assert!(msg.contains("unknown method code 5"), "{msg}");

        let mut topk = bytes.clone();
        topk[72] = 33;
        let msg = open_bytes("topk.kld", &topk);
        assert!(msg.contains("top_k is 33, expected 1 to 32"), "{msg}");

        let mut huge = bytes.clone();
        huge[80..88].copy_from_slice(&u64::MAX.to_le_bytes());
        let msg = open_bytes("huge.kld", &huge);
        assert!(msg.contains("impossibly large"), "{msg}");

        let missing = dir.path().join("missing.kld");
        let msg = KldBaseReader::open(&missing).unwrap_err().to_string();
        assert!(
            msg.contains("missing.kld") && msg.contains("cannot open it"),
            "{msg}"
        );
    }

    #[test]
    fn reader_refuses_bad_records() {
        let _g = shared();
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good.kld");
        write_base(&good, header(2, 2), 2);
        let bytes = fs::read(&good).unwrap();
        // Record 1 starts at 120 + 24; its first id is at +8, its second log-prob at +20.
        // The whole file is checked when it is opened, before any record is read.
        let r1 = 120 + 24;
        let read_all = |name: &str, data: &[u8]| {
            let p = dir.path().join(name);
            fs::write(&p, data).unwrap();
            KldBaseReader::open(&p).unwrap_err().to_string()
        };
        let mut id = bytes.clone();
        id[r1 + 8..r1 + 12].copy_from_slice(&5000u32.to_le_bytes());
        let msg = read_all("id.kld", &id);
        assert!(msg.contains("id.kld`: record 1 is invalid"), "{msg}");
        assert!(
            msg.contains("id 5000 at rank 0 is outside the vocabulary (1000"),
            "{msg}"
        );

        let mut nan = bytes.clone();
        nan[r1 + 20..r1 + 24].copy_from_slice(&f32::NAN.to_le_bytes());
        let msg = read_all("nan.kld", &nan);
        assert!(msg.contains("is not finite"), "{msg}");

        let mut order = bytes.clone();
        order[r1 + 20..r1 + 24].copy_from_slice(&(-0.5f32).to_le_bytes());
        let msg = read_all("order.kld", &order);
        assert!(msg.contains("not in decreasing order at rank 1"), "{msg}");

        let mut dup = bytes.clone();
        let first_id: [u8; 4] = dup[r1 + 8..r1 + 12].try_into().unwrap();
        dup[r1 + 16..r1 + 20].copy_from_slice(&first_id);
        let msg = read_all("dup.kld", &dup);
        assert!(msg.contains("appears twice"), "{msg}");

        let mut nll = bytes.clone();
        nll[r1..r1 + 8].copy_from_slice(&f64::INFINITY.to_le_bytes());
        let msg = read_all("nll.kld", &nll);
        assert!(msg.contains("NLL inf is not finite"), "{msg}");

        for (value, says) in [
            (-0.5, "NLL -0.5 is negative"),
            (1e300, "larger than f32 logits can give"),
        ] {
            let mut nll = bytes.clone();
            nll[r1..r1 + 8].copy_from_slice(&f64::to_le_bytes(value));
            let msg = read_all("range.kld", &nll);
            assert!(
                msg.contains("record 1 is invalid") && msg.contains(says),
                "{msg}"
            );
        }
        let mut above = bytes.clone();
        above[r1 + 12..r1 + 16].copy_from_slice(&0.5f32.to_le_bytes());
        let msg = read_all("above.kld", &above);
        assert!(msg.contains("log-prob 0.5 of id"), "{msg}");

        // A FIFO or directory is refused before anything is read.
        let msg = KldBaseReader::open(dir.path()).unwrap_err().to_string();
        assert!(msg.contains("is not a regular file (a directory)"), "{msg}");
    }

    #[test]
    fn writer_refusals_leave_no_file() {
        let _g = shared();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("base.kld");

        let err = KldBaseWriter::create(&path, header(0, 1)).unwrap_err();
        assert!(err.to_string().contains("top_k is 0"), "{err}");
        let mut h = header(2, 1);
        h.stride = 0;
        let err = KldBaseWriter::create(&path, h).unwrap_err();
        assert!(err.to_string().contains("stride is 0"), "{err}");
        let err = KldBaseWriter::create(&dir.path().join("no/base.kld"), header(2, 1));
        assert!(err.unwrap_err().to_string().contains("does not exist"));

        let mut w = KldBaseWriter::create(&path, header(2, 2)).unwrap();
        assert_eq!(w.header().top_k, 2);
        let err = w
            .write_record(1.0, &[1, 2, 3], &[-1.0, -2.0, -3.0])
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("3 ids and 3 log-probs, expected 2"),
            "{err}"
        );
        let err = w.write_record(1.0, &[1, 1000], &[-1.0, -2.0]).unwrap_err();
        assert!(err.to_string().contains("outside the vocabulary"), "{err}");
        w.write_record(1.0, &[1, 2], &[-1.0, -2.0]).unwrap();
        let err = w.finish().unwrap_err();
        assert!(
            err.to_string()
                .contains("1 records written, but the header promises 2"),
            "{err}"
        );
        assert!(fs::read_dir(dir.path()).unwrap().next().is_none());

        let mut w = KldBaseWriter::create(&path, header(1, 1)).unwrap();
        w.write_record(1.0, &[1], &[-1.0]).unwrap();
        let err = w.write_record(1.0, &[1], &[-1.0]).unwrap_err();
        assert!(err.to_string().contains("record 1 is invalid"), "{err}");
        drop(w);
        assert!(fs::read_dir(dir.path()).unwrap().next().is_none());
    }
}
