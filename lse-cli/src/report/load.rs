//! Reading `lse perplexity` JSON reports for `lse report`, and checking that runs compared
//! with each other scored the same tokens the same way. Every refusal names the file, the
//! field and what was expected.

use std::path::{Path, PathBuf};

use lse_runtime::scoring::report::REPORT_OBJECT;
use lse_runtime::scoring::{PerplexityReport, WindowReport};

/// One report as read from its file.
pub struct Run {
    /// The file, as given.
    pub path: PathBuf,
    /// The report.
    pub report: PerplexityReport,
}

impl Run {
    /// The file name shown in the report and in errors.
    pub fn name(&self) -> String {
        self.path.display().to_string()
    }

    /// The per-window results (checked present by [`load`]).
    pub fn windows(&self) -> &[WindowReport] {
        self.report.windows.as_deref().unwrap_or_default()
    }
}

/// Reads and checks one report: JSON, every field of the brief present with its type,
/// `object` = `lse.perplexity`, per-window results present and consistent with the totals,
/// per-token values (when present) one per scored token.
pub fn load(path: &Path) -> Result<Run, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    parse(&bytes, path)
}

/// [`load`] on a file's bytes; `path` names it.
pub fn parse(bytes: &[u8], path: &Path) -> Result<Run, String> {
    let name = path.display();
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        format!("{name}: not JSON ({e}); expected the JSON `lse perplexity` writes")
    })?;
    let object = value.get("object");
    if object.and_then(|o| o.as_str()) != Some(REPORT_OBJECT) {
        let got = object.map_or_else(|| "missing".to_string(), |o| format!("{o}"));
        return Err(format!(
            "{name}: field `object` is {got}, expected \"{REPORT_OBJECT}\": not an `lse perplexity` report"
        ));
    }
    let report: PerplexityReport = serde_path_to_error::deserialize(&value).map_err(|e| {
        let field = e.path().to_string();
        let at = if field == "." {
            String::new()
        } else {
            format!(" in field `{field}`")
        };
        format!(
            "{name}: not a complete `lse perplexity` report{at}: {}",
            e.inner()
        )
    })?;
    check_consistent(&name.to_string(), &report)?;
    Ok(Run {
        path: path.to_path_buf(),
        report,
    })
}

fn check_consistent(name: &str, r: &PerplexityReport) -> Result<(), String> {
    let Some(windows) = &r.windows else {
        return Err(format!(
            "{name}: field `windows` is missing: lse report needs the per-window results, which `lse perplexity` writes unless they are left out"
        ));
    };
    if windows.len() as u64 != r.windows_scored {
        return Err(format!(
            "{name}: field `windows` holds {} entries, expected `windows_scored` = {}",
            windows.len(),
            r.windows_scored
        ));
    }
    let scored = windows
        .iter()
        .try_fold(0u64, |sum, w| sum.checked_add(w.scored));
    if scored != Some(r.scored_tokens) {
        let scored = scored.map_or_else(|| "more than 2^64".to_string(), |s| s.to_string());
        return Err(format!(
            "{name}: the windows' `scored` add up to {scored}, expected `scored_tokens` = {}",
            r.scored_tokens
        ));
    }
    if let Some(t) = &r.token_stats {
        let n = r.scored_tokens as usize;
        let fields = [
            ("nll", Some(&t.nll)),
            ("kld", t.kld.as_ref()),
            ("delta_p", t.delta_p.as_ref()),
        ];
        for (field, values) in fields {
            if let Some(v) = values.filter(|v| v.len() != n) {
                return Err(format!(
                    "{name}: field `token_stats.{field}` holds {} values, expected one per scored token ({n})",
                    v.len()
                ));
            }
        }
    }
    Ok(())
}

fn json(v: &impl serde::Serialize) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// Checks that `other` scored the same tokens with the same windows as `reference`, so
/// their windows can be compared one by one.
pub fn check_comparable(reference: &Run, other: &Run) -> Result<(), String> {
    let (a, b) = (&reference.report, &other.report);
    let fields = [
        (
            "token_ids_sha256",
            a.token_ids_sha256.clone(),
            b.token_ids_sha256.clone(),
        ),
        ("method", json(&a.method), json(&b.method)),
        ("ctx", a.ctx.to_string(), b.ctx.to_string()),
        ("stride", a.stride.to_string(), b.stride.to_string()),
        (
            "windows_scored",
            a.windows_scored.to_string(),
            b.windows_scored.to_string(),
        ),
        (
            "scored_tokens",
            a.scored_tokens.to_string(),
            b.scored_tokens.to_string(),
        ),
    ];
    for (field, want, got) in fields {
        if want != got {
            return Err(format!(
                "{} cannot be compared with {}: field `{field}` is {got} there, expected {want} as in {}: runs compared must score the same tokens with the same method, ctx, stride and chunk count",
                other.name(),
                reference.name(),
                reference.name()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_file_is_named() {
        let err = load(Path::new("/nonexistent/run.json")).err().unwrap();
        assert!(
            err.starts_with("/nonexistent/run.json: cannot read:"),
            "{err}"
        );
    }
}
