//! The mixture-of-experts block's steps other than its projections: the router
//! (`ffn.moe_router.v1`), the gather of each expert's token rows (`ffn.moe_gather.v2`) and the
//! per-token combine (`ffn.moe_combine.v2`), with the integer bookkeeping between them
//! ([`ExpertSlots`]).
//!
//! A block runs: router logits (a GEMM) → [`moe_router`] → [`ExpertSlots::aligned`] to
//! blocks of 16 rows → [`moe_gather`] into `xs` → the experts' gate, up and down products,
//! one launch each for all experts ([`crate::ops::gemm_experts`]; SwiGLU in between) into
//! `ys` → [`moe_combine`] with the shared expert. Experts in a tensor each, or in a block
//! format without the integer GEMM, take [`ExpertSlots::new`] and a GEMM per expert over its
//! segment of `xs`.

use std::ops::Range;

use lse_kernels::ffn::combine::moe_combine as combine_kernel;
use lse_kernels::ffn::gather::moe_gather as gather_kernel;
use lse_kernels::ffn::router::moe_router as router_kernel;

use super::{check_len, to_u32, OpError};
use crate::device::{DevSlice, DevSliceMut, Device};

/// Work-items per workgroup of the router kernel.
const ROUTER_WG: usize = 64;

/// Each token's routed experts, best first.
#[derive(Clone, Debug, PartialEq)]
pub struct Routing {
    /// Experts per token (k).
    pub k: usize,
    /// Number of experts; an id equal to it marks a choice the router could not make (the
    /// token's probabilities are NaN: a NaN or infinite logit).
    pub num_experts: usize,
    /// `[tokens, k]`: expert ids, larger probability first, equal ones by the lower id.
    pub ids: Vec<u32>,
    /// `[tokens, k]`: the chosen probabilities renormalised to sum to 1 per token.
    pub weights: Vec<f32>,
}

impl Routing {
    /// Number of tokens routed.
    pub fn tokens(&self) -> usize {
        self.ids.len().checked_div(self.k).unwrap_or(0)
    }
}

/// Routes each token of `logits` (`[tokens, num_experts]`, the router's outputs) to its `k`
/// experts: softmax in f32 over all experts, top-k, weights renormalised over the top k
/// (`kernels-src/src/ffn/router.rs`).
pub fn moe_router<'a>(
    dev: &Device,
    logits: impl Into<DevSlice<'a, f32>>,
    num_experts: usize,
    k: usize,
) -> Result<Routing, OpError> {
    let logits = logits.into();
    const OP: &str = "ffn.moe_router.v1";
    if num_experts == 0 || k == 0 || k > num_experts {
        return Err(OpError::Invalid {
            op: OP,
            message: format!("k = {k} must be from 1 to num_experts = {num_experts}"),
        });
    }
    let tokens = logits.len() / num_experts;
    check_len(OP, "logits", logits.len(), tokens * num_experts)?;
    to_u32(OP, "logits", logits.len())?;
    to_u32(OP, "tokens * k", tokens * k)?;
    // The kernel's expert index runs up to num_experts rounded up to whole workgroups.
    to_u32(OP, "num_experts + workgroup", num_experts + ROUTER_WG)?;
    let mut routing = Routing {
        k,
        num_experts,
        ids: vec![0; tokens * k],
        weights: vec![0.0; tokens * k],
    };
    if tokens == 0 {
        return Ok(routing);
    }
    let args = router_kernel::Args {
        logits,
        ids: &mut routing.ids,
        weights: &mut routing.weights,
        num_experts: num_experts as u32,
        k: k as u32,
    };
    dev.launch([tokens as u32, 1, 1], args)?;
    Ok(routing)
}

/// Where each routed (token, choice) pair lives in the expert-sorted buffers `xs` and `ys`
/// (`[len, H]`): expert 0's rows first, then expert 1's, ..., each expert's in increasing
/// token order. [`ExpertSlots::aligned`] starts each expert's rows at a multiple of a block
/// of rows, with rows of padding between them (token 0's row, gathered and multiplied like
/// the others and read by nothing), so that one launch can multiply each block by its
/// expert's weight ([`crate::ops::gemm_experts`]).
///
/// Built on the host from the router's ids by a counting sort. This is integer index
/// bookkeeping only (counts, offsets, positions): no arithmetic on activations happens here;
/// the kernels move and combine the rows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpertSlots {
    k: usize,
    /// Rows per block: each expert's rows start at a multiple of it.
    block: usize,
    /// `[num_experts + 1]`: expert `e`'s rows start at `starts[e]`; the last is the number of
    /// rows.
    starts: Vec<usize>,
    /// `[num_experts]`: the rows of expert `e` (the choices of it).
    counts: Vec<usize>,
    /// `[len]`: the token whose row each row holds (padding: token 0).
    rows: Vec<u32>,
    /// `[tokens * k]`: the row of token `t`'s `j`-th choice at `t * k + j`.
    slots: Vec<u32>,
}

impl ExpertSlots {
    /// Sorts `routing`'s (token, choice) pairs by expert, one row each, no padding. Refuses
    /// an id that is not an expert (a choice the router could not make, or a hand-made
    /// routing).
    pub fn new(routing: &Routing) -> Result<ExpertSlots, OpError> {
        ExpertSlots::aligned(routing, 1)
    }

    /// [`ExpertSlots::new`] with each expert's rows starting at a multiple of `block` rows.
    pub fn aligned(routing: &Routing, block: usize) -> Result<ExpertSlots, OpError> {
        const OP: &str = "moe expert slots";
        let (k, ne) = (routing.k, routing.num_experts);
        if k == 0 || block == 0 {
            return Err(OpError::Invalid {
                op: OP,
                message: format!("k = {k} and the block of {block} rows must be positive"),
            });
        }
        let n = routing.ids.len();
        check_len(OP, "ids", n, routing.tokens() * k)?;
        check_len(OP, "weights", routing.weights.len(), n)?;
        to_u32(OP, "tokens * k", n)?;
        let mut counts = vec![0usize; ne];
        for (i, &id) in routing.ids.iter().enumerate() {
            let e = id as usize;
            if e >= ne {
                return Err(OpError::Invalid {
                    op: OP,
                    message: format!(
                        "token {} has no expert for choice {} (id {id}, {ne} experts): its router \
                         logits are NaN or infinite",
                        i / k,
                        i % k
                    ),
                });
            }
            counts[e] += 1;
        }
        let mut starts = vec![0usize; ne + 1];
        for e in 0..ne {
            starts[e + 1] = starts[e] + counts[e].next_multiple_of(block);
        }
        to_u32(OP, "rows", starts[ne])?;
        let mut next = starts[..ne].to_vec();
        let mut rows = vec![0u32; starts[ne]];
        let mut slots = vec![0u32; n];
        for (i, &id) in routing.ids.iter().enumerate() {
            let s = next[id as usize];
            next[id as usize] += 1;
            rows[s] = (i / k) as u32;
            slots[i] = s as u32;
        }
        Ok(ExpertSlots {
            k,
            block,
            starts,
            counts,
            rows,
            slots,
        })
    }

    /// Number of rows of `xs` and `ys`: tokens · k, and the padding of [`ExpertSlots::aligned`].
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether no token was routed.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Number of tokens routed.
    pub fn tokens(&self) -> usize {
        self.slots.len() / self.k
    }

    /// The rows of `xs` and `ys` that expert `e`'s choices hold; empty for an expert no
    /// token chose.
    pub fn segment(&self, e: usize) -> Range<usize> {
        self.starts[e]..self.starts[e] + self.counts[e]
    }

    /// The expert of each block of rows (`len / block` of them): the table of
    /// [`crate::ops::gemm_experts`] for slots [`ExpertSlots::aligned`] to its blocks.
    pub fn block_experts(&self) -> Vec<u32> {
        (0..self.counts.len())
            .flat_map(|e| {
                let blocks = (self.starts[e + 1] - self.starts[e]) / self.block;
                std::iter::repeat_n(e as u32, blocks)
            })
            .collect()
    }

    /// The token whose row each row holds.
    pub fn rows(&self) -> &[u32] {
        &self.rows
    }

    /// `[tokens, k]`: the row of each token's choices.
    pub fn slots(&self) -> &[u32] {
        &self.slots
    }
}

/// `xs[s, :] = x[slots.rows()[s], :]` on `dev`: the token rows `x` (`[tokens, h]`) in expert
/// order, into `xs` (`[slots.len(), h]`).
pub fn moe_gather<'a>(
    dev: &Device,
    x: impl Into<DevSlice<'a, f32>>,
    h: usize,
    slots: &ExpertSlots,
    xs: impl Into<DevSliceMut<'a, f32>>,
) -> Result<(), OpError> {
    let (x, xs) = (x.into(), xs.into());
    const OP: &str = "ffn.moe_gather.v2";
    check_h(OP, h)?;
    check_len(OP, "x", x.len(), slots.tokens() * h)?;
    check_len(OP, "xs", xs.len(), slots.len() * h)?;
    to_u32(OP, "x", x.len())?;
    to_u32(OP, "xs", xs.len())?;
    if slots.is_empty() {
        return Ok(());
    }
    let args = gather_kernel::Args {
        x,
        rows: slots.rows(),
        xs,
        h: h as u32,
    };
    dev.launch([slots.len() as u32, 1, 1], args)?;
    Ok(())
}

/// The block's output on `dev`: `out[t, :] = sigmoid(shared_gate[t]) · shared[t, :] +
/// Σ_j w[t, j] · ys[slot(t, j), :]` with `ys` (`[slots.len(), h]`) the routed experts' outputs
/// in expert order, `shared` (`[tokens, h]`) the shared expert's and `shared_gate`
/// (`[tokens]`) its gate's logits. The routed terms are added in the router's order, largest
/// weight first, after the shared term (`kernels-src/src/ffn/combine.rs`).
#[allow(clippy::too_many_arguments)]
pub fn moe_combine<'a>(
    dev: &Device,
    routing: &Routing,
    slots: &ExpertSlots,
    ys: impl Into<DevSlice<'a, f32>>,
    shared: impl Into<DevSlice<'a, f32>>,
    shared_gate: impl Into<DevSlice<'a, f32>>,
    h: usize,
    out: impl Into<DevSliceMut<'a, f32>>,
) -> Result<(), OpError> {
    let (ys, shared, shared_gate) = (ys.into(), shared.into(), shared_gate.into());
    let out = out.into();
    const OP: &str = "ffn.moe_combine.v2";
    check_h(OP, h)?;
    let tokens = routing.tokens();
    let n = tokens * routing.k;
    check_len(OP, "routing ids", routing.ids.len(), n)?;
    check_len(OP, "routing weights", routing.weights.len(), n)?;
    check_len(OP, "slots", slots.slots().len(), n)?;
    check_len(OP, "ys", ys.len(), slots.len() * h)?;
    check_len(OP, "shared", shared.len(), tokens * h)?;
    check_len(OP, "shared_gate", shared_gate.len(), tokens)?;
    check_len(OP, "out", out.len(), tokens * h)?;
    if let Some(s) = slots.slots().iter().find(|&&s| s as usize >= slots.len()) {
        return Err(OpError::Invalid {
            op: OP,
            message: format!("slot {s} is past the {} rows of ys", slots.len()),
        });
    }
    to_u32(OP, "ys", ys.len())?;
    to_u32(OP, "out", out.len())?;
    if tokens == 0 {
        return Ok(());
    }
    let args = combine_kernel::Args {
        shared,
        shared_gate,
        weights: &routing.weights,
        slots: slots.slots(),
        ys,
        out,
        h: h as u32,
        k: routing.k as u32,
    };
    dev.launch([tokens as u32, 1, 1], args)?;
    Ok(())
}

fn check_h(op: &'static str, h: usize) -> Result<(), OpError> {
    if h == 0 {
        return Err(OpError::Invalid {
            op,
            message: "the row width h is 0".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Pool;

    fn router_err(logits: usize, num_experts: usize, k: usize) -> String {
        let dev = Device::open(Pool::Cpu).unwrap();
        moe_router(&dev, &vec![0.0; logits], num_experts, k)
            .unwrap_err()
            .to_string()
    }

    fn routing(ids: Vec<u32>, k: usize, num_experts: usize) -> Routing {
        Routing {
            k,
            num_experts,
            weights: vec![0.5; ids.len()],
            ids,
        }
    }

    #[test]
    fn router_refuses_k_outside_one_to_num_experts() {
        for (ne, k) in [(4, 0), (4, 5), (0, 1), (0, 0)] {
            let err = router_err(8, ne, k);
            assert_eq!(
                err,
                format!("ffn.moe_router.v1: k = {k} must be from 1 to num_experts = {ne}")
            );
        }
    }

    #[test]
    fn router_refuses_logits_that_are_not_whole_rows() {
        assert_eq!(
            router_err(10, 4, 2),
            "ffn.moe_router.v1: logits has 10 elements, expected 8"
        );
    }

    #[test]
    fn no_tokens_route_gather_and_combine_nothing() {
        let dev = Device::open(Pool::Cpu).unwrap();
        let r = moe_router(&dev, &[], 4, 2).unwrap();
        assert_eq!((r.tokens(), r.ids.len()), (0, 0));
        let s = ExpertSlots::new(&r).unwrap();
        assert!(s.is_empty() && (0..4).all(|e| s.segment(e).is_empty()));
        moe_gather(&dev, &[], 3, &s, &mut []).unwrap();
        moe_combine(&dev, &r, &s, &[], &[], &[], 3, &mut []).unwrap();
    }

    #[test]
    fn slots_sort_choices_by_expert_then_token() {
        // 3 tokens, k = 2, 4 experts; expert 1 gets no token.
        let r = routing(vec![2, 0, 0, 3, 2, 3], 2, 4);
        let s = ExpertSlots::new(&r).unwrap();
        assert_eq!(s.len(), 6);
        assert_eq!(s.tokens(), 3);
        assert_eq!(
            (0..4).map(|e| s.segment(e)).collect::<Vec<_>>(),
            [0..2, 2..2, 2..4, 4..6]
        );
        assert_eq!(s.rows(), [0, 1, 0, 2, 1, 2]);
        assert_eq!(s.slots(), [2, 0, 1, 4, 3, 5]);
    }

    #[test]
    fn aligned_slots_start_each_expert_at_a_block_and_pad_with_token_zero() {
        // 3 tokens, k = 2, 4 experts in blocks of 4 rows; expert 1 gets no token.
        let r = routing(vec![2, 0, 0, 3, 2, 3], 2, 4);
        let s = ExpertSlots::aligned(&r, 4).unwrap();
        assert_eq!(s.len(), 12);
        assert_eq!(s.tokens(), 3);
        assert_eq!(
            (0..4).map(|e| s.segment(e)).collect::<Vec<_>>(),
            [0..2, 4..4, 4..6, 8..10]
        );
        assert_eq!(s.rows(), [0, 1, 0, 0, 0, 2, 0, 0, 1, 2, 0, 0]);
        assert_eq!(s.slots(), [4, 0, 1, 8, 5, 9]);
        assert_eq!(s.block_experts(), [0, 2, 3]);
        // Blocks of one row are `new`'s slots, one block per row.
        let one = ExpertSlots::aligned(&r, 1).unwrap();
        assert_eq!(one, ExpertSlots::new(&r).unwrap());
        assert_eq!(one.block_experts(), [0, 0, 2, 2, 3, 3]);
        assert!(ExpertSlots::aligned(&r, 0).is_err());
    }

    #[test]
    fn slots_refuse_an_id_that_is_not_an_expert() {
        let err = ExpertSlots::new(&routing(vec![0, 4], 1, 4)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "moe expert slots: token 1 has no expert for choice 0 (id 4, 4 experts): its \
             router logits are NaN or infinite"
        );
    }

    #[test]
    fn nan_logits_give_no_expert_and_are_refused_before_use() {
        let dev = Device::open(Pool::Cpu).unwrap();
        let r = moe_router(&dev, &[0.0, f32::NAN, 1.0, 2.0], 2, 1).unwrap();
        assert_eq!(r.ids, [2, 1]);
        assert!(ExpertSlots::new(&r).is_err());
    }

    #[test]
    fn combine_refuses_a_shared_gate_of_another_length() {
        let dev = Device::open(Pool::Cpu).unwrap();
        let r = routing(vec![1, 0], 1, 2);
        let s = ExpertSlots::new(&r).unwrap();
        let err = moe_combine(
            &dev,
            &r,
            &s,
            &[0.0; 6],
            &[0.0; 6],
            &[0.0; 3],
            3,
            &mut [0.0; 6],
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "ffn.moe_combine.v2: shared_gate has 3 elements, expected 2"
        );
    }
}
