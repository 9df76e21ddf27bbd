//! Small example kernels: the `LOOM.md` example and a shared-memory reduction. They exercise
//! the whole pipeline (front end, work-item-loop transform, Rust lowering, build-script
//! artifacts) on kernels simple enough to check by hand.

use loom::kernel;

/// `out[i] = x[i] * factor` for `i < n`; one work-item per element.
#[kernel(name = "example.scale", version = 1, workgroup = 64)]
fn scale(x: &[f32], out: &mut [f32], n: u32, factor: f32) {
    let i = group_id() * group_size() + local_id();
    if i < n {
        out[i] = x[i] * factor;
    }
}

/// `out[g]` = sum of `x[64 g .. 64 g + 64]` (elements past `n` count as 0), by a pairwise
/// tree in shared memory with a barrier per level, the classic GPU reduction.
#[kernel(name = "example.block_sum", version = 1, workgroup = 64)]
fn block_sum(x: &[f32], out: &mut [f32], n: u32) {
    let tile = shared::<f32>(64);
    let lid = local_id();
    let i = group_id() * group_size() + lid;
    tile[lid] = if i < n { x[i] } else { 0.0 };
    barrier();
    for level in 0..6u32 {
        let stride = 32u32 >> level;
        if lid < stride {
            tile[lid] = tile[lid] + tile[lid + stride];
        }
        barrier();
    }
    if lid == 0 {
        out[group_id()] = tile[0];
    }
}

#[cfg(test)]
mod tests {
    use lse_dsl::rt::RawBuf;

    fn raw<T>(v: &mut [T]) -> RawBuf {
        RawBuf {
            ptr: v.as_mut_ptr().cast(),
            len: v.len(),
        }
    }

    #[test]
    fn scale_multiplies_in_range_elements_only() {
        let mut x: Vec<f32> = (0..100).map(|i| i as f32 - 50.0).collect();
        let mut out = vec![-1.0f32; 128];
        let n = 100u32;
        let bufs = [raw(&mut x), raw(&mut out)];
        let scalars = [n as u64, 0.5f32.to_bits() as u64];
        (super::scale::KERNEL.cpu)(&bufs, &scalars, [2, 1, 1], 0, 2);
        for (i, got) in out.iter().enumerate() {
            let want = if i < 100 {
                (i as f32 - 50.0) * 0.5
            } else {
                -1.0
            };
            assert_eq!(*got, want, "element {i}");
        }
    }

    #[test]
    fn block_sum_matches_pairwise_tree() {
        let n = 150u32;
        let mut x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin()).collect();
        let mut out = vec![0.0f32; 3];
        let bufs = [raw(&mut x), raw(&mut out)];
        (super::block_sum::KERNEL.cpu)(&bufs, &[n as u64], [3, 1, 1], 0, 3);
        for (g, got) in out.iter().enumerate() {
            let mut tile: Vec<f32> = (0..64)
                .map(|l| x.get(g * 64 + l).copied().unwrap_or(0.0))
                .collect();
            let mut s = 32;
            while s > 0 {
                for l in 0..s {
                    tile[l] += tile[l + s];
                }
                s /= 2;
            }
            assert_eq!(got.to_bits(), tile[0].to_bits(), "group {g}");
        }
    }

    #[test]
    fn metadata_describes_the_kernel() {
        let k = &super::block_sum::KERNEL;
        assert_eq!(k.id, "example.block_sum.v1");
        assert_eq!(k.fn_name, "block_sum");
        assert_eq!(k.workgroup_size, 64);
        assert_eq!(k.shared_bytes, 256);
        assert_eq!(k.params.len(), 3);
        assert!(k.rust_src.contains("for lid in 0..WG"));
        assert_eq!(k.ir_hash.len(), 64);
    }
}
