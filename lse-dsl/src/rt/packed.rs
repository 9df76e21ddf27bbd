//! Build artefacts kept as text (LLVM IR, assembly, PTX) are stored deflate-compressed: every
//! binary that links the kernels embeds all of them, about 107 MB as text and 15 MB packed,
//! and a test build has some twenty such binaries.

use miniz_oxide::deflate::compress_to_vec;
use miniz_oxide::inflate::decompress_to_vec_with_limit;

/// The extensions of the packed artefacts' files, as the LOOM build writes them and
/// `#[loom::kernel]` embeds them: LLVM IR, assembly and PTX (`host-x86-64.ll.deflate`).
pub const PACKED_LL: &str = "ll.deflate";
pub const PACKED_ASM: &str = "s.deflate";
pub const PACKED_PTX: &str = "ptx.deflate";

/// Deflate level for packing: on the kernels' 78 MB of LLVM IR, gzip's level 6 wrote 6% more
/// than its level 9 in 42% of the time (1.6 s against 3.9 s).
const LEVEL: u8 = 6;

/// The largest text unpacked: far above any artefact (the largest, a host level's IR, is
/// 0.5 MB), so a corrupt stream cannot ask for unbounded memory.
const MAX_TEXT: usize = 1 << 30;

/// Raw deflate (no zlib or gzip header) of `text`.
pub fn pack(text: &str) -> Vec<u8> {
    compress_to_vec(text.as_bytes(), LEVEL)
}

/// UTF-8 text packed by [`pack`] and embedded in the binary; [`PackedText::unpack`] restores it.
#[derive(Clone, Copy, Debug)]
pub struct PackedText(pub &'static [u8]);

impl PackedText {
    /// The text. Fails only on bytes [`pack`] did not write (a build out of step with this
    /// crate), with a message saying so.
    pub fn unpack(&self) -> Result<String, String> {
        let bytes = decompress_to_vec_with_limit(self.0, MAX_TEXT)
            .map_err(|e| format!("a packed build artefact does not inflate: {e:?}"))?;
        String::from_utf8(bytes).map_err(|e| format!("a packed build artefact is not UTF-8: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_text_unpacks_to_the_same_text() {
        let text = "define void @k() {\n  ret void\n}\n".repeat(1000) + "é";
        let packed = pack(&text);
        assert!(packed.len() * 10 < text.len(), "{}", packed.len());
        let stored: &'static [u8] = Box::leak(packed.into_boxed_slice());
        assert_eq!(PackedText(stored).unpack().unwrap(), text);
        assert_eq!(PackedText(&[3, 0]).unpack().unwrap(), "");
    }

    #[test]
    fn bytes_that_are_not_a_packed_text_are_an_error() {
        let e = PackedText(b"\xff\xff\xff\xff").unpack().unwrap_err();
        assert!(e.contains("does not inflate"), "{e}");
        let not_utf8: &'static [u8] = Box::leak(compress_to_vec(b"\xc3\x28", 6).into_boxed_slice());
        let e = PackedText(not_utf8).unpack().unwrap_err();
        assert!(e.contains("not UTF-8"), "{e}");
    }
}
