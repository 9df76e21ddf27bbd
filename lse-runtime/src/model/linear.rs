//! Matrix products for prefill: `Y = X · Wᵀ` with W read in its stored dtype.
//!
//! Output columns are split into blocks processed in parallel (rayon). Each worker converts its
//! block of weight rows to f32 into a reused thread-local scratch buffer and calls the
//! `matrixmultiply` SGEMM (runtime-dispatched AVX2/AVX-512 FMA kernels) on it.

use std::cell::RefCell;

use rayon::prelude::*;

use super::weights::{to_f32, DType, Tensor};

thread_local! {
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Strided f32 GEMM: `C = alpha·A·B + beta·C` with A [m,k], B [k,n], C [m,n].
///
/// Strides are in elements. Panics if a slice is too short for the given shape and strides.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    m: usize,
    k: usize,
    n: usize,
    alpha: f32,
    a: &[f32],
    (rsa, csa): (usize, usize),
    b: &[f32],
    (rsb, csb): (usize, usize),
    beta: f32,
    c: &mut [f32],
    (rsc, csc): (usize, usize),
) {
    if m == 0 || n == 0 {
        return;
    }
    let need = |r: usize, cols: usize, rs: usize, cs: usize| {
        if r == 0 || cols == 0 {
            0
        } else {
            (r - 1) * rs + (cols - 1) * cs + 1
        }
    };
    assert!(a.len() >= need(m, k, rsa, csa), "gemm: A too short");
    assert!(b.len() >= need(k, n, rsb, csb), "gemm: B too short");
    assert!(c.len() >= need(m, n, rsc, csc), "gemm: C too short");
    // SAFETY: the asserts above guarantee every accessed element lies inside the slices, and
    // `c` is uniquely borrowed.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            alpha,
            a.as_ptr(),
            rsa as isize,
            csa as isize,
            b.as_ptr(),
            rsb as isize,
            csb as isize,
            beta,
            c.as_mut_ptr(),
            rsc as isize,
            csc as isize,
        );
    }
}

/// A row-major weight matrix [n, k] inside a tensor, in its stored dtype.
#[derive(Clone, Copy)]
pub struct WeightMat<'a> {
    bytes: &'a [u8],
    dtype: DType,
    /// Output features (rows).
    pub n: usize,
    /// Input features (columns).
    pub k: usize,
}

impl<'a> WeightMat<'a> {
    /// The whole 2-D tensor [n, k].
    pub fn of(t: &'a Tensor) -> Self {
        let k = *t.shape.last().expect("tensor has a shape");
        Self::rows(t, 0, t.numel() / k, k)
    }
    /// Rows `[row0, row0 + n)` of the tensor viewed as a flat matrix with `k` columns
    /// (used for one expert's slice of a fused 3-D expert tensor).
    pub fn rows(t: &'a Tensor, row0: usize, n: usize, k: usize) -> Self {
        let s = t.dtype.size();
        WeightMat {
            bytes: &t.bytes()[row0 * k * s..(row0 + n) * k * s],
            dtype: t.dtype,
            n,
            k,
        }
    }
}

struct SendPtr(*mut f32);
// SAFETY: workers write disjoint column ranges of the output (see `linear`).
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

impl SendPtr {
    fn get(&self) -> *mut f32 {
        self.0
    }
}

/// `out[t, :] = x[t, :] · Wᵀ` for `t` rows. `x` is [t, w.k], `out` is [t, w.n] (overwritten).
pub fn linear(x: &[f32], t: usize, w: WeightMat<'_>, out: &mut [f32]) {
    let (n, k) = (w.n, w.k);
    assert!(
        x.len() >= t * k && out.len() >= t * n,
        "linear: buffer sizes"
    );
    if t == 0 || n == 0 {
        return;
    }
    let threads = rayon::current_num_threads().max(1);
    // Column block: enough blocks to balance the workers, not so small that packing dominates.
    let nb = (n.div_ceil(2 * threads)).clamp(64, 1024).min(n);
    let blocks = n.div_ceil(nb);
    let optr = SendPtr(out.as_mut_ptr());
    (0..blocks).into_par_iter().for_each(|bi| {
        let j0 = bi * nb;
        let cols = nb.min(n - j0);
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < cols * k {
                s.resize(cols * k, 0.0);
            }
            let wb = &mut s[..cols * k];
            let es = w.dtype.size();
            to_f32(w.dtype, &w.bytes[j0 * k * es..(j0 + cols) * k * es], wb);
            // SAFETY: `x` holds t*k elements and `wb` cols*k (asserted/sized above); this block
            // writes only columns [j0, j0 + cols) of the t*n output, and blocks are disjoint,
            // so no two workers touch the same element.
            unsafe {
                matrixmultiply::sgemm(
                    t,
                    k,
                    cols,
                    1.0,
                    x.as_ptr(),
                    k as isize,
                    1,
                    wb.as_ptr(),
                    1,
                    k as isize,
                    0.0,
                    optr.get().add(j0),
                    n as isize,
                    1,
                );
            }
        });
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_matches_naive_with_strides() {
        let (m, k, n) = (5, 7, 3);
        let a: Vec<f32> = (0..m * k).map(|i| (i as f32 * 0.37).sin()).collect();
        let b: Vec<f32> = (0..n * k).map(|i| (i as f32 * 0.11).cos()).collect(); // [n,k], used transposed
        let mut c = vec![0.0; m * n];
        gemm(m, k, n, 1.0, &a, (k, 1), &b, (1, k), 0.0, &mut c, (n, 1));
        for i in 0..m {
            for j in 0..n {
                let r: f32 = (0..k).map(|p| a[i * k + p] * b[j * k + p]).sum();
                assert!((c[i * n + j] - r).abs() < 1e-5);
            }
        }
    }
}
