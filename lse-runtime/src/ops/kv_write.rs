//! `attention.kv_write_<ty>.v2`: one pass's keys and values into the KV cache, rounded to the
//! cache dtype, or for an f32 cache through f16 as llama.cpp's flash attention reads it.

use lse_kernels::attention::kv_write::{kv_write_bf16, kv_write_f16, kv_write_f32};

use half::{bf16, f16};

use super::{check_len, to_u32, OpError};
use crate::device::{DevSlice, DevSliceMut, Device};

/// How a pass's keys and values are rounded into the KV cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvRounding {
    /// To the cache's dtype (round to nearest even; a copy for an f32 cache).
    CacheDtype,
    /// An f32 cache holds each value rounded to f16 (then widened exactly): llama.cpp's flash
    /// attention casts an f32 cache's keys and values to f16 before it reads them, so this is
    /// the cache its scores see. bf16 and f16 caches round to their dtype, as
    /// [`KvRounding::CacheDtype`].
    F32ThroughF16,
}

/// A KV cache's keys and values (`[capacity, row]` each), writable, in their stored dtype.
pub enum KvCacheMut<'a> {
    Bf16(DevSliceMut<'a, bf16>, DevSliceMut<'a, bf16>),
    F16(DevSliceMut<'a, f16>, DevSliceMut<'a, f16>),
    F32(DevSliceMut<'a, f32>, DevSliceMut<'a, f32>),
}

impl KvCacheMut<'_> {
    /// Elements of the keys and of the values.
    fn lens(&self) -> (usize, usize) {
        match self {
            KvCacheMut::Bf16(k, v) => (k.len(), v.len()),
            KvCacheMut::F16(k, v) => (k.len(), v.len()),
            KvCacheMut::F32(k, v) => (k.len(), v.len()),
        }
    }
}

/// Writes `k` and `v` (`[t, row]` f32) into rows `pos0..pos0 + t` of the caches (`[capacity,
/// row]`, one dtype), rounding to nearest even as `rounding` says.
pub fn kv_write<'a>(
    dev: &Device,
    k: impl Into<DevSlice<'a, f32>>,
    v: impl Into<DevSlice<'a, f32>>,
    row: usize,
    pos0: usize,
    cache: KvCacheMut<'_>,
    rounding: KvRounding,
) -> Result<(), OpError> {
    let (k, v) = (k.into(), v.into());
    const OP: &str = "attention.kv_write.v2";
    if row == 0 {
        return Err(OpError::Invalid {
            op: OP,
            message: "the cache row is empty".into(),
        });
    }
    let t = k.len() / row;
    check_len(OP, "k", k.len(), t * row)?;
    check_len(OP, "v", v.len(), t * row)?;
    let (k_len, v_len) = cache.lens();
    let capacity = k_len / row;
    check_len(OP, "key cache", k_len, capacity * row)?;
    check_len(OP, "value cache", v_len, capacity * row)?;
    to_u32(OP, "key cache", k_len)?;
    if pos0 + t > capacity {
        return Err(OpError::Invalid {
            op: OP,
            message: format!(
                "rows {pos0}..{} do not fit a cache of {capacity} rows",
                pos0 + t
            ),
        });
    }
    if t == 0 {
        return Ok(());
    }
    let (grid, row, pos0) = ([t as u32, 1, 1], row as u32, pos0 as u32);
    let through_f16 =
        u32::from(rounding == KvRounding::F32ThroughF16 && matches!(cache, KvCacheMut::F32(..)));
    macro_rules! launch {
        ($kernel:ident, $kc:expr, $vc:expr) => {
            dev.launch(
                grid,
                $kernel::Args {
                    k,
                    v,
                    k_cache: $kc,
                    v_cache: $vc,
                    row,
                    pos0,
                    through_f16,
                },
            )
        };
    }
    match cache {
        KvCacheMut::Bf16(kc, vc) => launch!(kv_write_bf16, kc, vc),
        KvCacheMut::F16(kc, vc) => launch!(kv_write_f16, kc, vc),
        KvCacheMut::F32(kc, vc) => launch!(kv_write_f32, kc, vc),
    }?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Pool;

    #[test]
    fn kv_write_rejects_rows_past_the_capacity_and_mismatched_caches() {
        let dev = Device::open(Pool::Cpu).unwrap();
        let (k, v) = (vec![1.0; 6], vec![2.0; 6]);
        let (mut kc, mut vc) = (vec![0.0f32; 9], vec![0.0f32; 9]);
        let e = kv_write(
            &dev,
            &k,
            &v,
            3,
            2,
            KvCacheMut::F32((&mut kc).into(), (&mut vc).into()),
            KvRounding::CacheDtype,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("rows 2..4 do not fit a cache of 3 rows"),
            "{e}"
        );
        let mut short = vec![0.0f32; 6];
        let e = kv_write(
            &dev,
            &k,
            &v,
            3,
            0,
            KvCacheMut::F32((&mut kc).into(), (&mut short).into()),
            KvRounding::CacheDtype,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains("value cache has 6 elements, expected 9"),
            "{e}"
        );
        let e = kv_write(
            &dev,
            &k,
            &v[..3],
            3,
            0,
            KvCacheMut::F32((&mut kc).into(), (&mut vc).into()),
            KvRounding::CacheDtype,
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("v has 3 elements, expected 6"),
            "{e}"
        );
        kv_write(
            &dev,
            &k,
            &v,
            3,
            1,
            KvCacheMut::F32((&mut kc).into(), (&mut vc).into()),
            KvRounding::CacheDtype,
        )
        .unwrap();
        assert_eq!(kc, [0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]);
        assert_eq!(vc, [0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]);
    }

    #[test]
    fn an_f32_cache_through_f16_holds_each_value_rounded_to_f16_on_every_cpu_device() {
        // Values f16 rounds up, down and to even, one past its range and one below its
        // smallest subnormal, with their exact f32 bits.
        let k = [
            1.0 + 2f32.powi(-11) + 2f32.powi(-20),
            1.0 + 2f32.powi(-12),
            70000.0,
            1e-9,
        ];
        let v = [-(1.0 + 3.0 * 2f32.powi(-11)), 0.1, -70000.0, 3.0e-8];
        let rounded =
            |x: &[f32]| -> Vec<f32> { x.iter().map(|&x| f16::from_f32(x).to_f32()).collect() };
        for pool in [Pool::Cpu, Pool::Host] {
            let dev = Device::open(pool).unwrap();
            for (rounding, want_k, want_v) in [
                (KvRounding::CacheDtype, k.to_vec(), v.to_vec()),
                (KvRounding::F32ThroughF16, rounded(&k), rounded(&v)),
            ] {
                let (mut kc, mut vc) = (vec![5.0f32; 8], vec![5.0f32; 8]);
                let cache = KvCacheMut::F32((&mut kc).into(), (&mut vc).into());
                kv_write(&dev, &k, &v, 4, 1, cache, rounding).unwrap();
                let bits = |x: &[f32]| x.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&kc[4..]), bits(&want_k), "{pool:?} {rounding:?}");
                assert_eq!(bits(&vc[4..]), bits(&want_v), "{pool:?} {rounding:?}");
                assert_eq!(kc[..4], [5.0; 4]);
            }
            // A 16-bit cache rounds to its own dtype either way.
            for rounding in [KvRounding::CacheDtype, KvRounding::F32ThroughF16] {
                let (mut kc, mut vc) = (vec![bf16::ZERO; 4], vec![bf16::ZERO; 4]);
                let cache = KvCacheMut::Bf16((&mut kc).into(), (&mut vc).into());
                kv_write(&dev, &k, &v, 4, 0, cache, rounding).unwrap();
                let want: Vec<bf16> = k.iter().map(|&x| bf16::from_f32(x)).collect();
                assert_eq!(kc, want, "{pool:?} {rounding:?}");
            }
        }
    }
}
