//! The AMX tile state of one thread (palette 1: eight tiles of at most 16 rows of 64 bytes)
//! and what each instruction does to it and to memory, as Intel's SDM pseudo-code defines it,
//! including the faults (#UD, #GP) the SDM lists, reported as [`Fault`].

/// Tiles of palette 1.
pub const TILES: usize = 8;
/// Rows a tile can have.
pub const MAX_ROWS: usize = 16;
/// Bytes a tile row can have.
pub const ROW_BYTES: usize = 64;

/// The 64-byte `ldtilecfg` operand for palette 1 with tile `t` of `shapes[t]` = (rows, bytes
/// per row) and the other tiles unused: what code that issues tile instructions (tests)
/// loads.
pub fn palette1(shapes: &[(u8, u16)]) -> [u8; 64] {
    let mut cfg = [0u8; 64];
    cfg[0] = 1;
    for (t, &(rows, colsb)) in shapes.iter().enumerate().take(TILES) {
        cfg[16 + 2 * t..18 + 2 * t].copy_from_slice(&colsb.to_le_bytes());
        cfg[48 + t] = rows;
    }
    cfg
}

/// Why an instruction cannot run: what the hardware would raise instead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault(pub &'static str);

/// One thread's tiles and their configuration.
pub struct Tiles {
    configured: bool,
    rows: [u8; TILES],
    colsb: [u16; TILES],
    data: [[[u8; ROW_BYTES]; MAX_ROWS]; TILES],
}

impl Tiles {
    /// The init state: no configuration, every tile zero.
    pub const INIT: Tiles = Tiles {
        configured: false,
        rows: [0; TILES],
        colsb: [0; TILES],
        data: [[[0; ROW_BYTES]; MAX_ROWS]; TILES],
    };

    /// `ldtilecfg`: palette 0 returns to the init state; palette 1 takes each tile's rows and
    /// bytes per row, and zeroes every tile. Reserved bytes must be zero and a tile has rows
    /// and columns or neither, within the palette's limits. A `start_row` other than 0 (what
    /// an interrupted load leaves, for its restart) is not emulated: it is reported.
    pub fn load_config(&mut self, cfg: &[u8; 64]) -> Result<(), Fault> {
        *self = Tiles::INIT;
        match cfg[0] {
            0 => return Ok(()),
            1 => {}
            _ => return Err(Fault("ldtilecfg: palette other than 0 or 1")),
        }
        if cfg[1] != 0 {
            return Err(Fault("ldtilecfg: start_row other than 0 is not emulated"));
        }
        let reserved = cfg[2..16].iter().chain(&cfg[32..48]).chain(&cfg[56..64]);
        if reserved.into_iter().any(|&b| b != 0) {
            return Err(Fault("ldtilecfg: nonzero reserved byte"));
        }
        for t in 0..TILES {
            let colsb = u16::from_le_bytes([cfg[16 + 2 * t], cfg[17 + 2 * t]]);
            let rows = cfg[48 + t];
            if (rows == 0) != (colsb == 0) || rows as usize > MAX_ROWS || colsb as usize > ROW_BYTES
            {
                return Err(Fault("ldtilecfg: tile shape outside palette 1"));
            }
            self.rows[t] = rows;
            self.colsb[t] = colsb;
        }
        self.configured = true;
        Ok(())
    }

    /// `tilerelease`.
    pub fn release(&mut self) {
        *self = Tiles::INIT;
    }

    /// Rows and bytes per row of a configured tile `t`.
    fn shape(&self, t: u8) -> Result<(usize, usize), Fault> {
        let t = t as usize;
        if !self.configured || self.rows[t] == 0 {
            return Err(Fault("tile not configured"));
        }
        Ok((self.rows[t] as usize, self.colsb[t] as usize))
    }

    /// `tilezero`.
    pub fn zero(&mut self, t: u8) -> Result<(), Fault> {
        self.shape(t)?;
        self.data[t as usize] = [[0; ROW_BYTES]; MAX_ROWS];
        Ok(())
    }

    /// `tileloadd`: row `r` from `start + r * stride`, the bytes past the configured shape zero.
    ///
    /// # Safety
    /// Each configured row's bytes must be readable at its address.
    pub unsafe fn load(&mut self, t: u8, start: u64, stride: u64) -> Result<(), Fault> {
        let (rows, colsb) = self.shape(t)?;
        let tile = &mut self.data[t as usize];
        *tile = [[0; ROW_BYTES]; MAX_ROWS];
        for (r, row) in tile.iter_mut().take(rows).enumerate() {
            let at = start.wrapping_add((r as u64).wrapping_mul(stride)) as *const u8;
            // SAFETY: the caller's contract; `row` holds ROW_BYTES >= colsb bytes.
            unsafe { std::ptr::copy_nonoverlapping(at, row.as_mut_ptr(), colsb) };
        }
        Ok(())
    }

    /// `tilestored`: the configured rows and bytes of tile `t`, row `r` to `start + r * stride`.
    ///
    /// # Safety
    /// Each configured row's bytes must be writable at its address.
    pub unsafe fn store(&self, t: u8, start: u64, stride: u64) -> Result<(), Fault> {
        let (rows, colsb) = self.shape(t)?;
        for (r, row) in self.data[t as usize].iter().take(rows).enumerate() {
            let at = start.wrapping_add((r as u64).wrapping_mul(stride)) as *mut u8;
            // SAFETY: the caller's contract.
            unsafe { std::ptr::copy_nonoverlapping(row.as_ptr(), at, colsb) };
        }
        Ok(())
    }

    /// `tdpbf16ps dst, a, b`: for each row m and column n of `dst` (f32), and each pair k of
    /// `a`'s row m, `dst[m][n] += a[m][2k] b[k][2n]`, then `+= a[m][2k+1] b[k][2n+1]`, each a
    /// fused multiply-add rounded to nearest even, bf16 denormal inputs and denormal results
    /// flushed to zero (the SDM's DAZ, FTZ). The three tiles must be distinct, `a` has `dst`'s
    /// rows, `b` one row per pair of `a` and `dst`'s bytes per row.
    pub fn dot_bf16(&mut self, dst: u8, a: u8, b: u8) -> Result<(), Fault> {
        let (m, dst_colsb) = self.shape(dst)?;
        let (a_rows, a_colsb) = self.shape(a)?;
        let (b_rows, b_colsb) = self.shape(b)?;
        if dst == a || dst == b || a == b {
            return Err(Fault("tdpbf16ps: tiles not distinct"));
        }
        let (n, k) = (dst_colsb / 4, a_colsb / 4);
        if a_rows != m || b_rows != k || b_colsb != dst_colsb || dst_colsb % 4 != 0 {
            return Err(Fault("tdpbf16ps: tile shapes disagree"));
        }
        let [ta, tb] = [a, b].map(|t| self.data[t as usize]);
        let bf16 = |row: &[u8; ROW_BYTES], i: usize| {
            let bits = u16::from_le_bytes([row[2 * i], row[2 * i + 1]]);
            let v = f32::from_bits((bits as u32) << 16);
            if v.is_subnormal() {
                0.0f32.copysign(v)
            } else {
                v
            }
        };
        let out = &mut self.data[dst as usize];
        for (r, row) in out.iter_mut().take(m).enumerate() {
            let mut acc = [0f32; ROW_BYTES / 4];
            for (c, v) in acc.iter_mut().take(n).enumerate() {
                *v = f32::from_le_bytes(row[4 * c..4 * c + 4].try_into().unwrap());
            }
            for (kk, b_row) in tb.iter().take(k).enumerate() {
                for (c, v) in acc.iter_mut().take(n).enumerate() {
                    for j in 0..2 {
                        let s = bf16(&ta[r], 2 * kk + j).mul_add(bf16(b_row, 2 * c + j), *v);
                        *v = if s.is_subnormal() {
                            0.0f32.copysign(s)
                        } else {
                            s
                        };
                    }
                }
            }
            *row = [0; ROW_BYTES];
            for (c, v) in acc.iter().take(n).enumerate() {
                row[4 * c..4 * c + 4].copy_from_slice(&v.to_le_bytes());
            }
        }
        for row in out.iter_mut().skip(m) {
            *row = [0; ROW_BYTES];
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    fn bytes_of_bf16(v: &[f32]) -> Vec<u8> {
        v.iter()
            .flat_map(|&x| bf16::from_f32(x).to_bits().to_le_bytes())
            .collect()
    }

    #[test]
    fn a_product_of_ragged_tiles_equals_the_pairwise_sum_and_zeroes_the_rest() {
        // dst 3 x 5 (f32), a 3 x 7 pairs, b 7 x 5 pairs.
        let (m, n, k) = (3usize, 5usize, 7usize);
        let mut t = Tiles::INIT;
        let shapes = [
            (m as u8, 4 * n as u16),
            (m as u8, 4 * k as u16),
            (k as u8, 4 * n as u16),
        ];
        t.load_config(&palette1(&shapes)).unwrap();
        let a: Vec<f32> = (0..m * 2 * k).map(|i| (i % 11) as f32 - 5.0).collect();
        let b: Vec<f32> = (0..k * 2 * n)
            .map(|i| (i % 7) as f32 * 0.25 - 0.5)
            .collect();
        let d: Vec<f32> = (0..m * n).map(|i| i as f32).collect();
        let (ab, bb) = (bytes_of_bf16(&a), bytes_of_bf16(&b));
        let db: Vec<u8> = d.iter().flat_map(|x| x.to_le_bytes()).collect();
        // SAFETY: each buffer holds the tile's rows at its stride.
        unsafe {
            t.load(0, db.as_ptr() as u64, 4 * n as u64).unwrap();
            t.load(1, ab.as_ptr() as u64, 4 * k as u64).unwrap();
            t.load(2, bb.as_ptr() as u64, 4 * n as u64).unwrap();
        }
        t.dot_bf16(0, 1, 2).unwrap();
        let mut out = vec![0u8; 16 * 64];
        // SAFETY: 3 rows of 20 bytes at stride 64 fit in `out`.
        unsafe { t.store(0, out.as_mut_ptr() as u64, 64).unwrap() };
        for r in 0..m {
            for c in 0..n {
                let mut want = d[r * n + c];
                for kk in 0..2 * k {
                    want += a[r * 2 * k + kk] * b[kk / 2 * 2 * n + 2 * c + kk % 2];
                }
                let got =
                    f32::from_le_bytes(out[r * 64 + 4 * c..r * 64 + 4 * c + 4].try_into().unwrap());
                assert_eq!(got, want, "[{r}][{c}]");
            }
            assert!(out[r * 64 + 4 * n..(r + 1) * 64].iter().all(|&x| x == 0));
        }
        assert!(t.data[0][m..].iter().flatten().all(|&x| x == 0));
    }

    #[test]
    fn denormal_inputs_and_results_flush_to_zero() {
        let mut t = Tiles::INIT;
        t.load_config(&palette1(&[(1, 4), (1, 4), (1, 4)])).unwrap();
        let tiny = f32::from_bits(1 << 16); // a bf16 denormal
        let a = [bf16::from_f32(tiny), bf16::from_f32(1e-30)];
        let b = [bf16::from_f32(1e30), bf16::from_f32(1e-10)];
        let bits = |v: [bf16; 2]| {
            let mut x = [0u8; 4];
            x[..2].copy_from_slice(&v[0].to_bits().to_le_bytes());
            x[2..].copy_from_slice(&v[1].to_bits().to_le_bytes());
            x
        };
        let (ab, bb, db) = (bits(a), bits(b), 0f32.to_le_bytes());
        // SAFETY: one row of 4 bytes each.
        unsafe {
            t.load(0, db.as_ptr() as u64, 4).unwrap();
            t.load(1, ab.as_ptr() as u64, 4).unwrap();
            t.load(2, bb.as_ptr() as u64, 4).unwrap();
        }
        t.dot_bf16(0, 1, 2).unwrap();
        // tiny * 1e30 would be 9e-11 without DAZ; 1e-30 * 1e-10 underflows to a denormal.
        assert_eq!(
            f32::from_le_bytes(t.data[0][0][..4].try_into().unwrap()),
            0.0
        );
    }

    #[test]
    fn bad_configurations_and_mismatched_shapes_fault() {
        let mut t = Tiles::INIT;
        assert!(t.zero(0).is_err(), "no configuration yet");
        let mut cfg = palette1(&[(16, 64)]);
        cfg[0] = 2;
        assert!(t.load_config(&cfg).is_err());
        assert!(t.load_config(&palette1(&[(17, 64)])).is_err());
        assert!(t.load_config(&palette1(&[(16, 65)])).is_err());
        assert!(t.load_config(&palette1(&[(0, 64)])).is_err());
        let mut cfg = palette1(&[(16, 64)]);
        cfg[1] = 3;
        assert!(t.load_config(&cfg).is_err(), "start_row");
        let mut cfg = palette1(&[(16, 64)]);
        cfg[20] = 1;
        assert!(
            t.load_config(&cfg).is_err(),
            "colsb of tile 2 set, its rows not"
        );
        let mut cfg = palette1(&[(16, 64)]);
        cfg[40] = 1;
        assert!(t.load_config(&cfg).is_err(), "reserved byte");
        t.load_config(&palette1(&[(16, 64), (16, 64), (16, 64), (8, 64)]))
            .unwrap();
        assert!(t.zero(4).is_err(), "tile 4 has no shape");
        assert!(t.dot_bf16(0, 0, 1).is_err());
        assert!(t.dot_bf16(0, 3, 1).is_err(), "a has other rows than dst");
        t.dot_bf16(0, 1, 2).unwrap();
        t.release();
        assert!(t.dot_bf16(0, 1, 2).is_err());
    }
}
