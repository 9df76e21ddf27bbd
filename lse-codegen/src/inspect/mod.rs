//! Reading a linked AMDGPU code object back: ELF header, symbols and the
//! `NT_AMDGPU_METADATA` MessagePack note, summarised as a [`CodeObjectInfo`].

mod elf;
mod msgpack;

use serde::Serialize;
use serde_json::Value;

/// `EM_AMDGPU`.
const EM_AMDGPU: u16 = 224;
/// `NT_AMDGPU_METADATA`.
const NT_AMDGPU_METADATA: u32 = 32;
/// `EF_AMDGPU_MACH` mask of `e_flags`.
const EF_AMDGPU_MACH: u32 = 0xff;

/// `EF_AMDGPU_MACH_AMDGCN_*` values (LLVM's `ELF.h`) of the architectures we build for.
const ARCHES: &[(&str, u32)] = &[
    ("gfx900", 0x2c),
    ("gfx906", 0x2f),
    ("gfx908", 0x30),
    ("gfx90a", 0x3f),
    ("gfx942", 0x4c),
    ("gfx1030", 0x36),
    ("gfx1100", 0x41),
    ("gfx1101", 0x46),
    ("gfx1102", 0x47),
    ("gfx1200", 0x48),
    ("gfx1201", 0x4e),
];

/// The `e_flags` machine value of `arch`, if it is one we support.
pub fn arch_mach(arch: &str) -> Option<u32> {
    ARCHES.iter().find(|(a, _)| *a == arch).map(|(_, m)| *m)
}

/// Rejects architectures we do not know (LLVM would only print a warning for them).
pub(crate) fn check_arch(arch: &str) -> Result<(), String> {
    match arch_mach(arch) {
        Some(_) => Ok(()),
        None => Err(format!(
            "unknown AMDGPU architecture `{arch}`, expected one of {:?}",
            ARCHES.iter().map(|(a, _)| *a).collect::<Vec<_>>()
        )),
    }
}

/// One ELF symbol.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct SymbolInfo {
    pub name: String,
    /// `func`, `object` or `other`.
    pub kind: String,
    pub size: u64,
}

/// One kernel argument from the metadata note.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ArgInfo {
    pub offset: u64,
    pub size: u64,
    /// e.g. `global_buffer`, `by_value`, `hidden_block_count_x`.
    pub value_kind: String,
}

/// One entry of `amdhsa.kernels`.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct KernelInfo {
    /// `.name`.
    pub name: String,
    /// `.symbol`, the kernel descriptor (`<name>.kd`).
    pub symbol: String,
    pub args: Vec<ArgInfo>,
    pub kernarg_segment_size: u64,
    /// Static LDS bytes.
    pub group_segment_fixed_size: u64,
    /// Scratch bytes per work-item.
    pub private_segment_fixed_size: u64,
    pub sgpr_count: u64,
    pub vgpr_count: u64,
    pub wavefront_size: u64,
    pub max_flat_workgroup_size: u64,
}

/// Summary of a linked HSA code object.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct CodeObjectInfo {
    /// Architecture named by `e_flags` (e.g. `gfx1201`), or `unknown(0xNN)`.
    pub arch: String,
    pub e_flags: u32,
    /// 64 = `ELFOSABI_AMDGPU_HSA`.
    pub os_abi: u8,
    /// 3 = code object v5.
    pub abi_version: u8,
    /// 3 = `ET_DYN`.
    pub elf_type: u16,
    pub symbols: Vec<SymbolInfo>,
    /// `amdhsa.target`, e.g. `amdgcn-amd-amdhsa--gfx1201`.
    pub target: String,
    pub kernels: Vec<KernelInfo>,
}

fn u(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn s(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or("").to_string()
}

/// Parses an AMDGPU code object: ELF header fields (arch from `e_flags`, OS/ABI, ABI
/// version, type), its symbols (including `<name>.kd`) and the `NT_AMDGPU_METADATA` note
/// (`amdhsa.kernels` and `amdhsa.target`).
pub fn inspect_code_object(bytes: &[u8]) -> Result<CodeObjectInfo, String> {
    let e = elf::parse(bytes)?;
    if e.machine != EM_AMDGPU {
        return Err(format!(
            "ELF machine is {}, not EM_AMDGPU ({EM_AMDGPU})",
            e.machine
        ));
    }
    let mach = e.flags & EF_AMDGPU_MACH;
    let arch = ARCHES
        .iter()
        .find(|(_, m)| *m == mach)
        .map(|(a, _)| a.to_string())
        .unwrap_or_else(|| format!("unknown(0x{mach:x})"));
    // `.symtab` and `.dynsym` list the kernel twice; keep the first of each.
    let mut seen = std::collections::BTreeSet::new();
    let symbols = e
        .symbols
        .iter()
        .filter(|s| seen.insert((*s).clone()))
        .map(|(name, kind, size)| SymbolInfo {
            name: name.clone(),
            kind: match kind {
                2 => "func",
                1 => "object",
                _ => "other",
            }
            .to_string(),
            size: *size,
        })
        .collect();
    let note = e
        .notes
        .iter()
        .find(|(name, kind, _)| name == "AMDGPU" && *kind == NT_AMDGPU_METADATA)
        .ok_or("code object has no NT_AMDGPU_METADATA note")?;
    let meta = msgpack::decode(&note.2)?;
    let kernels = meta
        .get("amdhsa.kernels")
        .and_then(Value::as_array)
        .ok_or("metadata note has no amdhsa.kernels")?
        .iter()
        .map(|k| KernelInfo {
            name: s(k, ".name"),
            symbol: s(k, ".symbol"),
            args: k
                .get(".args")
                .and_then(Value::as_array)
                .map(|args| {
                    args.iter()
                        .map(|a| ArgInfo {
                            offset: u(a, ".offset"),
                            size: u(a, ".size"),
                            value_kind: s(a, ".value_kind"),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            kernarg_segment_size: u(k, ".kernarg_segment_size"),
            group_segment_fixed_size: u(k, ".group_segment_fixed_size"),
            private_segment_fixed_size: u(k, ".private_segment_fixed_size"),
            sgpr_count: u(k, ".sgpr_count"),
            vgpr_count: u(k, ".vgpr_count"),
            wavefront_size: u(k, ".wavefront_size"),
            max_flat_workgroup_size: u(k, ".max_flat_workgroup_size"),
        })
        .collect();
    Ok(CodeObjectInfo {
        arch,
        e_flags: e.flags,
        os_abi: e.os_abi,
        abi_version: e.abi_version,
        elf_type: e.elf_type,
        symbols,
        target: s(&meta, "amdhsa.target"),
        kernels,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(inspect_code_object(b"not an elf").is_err());
        let mut fake = vec![0u8; 64];
        fake[..4].copy_from_slice(b"\x7fELF");
        fake[4] = 2;
        fake[5] = 1;
        fake[0x28] = 0xff; // section headers past the end
        fake[0x3c] = 1;
        assert!(inspect_code_object(&fake).is_err());
    }
}
