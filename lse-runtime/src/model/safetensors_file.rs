//! Checks the bytes of one safetensors file before its tensors are used: a file cut short
//! is called truncated with the number of bytes missing; the rest goes through the
//! safetensors crate's own validation (offsets contiguous, sizes matching shapes).

use std::path::Path;

use serde_json::Value;

use super::error::{ModelError, Result};
use super::weights::DType;

/// The safetensors crate's limit on the JSON header.
const MAX_HEADER_LEN: u64 = 100_000_000;

/// One tensor of a checked file: its byte range in the file, dtype (or the unreadable dtype's
/// name) and shape.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorEntry {
    /// Full tensor name.
    pub name: String,
    /// First byte of the tensor's data in the file.
    pub start: usize,
    /// One past its last byte.
    pub end: usize,
    /// Stored dtype, or the name of one LSE cannot read.
    pub dtype: std::result::Result<DType, String>,
    /// Stored shape.
    pub shape: Vec<usize>,
}

fn invalid(path: &Path, message: String) -> ModelError {
    ModelError::Safetensors {
        path: path.to_path_buf(),
        message,
    }
}

/// The data bytes the header's `data_offsets` reach, read leniently (`None` when the header
/// does not say, and the full validation reports why).
fn data_len_in_header(header: &[u8]) -> Option<u64> {
    let map: serde_json::Map<String, Value> = serde_json::from_slice(header).ok()?;
    map.iter()
        .filter(|(name, _)| name.as_str() != "__metadata__")
        .filter_map(|(_, info)| info.get("data_offsets")?.get(1)?.as_u64())
        .max()
}

/// Refuses a file shorter than its own header says, naming how many bytes are missing.
fn check_length(bytes: &[u8], path: &Path) -> Result<()> {
    let len = bytes.len() as u64;
    let Some(prefix) = bytes.get(..8) else {
        return Err(invalid(
            path,
            format!("truncated: the file is {len} bytes, shorter than the 8-byte header length"),
        ));
    };
    let mut n = [0u8; 8];
    n.copy_from_slice(prefix);
    let n = u64::from_le_bytes(n);
    if n > MAX_HEADER_LEN {
        return Err(invalid(
            path,
            format!(
                "the header length field says {n} bytes, more than {MAX_HEADER_LEN}: not a \
                 safetensors file, or a corrupt one"
            ),
        ));
    }
    let after_len = len - 8;
    if n > after_len {
        return Err(invalid(
            path,
            format!(
                "truncated: the header is {n} bytes but only {after_len} follow the length \
                 field ({} bytes missing)",
                n - after_len
            ),
        ));
    }
    if let Some(data) = data_len_in_header(&bytes[8..8 + n as usize]) {
        let have = after_len - n;
        if data > have {
            return Err(invalid(
                path,
                format!(
                    "truncated: the header places {data} bytes of tensor data after it, the \
                     file holds {have} ({} bytes missing)",
                    data - have
                ),
            ));
        }
    }
    Ok(())
}

/// Checks a whole safetensors file held in `bytes` (`path` names it in errors) and lists its
/// tensors.
pub fn parse(bytes: &[u8], path: &Path) -> Result<Vec<TensorEntry>> {
    check_length(bytes, path)?;
    let (n, meta) =
        safetensors::SafeTensors::read_metadata(bytes).map_err(|e| invalid(path, e.to_string()))?;
    let base = n
        .checked_add(8)
        .ok_or_else(|| invalid(path, "header length overflows".into()))?;
    let mut out = Vec::new();
    for (name, info) in meta.tensors() {
        let (start, end) = info.data_offsets;
        let (Some(start), Some(end)) = (base.checked_add(start), base.checked_add(end)) else {
            return Err(invalid(
                path,
                format!("tensor `{name}`: data offsets overflow"),
            ));
        };
        if start > end || end > bytes.len() {
            return Err(invalid(
                path,
                format!(
                    "tensor `{name}`: data bytes {start}..{end} are outside the file ({} bytes)",
                    bytes.len()
                ),
            ));
        }
        let dtype = match info.dtype {
            safetensors::Dtype::BF16 => Ok(DType::BF16),
            safetensors::Dtype::F16 => Ok(DType::F16),
            safetensors::Dtype::F32 => Ok(DType::F32),
            other => Err(format!("{other:?}")),
        };
        if let Ok(dt) = dtype {
            let numel = info.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
            if numel.and_then(|n| n.checked_mul(dt.size())) != Some(end - start) {
                return Err(invalid(
                    path,
                    format!(
                        "tensor `{name}`: shape {:?} of {} does not match its {} data bytes",
                        info.shape,
                        dt.name(),
                        end - start
                    ),
                ));
            }
        }
        out.push(TensorEntry {
            name,
            start,
            end,
            dtype,
            shape: info.shape.clone(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file of one F32 tensor of `n` elements.
    fn file(n: usize) -> Vec<u8> {
        let header = format!(
            r#"{{"w":{{"dtype":"F32","shape":[{n}],"data_offsets":[0,{}]}}}}"#,
            4 * n
        );
        let mut b = (header.len() as u64).to_le_bytes().to_vec();
        b.extend_from_slice(header.as_bytes());
        b.extend(std::iter::repeat_n(0u8, 4 * n));
        b
    }

    #[test]
    fn lists_tensors() {
        let bytes = file(3);
        let t = parse(&bytes, Path::new("m.safetensors")).unwrap();
        assert_eq!(t.len(), 1);
        assert_eq!(
            (t[0].end - t[0].start, t[0].dtype.clone()),
            (12, Ok(DType::F32))
        );
    }

    #[test]
    fn truncation_is_named_with_the_bytes_missing() {
        let bytes = file(100);
        let cut = &bytes[..bytes.len() - 40];
        let e = parse(cut, Path::new("m.safetensors"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("m.safetensors"), "{e}");
        assert!(
            e.contains("truncated") && e.contains("(40 bytes missing)"),
            "{e}"
        );
        let e = parse(&bytes[..20], Path::new("m.safetensors"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("truncated: the header is"), "{e}");
        let e = parse(&bytes[..5], Path::new("m.safetensors"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("truncated: the file is 5 bytes"), "{e}");
        let mut long = bytes.clone();
        long.push(0);
        let e = parse(&long, Path::new("m.safetensors"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("invalid safetensors file"), "{e}");
    }
}
