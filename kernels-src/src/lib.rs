//! LSE's kernels in LOOM.
//!
//! Each `#[loom::kernel]` fn becomes a module with a `KERNEL` description
//! ([`lse_dsl::rt::KernelDef`]); [`ALL`] lists them so the runtime and `lse kernels` can find
//! a kernel by name or id.

use lse_dsl::rt::KernelDef;

pub mod lm_head;
pub mod lse_pick;
pub mod topk_pairs;

/// Every kernel of this crate.
pub static ALL: &[&KernelDef] = &[
    &lse_pick::lse_pick::KERNEL,
    &topk_pairs::topk_pairs::KERNEL,
    &lm_head::lm_head_matrix_bf16::KERNEL,
    &lm_head::lm_head_matrix_f16::KERNEL,
    &lm_head::lm_head_matrix_f32::KERNEL,
    &lm_head::lm_head_matvec_bf16::KERNEL,
    &lm_head::lm_head_matvec_f16::KERNEL,
    &lm_head::lm_head_matvec_f32::KERNEL,
];

/// Finds a kernel by id (`logits.lse_pick.v1`), by Rust fn name (`lse_pick`), or by stable
/// name (`logits.lse_pick`, which picks the highest version).
pub fn find(name_or_id: &str) -> Option<&'static KernelDef> {
    if let Some(k) = ALL
        .iter()
        .find(|k| k.id == name_or_id || k.fn_name == name_or_id)
    {
        return Some(*k);
    }
    ALL.iter()
        .filter_map(|k| {
            let (name, version) = split_id(k.id)?;
            (name == name_or_id).then_some((version, *k))
        })
        .max_by_key(|(version, _)| *version)
        .map(|(_, k)| k)
}

/// Splits `name.vN` into `(name, N)`.
fn split_id(id: &str) -> Option<(&str, u32)> {
    let (name, v) = id.rsplit_once(".v")?;
    Some((name, v.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_by_id_fn_name_and_name() {
        assert_eq!(
            find("logits.lse_pick.v1").map(|k| k.fn_name),
            Some("lse_pick")
        );
        assert_eq!(find("topk_pairs").map(|k| k.id), Some("topk_pairs.v1"));
        assert_eq!(
            find("logits.lse_pick").map(|k| k.id),
            Some("logits.lse_pick.v1")
        );
        assert!(find("logits.nope").is_none());
        assert!(find("logits.lse_pick.v2").is_none());
    }

    #[test]
    fn ids_are_unique() {
        for (i, a) in ALL.iter().enumerate() {
            for b in &ALL[i + 1..] {
                assert_ne!(a.id, b.id);
                assert_ne!(
                    a.fn_name, b.fn_name,
                    "fn names are symbol bases and must differ"
                );
            }
        }
    }

    #[test]
    fn split_id_parses_versions() {
        assert_eq!(split_id("a.b.v12"), Some(("a.b", 12)));
        assert_eq!(split_id("a.b"), None);
    }
}
