//! Decoding of the AMX instructions the emulator runs, from their VEX encodings (Intel SDM
//! vol. 2, "AMX instructions"): all are `VEX.128.<pp>.0F38.W0` with opcode 0x49, 0x4B or 0x5C.

/// A memory operand: `base + (index << scale) + disp`, or `rip + disp` (of the next
/// instruction) when `rip_relative`. Register numbers are x86's (0 = rax ... 15 = r15).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mem {
    pub base: Option<u8>,
    pub index: Option<u8>,
    pub scale: u8,
    pub disp: i32,
    pub rip_relative: bool,
}

/// One AMX instruction; tiles are `tmm0`..`tmm7`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Insn {
    /// `ldtilecfg m512`.
    LoadConfig(Mem),
    /// `tilerelease`.
    Release,
    /// `tilezero tmm`.
    Zero(u8),
    /// `tileloadd` or `tileloaddt1 tmm, [base + disp + index * scale]`: rows start at
    /// `base + disp`, `index << scale` bytes apart.
    Load { tile: u8, mem: Mem },
    /// `tilestored [base + disp + index * scale], tmm`.
    Store { tile: u8, mem: Mem },
    /// `tdpbf16ps dst, a, b`: `dst += a b` on bf16 pairs.
    DotBf16 { dst: u8, a: u8, b: u8 },
}

/// An instruction and its length in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decoded {
    pub insn: Insn,
    pub len: usize,
}

/// The longest encoding decoded here: VEX (3), opcode, ModRM, SIB, disp32.
pub const MAX_LEN: usize = 10;

/// Decodes the instruction starting at `code[0]`; `None` for anything not listed in
/// [`Insn`] (including reserved encodings of those opcodes).
pub fn decode(code: &[u8; MAX_LEN]) -> Option<Decoded> {
    let [vex, p1, p2, opcode, modrm, ..] = *code;
    // Three-byte VEX, map 0F38, W0, L0 (128).
    if vex != 0xC4 || p1 & 0x1F != 0x02 || p2 & 0x84 != 0 {
        return None;
    }
    let (r, x, b) = (!p1 >> 7 & 1, !p1 >> 6 & 1, !p1 >> 5 & 1);
    let vvvv = !p2 >> 3 & 0xF;
    let pp = p2 & 3;
    let md = modrm >> 6;
    let reg = modrm >> 3 & 7 | r << 3;
    let rm = modrm & 7 | b << 3;
    let tile = |n: u8| (n < 8).then_some(n);
    let insn_len = |mem_len: usize| 5 + mem_len;
    if md == 3 {
        let insn = match (opcode, pp) {
            (0x49, 0) if modrm == 0xC0 && vvvv == 0 && r == 0 && b == 0 => Insn::Release,
            (0x49, 3) if modrm & 7 == 0 && vvvv == 0 && b == 0 => Insn::Zero(tile(reg)?),
            (0x5C, 2) => Insn::DotBf16 {
                dst: tile(reg)?,
                a: tile(rm)?,
                b: tile(vvvv)?,
            },
            _ => return None,
        };
        return Some(Decoded {
            insn,
            len: insn_len(0),
        });
    }
    if vvvv != 0 {
        return None;
    }
    let (mem, mem_len) = memory(md, modrm & 7, x, b, &code[5..])?;
    let insn = match (opcode, pp) {
        (0x49, 0) if reg == 0 => Insn::LoadConfig(mem),
        // tileloadd (F2) and tileloaddt1 (66, a cache hint) take a SIB operand.
        (0x4B, 3 | 1) if modrm & 7 == 4 => Insn::Load {
            tile: tile(reg)?,
            mem,
        },
        (0x4B, 2) if modrm & 7 == 4 => Insn::Store {
            tile: tile(reg)?,
            mem,
        },
        _ => return None,
    };
    Some(Decoded {
        insn,
        len: insn_len(mem_len),
    })
}

/// The memory operand of ModRM `md`/`rm` (`rm` without VEX.B) and the bytes after ModRM
/// it takes (SIB and displacement), read from `rest`.
fn memory(md: u8, rm: u8, x: u8, b: u8, rest: &[u8]) -> Option<(Mem, usize)> {
    let mut mem = Mem {
        base: None,
        index: None,
        scale: 0,
        disp: 0,
        rip_relative: false,
    };
    let mut at = 0;
    let base_low;
    if rm == 4 {
        let sib = rest[0];
        at = 1;
        mem.scale = sib >> 6;
        let index = sib >> 3 & 7 | x << 3;
        // Index 100 without REX/VEX.X means none.
        mem.index = (index != 4).then_some(index);
        base_low = sib & 7;
    } else {
        base_low = rm;
    }
    let disp32 = match (md, base_low) {
        // mod 00 with base 101: no base (SIB) or rip-relative (no SIB), and a disp32.
        (0, 5) => {
            mem.rip_relative = rm == 5;
            true
        }
        (0, _) => {
            mem.base = Some(base_low | b << 3);
            false
        }
        (1, _) => {
            mem.base = Some(base_low | b << 3);
            mem.disp = rest[at] as i8 as i32;
            at += 1;
            false
        }
        _ => {
            mem.base = Some(base_low | b << 3);
            true
        }
    };
    if disp32 {
        mem.disp = i32::from_le_bytes(rest[at..at + 4].try_into().ok()?);
        at += 4;
    }
    Some((mem, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `code` padded to [`MAX_LEN`] with bytes that decode as nothing.
    fn dec(code: &[u8]) -> Option<Decoded> {
        let mut c = [0xCC; MAX_LEN];
        c[..code.len()].copy_from_slice(code);
        decode(&c)
    }

    fn mem(base: Option<u8>, index: Option<u8>, scale: u8, disp: i32) -> Mem {
        Mem {
            base,
            index,
            scale,
            disp,
            rip_relative: false,
        }
    }

    /// Encodings as LLVM 19's assembler writes them (checked with objdump).
    #[test]
    fn the_encodings_llvm_emits_decode_to_their_instructions() {
        let cases: [(&[u8], Insn); 9] = [
            (
                &[0xc4, 0xe2, 0x78, 0x49, 0x00],
                Insn::LoadConfig(mem(Some(0), None, 0, 0)),
            ),
            (
                // ldtilecfg 312(%rsp)
                &[0xc4, 0xe2, 0x78, 0x49, 0x84, 0x24, 0x38, 0x01, 0, 0],
                Insn::LoadConfig(mem(Some(4), None, 0, 312)),
            ),
            (
                &[0xc4, 0xe2, 0x7b, 0x4b, 0x0c, 0x11],
                Insn::Load {
                    tile: 1,
                    mem: mem(Some(1), Some(2), 0, 0),
                },
            ),
            (
                &[0xc4, 0xe2, 0x7b, 0x4b, 0x54, 0x11, 0x08],
                Insn::Load {
                    tile: 2,
                    mem: mem(Some(1), Some(2), 0, 8),
                },
            ),
            (
                // tileloadd (%r9,%r12), %tmm7: VEX.X and VEX.B set.
                &[0xc4, 0x82, 0x7b, 0x4b, 0x3c, 0x21],
                Insn::Load {
                    tile: 7,
                    mem: mem(Some(9), Some(12), 0, 0),
                },
            ),
            (
                &[0xc4, 0xe2, 0x6a, 0x5c, 0xc1],
                Insn::DotBf16 { dst: 0, a: 1, b: 2 },
            ),
            (&[0xc4, 0xe2, 0x7b, 0x49, 0xd8], Insn::Zero(3)),
            (
                &[0xc4, 0xe2, 0x7a, 0x4b, 0x04, 0x11],
                Insn::Store {
                    tile: 0,
                    mem: mem(Some(1), Some(2), 0, 0),
                },
            ),
            (&[0xc4, 0xe2, 0x78, 0x49, 0xc0], Insn::Release),
        ];
        for (code, insn) in cases {
            assert_eq!(
                dec(code),
                Some(Decoded {
                    insn,
                    len: code.len()
                }),
                "{code:02x?}"
            );
        }
    }

    #[test]
    fn other_instructions_and_reserved_forms_are_not_decoded() {
        for code in [
            // vfmadd231ps zmm0, zmm1, zmm2 (EVEX), a plain VEX vaddps, ud2.
            &[0x62, 0xf2, 0x75, 0x48, 0xb8, 0xc2][..],
            &[0xc5, 0xf4, 0x58, 0xc2],
            &[0x0f, 0x0b],
            // tdpbssd (opcode 5E, an int8 dot the emulator does not run).
            &[0xc4, 0xe2, 0x73, 0x5e, 0xc2],
            // tdpbf16ps with W1, with L1, and with VEX.R set (a tile register >= 8).
            &[0xc4, 0xe2, 0xea, 0x5c, 0xc1],
            &[0xc4, 0xe2, 0x6e, 0x5c, 0xc1],
            &[0xc4, 0x62, 0x6a, 0x5c, 0xc1],
            // tileloadd without a SIB byte.
            &[0xc4, 0xe2, 0x7b, 0x4b, 0x08],
            // sttilecfg (66 49): not run here.
            &[0xc4, 0xe2, 0x79, 0x49, 0x00],
        ] {
            assert_eq!(dec(code), None, "{code:02x?}");
        }
    }

    #[test]
    fn displacements_and_rip_relative_operands_decode() {
        // ldtilecfg [rip + 0x100]
        assert_eq!(
            dec(&[0xc4, 0xe2, 0x78, 0x49, 0x05, 0x00, 0x01, 0, 0]),
            Some(Decoded {
                insn: Insn::LoadConfig(Mem {
                    base: None,
                    index: None,
                    scale: 0,
                    disp: 0x100,
                    rip_relative: true,
                }),
                len: 9,
            })
        );
        // tileloadd tmm0, [rax + rcx*8 - 16]
        assert_eq!(
            dec(&[0xc4, 0xe2, 0x7b, 0x4b, 0x44, 0xc8, 0xf0]),
            Some(Decoded {
                insn: Insn::Load {
                    tile: 0,
                    mem: mem(Some(0), Some(1), 3, -16),
                },
                len: 7,
            })
        );
    }
}
