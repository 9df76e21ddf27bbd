//! The token-id input (`--perplexity-tokens`): a JSON array of token ids.

use std::path::Path;

/// Parses a token-id file's bytes: a JSON array of at least one integer in `0..2^32`.
/// Errors name the file and say what was expected.
pub fn parse_token_ids(bytes: &[u8], path: &Path) -> Result<Vec<u32>, String> {
    let ids: Vec<u32> = serde_json::from_slice(bytes).map_err(|e| {
        format!(
            "{}: expected a JSON array of token ids (integers from 0 to 4294967295): {e}",
            path.display()
        )
    })?;
    if ids.is_empty() {
        return Err(format!(
            "{}: the JSON array holds no token ids; expected the ids of the text to score",
            path.display()
        ));
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses_clearly() {
        let p = Path::new("t.json");
        assert_eq!(parse_token_ids(b" [1, 2,3]\n", p).unwrap(), vec![1, 2, 3]);
        let e = parse_token_ids(b"[]", p).unwrap_err();
        assert!(
            e.contains("t.json: the JSON array holds no token ids"),
            "{e}"
        );
        for bad in [&b"[1, -2]"[..], b"[4294967296]", b"{}", b"[1.5]", b"\xff"] {
            let e = parse_token_ids(bad, p).unwrap_err();
            assert!(
                e.contains("t.json: expected a JSON array of token ids"),
                "{e}"
            );
        }
    }
}
