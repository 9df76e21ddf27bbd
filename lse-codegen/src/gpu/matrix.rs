//! `tile_dot` on the GPUs' matrix units: MFMA on CDNA (gfx90a, gfx94x, gfx950), WMMA on RDNA3
//! (gfx11) and RDNA4 (gfx12), `mma.sync` on NVIDIA sm_80 and sm_90.
//!
//! Tiles stay where the portable lowering keeps them (row-major shared-memory arrays); only the
//! dot changes. The accumulator is cut into instruction-sized sub-tiles; wave `w` of the
//! workgroup takes sub-tiles `w, w + waves, ...`, loads its fragment of each into registers,
//! runs one instruction per K step (each lane gathering its operand fragments from shared
//! memory), and writes the fragment back. A sub-tile belongs to exactly one wave, and the
//! statement is bracketed by barriers like every tile statement.
//!
//! Each instruction's register layout is data ([`Fragment`]): lane `l`'s element `j` of an
//! operand sits at row `base_row(l) + rows[j]`, column `base_col(l) + cols[j]` of the operand's
//! sub-matrix, with bases of the form `(l % m) · a + (l / d) · b`. The layouts are the vendors'
//! documented ones; the unit tests check that each covers its sub-matrix exactly (A and B of
//! RDNA3 twice: lanes 16 to 31 repeat lanes 0 to 15).
//!
//! On NVIDIA the operands come from shared memory through `ldmatrix` instead (one instruction
//! per A fragment, one per two B fragments, `.trans` for B), and a warp takes one 16-row strip
//! of the accumulator and up to 8 of its `m16n8` sub-tiles at once, so each A fragment serves
//! every sub-tile of the group ([`lower_dot_ldmatrix`]); the order of the instructions that
//! reach each output element, and so its value, is the same as one sub-tile at a time.
//!
//! Used only when the operands are both bf16 or both f16, the accumulator is f32, the shapes are
//! multiples of the instruction's, and the workgroup is whole waves; every other dot takes the
//! portable path. The summation order inside an instruction is the hardware's, so these dots
//! are held to the `tile_dot` tolerance of `LOOM.md`, not to bit equality.

use super::tiles::{elem_ptr, read_raw, strided_loop, write};
use crate::emit::Emitter;
use lse_dsl::ir::Ty;

/// A matrix instruction family a GPU target has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MatrixUnit {
    /// CDNA `v_mfma_f32_16x16x16_{bf16,f16}`, wave64.
    Mfma,
    /// RDNA3 `v_wmma_f32_16x16x16_{bf16,f16}`, wave32, 16 operand elements per lane.
    Wmma11,
    /// RDNA4 `v_wmma_f32_16x16x16_{bf16,f16}`, wave32, 8 operand elements per lane.
    Wmma12,
    /// NVIDIA `mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}`, warp of 32.
    MmaSync,
}

/// `(lane % m) · a + (lane / d) · b`: one coordinate of a lane's first fragment element.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LaneTerm {
    pub m: u32,
    pub a: u32,
    pub d: u32,
    pub b: u32,
}

impl LaneTerm {
    const ZERO: LaneTerm = LaneTerm {
        m: 1,
        a: 0,
        d: 1,
        b: 0,
    };

    /// `lane % m`.
    const fn rem(m: u32) -> Self {
        LaneTerm {
            m,
            a: 1,
            d: 1,
            b: 0,
        }
    }

    /// `(lane / d) · b`.
    const fn div(d: u32, b: u32) -> Self {
        LaneTerm { m: 1, a: 0, d, b }
    }

    /// The value for lane `lane`.
    #[cfg(test)]
    pub fn at(self, lane: u32) -> u32 {
        (lane % self.m) * self.a + (lane / self.d) * self.b
    }

    fn emit(self, e: &mut Emitter, lane: &str) -> String {
        let mut terms = Vec::new();
        if self.a != 0 {
            let r = e.b.op(format!("urem i32 {lane}, {}", self.m));
            terms.push(e.b.op(format!("mul nuw i32 {r}, {}", self.a)));
        }
        if self.b != 0 {
            let q = e.b.op(format!("udiv i32 {lane}, {}", self.d));
            terms.push(e.b.op(format!("mul nuw i32 {q}, {}", self.b)));
        }
        match terms.as_slice() {
            [] => "0".to_string(),
            [t] => t.clone(),
            [x, y] => e.b.op(format!("add nuw i32 {x}, {y}")),
            _ => unreachable!("at most two terms"),
        }
    }
}

/// Where each lane's elements of one operand sit in its sub-matrix.
#[derive(Clone, Debug)]
pub(crate) struct Fragment {
    pub base_row: LaneTerm,
    pub base_col: LaneTerm,
    /// Row and column offsets of element `j` from the lane's base.
    pub offsets: Vec<(u32, u32)>,
}

impl Fragment {
    fn new(
        base_row: LaneTerm,
        base_col: LaneTerm,
        offsets: impl Iterator<Item = (u32, u32)>,
    ) -> Self {
        Fragment {
            base_row,
            base_col,
            offsets: offsets.collect(),
        }
    }

    /// Element `j` of lane `lane`: (row, column).
    #[cfg(test)]
    pub fn coord(&self, lane: u32, j: usize) -> (u32, u32) {
        let (r, c) = self.offsets[j];
        (self.base_row.at(lane) + r, self.base_col.at(lane) + c)
    }
}

impl MatrixUnit {
    /// The unit of AMDGPU `arch`, if it has one this lowering uses.
    pub fn for_amdgpu(arch: &str) -> Option<Self> {
        if arch == "gfx90a" || arch.starts_with("gfx94") || arch == "gfx950" {
            Some(MatrixUnit::Mfma)
        } else if arch.starts_with("gfx11") {
            Some(MatrixUnit::Wmma11)
        } else if arch.starts_with("gfx12") {
            Some(MatrixUnit::Wmma12)
        } else {
            None
        }
    }

    /// Lanes per wave (warp).
    pub fn wave(self) -> u32 {
        match self {
            MatrixUnit::Mfma => 64,
            _ => 32,
        }
    }

    /// The instruction's (M, N, K).
    pub fn shape(self) -> (u32, u32, u32) {
        match self {
            MatrixUnit::MmaSync => (16, 8, 16),
            _ => (16, 16, 16),
        }
    }

    /// The layouts of A (M x K), B (K x N) and the accumulator (M x N).
    pub fn fragments(self) -> [Fragment; 3] {
        use LaneTerm as T;
        match self {
            MatrixUnit::Mfma => [
                Fragment::new(T::rem(16), T::div(16, 4), (0..4).map(|j| (0, j))),
                Fragment::new(T::div(16, 4), T::rem(16), (0..4).map(|j| (j, 0))),
                Fragment::new(T::div(16, 4), T::rem(16), (0..4).map(|j| (j, 0))),
            ],
            MatrixUnit::Wmma11 => [
                Fragment::new(T::rem(16), T::ZERO, (0..16).map(|j| (0, j))),
                Fragment::new(T::ZERO, T::rem(16), (0..16).map(|j| (j, 0))),
                Fragment::new(T::div(16, 1), T::rem(16), (0..8).map(|j| (2 * j, 0))),
            ],
            MatrixUnit::Wmma12 => [
                Fragment::new(T::rem(16), T::div(16, 8), (0..8).map(|j| (0, j))),
                Fragment::new(T::div(16, 8), T::rem(16), (0..8).map(|j| (j, 0))),
                Fragment::new(T::div(16, 8), T::rem(16), (0..8).map(|j| (j, 0))),
            ],
            MatrixUnit::MmaSync => {
                let (g, two_t) = (
                    T::div(4, 1),
                    LaneTerm {
                        m: 4,
                        a: 2,
                        d: 1,
                        b: 0,
                    },
                );
                [
                    Fragment::new(
                        g,
                        two_t,
                        (0..8).map(|j| (8 * ((j / 2) % 2), j % 2 + 8 * (j / 4))),
                    ),
                    Fragment::new(two_t, g, (0..4).map(|j| (j % 2 + 8 * (j / 2), 0))),
                    Fragment::new(g, two_t, (0..4).map(|j| (8 * (j / 2), j % 2))),
                ]
            }
        }
    }

    /// The wave index of work-item `lid`, made uniform (a scalar register on AMDGPU).
    fn wave_index(self, e: &mut Emitter, lid: &str) -> String {
        let w = e.b.op(format!("udiv i32 {lid}, {}", self.wave()));
        match self {
            MatrixUnit::MmaSync => w,
            _ => {
                e.b.call("i32", "llvm.amdgcn.readfirstlane.i32", &[("i32", &w)])
            }
        }
    }

    /// One instruction: `acc + a · b`, with `a` and `b` as `<n x i16>` bit patterns of `elem`
    /// and `acc` as `<c x float>`.
    fn call(self, e: &mut Emitter, elem: Ty, a: &str, b: &str, acc: &str) -> String {
        let [fa, fb, fc] = self.fragments();
        let (na, nb, nc) = (fa.offsets.len(), fb.offsets.len(), fc.offsets.len());
        let acc_ty = format!("<{nc} x float>");
        let bf16 = elem == Ty::Bf16;
        let amd_operand = |e: &mut Emitter, v: &str, n: usize| -> (String, String) {
            if bf16 {
                (format!("<{n} x i16>"), v.to_string())
            } else {
                let h = e.b.op(format!("bitcast <{n} x i16> {v} to <{n} x half>"));
                (format!("<{n} x half>"), h)
            }
        };
        match self {
            MatrixUnit::Mfma => {
                let name = if bf16 {
                    "llvm.amdgcn.mfma.f32.16x16x16bf16.1k"
                } else {
                    "llvm.amdgcn.mfma.f32.16x16x16f16"
                };
                let (ta, va) = amd_operand(e, a, na);
                let (tb, vb) = amd_operand(e, b, nb);
                e.b.call(
                    &acc_ty,
                    name,
                    &[
                        (&ta, &va),
                        (&tb, &vb),
                        (&acc_ty, acc),
                        ("i32", "0"),
                        ("i32", "0"),
                        ("i32", "0"),
                    ],
                )
            }
            MatrixUnit::Wmma11 | MatrixUnit::Wmma12 => {
                let name = if bf16 {
                    "llvm.amdgcn.wmma.f32.16x16x16.bf16"
                } else {
                    "llvm.amdgcn.wmma.f32.16x16x16.f16"
                };
                let (ta, va) = amd_operand(e, a, na);
                let (tb, vb) = amd_operand(e, b, nb);
                e.b.call(&acc_ty, name, &[(&ta, &va), (&tb, &vb), (&acc_ty, acc)])
            }
            MatrixUnit::MmaSync => {
                let mut words = Vec::new();
                for (v, n) in [(a, na), (b, nb)] {
                    let w =
                        e.b.op(format!("bitcast <{n} x i16> {v} to <{} x i32>", n / 2));
                    for i in 0..n / 2 {
                        words
                            .push(e.b.op(format!("extractelement <{} x i32> {w}, i32 {i}", n / 2)));
                    }
                }
                mma_sync(e, elem, &words[..na / 2], &words[na / 2..], acc)
            }
        }
    }
}

/// One `mma.sync.m16n8k16` on operand registers as PTX holds them (`a`: 4 words, `b`: 2, each
/// two 16-bit `elem` values) and `acc` as `<4 x float>`; returns the new accumulator.
fn mma_sync(e: &mut Emitter, elem: Ty, a: &[String], b: &[String], acc: &str) -> String {
    let (name, word) = if elem == Ty::Bf16 {
        ("llvm.nvvm.mma.m16n8k16.row.col.bf16", "i32")
    } else {
        ("llvm.nvvm.mma.m16n8k16.row.col.f32.f32", "<2 x half>")
    };
    let words: Vec<String> = a
        .iter()
        .chain(b)
        .map(|w| {
            if elem == Ty::Bf16 {
                w.clone()
            } else {
                e.b.op(format!("bitcast i32 {w} to <2 x half>"))
            }
        })
        .collect();
    let mut accs = Vec::new();
    for i in 0..4 {
        accs.push(e.b.op(format!("extractelement <4 x float> {acc}, i32 {i}")));
    }
    let mut args: Vec<(&str, &str)> = words.iter().map(|w| (word, w.as_str())).collect();
    args.extend(accs.iter().map(|c| ("float", c.as_str())));
    let st = "{float, float, float, float}";
    let r = e.b.call(st, name, &args);
    let mut out = "poison".to_string();
    for i in 0..4 {
        let x = e.b.op(format!("extractvalue {st} {r}, {i}"));
        out = e.b.op(format!(
            "insertelement <4 x float> {out}, float {x}, i32 {i}"
        ));
    }
    out
}

/// The shapes of one dot: `acc` (M x N) += `a` (M x K) · `b` (K x N).
pub(crate) struct DotShape {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    pub elem: Ty,
}

/// Whether `unit` can run this dot in a workgroup of `wg` work-items.
pub(crate) fn fits(unit: MatrixUnit, wg: u32, s: &DotShape, acc_elem: Ty, b_elem: Ty) -> bool {
    let (im, in_, ik) = unit.shape();
    matches!(s.elem, Ty::Bf16 | Ty::F16)
        && b_elem == s.elem
        && acc_elem == Ty::F32
        && wg.is_multiple_of(unit.wave())
        && s.m.is_multiple_of(im)
        && s.n.is_multiple_of(in_)
        && s.k.is_multiple_of(ik)
}

/// The tiles of one dot: `acc += a · b`.
pub(crate) struct DotTiles {
    pub acc: u32,
    pub a: u32,
    pub b: u32,
}

/// One operand's fragment placed in its tile: the lane's base coordinates, computed once,
/// and the tile's row length.
struct Placed<'f> {
    frag: &'f Fragment,
    base: (String, String),
    cols: u32,
}

impl<'f> Placed<'f> {
    fn new(e: &mut Emitter, frag: &'f Fragment, lane: &str, cols: u32) -> Self {
        let base = (frag.base_row.emit(e, lane), frag.base_col.emit(e, lane));
        Placed { frag, base, cols }
    }

    /// The tile index of element `j` of the sub-matrix that starts at (`row0`, `col0`).
    fn index(&self, e: &mut Emitter, row0: &str, col0: &str, j: usize) -> String {
        let (dr, dc) = self.frag.offsets[j];
        let r = e.b.op(format!("add nuw i32 {row0}, {}", self.base.0));
        let r = e.b.op(format!("add nuw i32 {r}, {dr}"));
        let c = e.b.op(format!("add nuw i32 {col0}, {}", self.base.1));
        let c = e.b.op(format!("add nuw i32 {c}, {dc}"));
        let rc = e.b.op(format!("mul nuw i32 {r}, {}", self.cols));
        e.b.op(format!("add nuw i32 {rc}, {c}"))
    }

    /// The lane's raw elements of tile `t` as a vector of `ty`.
    fn gather(&self, e: &mut Emitter, t: u32, row0: &str, col0: &str, ty: &str) -> String {
        let n = self.frag.offsets.len();
        let mut v = "poison".to_string();
        for j in 0..n {
            let i = self.index(e, row0, col0, j);
            let x = read_raw(e, t, &i);
            v =
                e.b.op(format!("insertelement <{n} x {ty}> {v}, {ty} {x}, i32 {j}"));
        }
        v
    }
}

/// Lowers `acc += a · b` on `unit` (the caller checked [`fits`]).
pub(crate) fn lower_dot(e: &mut Emitter, unit: MatrixUnit, wg: u32, s: &DotShape, t: &DotTiles) {
    if unit == MatrixUnit::MmaSync && s.n.is_multiple_of(16) {
        return lower_dot_ldmatrix(e, wg, s, t);
    }
    let (im, in_, ik) = unit.shape();
    let [fa, fb, fc] = unit.fragments();
    let lid = e.lid.clone();
    let lane = e.b.op(format!("urem i32 {lid}, {}", unit.wave()));
    let wave = unit.wave_index(e, &lid);
    let pa = Placed::new(e, &fa, &lane, s.k);
    let pb = Placed::new(e, &fb, &lane, s.n);
    let pc = Placed::new(e, &fc, &lane, s.n);
    let sub_cols = s.n / in_;
    let subtiles = (s.m / im) * sub_cols;
    let acc_ty = format!("<{} x float>", fc.offsets.len());
    strided_loop(e, &wave, wg / unit.wave(), subtiles, &mut |e, sub| {
        let sm = e.b.op(format!("udiv i32 {sub}, {sub_cols}"));
        let sn = e.b.op(format!("urem i32 {sub}, {sub_cols}"));
        let row0 = e.b.op(format!("mul nuw i32 {sm}, {im}"));
        let col0 = e.b.op(format!("mul nuw i32 {sn}, {in_}"));
        let c0 = pc.gather(e, t.acc, &row0, &col0, "float");
        let sum = e.carried_loop(s.k / ik, &acc_ty, &[c0], |e, step, c| {
            let k0 = e.b.op(format!("mul nuw i32 {step}, {ik}"));
            let a = pa.gather(e, t.a, &row0, &k0, "i16");
            let b = pb.gather(e, t.b, &k0, &col0, "i16");
            vec![unit.call(e, s.elem, &a, &b, &c[0])]
        });
        for j in 0..fc.offsets.len() {
            let i = pc.index(e, &row0, &col0, j);
            let x =
                e.b.op(format!("extractelement {acc_ty} {}, i32 {j}", sum[0]));
            write(e, t.acc, &i, &x);
        }
    });
}

/// The `m16n8` sub-tiles a warp of [`lower_dot_ldmatrix`] takes at once in a dot with
/// `sub_cols` of them per 16-row strip and `strips` strips: the largest even divisor of
/// `sub_cols` up to 8 that still gives each of the `warps` a group, else 2.
fn ldmatrix_group(strips: u32, sub_cols: u32, warps: u32) -> u32 {
    [8, 6, 4, 2]
        .into_iter()
        .find(|&g| sub_cols.is_multiple_of(g) && strips * (sub_cols / g) >= warps)
        .unwrap_or(2)
}

/// Row and column, in an 8 x 8 block grid of a 16 x 16 sub-matrix, of the row that lane `l`
/// gives `ldmatrix.x4` the address of: lanes 8i to 8i + 7 give the rows of matrix i, and the
/// matrices are (rows 0-7, cols 0-7), (8-15, 0-7), (0-7, 8-15), (8-15, 8-15).
fn ldmatrix_row(lane: &str, e: &mut Emitter) -> (String, String) {
    let r = e.b.op(format!("urem i32 {lane}, 16"));
    let q = e.b.op(format!("udiv i32 {lane}, 16"));
    let c = e.b.op(format!("mul nuw i32 {q}, 8"));
    (r, c)
}

/// `ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16` at element `i` of 16-bit tile `t`: four
/// words, matrix 0 to 3.
fn ldmatrix(e: &mut Emitter, t: u32, i: &str, trans: bool) -> Vec<String> {
    let p = elem_ptr(e, t, i);
    let st = "{i32, i32, i32, i32}";
    let name = if trans {
        "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.trans.b16"
    } else {
        "llvm.nvvm.ldmatrix.sync.aligned.m8n8.x4.b16"
    };
    let r = e.b.call(st, name, &[("ptr addrspace(3)", &p)]);
    (0..4)
        .map(|j| e.b.op(format!("extractvalue {st} {r}, {j}")))
        .collect()
}

/// `acc += a · b` on `mma.sync.m16n8k16` with `ldmatrix` operand loads (`s.n` a multiple of
/// 16, tiles row-major with 16-byte rows aligned, as [`lse_dsl::ir::Kernel::workgroup_block`]
/// and the tile globals place them). Warp `w` takes groups `w, w + warps, ...` of G sub-tiles
/// of one 16-row strip ([`ldmatrix_group`]), holds their accumulators in registers over K,
/// and per K step loads the strip's A fragment once (`ldmatrix.x4`) and each two sub-tiles'
/// B fragments once (`ldmatrix.x4.trans` on the K x N tile: matrices 0 and 1 are the first
/// sub-tile's k 0-7 and 8-15, 2 and 3 the second's).
fn lower_dot_ldmatrix(e: &mut Emitter, wg: u32, s: &DotShape, t: &DotTiles) {
    let unit = MatrixUnit::MmaSync;
    let [_, _, fc] = unit.fragments();
    let warps = wg / unit.wave();
    let (strips, sub_cols) = (s.m / 16, s.n / 8);
    let g = ldmatrix_group(strips, sub_cols, warps);
    let groups = sub_cols / g;
    let lid = e.lid.clone();
    let lane = e.b.op(format!("urem i32 {lid}, 32"));
    let warp = unit.wave_index(e, &lid);
    let (lr, lc) = ldmatrix_row(&lane, e);
    let pc = Placed::new(e, &fc, &lane, s.n);
    strided_loop(e, &warp, warps, strips * groups, &mut |e, u| {
        let sm = e.b.op(format!("udiv i32 {u}, {groups}"));
        let gi = e.b.op(format!("urem i32 {u}, {groups}"));
        let row0 = e.b.op(format!("mul nuw i32 {sm}, 16"));
        let col0 = e.b.op(format!("mul nuw i32 {gi}, {}", g * 8));
        let mut cols = Vec::new();
        let mut accs = Vec::new();
        for j in 0..g {
            let c = e.b.op(format!("add nuw i32 {col0}, {}", 8 * j));
            accs.push(pc.gather(e, t.acc, &row0, &c, "float"));
            cols.push(c);
        }
        // The lane's A row (of the strip) and B column (of the group), fixed over K.
        let a_row = e.b.op(format!("add nuw i32 {row0}, {lr}"));
        let a_row = e.b.op(format!("mul nuw i32 {a_row}, {}", s.k));
        let a_at = e.b.op(format!("add nuw i32 {a_row}, {lc}"));
        let b_col = e.b.op(format!("add nuw i32 {col0}, {lc}"));
        let sums = e.carried_loop(s.k / 16, "<4 x float>", &accs, |e, step, c| {
            let k0 = e.b.op(format!("mul nuw i32 {step}, 16"));
            let ia = e.b.op(format!("add nuw i32 {a_at}, {k0}"));
            let a = ldmatrix(e, t.a, &ia, false);
            let b_row = e.b.op(format!("add nuw i32 {k0}, {lr}"));
            let b_row = e.b.op(format!("mul nuw i32 {b_row}, {}", s.n));
            let mut out = Vec::new();
            for pair in 0..g / 2 {
                let ib = e.b.op(format!("add nuw i32 {b_row}, {b_col}"));
                let ib = e.b.op(format!("add nuw i32 {ib}, {}", 16 * pair));
                let b = ldmatrix(e, t.b, &ib, true);
                for half in 0..2 {
                    let j = (2 * pair + half) as usize;
                    let bw = &b[2 * half as usize..2 * half as usize + 2];
                    out.push(mma_sync(e, s.elem, &a, bw, &c[j]));
                }
            }
            out
        });
        for (sum, col) in sums.iter().zip(&cols) {
            for j in 0..fc.offsets.len() {
                let i = pc.index(e, &row0, col, j);
                let x = e.b.op(format!("extractelement <4 x float> {sum}, i32 {j}"));
                write(e, t.acc, &i, &x);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNITS: [MatrixUnit; 4] = [
        MatrixUnit::Mfma,
        MatrixUnit::Wmma11,
        MatrixUnit::Wmma12,
        MatrixUnit::MmaSync,
    ];

    /// How often each cell of a `rows x cols` matrix is held by some (lane, element).
    fn coverage(unit: MatrixUnit, f: &Fragment, rows: u32, cols: u32) -> Vec<u32> {
        let mut seen = vec![0u32; (rows * cols) as usize];
        for lane in 0..unit.wave() {
            for j in 0..f.offsets.len() {
                let (r, c) = f.coord(lane, j);
                assert!(
                    r < rows && c < cols,
                    "{unit:?} lane {lane} element {j}: ({r}, {c})"
                );
                seen[(r * cols + c) as usize] += 1;
            }
        }
        seen
    }

    #[test]
    fn every_fragment_covers_its_sub_matrix_evenly() {
        for unit in UNITS {
            let (m, n, k) = unit.shape();
            let [fa, fb, fc] = unit.fragments();
            let copies = if unit == MatrixUnit::Wmma11 { 2 } else { 1 };
            for (name, f, rows, cols, times) in [
                ("A", &fa, m, k, copies),
                ("B", &fb, k, n, copies),
                ("C", &fc, m, n, 1),
            ] {
                let seen = coverage(unit, f, rows, cols);
                assert!(
                    seen.iter().all(|&x| x == times),
                    "{unit:?} {name}: cells held {seen:?} times, expected {times}"
                );
            }
        }
    }

    #[test]
    fn documented_layout_points() {
        let [a, b, c] = MatrixUnit::Mfma.fragments();
        // CDNA 16x16x16: lane 17 holds A row 1, k 4..8; C rows 4..8 of column 1.
        assert_eq!(a.coord(17, 0), (1, 4));
        assert_eq!(b.coord(17, 3), (7, 1));
        assert_eq!(c.coord(17, 2), (6, 1));
        let [_, _, c] = MatrixUnit::Wmma11.fragments();
        // RDNA3: accumulator element v of lane l is row 2v + l / 16, column l % 16.
        assert_eq!(c.coord(21, 3), (7, 5));
        let [a, _, c] = MatrixUnit::Wmma12.fragments();
        // RDNA4: lanes 16..32 hold k 8..16; accumulator rows 8 (l / 16) + v.
        assert_eq!(a.coord(18, 1), (2, 9));
        assert_eq!(c.coord(18, 1), (9, 2));
        let [a, b, c] = MatrixUnit::MmaSync.fragments();
        // PTX m16n8k16: group g = lane / 4, t = lane % 4; a2 is (g, 2t + 8), b1 (2t + 8, g),
        // c3 (g + 8, 2t + 1).
        assert_eq!(a.coord(6, 4), (1, 12));
        assert_eq!(a.coord(6, 3), (9, 5));
        assert_eq!(b.coord(6, 2), (12, 1));
        assert_eq!(c.coord(6, 3), (9, 5));
    }

    /// What `ldmatrix.x4` gives lane `lane` as its word `word` (PTX ISA, "ldmatrix"): the two
    /// elements of matrix `word` at (row lane / 4, columns 2 (lane % 4) and + 1), transposed
    /// with `.trans`; row r of matrix i is the 16-byte row whose address lane 8i + r gives,
    /// here `(l % 16, 8 (l / 16))` of the sub-matrix, as `ldmatrix_row` computes it.
    fn ldmatrix_elements(lane: u32, word: u32, trans: bool) -> [(u32, u32); 2] {
        let source = |l: u32| (l % 16, 8 * (l / 16));
        [0, 1].map(|h| {
            let (r, c) = if trans {
                (2 * (lane % 4) + h, lane / 4)
            } else {
                (lane / 4, 2 * (lane % 4) + h)
            };
            let (row, col) = source(8 * word + r);
            (row, col + c)
        })
    }

    #[test]
    fn ldmatrix_words_are_the_mma_sync_fragments() {
        let [fa, fb, _] = MatrixUnit::MmaSync.fragments();
        for lane in 0..32 {
            // A (16 x 16, row-major): word w holds elements 2w and 2w + 1 of the fragment.
            for w in 0..4 {
                let got = ldmatrix_elements(lane, w, false);
                let want = [0, 1].map(|h| fa.coord(lane, (2 * w + h) as usize));
                assert_eq!(got, want, "A lane {lane} word {w}");
            }
            // B (K x N, row-major, two n8 sub-tiles side by side) with `.trans`: words 0 and
            // 1 are the first sub-tile's b0 b1 and b2 b3, words 2 and 3 the second's.
            for w in 0..4 {
                let got = ldmatrix_elements(lane, w, true);
                let (sub, j) = (w / 2, w % 2);
                let want = [0, 1].map(|h| {
                    let (k, n) = fb.coord(lane, (2 * j + h) as usize);
                    (k, n + 8 * sub)
                });
                assert_eq!(got, want, "B lane {lane} word {w}");
            }
        }
    }

    #[test]
    fn ldmatrix_groups_use_every_warp_when_they_can() {
        // The GEMM's 64 x 64 accumulator on 2 warps: 4 strips of 8 sub-tiles, whole strips.
        assert_eq!(ldmatrix_group(4, 8, 2), 8);
        // One strip on 4 warps: groups of 2, one per warp.
        assert_eq!(ldmatrix_group(1, 8, 4), 2);
        assert_eq!(ldmatrix_group(1, 6, 2), 2);
        assert_eq!(ldmatrix_group(2, 12, 2), 6);
        // Fewer sub-tiles than warps: pairs, some warps idle.
        assert_eq!(ldmatrix_group(1, 2, 8), 2);
    }

    #[test]
    fn units_follow_the_architecture() {
        assert_eq!(MatrixUnit::for_amdgpu("gfx942"), Some(MatrixUnit::Mfma));
        assert_eq!(MatrixUnit::for_amdgpu("gfx90a"), Some(MatrixUnit::Mfma));
        assert_eq!(MatrixUnit::for_amdgpu("gfx1100"), Some(MatrixUnit::Wmma11));
        assert_eq!(MatrixUnit::for_amdgpu("gfx1201"), Some(MatrixUnit::Wmma12));
        assert_eq!(MatrixUnit::for_amdgpu("gfx1030"), None);
        assert_eq!(MatrixUnit::for_amdgpu("gfx908"), None);
    }
}
