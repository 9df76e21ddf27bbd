//! The KL-divergence base file: what a base run recorded per scored token, for a later
//! comparison run.
//!
//! Layout, all little-endian:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `LSEKLDB\0` |
//! | 8 | 4 | format version (u32, 1) |
//! | 12 | 4 | method (u32: 0 chunks, 1 sliding) |
//! | 16 | 32 | SHA-256 of the text's token ids (little-endian u32s) |
//! | 48 | 8 | ctx (u64) |
//! | 56 | 8 | stride (u64) |
//! | 64 | 8 | chunk limit (u64, 0 = all) |
//! | 72 | 4 | top_k (u32, 1 to 32) |
//! | 76 | 4 | vocabulary size (u32) |
//! | 80 | 8 | number of scored tokens (u64) |
//! | 88 | 8 + 8·top_k each | per scored token, in scoring order: base NLL (f64), then top_k pairs (u32 id, f32 log-prob), most likely first |
//!
//! At top_k = 32 a record is 264 bytes.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use super::atomic::{AtomicFile, OutputError};
use super::report::token_ids_digest;
use super::stats::BaseRecord;
use super::windows::{Method, WindowPlan};

/// First 8 bytes of every base file.
pub const MAGIC: [u8; 8] = *b"LSEKLDB\0";
/// The format version this code writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes before the first record.
pub const HEADER_LEN: usize = 88;
/// Largest top_k a base may record.
pub const MAX_TOP_K: u32 = 32;

/// Bytes of one record for `top_k` ids.
pub fn record_len(top_k: u32) -> usize {
    8 + 8 * top_k as usize
}

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
    /// The file's format version is not the one this build reads.
    #[error(
        "KL-divergence base `{path}` has format version {found}, this build reads version \
         {supported}: record the base again with this build"
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
    /// `vocab_size`-entry vocabulary per scored token.
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
        }
    }

    /// Encodes the header to its 88 bytes.
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
        b
    }

    /// Decodes and validates a header read from `path`.
    pub fn from_bytes(b: &[u8; HEADER_LEN], path: &Path) -> Result<Self, KldBaseError> {
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        if b[0..8] != MAGIC {
            return Err(KldBaseError::NotABaseFile {
                path: path.to_path_buf(),
            });
        }
        let version = u32_at(8);
        if version != FORMAT_VERSION {
            return Err(KldBaseError::UnsupportedVersion {
                path: path.to_path_buf(),
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let method_code = u32_at(12);
        let method = Method::from_code(method_code).ok_or_else(|| KldBaseError::Corrupt {
            path: path.to_path_buf(),
            what: format!("unknown method code {method_code} (expected 0 or 1)"),
        })?;
        let mut token_ids_sha256 = [0u8; 32];
        token_ids_sha256.copy_from_slice(&b[16..48]);
        let header = KldBaseHeader {
            token_ids_sha256,
            method,
            ctx: u64_at(48),
            stride: u64_at(56),
            chunk_limit: u64_at(64),
            top_k: u32_at(72),
            vocab_size: u32_at(76),
            scored_tokens: u64_at(80),
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

    /// Every field where `self` (the base) differs from `run`, as "field: base X, this run Y".
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

/// Checks one record against the header; the message says what is wrong.
fn validate_record(
    header: &KldBaseHeader,
    nll: f64,
    ids: &[u32],
    log_probs: &[f32],
) -> Result<(), String> {
    let k = header.top_k as usize;
    if ids.len() != k || log_probs.len() != k {
        return Err(format!(
            "{} ids and {} log-probs, expected {k} of each",
            ids.len(),
            log_probs.len()
        ));
    }
    if !nll.is_finite() {
        return Err(format!("NLL {nll} is not finite"));
    }
    let mut sorted = [0u32; MAX_TOP_K as usize];
    for (i, (&id, &lp)) in ids.iter().zip(log_probs).enumerate() {
        if id >= header.vocab_size {
            return Err(format!(
                "id {id} at rank {i} is outside the vocabulary ({} entries)",
                header.vocab_size
            ));
        }
        if !lp.is_finite() {
            return Err(format!("log-prob {lp} of id {id} is not finite"));
        }
        if i > 0 && lp > log_probs[i - 1] {
            return Err(format!(
                "log-probs are not in decreasing order at rank {i} ({} then {lp})",
                log_probs[i - 1]
            ));
        }
        sorted[i] = id;
    }
    let sorted = &mut sorted[..k];
    sorted.sort_unstable();
    if let Some(pair) = sorted.windows(2).find(|p| p[0] == p[1]) {
        return Err(format!("id {} appears twice", pair[0]));
    }
    Ok(())
}

/// Streams records into a new base file, written atomically: the file appears at its path
/// only when [`KldBaseWriter::finish`] succeeds.
#[derive(Debug)]
pub struct KldBaseWriter {
    file: AtomicFile,
    header: KldBaseHeader,
    written: u64,
    buf: Vec<u8>,
}

impl KldBaseWriter {
    /// Validates `header`, creates the temporary file and writes the header.
    pub fn create(path: &Path, header: KldBaseHeader) -> Result<Self, KldBaseError> {
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
        validate_record(&self.header, nll, ids, log_probs).map_err(bad)?;
        self.buf.clear();
        self.buf.extend_from_slice(&nll.to_le_bytes());
        for (&id, &lp) in ids.iter().zip(log_probs) {
            self.buf.extend_from_slice(&id.to_le_bytes());
            self.buf.extend_from_slice(&lp.to_le_bytes());
        }
        self.file
            .write_all(&self.buf)
            .map_err(|source| KldBaseError::Io {
                path: self.file.target().to_path_buf(),
                action: "write a record",
                source,
            })?;
        self.written += 1;
        Ok(())
    }

    /// Appends a [`BaseRecord`].
    pub fn write(&mut self, record: &BaseRecord) -> Result<(), KldBaseError> {
        self.write_record(record.nll, &record.ids, &record.log_probs)
    }

    /// Checks that every promised record was written, then commits the file.
    pub fn finish(self) -> Result<(), KldBaseError> {
        if self.written != self.header.scored_tokens {
            return Err(KldBaseError::RecordCount {
                path: self.file.target().to_path_buf(),
                written: self.written,
                expected: self.header.scored_tokens,
            });
        }
        self.file.commit()?;
        Ok(())
    }
}

/// Reads a base file record by record after validating its header and size.
#[derive(Debug)]
pub struct KldBaseReader {
    path: PathBuf,
    header: KldBaseHeader,
    reader: BufReader<File>,
    next: u64,
    buf: Vec<u8>,
}

impl KldBaseReader {
    /// Opens `path`, checks magic, version, header fields and that the file size is exactly
    /// what the header implies.
    pub fn open(path: &Path) -> Result<Self, KldBaseError> {
        let io_err = |action| {
            move |source| KldBaseError::Io {
                path: path.to_path_buf(),
                action,
                source,
            }
        };
        let file = File::open(path).map_err(io_err("open it"))?;
        let actual = file.metadata().map_err(io_err("read its size"))?.len();
        if actual < HEADER_LEN as u64 {
            return Err(KldBaseError::Truncated {
                path: path.to_path_buf(),
                what: format!("it is {actual} bytes, shorter than the {HEADER_LEN}-byte header"),
            });
        }
        let mut reader = BufReader::with_capacity(1 << 20, file);
        let mut raw = [0u8; HEADER_LEN];
        reader
            .read_exact(&mut raw)
            .map_err(io_err("read the header"))?;
        let header = KldBaseHeader::from_bytes(&raw, path)?;
        let expected = header.file_len().ok_or_else(|| KldBaseError::Corrupt {
            path: path.to_path_buf(),
            what: format!(
                "the header's scored token count {} is impossibly large",
                header.scored_tokens
            ),
        })?;
        let what = format!(
            "the header promises {} records of {} bytes ({expected} bytes in all), but the \
             file is {actual} bytes",
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
        self.header.scored_tokens - self.next
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
        let b = &self.buf;
        let mut nll = [0u8; 8];
        nll.copy_from_slice(&b[..8]);
        record.nll = f64::from_le_bytes(nll);
        record.ids.clear();
        record.log_probs.clear();
        for pair in b[8..].chunks_exact(8) {
            record
                .ids
                .push(u32::from_le_bytes([pair[0], pair[1], pair[2], pair[3]]));
            record
                .log_probs
                .push(f32::from_le_bytes([pair[4], pair[5], pair[6], pair[7]]));
        }
        validate_record(&self.header, record.nll, &record.ids, &record.log_probs).map_err(
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
        }
    }

    fn record(i: u32, k: u32) -> BaseRecord {
        BaseRecord {
            nll: 1.5 + f64::from(i),
            ids: (0..k).map(|r| (i * 7 + r * 13) % 1000).collect(),
            log_probs: (0..k).map(|r| -0.25 * r as f32 - 0.1).collect(),
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
        assert_eq!(header(32, 147_900).file_len(), Some(88 + 264 * 147_900));
    }

    #[test]
    fn header_for_plan() {
        let ids: Vec<u32> = (0..23).collect();
        let plan = WindowPlan::new(23, Method::Chunks, 7, 7, Some(2)).unwrap();
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
        };
        let b = h.to_bytes();
        assert_eq!(&b[0..8], b"LSEKLDB\0");
        assert_eq!(&b[8..12], &[1, 0, 0, 0]);
        assert_eq!(&b[12..16], &[1, 0, 0, 0]);
        assert_eq!(&b[16..48], &[7u8; 32]);
        assert_eq!(&b[48..56], &[2, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[56..58], &[1, 1]);
        assert_eq!(b[64], 40);
        assert_eq!(b[72], 32);
        assert_eq!(&b[76..80], &248_320u32.to_le_bytes());
        assert_eq!(b[80], 5);
        assert_eq!(KldBaseHeader::from_bytes(&b, Path::new("x")).unwrap(), h);
    }

    #[test]
    fn round_trip() {
        let _g = shared();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("base.kld");
        let h = header(4, 3);
        write_base(&path, h, 3);
        assert_eq!(fs::metadata(&path).unwrap().len(), 88 + 3 * 40);
        let bytes = fs::read(&path).unwrap();
        // First record: nll 1.5 then (id 0, -0.1).
        assert_eq!(&bytes[88..96], &1.5f64.to_le_bytes());
        assert_eq!(&bytes[96..100], &0u32.to_le_bytes());
        assert_eq!(&bytes[100..104], &(-0.1f32).to_le_bytes());

        let mut r = KldBaseReader::open(&path).unwrap();
        assert_eq!(r.header(), &h);
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
        assert!(msg.contains("shorter than the 88-byte header"), "{msg}");

        let msg = open_bytes("cut.kld", &bytes[..bytes.len() - 1]);
        assert!(msg.contains("cut.kld` is truncated"), "{msg}");
        assert!(
            msg.contains("promises 2 records of 24 bytes (136 bytes in all)"),
            "{msg}"
        );

        let mut long = bytes.clone();
        long.push(0);
        let msg = open_bytes("long.kld", &long);
        assert!(
            msg.contains("long.kld` is corrupt") && msg.contains("137 bytes"),
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
            msg.contains("format version 9, this build reads version 1"),
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
        // Record 1 starts at 88 + 24; its first id is at +8, its second log-prob at +20.
        let r1 = 88 + 24;
        let read_all = |name: &str, data: &[u8]| {
            let p = dir.path().join(name);
            fs::write(&p, data).unwrap();
            let mut r = KldBaseReader::open(&p).unwrap();
            assert!(r.next_record().unwrap().is_some());
            r.next_record().unwrap_err().to_string()
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
        order[r1 + 20..r1 + 24].copy_from_slice(&0.5f32.to_le_bytes());
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
