//! One KL-divergence base record: its bytes, and the checks every record of a base must
//! pass before a comparison run trusts it (ids, order, finiteness, NLL and log-probability
//! ranges, top-k mass), plus the running SHA-256 a base keeps of its records.

use sha2::{Digest, Sha256};

use super::kld_base::{KldBaseHeader, MAX_TOP_K};
use super::stats::SUM_EXP_TOLERANCE;

/// How far past 0 an NLL (below) or a log-probability (above) may round. A base's values
/// are `logit − (m + ln s)` where the device sum `s` may round below 1 by up to
/// [`SUM_EXP_TOLERANCE`], so they can overshoot 0 by about that much.
pub const LOG_ROUNDING: f64 = 2.0 * SUM_EXP_TOLERANCE;

/// How far past 1 the summed probabilities of a record's top-k ids may round (32 f32
/// log-probabilities, each overshooting by at most [`LOG_ROUNDING`]).
pub const MASS_ROUNDING: f64 = 1e-2;

/// The largest NLL f32 logits can give: the span of two f32 logits plus ln of a u32
/// vocabulary. A larger NLL in a base was not produced by a model.
pub const MAX_NLL: f64 = 2.0 * (f32::MAX as f64) + 23.0;

/// Bytes of one record for `top_k` ids: the NLL (f64), then `top_k` (u32 id, f32 log-prob)
/// pairs.
pub fn record_len(top_k: u32) -> usize {
    8 + 8 * top_k as usize
}

/// Encodes one record into `out` (cleared first).
pub fn encode(nll: f64, ids: &[u32], log_probs: &[f32], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&nll.to_le_bytes());
    for (&id, &lp) in ids.iter().zip(log_probs) {
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&lp.to_le_bytes());
    }
}

/// Decodes one record's bytes (a multiple of 8 bytes, at least 8) into its NLL, ids and
/// log-probabilities (the vectors are cleared first).
pub fn decode(bytes: &[u8], ids: &mut Vec<u32>, log_probs: &mut Vec<f32>) -> f64 {
    let mut nll = [0u8; 8];
    let (head, pairs) = bytes.split_at(8.min(bytes.len()));
    nll[..head.len()].copy_from_slice(head);
    ids.clear();
    log_probs.clear();
    for pair in pairs.chunks_exact(8) {
        ids.push(u32::from_le_bytes([pair[0], pair[1], pair[2], pair[3]]));
        log_probs.push(f32::from_le_bytes([pair[4], pair[5], pair[6], pair[7]]));
    }
    f64::from_le_bytes(nll)
}

/// Checks one record against the header; the message says which value is wrong and what
/// was expected.
pub fn validate(
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
    if nll < -LOG_ROUNDING {
        return Err(format!(
            "NLL {nll} is negative, expected at least 0 (a probability is at most 1)"
        ));
    }
    if nll > MAX_NLL {
        return Err(format!(
            "NLL {nll} is larger than f32 logits can give (at most {MAX_NLL:.3e})"
        ));
    }
    let mut sorted = [0u32; MAX_TOP_K as usize];
    let mut mass = 0.0f64;
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
        if f64::from(lp) > LOG_ROUNDING {
            return Err(format!(
                "log-prob {lp} of id {id} is above 0 (a probability is at most 1)"
            ));
        }
        if i > 0 && lp > log_probs[i - 1] {
            return Err(format!(
                "log-probs are not in decreasing order at rank {i} ({} then {lp})",
                log_probs[i - 1]
            ));
        }
        mass += f64::from(lp).exp();
        sorted[i] = id;
    }
    if mass > 1.0 + MASS_ROUNDING {
        return Err(format!(
            "the top-{k} probabilities sum to {mass:.6}, more than 1"
        ));
    }
    let sorted = &mut sorted[..k];
    sorted.sort_unstable();
    if let Some(pair) = sorted.windows(2).find(|p| p[0] == p[1]) {
        return Err(format!("id {} appears twice", pair[0]));
    }
    Ok(())
}

/// The SHA-256 of a base's record bytes, in file order, as the header's checksum holds it.
#[derive(Clone, Default)]
pub struct RecordDigest(Sha256);

impl RecordDigest {
    /// Adds one record's bytes.
    pub fn update(&mut self, record: &[u8]) {
        self.0.update(record);
    }

    /// The digest of every record added.
    pub fn finish(self) -> [u8; 32] {
        self.0.finalize().into()
    }
}

impl std::fmt::Debug for RecordDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RecordDigest")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scoring::windows::Method;

    fn header(top_k: u32) -> KldBaseHeader {
        KldBaseHeader {
            token_ids_sha256: [0; 32],
            method: Method::Chunks,
            ctx: 8,
            stride: 8,
            chunk_limit: 0,
            top_k,
            vocab_size: 100,
            scored_tokens: 1,
            records_sha256: [0; 32],
        }
    }

    #[test]
    fn encode_decode_round_trip() {
        let mut bytes = Vec::new();
        encode(1.25, &[3, 9], &[-0.5, -1.5], &mut bytes);
        assert_eq!(bytes.len(), record_len(2));
        let (mut ids, mut lps) = (Vec::new(), Vec::new());
        assert_eq!(decode(&bytes, &mut ids, &mut lps), 1.25);
        assert_eq!((ids, lps), (vec![3, 9], vec![-0.5, -1.5]));
    }

    #[test]
    fn values_out_of_range_are_named() {
        let h = header(2);
        let check = |nll: f64, lps: [f32; 2]| validate(&h, nll, &[1, 2], &lps);
        check(0.0, [-0.1, -3.0]).unwrap();
        // Rounding within the device sum's tolerance is accepted.
        check(-1e-5, [1e-5, -30.0]).unwrap();
        let e = check(-0.5, [-0.1, -3.0]).unwrap_err();
        assert!(e.contains("NLL -0.5 is negative"), "{e}");
        let e = check(1e300, [-0.1, -3.0]).unwrap_err();
        assert!(e.contains("larger than f32 logits can give"), "{e}");
        let e = check(1.0, [0.5, -3.0]).unwrap_err();
        assert!(e.contains("log-prob 0.5 of id 1 is above 0"), "{e}");
        let e = check(1.0, [-0.1, -0.2]).unwrap_err();
        assert!(e.contains("probabilities sum to 1.7"), "{e}");
    }
}
