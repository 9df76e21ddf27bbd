//! GGUF model files (llama.cpp's format): the container ([`file`](mod@file)) and ggml's block
//! quantizations ([`quants`]), so quantized weights can be read and dequantized exactly as
//! llama.cpp's reference code does.
//!
//! [`file::GgufFile`] maps a file read-only and validates it with ggml's rules before anything
//! is used; [`quants::dequantize_row`] turns a row of F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
//! Q8_0, Q4_K, Q5_K or Q6_K blocks into f32, bit-identical to ggml's `dequantize_row_*`.
//! The golden test below checks that against gguf-py's dequantization of blocks quantized by
//! llama.cpp (`tests/goldens/make_gguf_goldens.py`).

pub mod checkpoint;
pub mod file;
pub mod quants;
pub mod tokenizer;

pub use checkpoint::{is_gguf, GgufCheckpoint};
pub use file::{GgufFile, GgufTensorInfo, GgufValue};
pub use quants::{dequantize_row, GgmlType};

/// A committed GGUF fixture (`tests/data/gguf/<name>`).
#[cfg(test)]
fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/data/gguf")
        .join(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every tensor of `blocks.gguf` (one per type, blocks from llama-quantize), dequantized
    /// row by row, equals gguf-py's dequantization bit for bit.
    #[test]
    fn dequantization_matches_the_goldens() {
        let f = GgufFile::open(&fixture("blocks.gguf")).unwrap();
        let index: serde_json::Value =
            serde_json::from_slice(&std::fs::read(fixture("blocks.expected.json")).unwrap())
                .unwrap();
        let expected: Vec<f32> = std::fs::read(fixture("blocks.expected.f32"))
            .unwrap()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        let entries = index["tensors"].as_array().unwrap();
        assert_eq!(entries.len(), f.tensors().len());
        let mut seen = Vec::new();
        for (t, e) in f.tensors().iter().zip(entries) {
            assert_eq!(e["name"], t.name.as_str());
            let ty = t.ty.clone().unwrap();
            assert_eq!(e["type"], ty.name());
            seen.push(ty);
            let (ne0, rows) = (t.ne[0] as usize, t.ne[1] as usize);
            assert_eq!((ne0, rows, t.ne.len()), (512, 8, 2), "{}", t.name);
            let off = e["offset"].as_u64().unwrap() as usize;
            let want = &expected[off..off + ne0 * rows];
            let row_bytes = ty.row_bytes(ne0).unwrap();
            let bytes = f.tensor_bytes(t);
            assert_eq!(bytes.len(), row_bytes * rows, "{}", t.name);
            let mut y = vec![f32::NAN; ne0];
            for (r, (b, want)) in bytes
                .chunks_exact(row_bytes)
                .zip(want.chunks_exact(ne0))
                .enumerate()
            {
                dequantize_row(ty, b, &mut y);
                for (i, (a, w)) in y.iter().zip(want).enumerate() {
                    assert_eq!(
                        a.to_bits(),
                        w.to_bits(),
                        "{} row {r} element {i}: {a} vs {w}",
                        t.name
                    );
                }
            }
        }
        assert_eq!(
            seen,
            GgmlType::ALL,
            "the fixture holds every type, in order"
        );
    }

    /// The fixture's metadata, written by gguf-py, reads back through the typed getters.
    #[test]
    fn reads_gguf_py_metadata() {
        let f = GgufFile::open(&fixture("blocks.gguf")).unwrap();
        assert_eq!(f.version(), 3);
        assert_eq!(f.str_of("general.architecture").unwrap(), "lse-test");
        assert_eq!(f.u64_of("lse-test.rows").unwrap(), 8);
        assert!(f.u64_of("lse-test.negative").is_err());
        assert_eq!(f.get("lse-test.negative"), Some(&GgufValue::I32(-7)));
        assert_eq!(f.f32_of("lse-test.scale").unwrap(), 0.5);
        assert!(f.f32_of("lse-test.scale_f64").is_err());
        assert!(f.bool_of("lse-test.flag").unwrap());
        let types: Vec<&str> = f
            .array_of("lse-test.types")
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        let names: Vec<&str> = GgmlType::ALL.iter().map(|t| t.name()).collect();
        assert_eq!(types, names);
        let sizes = f.array_of("lse-test.sizes").unwrap();
        for (t, s) in f.tensors().iter().zip(sizes) {
            assert_eq!(s.as_u64(), Some((t.end - t.start) as u64), "{}", t.name);
        }
    }
}
