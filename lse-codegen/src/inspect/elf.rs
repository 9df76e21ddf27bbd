//! A minimal ELF64 little-endian reader: header fields, symbols and notes.

/// The parts of an ELF file the code-object inspection needs.
pub(crate) struct Elf {
    pub os_abi: u8,
    pub abi_version: u8,
    pub elf_type: u16,
    pub machine: u16,
    pub flags: u32,
    /// `(name, st_info type, size)` from `.symtab` and `.dynsym`.
    pub symbols: Vec<(String, u8, u64)>,
    /// `(owner name, type, descriptor)` of every note in `SHT_NOTE` sections.
    pub notes: Vec<(String, u32, Vec<u8>)>,
}

fn rd(d: &[u8], off: usize, n: usize) -> Result<u64, String> {
    let s = d.get(off..off.checked_add(n).ok_or("ELF: offset overflow")?);
    let s = s.ok_or_else(|| {
        format!(
            "ELF: read of {n} bytes at {off} past the end ({} bytes)",
            d.len()
        )
    })?;
    Ok(s.iter().rev().fold(0u64, |acc, &b| (acc << 8) | b as u64))
}

fn cstr(d: &[u8], off: usize) -> String {
    let s = d.get(off..).unwrap_or(&[]);
    let end = s.iter().position(|&b| b == 0).unwrap_or(s.len());
    String::from_utf8_lossy(&s[..end]).into_owned()
}

struct Section {
    kind: u32,
    offset: usize,
    size: usize,
    link: usize,
    entsize: usize,
}

/// Parses `d` as a little-endian ELF64 file.
pub(crate) fn parse(d: &[u8]) -> Result<Elf, String> {
    if d.len() < 64 || &d[..4] != b"\x7fELF" {
        return Err("not an ELF file".into());
    }
    if d[4] != 2 || d[5] != 1 {
        return Err("not a little-endian ELF64 file".into());
    }
    let shoff = rd(d, 0x28, 8)? as usize;
    let shentsize = rd(d, 0x3a, 2)? as usize;
    let shnum = rd(d, 0x3c, 2)? as usize;
    let mut sections = Vec::new();
    for i in 0..shnum {
        let b = shoff + i * shentsize;
        sections.push(Section {
            kind: rd(d, b + 4, 4)? as u32,
            offset: rd(d, b + 0x18, 8)? as usize,
            size: rd(d, b + 0x20, 8)? as usize,
            link: rd(d, b + 0x28, 4)? as usize,
            entsize: rd(d, b + 0x38, 8)? as usize,
        });
    }
    let mut symbols = Vec::new();
    let mut notes = Vec::new();
    for s in &sections {
        match s.kind {
            // SHT_SYMTAB, SHT_DYNSYM
            2 | 11 => {
                let strtab = sections
                    .get(s.link)
                    .ok_or("ELF: symbol table links a missing string table")?;
                let str_data = d
                    .get(strtab.offset..strtab.offset + strtab.size)
                    .ok_or("ELF: string table out of range")?;
                let ent = if s.entsize == 0 { 24 } else { s.entsize };
                for j in 0..s.size / ent {
                    let b = s.offset + j * ent;
                    let name = cstr(str_data, rd(d, b, 4)? as usize);
                    let info = rd(d, b + 4, 1)? as u8;
                    let size = rd(d, b + 16, 8)?;
                    if !name.is_empty() {
                        symbols.push((name, info & 0xf, size));
                    }
                }
            }
            // SHT_NOTE
            7 => {
                let mut p = s.offset;
                let end = s.offset + s.size;
                while p + 12 <= end {
                    let namesz = rd(d, p, 4)? as usize;
                    let descsz = rd(d, p + 4, 4)? as usize;
                    let kind = rd(d, p + 8, 4)? as u32;
                    let name_off = p + 12;
                    let desc_off = name_off + namesz.next_multiple_of(4);
                    let name = cstr(
                        d.get(name_off..name_off + namesz)
                            .ok_or("ELF: note name out of range")?,
                        0,
                    );
                    let desc = d
                        .get(desc_off..desc_off + descsz)
                        .ok_or("ELF: note descriptor out of range")?;
                    notes.push((name, kind, desc.to_vec()));
                    p = desc_off + descsz.next_multiple_of(4);
                }
            }
            _ => {}
        }
    }
    Ok(Elf {
        os_abi: d[7],
        abi_version: d[8],
        elf_type: rd(d, 0x10, 2)? as u16,
        machine: rd(d, 0x12, 2)? as u16,
        flags: rd(d, 0x30, 4)? as u32,
        symbols,
        notes,
    })
}
