//! Host lowering of the tile statements. Each tile is a stack array of the host function,
//! zeroed at the start of every workgroup unless every element is written before anything
//! reads it (the zeros could not be seen; a GEMM workgroup spent up to 48 KiB of `memset`
//! on tiles its loads then overwrote); each statement runs once per workgroup.
//!
//! - Loads, stores, `tile_zero` and `tile_add` are element loops with parallel-access
//!   metadata, vectorised by LLVM; a window that covers the whole tile takes a branch-free
//!   copy of the loop. A whole transposed window loaded into an f32 tile or a pair-layout
//!   bf16 tile, or stored from an f32 tile to an f32 buffer, is instead moved in 16 x 16
//!   blocks of 32-bit units through a shuffle transpose: element by element, each unit cost
//!   a strided access. A whole untransposed window loaded into a pair-layout tile is
//!   interleaved two rows at a time. A window on an f32 shared array (a stack array of the
//!   host function, like the tiles) takes the same loops and transposed blocks as one on an
//!   f32 buffer.
//! - A tile used only as the `a` operand of dots and loaded only from untransposed windows of
//!   read-only buffers of its own type (the GEMM's activation or weight rows) is read in place
//!   when the window is whole: the load records where the window starts and its row stride
//!   (a [`View`]), and the dot reads the buffer there. A partial window is copied,
//!   zero-padded, as for any tile, and the view points at the copy. A tile loaded from a
//!   shared array is copied (the work-items may write the array after the load), but for a
//!   byte `b` operand below. A pair-layout `b` operand (below) loaded only from pairs
//!   windows (`tile_load_pairs`) of such buffers is read in place the same way: a pairs
//!   window's memory rows are the layout's rows, and so is the row-major `b` operand of a dot
//!   on `fma` register blocks. So is a [`Layout::Quads`] `b` operand loaded by
//!   `tile_load_quads`, whose words are the layout's, from a buffer or from a shared array that
//!   nothing writes between its one load and the dots that read it
//!   ([`shared_reads_settled`]): the integer GEMMs' unpacked weight words, which a copy moved
//!   once more (in `benches/gemm_quant.rs` the K-quant GEMMs at 512 x 3584 x 1024 ran 8 to 10%
//!   faster relative to the f32 path without it). An f32 `a` operand of such dots loaded only
//!   from plain windows of a read-only bf16 (or f16) buffer is stored in that type
//!   ([`narrowed`]) and read in place too, each element widened (exactly) as the dot
//!   broadcasts it: the f32-activation GEMM's weight rows. A whole pairs window loaded into
//!   any other 16-bit tile (or one widened to f32), or stored from one, moves two rows per
//!   vector load or store.
//! - A load of a whole buffer window inside a uniform loop also prefetches, into L2, the window it
//!   will load at the loop's next step (its offset evaluated with the loop variable advanced,
//!   when that cannot read memory or trap): without it a GEMM block's 64 rows, one or two
//!   cache lines each per step, were 64 streams the hardware prefetcher does not follow, and
//!   the loads waited on memory. The dot's register blocks prefetch into L1 the in-place rows
//!   of the next row of blocks; in a fused K loop, blocks of one column vector (the few-row
//!   GEMMs) their own rows four steps ahead instead ([`HostPhases::prefetch_steps_ahead`]).
//! - `tile_dot` with bf16 operands on the levels with AVX512-BF16 stores its `b` operand in
//!   the pair layout (VNNI: rows `2i` and `2i + 1` interleaved), which its load writes
//!   directly (or reads in place, from a pairs window), and then:
//!   - on `x86-64-v4-amx`, when the shapes are multiples of 16 x 16 x 32, runs on AMX: 16 x 16
//!     f32 accumulator tiles, 2 x 2 of them at a time with their A and B tiles (all 8 tile
//!     registers), `tdpbf16ps` over every 32-wide K step (LLVM inserts `ldtilecfg`); the
//!     operands are read where their views point, so a K loop of only their loads and the
//!     dot runs fused ([`fused`]) with the accumulator tiles in tile registers throughout;
//!   - otherwise, when N is a multiple of 16 and K even, runs `vdpbf16ps`: register blocks of
//!     up to 4 rows x 64 columns (16 zmm accumulators) over the K pairs, each B vector used by
//!     4 rows and each broadcast A pair by 4 vectors. A K loop of only the two operands' loads
//!     (both read in place) and such a dot runs each register block through all of its steps
//!     ([`fused`]), its accumulators in registers throughout.
//! - `tile_dot` of i16 tiles on the levels with AVX512-VNNI stores its `b` operand in the
//!   same pair layout (an i32 window's rows truncated to i16 and interleaved as they load) and
//!   runs `vpdpwssd` in the same register blocks into i32 accumulators: exact products,
//!   wrapping sums, so bit-identical to the reference. A dot of an i8 by a u8 tile stores
//!   `b` in fours of rows ([`Layout::Quads`]: a `tile_load_quads` window's words as they are,
//!   an i32 window's rows narrowed and interleaved) and runs `vpdpbusd`, the u8 operand
//!   first. `tile_dot_scaled` starts the block's accumulators at zero (or at their rows'
//!   offsets, broadcast) and, after the K steps, adds them times the columns' scales
//!   (`vpmulld`) to `acc`; `tile_dot_dequant` likewise
//!   converts them to f32, adds the rows' offsets and adds them times the rows' by the
//!   columns' scales to its f32 `acc`, 16 lanes at a time. Elsewhere an integer dot is the
//!   element loop in wrapping i32.
//! - Any other `tile_dot` with N a multiple of 16 on levels with FMA runs in register blocks
//!   with `fma` on 16-lane vectors: 4 rows x 64 columns on x86-64-v4 (16 of its 32 zmm
//!   registers), 6 rows x 16 columns on the AVX2 levels (12 of their 16 ymm registers; a
//!   4 x 64 block there spilled, and ran at a third of the speed); with both operands read
//!   in place, a K loop of only their loads and the dot runs fused ([`fused`]). Its bf16 and
//!   f16 operand tiles, when only dots read them and they load from buffers of their own
//!   type, are stored widened to f32 (each element widened once per load, not once per
//!   register block that reads it: the bf16 GEMM on x86-64-v3 ran about 3 times faster),
//!   but that a bf16 `b` loaded from pairs windows stays in pairs, read in place, one load
//!   per 16 columns of two K rows with each half widened in the vector (a shift or a mask)
//!   for 12 rows x 32 columns on x86-64-v4 ([`fma_pairs_b`]). A bf16 `a` read in
//!   place is read a K pair per row at a time: one 32-bit broadcast, a shift or a mask per
//!   element (five scalar instructions and a broadcast from a general register each, on the
//!   ports the `fma`s need, held the f32-activation GEMM at 62% of the `vfmadd` peak);
//!   other 16-bit operands are widened as they are read. Every other `tile_dot` is
//!   `acc[m][n] = fma(a[m][k], b[k][n], acc[m][n])` with n innermost (vectorised). Both add
//!   the products with one rounding each in the generated Rust's order (increasing k; for
//!   two bf16 operands each pair's odd k first, as `vdpbf16ps`: [`dot_step`]), so they agree
//!   with it bit for bit.
//! - `tile_row_sum` and `tile_row_max` of an f32 tile whose sides are multiples of 16 run 16
//!   rows at a time on x86-64-v4: each 16 x 16 block is transposed into column vectors and
//!   folded into a vector of the rows' running values in increasing column order, so every
//!   row sees the scalar loop's operations (one dependent scalar operation per element made
//!   them 13 to 15% of the tile attention kernel's time). Other shapes and levels take the
//!   scalar loop per row.

mod fused;

use super::remat::{pure, rewrite_expr};
use super::{HostPhases, LoopHint};
use crate::emit::{
    convert, dequant_sum, dot_step, lty, scaled_sum, tile_binary, tile_binary_x16, Emitter,
    Lowered, WindowVals,
};
use lse_dsl::ir::{
    each_tile_op, Access, BinOp, Block, DotScale, Expr, ExprKind, Kernel, Param, SharedId, Stmt,
    TileBinary, TileDecl, TileId, TileMem, TileOp, TileWindow, Ty,
};

/// How a tile's elements are laid out in its stack array.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Layout {
    /// Element `(r, c)` at `r * cols + c`.
    RowMajor,
    /// Rows paired (AMX's VNNI layout for the `b` operand): `(r, c)` at
    /// `(r / 2) * 2 * cols + 2 * c + r % 2`; an odd row count is padded with a zero row.
    Pairs,
    /// Rows in fours (`vpdpbusd`'s layout for a byte `b` operand): `(r, c)` at
    /// `(r / 4) * 4 * cols + 4 * c + r % 4`; the rows padded to a multiple of 4 with zeros.
    Quads,
}

/// One tile's stack array.
pub(super) struct HostTile {
    ptr: String,
    decl: TileDecl,
    layout: Layout,
    /// Where the tile's elements are read from, when it may be read in place.
    view: Option<View>,
    /// Whether its stack array is zeroed at the start of each workgroup: false when every
    /// element is written before anything reads it ([`read_before_written`]), so the zeros
    /// could not be seen.
    zero_fill: bool,
    /// A 16-bit float tile stored as f32 ([`widened`]; `decl.elem` is then f32).
    widened: bool,
}

/// A tile read where its elements are (a row-major `a` operand, or a pair-layout `b` one with
/// its pair rows as rows, or a quads-layout `b` one with its fours of rows as rows): a load of
/// a whole window points the view
/// at the window (no copy); a load of a partial window copies it, zero-padded, into the
/// tile's stack array and points the view there. The two slots are stack variables that
/// LLVM promotes to registers.
struct View {
    /// Slot holding the address of element (0, 0).
    base: String,
    /// Slot holding the distance between rows (pair rows, rows of four), in elements (`i32`).
    stride: String,
}

impl HostTile {
    /// The distance between the rows of the tile's own array as a [`View`] reads them: a
    /// row, a pair of rows or four rows of its columns.
    fn own_row(&self) -> u32 {
        match self.layout {
            Layout::Pairs => 2 * self.decl.cols,
            Layout::Quads => 4 * self.decl.cols,
            Layout::RowMajor => self.decl.cols,
        }
    }

    fn elems(&self) -> u32 {
        match self.layout {
            Layout::RowMajor => self.decl.len(),
            Layout::Pairs => self.decl.rows.div_ceil(2) * 2 * self.decl.cols,
            Layout::Quads => self.decl.rows.div_ceil(4) * 4 * self.decl.cols,
        }
    }

    fn bytes(&self) -> u32 {
        self.elems() * self.decl.elem.size_bytes()
    }
}

/// Whether the shapes of `acc += a b` suit a packed instruction (`vdpbf16ps`, `vpdpwssd`,
/// `vpdpbusd`): N a multiple of 16, K a multiple of the values per 32-bit lane.
fn pairs_shape(acc: &TileDecl, a: &TileDecl) -> bool {
    let per_lane = 4 / a.elem.size_bytes();
    acc.cols.is_multiple_of(16) && a.cols.is_multiple_of(per_lane)
}

/// Whether AMX applies to `acc += a b` (bf16, shapes multiples of 16 x 16 x 32).
fn amx_shape(acc: &TileDecl, a: &TileDecl) -> bool {
    a.elem == Ty::Bf16
        && pairs_shape(acc, a)
        && acc.rows.is_multiple_of(16)
        && a.cols.is_multiple_of(32)
}

/// The stack arrays of `k`'s tiles. The `b` operands of dots whose operand type has a packed
/// instruction on the level (`pair_dot`) and whose shapes [`pairs_shape`] accepts get
/// [`Layout::Pairs`] ([`Layout::Quads`] for `vpdpbusd`), as do bf16 `b` operands loaded
/// from pairs windows of dots that no such instruction takes, on levels with FMA
/// ([`fma_pairs_b`]); tiles that [`viewable`] accepts get a [`View`].
pub(super) fn allocate(
    e: &mut Emitter,
    k: &Kernel,
    pair_dot: impl Fn(Ty) -> Option<Micro>,
    fma: bool,
) -> Vec<HostTile> {
    let mut packed = vec![Layout::RowMajor; k.tiles.len()];
    let mut pairs_b = vec![false; k.tiles.len()];
    each_tile_op(&k.body, &mut |op| {
        let TileOp::Dot { acc, a, b, .. } = op else {
            return;
        };
        match pair_dot(k.tiles[*a as usize].elem) {
            Some(micro)
                if a != b && pairs_shape(&k.tiles[*acc as usize], &k.tiles[*a as usize]) =>
            {
                packed[*b as usize] = micro.b_layout();
            }
            None if fma && fma_pairs_b(k, op) => {
                packed[*b as usize] = Layout::Pairs;
                pairs_b[*b as usize] = true;
            }
            _ => {}
        }
    });
    let fma = FmaBlocks {
        on: fma,
        pairs_b: &pairs_b,
    };
    let widened = widened(k, &packed, fma);
    let narrowed = narrowed(k, &packed, fma);
    let stored: Vec<Ty> = k
        .tiles
        .iter()
        .zip(&narrowed)
        .map(|(d, n)| n.unwrap_or(d.elem))
        .collect();
    let views = viewable(k, &packed, &stored, fma);
    let unwritten = read_before_written(k);
    k.tiles
        .iter()
        .zip(packed)
        .zip(views)
        .zip(unwritten)
        .zip(widened)
        .zip(stored)
        .map(|(((((d, layout), v), unwritten), wide), elem)| {
            let mut t = HostTile {
                ptr: String::new(),
                decl: d.clone(),
                layout,
                view: None,
                zero_fill: unwritten,
                widened: wide,
            };
            t.decl.elem = if wide { Ty::F32 } else { elem };
            // A packed layout's padding rows are never written: they must stay zero.
            t.zero_fill |= t.elems() != d.len();
            t.ptr = e.alloca(&format!("[{} x {}]", t.elems(), lty(t.decl.elem)), 64);
            if v && !wide {
                t.view = Some(View {
                    base: e.alloca("ptr", 8),
                    stride: e.alloca("i32", 4),
                });
            }
            t
        })
        .collect()
}

/// The access of the buffer window `from` loads a tile from, when that buffer holds `elem`
/// (the tile's element type, or the one it is stored in); `None` for a shared array or a
/// buffer of another type.
fn buffer_access(k: &Kernel, elem: Ty, from: &TileWindow) -> Option<Access> {
    match k.params.get(from.buffer()? as usize)? {
        Param::Buffer {
            elem: e, access, ..
        } if *e == elem => Some(*access),
        _ => None,
    }
}

/// [`buffer_access`] for tile `t`'s own element type.
fn own_buffer_access(k: &Kernel, t: TileId, from: &TileWindow) -> Option<Access> {
    buffer_access(k, k.tiles[t as usize].elem, from)
}

/// What a level's `fma` register blocks take: whether it has FMA at all, and which `b` tiles
/// stay in pairs for them ([`fma_pairs_b`]).
#[derive(Clone, Copy)]
struct FmaBlocks<'p> {
    on: bool,
    pairs_b: &'p [bool],
}

/// Whether `acc += a b` of `k`'s tiles runs in `fma` register blocks on a level with FMA:
/// an f32 accumulator of a multiple of 16 columns, a row-major `a`, a row-major `b` or one
/// left in pairs for the blocks ([`fma_pairs_b`]), no scale.
fn fma_blocked(k: &Kernel, packed: &[Layout], fma: FmaBlocks<'_>, op: &TileOp) -> bool {
    let TileOp::Dot { acc, a, b, scale } = op else {
        return false;
    };
    let b_ok = match packed[*b as usize] {
        Layout::RowMajor => true,
        Layout::Pairs => fma.pairs_b[*b as usize],
        Layout::Quads => false,
    };
    fma.on
        && scale.is_none()
        && a != b
        && k.tiles[*acc as usize].elem == Ty::F32
        && k.tiles[*acc as usize].cols.is_multiple_of(16)
        && packed[*a as usize] == Layout::RowMajor
        && b_ok
}

/// Whether the `b` operand of `acc += a b` stays in pairs where no pair instruction takes
/// the dot (the `fma` register blocks): a bf16 `b` loaded only from pairs windows, an f32
/// accumulator of a multiple of 16 columns, an even K, no scale. Its register blocks read 16
/// columns of two K rows in one load and widen each half in the vector (a shift or a mask),
/// where a row-major copy widened the whole tile each step. (An f16 `b` keeps the copy: each
/// half took a narrowing and a conversion, and an F16 checkpoint ran 15% slower.)
fn fma_pairs_b(k: &Kernel, op: &TileOp) -> bool {
    let TileOp::Dot { acc, a, b, scale } = op else {
        return false;
    };
    let (dc, da, db) = (
        &k.tiles[*acc as usize],
        &k.tiles[*a as usize],
        &k.tiles[*b as usize],
    );
    let mut only_pairs = true;
    let mut loaded = false;
    each_tile_op(&k.body, &mut |o| match o {
        TileOp::Load { dst, from } if dst == b => {
            loaded = true;
            only_pairs &= from.pairs;
        }
        _ => {}
    });
    scale.is_none()
        && a != b
        && dc.elem == Ty::F32
        && dc.cols.is_multiple_of(16)
        && da.cols.is_multiple_of(2)
        && db.elem == Ty::Bf16
        && loaded
        && only_pairs
}

/// The 16-bit float type the host stores an f32 tile in, for tiles used only as the `a`
/// operand of dots that run on `fma` register blocks ([`fma_blocked`]) and loaded only from
/// plain windows (not transposed) of read-only buffers of that one type: the values are that
/// type's anyway, so the tile can be read in place from the buffer ([`viewable`]) and each
/// element is widened (exactly) as the dot broadcasts it. The f32-activation GEMM's weight
/// rows: no copy and no widening pass per K step, and its K loop runs fused ([`fused`]).
fn narrowed(k: &Kernel, packed: &[Layout], fma: FmaBlocks<'_>) -> Vec<Option<Ty>> {
    let mut source: Vec<Option<Ty>> = vec![None; k.tiles.len()];
    let mut a_operand = vec![false; k.tiles.len()];
    let mut other = vec![false; k.tiles.len()];
    each_tile_op(&k.body, &mut |op| match op {
        TileOp::Load { dst, from } => {
            let t = *dst as usize;
            let half = [Ty::Bf16, Ty::F16]
                .into_iter()
                .find(|&ty| buffer_access(k, ty, from) == Some(Access::Read));
            let plain = !from.transposed && !from.pairs && !from.quads;
            match (half, source[t]) {
                (Some(ty), None) if plain => source[t] = Some(ty),
                (Some(ty), Some(seen)) if plain && ty == seen => {}
                _ => other[t] = true,
            }
        }
        TileOp::Dot { acc, a, b, .. } => {
            a_operand[*a as usize] = true;
            other[*a as usize] |= !fma_blocked(k, packed, fma, op);
            other[*b as usize] = true;
            other[*acc as usize] = true;
        }
        _ => {
            let (reads, writes) = tile_access(op);
            for t in reads.into_iter().chain(writes) {
                other[t as usize] = true;
            }
        }
    });
    (0..k.tiles.len())
        .map(|t| {
            let f32_tile = k.tiles[t].elem == Ty::F32;
            source[t].filter(|_| f32_tile && a_operand[t] && !other[t])
        })
        .collect()
}

/// Which 16-bit float tiles the host stores widened to f32: those used only as the `a` or
/// `b` operand of dots that run on `fma` register blocks (no packed layout for them, an f32
/// accumulator with a multiple of 16 columns, on a level with FMA) and loaded only from
/// buffer windows of their own element type. Widening is exact (for bf16 a shift,
/// [`widen_bits`]), so the dots compute the same results; but each element is widened once
/// per load rather than each time a register block reads it, where a bf16 GEMM on AVX2
/// widened (and quieted NaNs) inside its K loop and ran at a third of the f32 one's speed.
fn widened(k: &Kernel, packed: &[Layout], fma: FmaBlocks<'_>) -> Vec<bool> {
    let half = |t: u32| matches!(k.tiles[t as usize].elem, Ty::Bf16 | Ty::F16);
    let mut operand = vec![false; k.tiles.len()];
    let mut other = vec![false; k.tiles.len()];
    each_tile_op(&k.body, &mut |op| match op {
        TileOp::Load { dst, from } => {
            let own = own_buffer_access(k, *dst, from).is_some();
            other[*dst as usize] |= !own || from.quads;
        }
        TileOp::Dot { acc, a, b, scale } => {
            let blocked = fma_blocked(k, packed, fma, op);
            for t in [*a, *b] {
                operand[t as usize] = true;
                // A pairs `b` stays 16-bit: its register blocks widen it ([`fma_pairs_b`]).
                let paired = packed[t as usize] != Layout::RowMajor;
                other[t as usize] |= !blocked || !half(t) || paired;
            }
            other[*acc as usize] = true;
            for s in scale.iter().flat_map(DotScale::tiles) {
                other[s as usize] = true;
            }
        }
        _ => {
            let (reads, writes) = tile_access(op);
            for t in reads.into_iter().chain(writes) {
                other[t as usize] = true;
            }
        }
    });
    operand.iter().zip(other).map(|(o, x)| *o && !x).collect()
}

/// Which tiles may be read in place ([`View`]), unchanged for as long as they hold a window:
/// those loaded only from read-only buffers of the type they are `stored` in and used only
/// as dot operands of one kind. A row-major `a` operand (or the row-major `b` operand of a
/// dot on `fma` register blocks, [`fma_blocked`]) loads from plain windows (not transposed,
/// not pairs), whose whole rows are the tile's; a [`Layout::Pairs`] `b` operand loads from
/// pairs windows, whose memory rows are the tile's pair rows; a [`Layout::Quads`] `b`
/// operand (of whole fours of rows) from quads windows, whose words are the tile's, also on a
/// shared array where [`shared_reads_settled`] holds (the integer GEMMs' unpacked weights:
/// the copy had been a load and a store per word of them).
fn viewable(k: &Kernel, packed: &[Layout], stored: &[Ty], fma: FmaBlocks<'_>) -> Vec<bool> {
    let mut dotted = vec![false; k.tiles.len()];
    let mut other = vec![false; k.tiles.len()];
    let settled = shared_reads_settled(k);
    each_tile_op(&k.body, &mut |op| match op {
        TileOp::Load { dst, from } => {
            let t = *dst as usize;
            // A packed or quads window's rows are rows of bytes in i32 memory.
            let holds = if from.packed || from.quads {
                Ty::I32
            } else {
                stored[t]
            };
            let read_only = buffer_access(k, holds, from) == Some(Access::Read);
            let (rows_match, settled_shared) = match packed[t] {
                Layout::RowMajor => (!from.transposed && !from.pairs && !from.quads, false),
                Layout::Pairs => (from.pairs, false),
                Layout::Quads => (
                    from.quads && k.tiles[t].rows.is_multiple_of(4),
                    from.buffer().is_none() && settled[t],
                ),
            };
            if !(read_only || settled_shared) || !rows_match {
                other[t] = true;
            }
        }
        TileOp::Dot { acc, a, b, scale } => {
            dotted[*a as usize] = true;
            other[*a as usize] |= packed[*a as usize] != Layout::RowMajor;
            dotted[*b as usize] = true;
            let b_view = matches!(packed[*b as usize], Layout::Pairs | Layout::Quads)
                || fma_blocked(k, packed, fma, op);
            other[*b as usize] |= !b_view;
            other[*acc as usize] = true;
            for s in scale.iter().flat_map(DotScale::tiles) {
                other[s as usize] = true;
            }
        }
        TileOp::Zero { dst } | TileOp::Exp { dst } | TileOp::Scale { dst, .. } => {
            other[*dst as usize] = true;
        }
        TileOp::Store { src, .. } => other[*src as usize] = true,
        TileOp::Binary { dst, src, .. }
        | TileOp::RowReduce { dst, src, .. }
        | TileOp::Copy { dst, src } => {
            other[*dst as usize] = true;
            other[*src as usize] = true;
        }
        TileOp::Dequant { .. } => {
            for t in tile_access(op).0 {
                other[t as usize] = true;
            }
        }
        TileOp::Prefetch { .. } => {}
    });
    dotted.iter().zip(other).map(|(d, o)| *d && !o).collect()
}

/// Which tiles, loaded from a shared array, are read only while the array still holds what
/// they loaded: each such tile has one load, in some statement list, and every statement that
/// reads it comes after the load in that list, with no statement between the load and the
/// last of them that writes the array (a work-item's store, or a tile store, nested ones
/// included). A view of the array then reads what a copy would have held.
fn shared_reads_settled(k: &Kernel) -> Vec<bool> {
    let mut loads = vec![0usize; k.tiles.len()];
    each_tile_op(&k.body, &mut |op| {
        if let TileOp::Load { dst, .. } = op {
            loads[*dst as usize] += 1;
        }
    });
    let mut settled = vec![false; k.tiles.len()];
    settle_block(k, &k.body, &loads, &mut settled);
    settled
}

/// [`shared_reads_settled`] for the loads in `block` and in the blocks nested in it.
fn settle_block(k: &Kernel, block: &Block, loads: &[usize], settled: &mut [bool]) {
    for (i, s) in block.iter().enumerate() {
        match s {
            Stmt::Tile(TileOp::Load { dst, from }) if loads[*dst as usize] == 1 => {
                let TileMem::Shared(array) = from.mem else {
                    continue;
                };
                let t = *dst;
                let rest = &block[i + 1..];
                let Some(last) = rest.iter().rposition(|s| tile_reads(s, t) > 0) else {
                    continue;
                };
                let span = &rest[..=last];
                let all_here = span.iter().map(|s| tile_reads(s, t)).sum::<usize>()
                    == k.body.iter().map(|s| tile_reads(s, t)).sum::<usize>();
                settled[t as usize] = all_here && !span.iter().any(|s| writes_shared(s, array));
            }
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                settle_block(k, then_body, loads, settled);
                settle_block(k, else_body, loads, settled);
            }
            Stmt::For { body, .. } | Stmt::While { body, .. } => {
                settle_block(k, body, loads, settled)
            }
            _ => {}
        }
    }
}

/// How many tile statements in `s` (itself or nested) read tile `t`.
fn tile_reads(s: &Stmt, t: TileId) -> usize {
    let mut n = 0;
    let mut count = |op: &TileOp| n += usize::from(tile_access(op).0.contains(&t));
    match s {
        Stmt::Tile(op) => count(op),
        Stmt::If {
            then_body,
            else_body,
            ..
        } => {
            each_tile_op(then_body, &mut count);
            each_tile_op(else_body, &mut count);
        }
        Stmt::For { body, .. } | Stmt::While { body, .. } => each_tile_op(body, &mut count),
        _ => {}
    }
    n
}

/// Whether `s` (itself or nested) writes shared array `array`: a work-item's store or a tile
/// store to it.
fn writes_shared(s: &Stmt, array: SharedId) -> bool {
    match s {
        Stmt::SharedStore { array: a, .. } => *a == array,
        Stmt::Tile(TileOp::Store { to, .. }) => to.mem == TileMem::Shared(array),
        Stmt::If {
            then_body,
            else_body,
            ..
        } => then_body
            .iter()
            .chain(else_body)
            .any(|s| writes_shared(s, array)),
        Stmt::For { body, .. } | Stmt::While { body, .. } => {
            body.iter().any(|s| writes_shared(s, array))
        }
        _ => false,
    }
}

/// Which tiles a workgroup may read before it has written all of their elements (a load,
/// `tile_zero` or `tile_copy` writes all of them; a partial window's load writes zeros
/// outside the window): on some path through the body a statement reads the tile where
/// no such write has come before it. A loop's body may run no times, and a branch counts
/// only what both of its arms write.
fn read_before_written(k: &Kernel) -> Vec<bool> {
    fn walk(block: &Block, written: &mut [bool], unwritten: &mut [bool]) {
        for s in block {
            match s {
                Stmt::Tile(op) => {
                    let (reads, writes) = tile_access(op);
                    for t in reads {
                        unwritten[t as usize] |= !written[t as usize];
                    }
                    if let Some(t) = writes {
                        written[t as usize] = true;
                    }
                }
                Stmt::If {
                    then_body,
                    else_body,
                    ..
                } => {
                    let mut then_w = written.to_vec();
                    walk(then_body, &mut then_w, unwritten);
                    let mut else_w = written.to_vec();
                    walk(else_body, &mut else_w, unwritten);
                    for (w, (a, b)) in written.iter_mut().zip(then_w.iter().zip(&else_w)) {
                        *w = *a && *b;
                    }
                }
                Stmt::For { body, .. } | Stmt::While { body, .. } => {
                    walk(body, &mut written.to_vec(), unwritten);
                }
                _ => {}
            }
        }
    }
    let mut unwritten = vec![false; k.tiles.len()];
    walk(&k.body, &mut vec![false; k.tiles.len()], &mut unwritten);
    unwritten
}

/// The tiles a statement reads, and the tile it writes whole (if any).
fn tile_access(op: &TileOp) -> (Vec<u32>, Option<u32>) {
    match op {
        TileOp::Zero { dst } | TileOp::Load { dst, .. } => (vec![], Some(*dst)),
        TileOp::Copy { dst, src } => (vec![*src], Some(*dst)),
        TileOp::Store { src, .. } => (vec![*src], None),
        TileOp::Dot { acc, a, b, scale } => {
            let mut r = vec![*acc, *a, *b];
            r.extend(scale.iter().flat_map(DotScale::tiles));
            (r, None)
        }
        TileOp::Binary { dst, src, .. } | TileOp::RowReduce { dst, src, .. } => {
            (vec![*dst, *src], None)
        }
        TileOp::Dequant {
            acc,
            src,
            rows,
            cols,
        } => (vec![*acc, *src, *rows, *cols], None),
        TileOp::Exp { dst } | TileOp::Scale { dst, .. } => (vec![*dst], None),
        TileOp::Prefetch { .. } => (vec![], None),
    }
}

/// `prefetch(buf, offset, len)`: a prefetch into L2 of every cache line of elements
/// `offset .. offset + len` of buffer `buf`, 64 bytes apart from the first element's first
/// byte and one at the last element's last byte (the line a range that starts inside a line
/// ends in); nothing for `len` 0. The addresses are formed in 64 bits without `inbounds`: a
/// range past the buffer's end is prefetched harmlessly (a prefetch never faults).
fn prefetch_range(e: &mut Emitter, buf: u32, offset: &str, len: &str) -> Lowered<()> {
    let (Some(Param::Buffer { elem, .. }), Some(Some(base))) =
        (e.k.params.get(buf as usize), e.bufs.get(buf as usize))
    else {
        return Err(format!("prefetch of parameter {buf}, not a buffer"));
    };
    let (size, base, ptr_ty) = (elem.size_bytes(), base.clone(), e.buf_ptr);
    e.b.declare("declare void @llvm.prefetch.p0(ptr, i32, i32, i32)");
    let any = e.b.op(format!("icmp ne i32 {len}, 0"));
    e.branch_on(&any, &mut |e, taken| {
        if !taken {
            return;
        }
        let at = |e: &mut Emitter, byte: &str| {
            let p =
                e.b.op(format!("getelementptr i8, {ptr_ty} {base}, i64 {byte}"));
            e.b.ins(format!(
                "call void @llvm.prefetch.p0(ptr {p}, i32 0, i32 2, i32 1)"
            ));
        };
        let first = e.b.op(format!("zext i32 {offset} to i64"));
        let first = e.b.op(format!("mul nuw nsw i64 {first}, {size}"));
        let bytes = e.b.op(format!("zext i32 {len} to i64"));
        let bytes = e.b.op(format!("mul nuw nsw i64 {bytes}, {size}"));
        // ceil(bytes / 64) lines, at least 1; at most 2^32 * 8 / 64 = 2^29, an i32 count.
        let lines = e.b.op(format!("add nuw nsw i64 {bytes}, 63"));
        let lines = e.b.op(format!("lshr i64 {lines}, 6"));
        let lines = e.b.op(format!("trunc i64 {lines} to i32"));
        e.carried_loop(&lines, "i32", &[], |e, line, _| {
            let line = e.b.op(format!("zext i32 {line} to i64"));
            let byte = e.b.op(format!("shl nuw nsw i64 {line}, 6"));
            let byte = e.b.op(format!("add nuw nsw i64 {first}, {byte}"));
            at(e, &byte);
            vec![]
        });
        let last = e.b.op(format!("add nuw nsw i64 {first}, {bytes}"));
        let last = e.b.op(format!("sub nuw nsw i64 {last}, 1"));
        at(e, &last);
    });
    Ok(())
}

/// Zero-fills the tiles whose zeros a workgroup could read (at the start of each workgroup)
/// and points every [`View`] at its tile's stack array, so a dot that reads a tile before
/// any load reads its zeros.
pub(super) fn zero_all(e: &mut Emitter, tiles: &[HostTile]) {
    for t in tiles.iter().filter(|t| t.zero_fill) {
        memset0(e, t);
    }
    for t in tiles {
        if let Some(view) = &t.view {
            e.b.ins(format!("store ptr {}, ptr {}", t.ptr, view.base));
            e.b.ins(format!("store i32 {}, ptr {}", t.own_row(), view.stride));
        }
    }
}

fn memset0(e: &mut Emitter, t: &HostTile) {
    e.b.declare("declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)");
    e.b.ins(format!(
        "call void @llvm.memset.p0.i64(ptr align 64 {}, i8 0, i64 {}, i1 false)",
        t.ptr,
        t.bytes()
    ));
}

/// The register-blocked inner product of [`HostPhases::blocked_dot`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Micro {
    /// `vdpbf16ps` on bf16 pairs (AVX512-BF16), `b` in [`Layout::Pairs`].
    Dpbf16,
    /// `vpdpwssd` on i16 pairs into i32 (AVX512-VNNI), `b` in [`Layout::Pairs`]: exact
    /// products, wrapping sums, so equal to the reference in any order.
    Dpwssd,
    /// `vpdpbusd` on fours of u8 by i8 into i32 (AVX512-VNNI), `b` in [`Layout::Quads`]:
    /// exact products and sums (wrapping), as `vpdpwssd`.
    Dpbusd,
    /// `fma` on f32 vectors (16-bit operands widened exactly): per element the reference's
    /// order, so bit-identical to it.
    Fma,
}

impl Micro {
    /// The layout the instruction reads its `b` operand in.
    fn b_layout(self) -> Layout {
        match self {
            Micro::Dpbf16 | Micro::Dpwssd => Layout::Pairs,
            Micro::Dpbusd => Layout::Quads,
            Micro::Fma => Layout::RowMajor,
        }
    }

    /// Operand values per 32-bit lane: K steps of one instruction.
    fn per_lane(self) -> u32 {
        match self {
            Micro::Dpbf16 | Micro::Dpwssd => 2,
            Micro::Dpbusd => 4,
            Micro::Fma => 1,
        }
    }
}

/// `&base[ix]` for an `i32` index `ix` into an array of `ty`.
fn at(e: &mut Emitter, ty: &str, base: &str, ix: &str) -> String {
    let ix64 = e.b.op(format!("zext i32 {ix} to i64"));
    e.b.op(format!(
        "getelementptr inbounds {ty}, ptr {base}, i64 {ix64}"
    ))
}

/// 16 consecutive 32-bit units of a buffer of `src` at `p`, as `<16 x i32>`: with `widen`,
/// 16 elements as f32 bits (f32 as they are, bf16 and f16 widened exactly as [`convert`]
/// does, or for bf16 without `quiet` the bits shifted up, a signaling NaN left signaling);
/// without, 16 words as they are (pairs of bf16).
fn load_units(e: &mut Emitter, p: &str, src: Ty, widen: bool, quiet: bool) -> String {
    match (src, widen) {
        (Ty::Bf16, true) if !quiet => {
            let h = e.b.op(format!("load <16 x i16>, ptr {p}, align 2"));
            widen_units(e, &h, src)
        }
        (Ty::F16, true) => {
            let h = e.b.op(format!("load <16 x i16>, ptr {p}, align 2"));
            widen_units(e, &h, src)
        }
        (Ty::Bf16, true) => {
            // A NaN gets its quiet bit set, as in `half::bf16::to_f32`.
            let h = e.b.op(format!("load <16 x i16>, ptr {p}, align 2"));
            let w = e.b.op(format!("zext <16 x i16> {h} to <16 x i32>"));
            let mag = e.b.op(format!(
                "and <16 x i32> {w}, {}",
                splat_const("i32", "32767")
            ));
            let nan = e.b.op(format!(
                "icmp ugt <16 x i32> {mag}, {}",
                splat_const("i32", "32640")
            ));
            let quiet =
                e.b.op(format!("or <16 x i32> {w}, {}", splat_const("i32", "64")));
            let sel = e.b.op(format!(
                "select <16 x i1> {nan}, <16 x i32> {quiet}, <16 x i32> {w}"
            ));
            e.b.op(format!(
                "shl <16 x i32> {sel}, {}",
                splat_const("i32", "16")
            ))
        }
        (Ty::F32, _) => e.b.op(format!("load <16 x i32>, ptr {p}, align 4")),
        _ => e.b.op(format!("load <16 x i32>, ptr {p}, align 2")),
    }
}

/// 16 bf16 or f16 values (`h`, a `<16 x i16>` of their bits) as f32 bits, `<16 x i32>`:
/// f16 widened exactly, bf16 shifted up (a signaling NaN left signaling, as [`widen_bits`]).
fn widen_units(e: &mut Emitter, h: &str, src: Ty) -> String {
    if src == Ty::F16 {
        let x = e.b.op(format!("bitcast <16 x i16> {h} to <16 x half>"));
        let f = e.b.op(format!("fpext <16 x half> {x} to <16 x float>"));
        return e.b.op(format!("bitcast <16 x float> {f} to <16 x i32>"));
    }
    let w = e.b.op(format!("zext <16 x i16> {h} to <16 x i32>"));
    e.b.op(format!("shl <16 x i32> {w}, {}", splat_const("i32", "16")))
}

/// The f32 whose upper half is the bf16 bits `h` (an `i16`): its value, exactly, for every
/// bf16 but a signaling NaN, which stays signaling (for a widened tile, whose only reader, a
/// dot's `fma`, quiets it as it would the quiet NaN [`convert`] makes).
fn widen_bits(e: &mut Emitter, h: &str) -> String {
    let w = e.b.op(format!("zext i16 {h} to i32"));
    let s = e.b.op(format!("shl i32 {w}, 16"));
    e.b.op(format!("bitcast i32 {s} to float"))
}

/// A `<16 x ty>` constant with every lane `x`.
fn splat_const(ty: &str, x: &str) -> String {
    let lanes = vec![format!("{ty} {x}"); 16];
    format!("<{}>", lanes.join(", "))
}

/// Transposes the 16 x 16 matrix of 32-bit units whose rows are `v`, in place: four stages
/// of two-source shuffles, each swapping the off-diagonal `b x b` blocks of row pairs
/// `(i, i + b)` for `b` = 8, 4, 2, 1.
fn transpose16(e: &mut Emitter, v: &mut [String]) {
    let mut b = 8;
    while b >= 1 {
        for i in (0..16).filter(|i| i & b == 0) {
            let j = i + b;
            let lo: Vec<String> = (0..16)
                .map(|p| {
                    let ix = if p & b == 0 { p } else { 16 + p - b };
                    format!("i32 {ix}")
                })
                .collect();
            let hi: Vec<String> = (0..16)
                .map(|p| {
                    let ix = if p & b == 0 { p + b } else { 16 + p };
                    format!("i32 {ix}")
                })
                .collect();
            let (x, y) = (v[i].clone(), v[j].clone());
            v[i] = e.b.op(format!(
                "shufflevector <16 x i32> {x}, <16 x i32> {y}, <16 x i32> <{}>",
                lo.join(", ")
            ));
            v[j] = e.b.op(format!(
                "shufflevector <16 x i32> {x}, <16 x i32> {y}, <16 x i32> <{}>",
                hi.join(", ")
            ));
        }
        b /= 2;
    }
}

/// `<16 x ty>` with every lane `x`.
fn splat(e: &mut Emitter, ty: &str, x: &str) -> String {
    let one =
        e.b.op(format!("insertelement <16 x {ty}> poison, {ty} {x}, i64 0"));
    e.b.op(format!(
        "shufflevector <16 x {ty}> {one}, <16 x {ty}> poison, <16 x i32> zeroinitializer"
    ))
}

/// Element `half` (0 or 1) of the bf16 pairs in `words` (`<16 x i32>`) as f32: the low half
/// shifted up or the high half masked. Exact, but that a signaling NaN stays signaling: the
/// only reader, an `fma`, quiets it as it would the quiet NaN [`convert`] makes.
fn bf16_half(e: &mut Emitter, words: &str, half: usize) -> String {
    let bits = if half == 0 {
        e.b.op(format!(
            "shl <16 x i32> {words}, {}",
            splat_const("i32", "16")
        ))
    } else {
        e.b.op(format!(
            "and <16 x i32> {words}, {}",
            splat_const("i32", "-65536")
        ))
    };
    e.b.op(format!("bitcast <16 x i32> {bits} to <16 x float>"))
}

/// What one register block's pass over K reads ([`HostPhases::k_pass`]).
#[derive(Clone, Copy)]
struct KPass<'p> {
    /// The `a` and `b` tiles.
    tiles: [usize; 2],
    /// The block's rows of `a` (`i32` values).
    rows: &'p [String],
    /// Its first column vector (16 columns each) and how many.
    cols: (u32, u32),
    /// The K indices it adds: the first (an `i32` value, a multiple of the values per lane)
    /// and how many (a multiple of them; all of K for the pair paths of `fma` blocks).
    ks: (&'p str, u32),
    micro: Micro,
    /// The accumulators' vector type.
    vt: &'p str,
}

/// One 2 x 2 (or smaller, at the edges) block of accumulator tiles of an AMX dot: the rows
/// `is` and columns `js` of 16 x 16 tiles, the operand tiles `[a, b]` and the dot's K.
struct AmxBlock<'p> {
    tiles: [usize; 2],
    is: &'p [u32],
    js: &'p [u32],
    k: u32,
}

/// `tileloadd` of a 16 x 64-byte tile at `p` with rows `stride` bytes apart.
fn amx_load(e: &mut Emitter, p: &str, stride: &str) -> String {
    e.b.op(format!(
        "call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr {p}, i64 {stride})"
    ))
}

/// How a `tile_dot` with packed operands runs ([`HostPhases::packed_dot`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PackedDot {
    /// On AMX tiles ([`HostPhases::amx_dot`]).
    Amx,
    /// In register blocks of the pair instruction ([`HostPhases::blocked_dot`]).
    Blocked(Micro),
}

impl HostPhases {
    /// How `acc += a b` runs with packed operands on this level, if it does: its operand type
    /// has a pair instruction here, the shapes suit it ([`pairs_shape`]), `a` is row-major and
    /// `b` in the instruction's layout; on AMX when the level has it and [`amx_shape`] holds.
    pub(super) fn packed_dot(&self, [acc, a, b]: [usize; 3]) -> Option<PackedDot> {
        let (dc, da) = (&self.tiles[acc].decl, &self.tiles[a].decl);
        let micro = self.pair_dot(da.elem)?;
        let packed = pairs_shape(dc, da)
            && self.tiles[b].layout == micro.b_layout()
            && self.tiles[a].layout == Layout::RowMajor;
        match (packed, self.amx && amx_shape(dc, da)) {
            (false, _) => None,
            (true, true) => Some(PackedDot::Amx),
            (true, false) => Some(PackedDot::Blocked(micro)),
        }
    }

    /// Whether a `tile_dot` that no packed instruction takes runs in `fma` register blocks
    /// (the tiles' side of [`fma_blocked`]).
    pub(super) fn fma_dot(&self, [acc, a, b]: [usize; 3]) -> bool {
        let dc = &self.tiles[acc].decl;
        let b_ok = match self.tiles[b].layout {
            Layout::RowMajor => true,
            Layout::Pairs => self.tiles[b].decl.elem == Ty::Bf16,
            Layout::Quads => false,
        };
        self.fma
            && dc.elem == Ty::F32
            && b_ok
            && self.tiles[a].layout == Layout::RowMajor
            && dc.cols.is_multiple_of(16)
    }

    /// The pair instruction `tile_dot` of `elem` operands may use on this level, if any.
    pub(super) fn pair_dot(&self, elem: Ty) -> Option<Micro> {
        match elem {
            Ty::Bf16 if self.dpbf16 => Some(Micro::Dpbf16),
            Ty::I16 if self.vnni => Some(Micro::Dpwssd),
            Ty::I8 | Ty::U8 if self.vnni => Some(Micro::Dpbusd),
            _ => None,
        }
    }

    /// `tile_dequant` (`op`); with `zero_src`, each sum is set to 0 once read (the
    /// statement and a `tile_zero` of its sums after it, in one pass).
    pub(super) fn dequant(&mut self, e: &mut Emitter, op: &TileOp, zero_src: bool) {
        let TileOp::Dequant {
            acc,
            src,
            rows,
            cols,
        } = *op
        else {
            unreachable!("dequant lowers tile_dequant only");
        };
        let (d, s) = (acc as usize, src as usize);
        self.each_element(e, d, |h, e, r, c| {
            let sum = h.read_raw(e, s, r, c);
            if zero_src {
                h.write_raw(e, s, r, c, "0");
            }
            let x = e.b.op(format!("sitofp i32 {sum} to float"));
            let old = h.read(e, d, r, c);
            let factors = [
                h.read(e, rows as usize, r, "0"),
                h.read(e, cols as usize, "0", c),
            ];
            let v = dequant_sum(&mut e.b, &factors, &x, &old, false);
            h.write_raw(e, d, r, c, &v);
        });
    }

    /// Whether tile `t` lives in its own array (not a view of a buffer), so zeroing it as a
    /// statement reads it is the same as a `tile_zero` after.
    pub(super) fn zeroes_in_place(&self, t: TileId) -> bool {
        self.tiles[t as usize].view.is_none()
    }

    /// Lowers one tile statement (once per workgroup).
    pub(super) fn tile(&mut self, e: &mut Emitter, op: &TileOp) -> Lowered<()> {
        match op {
            TileOp::Zero { dst } => memset0(e, &self.tiles[*dst as usize]),
            TileOp::Load { dst, from } => {
                let w = e.tile_window(from, &mut |e, x| self.uniform(e, x))?;
                // A shared array is in the cache already: nothing to prefetch. (Nor is a quads
                // window, whose lines are not its rows.)
                let next = if w.shared || w.quads {
                    None
                } else {
                    self.next_offset(e, from)?
                };
                self.copy(e, *dst as usize, &w, false, next.as_deref());
            }
            TileOp::Store { src, to } => {
                let w = e.tile_window(to, &mut |e, x| self.uniform(e, x))?;
                self.copy(e, *src as usize, &w, true, None);
            }
            TileOp::Dot { acc, a, b, scale } => {
                let (acc, a, b) = (*acc as usize, *a as usize, *b as usize);
                let scale = *scale;
                let packed = self.packed_dot([acc, a, b]);
                if packed == Some(PackedDot::Amx) {
                    self.amx_dot(e, [acc, a, b], None)?
                } else if let Some(PackedDot::Blocked(micro)) = packed {
                    self.blocked_dot(e, [acc, a, b], scale, micro, None)?
                } else if scale.is_none() && self.fma_dot([acc, a, b]) {
                    self.blocked_dot(e, [acc, a, b], None, Micro::Fma, None)?
                } else {
                    self.loop_dot(e, [acc, a, b], scale)
                }
            }
            TileOp::Dequant { .. } => self.dequant(e, op, false),
            TileOp::Binary { op, dst, src } => {
                let (op, d, s) = (*op, *dst as usize, *src as usize);
                let (s_rows, s_cols) = (self.tiles[s].decl.rows, self.tiles[s].decl.cols);
                self.each_element(e, d, |h, e, r, c| {
                    let x = h.read(e, d, r, c);
                    let y = h.read(
                        e,
                        s,
                        if s_rows == 1 { "0" } else { r },
                        if s_cols == 1 { "0" } else { c },
                    );
                    let v = tile_binary(&mut e.b, op, &x, &y);
                    h.write_raw(e, d, r, c, &v);
                });
            }
            TileOp::RowReduce { op, dst, src } => {
                let (op, d, s) = (*op, *dst as usize, *src as usize);
                let (rows, cols) = (self.tiles[s].decl.rows, self.tiles[s].decl.cols);
                if self.row_reduce_blocks(e, op, d, s) {
                    return Ok(());
                }
                self.parallel_loop(e, rows, LoopHint::Plain, |h, e, r| {
                    h.sequential_loop(e, cols, |h, e, c| {
                        let x = h.read(e, d, r, "0");
                        let y = h.read(e, s, r, c);
                        let v = tile_binary(&mut e.b, op, &x, &y);
                        h.write_raw(e, d, r, "0", &v);
                    })
                });
            }
            TileOp::Exp { dst } => {
                let d = *dst as usize;
                self.each_element(e, d, |h, e, r, c| {
                    let x = h.read(e, d, r, c);
                    let v = crate::math::call(&mut e.b, crate::math::EXP_FN, &x);
                    h.write_raw(e, d, r, c, &v);
                });
            }
            TileOp::Scale { dst, by } => {
                let d = *dst as usize;
                let by = self.uniform(e, by)?;
                self.each_element(e, d, |h, e, r, c| {
                    let x = h.read(e, d, r, c);
                    let v = e.b.op(format!("fmul float {x}, {by}"));
                    h.write_raw(e, d, r, c, &v);
                });
            }
            TileOp::Copy { dst, src } => {
                let (d, s) = (*dst as usize, *src as usize);
                let to = self.tiles[d].decl.elem;
                self.each_element(e, d, |h, e, r, c| {
                    let x = h.read(e, s, r, c);
                    let v = convert(&mut e.b, &x, Ty::F32, to);
                    h.write_raw(e, d, r, c, &v);
                });
            }
            TileOp::Prefetch { buf, offset, len } => {
                let (offset, len) = (self.uniform(e, offset)?, self.uniform(e, len)?);
                prefetch_range(e, *buf, &offset, &len)?;
            }
        }
        Ok(())
    }

    /// `body(r, c)` for every element of tile `t`, rows outer, columns vectorised.
    fn each_element(
        &mut self,
        e: &mut Emitter,
        t: usize,
        body: impl Fn(&mut Self, &mut Emitter, &str, &str),
    ) {
        let (rows, cols) = (self.tiles[t].decl.rows, self.tiles[t].decl.cols);
        self.parallel_loop(e, rows, LoopHint::Plain, |h, e, r| {
            h.parallel_loop(e, cols, LoopHint::Vectorize, |h, e, c| body(h, e, r, c))
        });
    }

    /// Tile `t` <- window (`store` false) or window <- tile `t`. A window covering the whole
    /// tile takes an unconditional copy of the loops; a whole load first prefetches the
    /// window at offset `next` (where the enclosing loop loads next), if any.
    fn copy(&mut self, e: &mut Emitter, t: usize, w: &WindowVals, store: bool, next: Option<&str>) {
        let (rows, cols) = (self.tiles[t].decl.rows, self.tiles[t].decl.cols);
        let full_r = e.b.op(format!("icmp uge i32 {}, {rows}", w.rows));
        let full_c = e.b.op(format!("icmp uge i32 {}, {cols}", w.cols));
        let full = e.b.op(format!("and i1 {full_r}, {full_c}"));
        e.branch_on(&full, &mut |e, whole| {
            if let (true, false, Some(offset)) = (whole, store, next) {
                self.prefetch_window(e, t, &w.at_offset(offset));
            }
            if !store && self.point_view(e, t, w, whole) {
                return;
            }
            if whole && w.transposed && self.transposed_blocks(e, t, w, store) {
                return;
            }
            if whole && w.pairs && self.pair_window_rows(e, t, w, store) {
                return;
            }
            if whole
                && !store
                && !w.transposed
                && !w.pairs
                && (self.paired_rows(e, t, w) || self.quad_rows(e, t, w))
            {
                return;
            }
            // The loop over the buffer's contiguous direction is innermost.
            let (outer, inner) = if w.transposed {
                (cols, rows)
            } else {
                (rows, cols)
            };
            self.parallel_loop(e, outer, LoopHint::Plain, |h, e, i| {
                h.parallel_loop(e, inner, LoopHint::Vectorize, |h, e, j| {
                    let (r, c) = if w.transposed { (j, i) } else { (i, j) };
                    h.copy_elem(e, t, w, (r, c), store, whole);
                })
            });
        });
    }

    /// For a [`View`] tile `t` loaded from `w`: points the view at the window when `whole`
    /// (and returns true: nothing to copy), else at the tile's stack array, which the copy
    /// then fills. False for other tiles. ([`viewable`] gives a view to a tile loaded from a
    /// shared array only where the work-items cannot overwrite the array while the view
    /// points at it.)
    fn point_view(&mut self, e: &mut Emitter, t: usize, w: &WindowVals, whole: bool) -> bool {
        let tile = &self.tiles[t];
        let Some(view) = &tile.view else {
            return false;
        };
        let (base, stride) = if whole {
            // A packed or quads window's stride counts words of four of the tile's bytes.
            let stride = if w.packed || w.quads {
                e.b.op(format!("shl nuw i32 {}, 2", w.stride))
            } else {
                w.stride.clone()
            };
            (e.window_elem_ptr(w, "0", "0"), stride)
        } else {
            (tile.ptr.clone(), tile.own_row().to_string())
        };
        e.b.ins(format!("store ptr {base}, ptr {}", view.base));
        e.b.ins(format!("store i32 {stride}, ptr {}", view.stride));
        whole
    }

    /// Prefetches (into L2) window `w` of tile `t`'s shape: each buffer line of it (a row, a
    /// column of a transposed window, two rows of a pairs window, a row of a packed window's
    /// words) from its first byte to its last, 64 bytes at a time; when the stride is a
    /// constant and the whole run from the first line's first byte to the last line's last
    /// takes fewer prefetches, that run instead (a step's tile of the integer GEMMs'
    /// activations, lines 32 bytes apart: two prefetches per line were four per cache line).
    /// A prefetch past the buffer's end does nothing.
    fn prefetch_window(&mut self, e: &mut Emitter, t: usize, w: &WindowVals) {
        let (rows, cols) = (self.tiles[t].decl.rows, self.tiles[t].decl.cols);
        let (mut lines, along) = if w.transposed {
            (cols, rows)
        } else if w.pairs {
            (rows.div_ceil(2), 2 * cols)
        } else if w.packed {
            (rows, cols.div_ceil(4))
        } else {
            (rows, cols)
        };
        let size = w.elem.size_bytes();
        let mut span = along * size;
        if let Ok(stride) = w.stride.parse::<u64>() {
            let run = u64::from(lines - 1) * stride * u64::from(size) + u64::from(span);
            let per_line = u64::from(lines) * (u64::from(span).div_ceil(64) + 1);
            if run.div_ceil(64) + 1 < per_line {
                span = run as u32;
                lines = 1;
            }
        }
        let touches: Vec<u32> = line_touches(span).collect();
        e.b.declare("declare void @llvm.prefetch.p0(ptr, i32, i32, i32)");
        self.sequential_loop(e, lines, |_, e, line| {
            for &b in &touches {
                let p = e.window_line_addr(w, line, b);
                e.b.ins(format!(
                    "call void @llvm.prefetch.p0(ptr {p}, i32 0, i32 2, i32 1)"
                ));
            }
        });
    }

    /// The offset the window `from` will have one step later of the innermost enclosing
    /// uniform loop whose variable it depends on (a GEMM's K loop), evaluated now; `None`
    /// when it depends on no enclosing loop's variable, or when evaluating it ahead could
    /// read memory or trap (a buffer read or an integer division in it: past the loop's last
    /// step the index or the divisor need not be valid).
    fn next_offset(&mut self, e: &mut Emitter, from: &TileWindow) -> Lowered<Option<String>> {
        for (var, step) in self.loops.clone().into_iter().rev() {
            let ty = e.k.locals[var as usize].ty;
            let mut defs = vec![None; e.k.locals.len()];
            defs[var as usize] = Some(Expr::new(
                ExprKind::Binary(
                    BinOp::Add,
                    Box::new(Expr::new(ExprKind::Var(var), ty)),
                    Box::new(step),
                ),
                ty,
            ));
            let moved = rewrite_expr(&from.offset, &defs);
            if moved != from.offset {
                if !pure(&moved, &|_| true) {
                    return Ok(None);
                }
                return self.uniform(e, &moved).map(Some);
            }
        }
        Ok(None)
    }

    /// A whole transposed window loaded into (or, with `store`, stored from) tile `t` by
    /// 16 x 16 blocks of 32-bit units: 16 vector loads along one side, a shuffle transpose,
    /// 16 vector stores along the other (instead of one element at a time with a strided
    /// access each). Loads take f32 units (an f32 row-major tile from f32, bf16 or f16,
    /// widened exactly as [`convert`] does) or bf16 pairs (a [`Layout::Pairs`] tile from
    /// bf16, whose pair `(2i, 2i + 1)` of a column is one 32-bit word of the buffer); stores
    /// take an f32 row-major tile to an f32 buffer. Returns false, emitting nothing, for
    /// other tiles and shapes.
    fn transposed_blocks(
        &mut self,
        e: &mut Emitter,
        t: usize,
        w: &WindowVals,
        store: bool,
    ) -> bool {
        let tile = &self.tiles[t];
        let (rows, cols, elem, layout) =
            (tile.decl.rows, tile.decl.cols, tile.decl.elem, tile.layout);
        // Unit rows per block step (2 tile rows per pair) and the tile's units per row.
        let (unit_rows, row_units) = match (store, layout, elem, w.elem) {
            (false, Layout::RowMajor, Ty::F32, Ty::F32 | Ty::Bf16 | Ty::F16)
            | (true, Layout::RowMajor, Ty::F32, Ty::F32) => (1, cols),
            (false, Layout::Pairs, Ty::Bf16, Ty::Bf16) => (2, 2 * cols),
            _ => return false,
        };
        if !rows.is_multiple_of(16 * unit_rows) || !cols.is_multiple_of(16) {
            return false;
        }
        let (src, widen, widened) = (w.elem, layout == Layout::RowMajor, tile.widened);
        let tile_ptr = tile.ptr.clone();
        let tile_ty = lty(elem);
        self.sequential_loop(e, cols / 16, |h, e, cb| {
            h.sequential_loop(e, rows / (16 * unit_rows), |_, e, rb| {
                let c0 = e.b.op(format!("mul nuw i32 {cb}, 16"));
                let r0 = e.b.op(format!("mul nuw i32 {rb}, {}", 16 * unit_rows));
                // Column c0 + j of the block in the buffer, rows r0.. .
                let line = |e: &mut Emitter, j: usize| {
                    let c = e.b.op(format!("add nuw i32 {c0}, {j}"));
                    e.window_elem_ptr(w, &r0, &c)
                };
                // Unit row rb * 16 + i of the tile, columns c0.. .
                let u0 = e.b.op(format!("mul nuw i32 {rb}, 16"));
                let unit_row = |e: &mut Emitter, i: usize| {
                    let ur = e.b.op(format!("add nuw i32 {u0}, {i}"));
                    let row = e.b.op(format!("mul nuw i32 {ur}, {row_units}"));
                    let c = e.b.op(format!("mul nuw i32 {c0}, {unit_rows}"));
                    let ix = e.b.op(format!("add nuw i32 {row}, {c}"));
                    at(e, tile_ty, &tile_ptr, &ix)
                };
                let mut v: Vec<String> = (0..16)
                    .map(|j| {
                        if store {
                            let p = unit_row(e, j);
                            e.b.op(format!("load <16 x i32>, ptr {p}, align 4"))
                        } else {
                            let p = line(e, j);
                            load_units(e, &p, src, widen, !widened)
                        }
                    })
                    .collect();
                transpose16(e, &mut v);
                for (i, x) in v.iter().enumerate() {
                    let p = if store { line(e, i) } else { unit_row(e, i) };
                    e.b.ins(format!("store <16 x i32> {x}, ptr {p}, align 4"));
                }
            })
        });
        true
    }

    /// `tile_row_sum` / `tile_row_max` of the f32 row-major tile `s` into `d` 16 rows at a time
    /// on x86-64-v4: a vector holds the 16 rows' running values, and each 16 x 16 block of `s`
    /// is loaded as 16 row vectors and transposed into 16 column vectors, added (or maxed) in
    /// increasing column order. Each lane sees its row's columns in the scalar loop's order,
    /// so the same bits, where the scalar loop ran one dependent operation per element.
    /// Returns false, emitting nothing, for other levels, tiles and shapes.
    fn row_reduce_blocks(&mut self, e: &mut Emitter, op: TileBinary, d: usize, s: usize) -> bool {
        let src = &self.tiles[s];
        let (rows, cols) = (src.decl.rows, src.decl.cols);
        if !self.zmm
            || src.decl.elem != Ty::F32
            || src.layout != Layout::RowMajor
            || !rows.is_multiple_of(16)
            || !cols.is_multiple_of(16)
        {
            return false;
        }
        self.sequential_loop(e, rows / 16, |h, e, rb| {
            let r0 = e.b.op(format!("mul nuw i32 {rb}, 16"));
            let row_ix: Vec<String> = (0..16)
                .map(|i| e.b.op(format!("add nuw i32 {r0}, {i}")))
                .collect();
            let mut acc = "poison".to_string();
            for (i, r) in row_ix.iter().enumerate() {
                let x = h.read(e, d, r, "0");
                acc = e.b.op(format!(
                    "insertelement <16 x float> {acc}, float {x}, i64 {i}"
                ));
            }
            for c0 in (0..cols).step_by(16) {
                let mut v: Vec<String> = row_ix
                    .iter()
                    .map(|r| {
                        let p = h.elem_ptr(e, s, r, &c0.to_string());
                        e.b.op(format!("load <16 x i32>, ptr {p}, align 4"))
                    })
                    .collect();
                transpose16(e, &mut v);
                for column in v {
                    let x =
                        e.b.op(format!("bitcast <16 x i32> {column} to <16 x float>"));
                    acc = tile_binary_x16(&mut e.b, op, &acc, &x);
                }
            }
            for (i, r) in row_ix.iter().enumerate() {
                let x =
                    e.b.op(format!("extractelement <16 x float> {acc}, i64 {i}"));
                h.write_raw(e, d, r, "0", &x);
            }
        });
        true
    }

    /// A whole untransposed window of a bf16 buffer (into a bf16 tile) or of i32 memory (into
    /// an i16 tile, each value wrapped) loaded into the [`Layout::Pairs`] tile `t`: each pair
    /// of rows is read 16 columns at a time and interleaved into one tile row of pairs (two
    /// vector loads, one shuffle, one store per 32 elements). Returns false, emitting
    /// nothing, for other tiles and shapes.
    fn paired_rows(&mut self, e: &mut Emitter, t: usize, w: &WindowVals) -> bool {
        let tile = &self.tiles[t];
        let (rows, cols) = (tile.decl.rows, tile.decl.cols);
        let source = (tile.decl.elem, w.elem);
        if tile.layout != Layout::Pairs
            || !matches!(source, (Ty::Bf16, Ty::Bf16) | (Ty::I16, Ty::I32))
            || !rows.is_multiple_of(2)
            || !cols.is_multiple_of(16)
        {
            return false;
        }
        let tile_ptr = tile.ptr.clone();
        let interleave: Vec<String> = (0..16)
            .flat_map(|i| [i, 16 + i])
            .map(|i| format!("i32 {i}"))
            .collect();
        let interleave = interleave.join(", ");
        self.sequential_loop(e, rows / 2, |_, e, p| {
            let r0 = e.b.op(format!("shl nuw i32 {p}, 1"));
            let r1 = e.b.op(format!("or disjoint i32 {r0}, 1"));
            let row = e.b.op(format!("mul nuw i32 {p}, {}", 2 * cols));
            for c0 in (0..cols).step_by(16) {
                let c = c0.to_string();
                let halves = [&r0, &r1].map(|r| {
                    let q = e.window_elem_ptr(w, r, &c);
                    if source.1 == Ty::I32 {
                        let v = e.b.op(format!("load <16 x i32>, ptr {q}, align 4"));
                        e.b.op(format!("trunc <16 x i32> {v} to <16 x i16>"))
                    } else {
                        e.b.op(format!("load <16 x i16>, ptr {q}, align 2"))
                    }
                });
                let pairs = e.b.op(format!(
                    "shufflevector <16 x i16> {}, <16 x i16> {}, <32 x i32> <{interleave}>",
                    halves[0], halves[1]
                ));
                let ix = e.b.op(format!("add nuw i32 {row}, {}", 2 * c0));
                let q = at(e, "i16", &tile_ptr, &ix);
                e.b.ins(format!("store <32 x i16> {pairs}, ptr {q}, align 4"));
            }
        });
        true
    }

    /// A whole pairs window of a 16-bit buffer loaded into (or, with `store`, stored from) tile
    /// `t`, one memory row (two tile rows) at a time, 16 columns per step: into a
    /// [`Layout::Pairs`] tile, whose rows are the memory's, a plain vector copy; into a
    /// row-major 16-bit tile (or one [`widened`] to f32) one load split into the two rows; from
    /// a row-major 16-bit tile the two rows' loads interleaved into one store. Returns false,
    /// emitting nothing, for other tiles and shapes.
    fn pair_window_rows(&mut self, e: &mut Emitter, t: usize, w: &WindowVals, store: bool) -> bool {
        let tile = &self.tiles[t];
        let (rows, cols, elem, layout, widened) = (
            tile.decl.rows,
            tile.decl.cols,
            tile.decl.elem,
            tile.layout,
            tile.widened,
        );
        let half = matches!(w.elem, Ty::Bf16 | Ty::F16);
        let fits = match (store, layout) {
            (_, Layout::Quads) => false,
            (true, Layout::Pairs) => false,
            (_, Layout::Pairs) => elem == w.elem,
            (true, Layout::RowMajor) => elem == w.elem,
            (false, Layout::RowMajor) => elem == w.elem || widened,
        };
        if !half || !fits || !rows.is_multiple_of(2) || !cols.is_multiple_of(16) {
            return false;
        }
        let tile_ptr = tile.ptr.clone();
        let lanes = |f: &dyn Fn(u32) -> u32, n: u32| -> String {
            let v: Vec<String> = (0..n).map(|i| format!("i32 {}", f(i))).collect();
            v.join(", ")
        };
        let interleave = lanes(&|i| if i % 2 == 0 { i / 2 } else { 16 + i / 2 }, 32);
        let halves = [lanes(&|i| 2 * i, 16), lanes(&|i| 2 * i + 1, 16)];
        let src = w.elem;
        self.sequential_loop(e, rows / 2, |_, e, p| {
            let r0 = e.b.op(format!("shl nuw i32 {p}, 1"));
            let r1 = e.b.op(format!("or disjoint i32 {r0}, 1"));
            for c0 in (0..cols).step_by(16) {
                // Tile row 2p's element c0 and the memory row's pair at column c0.
                let q = e.window_elem_ptr(w, &r0, &c0.to_string());
                if layout == Layout::Pairs {
                    let v = e.b.op(format!("load <32 x i16>, ptr {q}, align 2"));
                    let row = e.b.op(format!("mul nuw i32 {p}, {}", 2 * cols));
                    let ix = e.b.op(format!("add nuw i32 {row}, {}", 2 * c0));
                    let d = at(e, "i16", &tile_ptr, &ix);
                    e.b.ins(format!("store <32 x i16> {v}, ptr {d}, align 4"));
                    continue;
                }
                let row_ptr = |e: &mut Emitter, r: &str, ty: &str| {
                    let row = e.b.op(format!("mul nuw i32 {r}, {cols}"));
                    let ix = e.b.op(format!("add nuw i32 {row}, {c0}"));
                    at(e, ty, &tile_ptr, &ix)
                };
                if store {
                    let [a, b] = [&r0, &r1].map(|r| {
                        let d = row_ptr(e, r, "i16");
                        e.b.op(format!("load <16 x i16>, ptr {d}, align 2"))
                    });
                    let v = e.b.op(format!(
                        "shufflevector <16 x i16> {a}, <16 x i16> {b}, <32 x i32> <{interleave}>"
                    ));
                    e.b.ins(format!("store <32 x i16> {v}, ptr {q}, align 2"));
                    continue;
                }
                let v = e.b.op(format!("load <32 x i16>, ptr {q}, align 2"));
                for (r, lane) in [&r0, &r1].into_iter().zip(&halves) {
                    let h = e.b.op(format!(
                        "shufflevector <32 x i16> {v}, <32 x i16> poison, <16 x i32> <{lane}>"
                    ));
                    if widened {
                        let f = widen_units(e, &h, src);
                        let d = row_ptr(e, r, "float");
                        e.b.ins(format!("store <16 x i32> {f}, ptr {d}, align 4"));
                    } else {
                        let d = row_ptr(e, r, "i16");
                        e.b.ins(format!("store <16 x i16> {h}, ptr {d}, align 2"));
                    }
                }
            }
        });
        true
    }

    /// A whole untransposed window of i32 memory loaded into the [`Layout::Quads`] byte tile
    /// `t`, per four rows and 16 columns: from a quads window, whose words are the tile's, one
    /// vector copy; from one value per word, four vector loads narrowed to bytes and one
    /// shuffle interleaving them into fours. Returns false, emitting nothing, for other tiles
    /// and shapes.
    fn quad_rows(&mut self, e: &mut Emitter, t: usize, w: &WindowVals) -> bool {
        let tile = &self.tiles[t];
        let (rows, cols) = (tile.decl.rows, tile.decl.cols);
        if tile.layout != Layout::Quads
            || w.elem != Ty::I32
            || !rows.is_multiple_of(4)
            || !cols.is_multiple_of(16)
        {
            return false;
        }
        let tile_ptr = tile.ptr.clone();
        let lanes = |n: u32, lane: &dyn Fn(u32) -> u32| -> String {
            (0..n)
                .map(|p| format!("i32 {}", lane(p)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let concat = lanes(32, &|p| p);
        // Lane 4 c + r of the result is lane c of row r's 16 bytes.
        let interleave = lanes(64, &|p| (p % 4) * 16 + p / 4);
        self.sequential_loop(e, rows / 4, |_, e, q| {
            let r0 = e.b.op(format!("shl nuw i32 {q}, 2"));
            let row = e.b.op(format!("mul nuw i32 {q}, {}", 4 * cols));
            for c0 in (0..cols).step_by(16) {
                let c = c0.to_string();
                let ix = e.b.op(format!("add nuw i32 {row}, {}", 4 * c0));
                let p = at(e, "i8", &tile_ptr, &ix);
                if w.quads {
                    let q = e.window_elem_ptr(w, &r0, &c);
                    let v = e.b.op(format!("load <16 x i32>, ptr {q}, align 4"));
                    e.b.ins(format!("store <16 x i32> {v}, ptr {p}, align 4"));
                    continue;
                }
                let bytes: Vec<String> = (0..4)
                    .map(|i| {
                        let r = e.b.op(format!("or disjoint i32 {r0}, {i}"));
                        let q = e.window_elem_ptr(w, &r, &c);
                        let v = e.b.op(format!("load <16 x i32>, ptr {q}, align 4"));
                        e.b.op(format!("trunc <16 x i32> {v} to <16 x i8>"))
                    })
                    .collect();
                let [lo, hi] = [0, 2].map(|i| {
                    e.b.op(format!(
                        "shufflevector <16 x i8> {}, <16 x i8> {}, <32 x i32> <{concat}>",
                        bytes[i],
                        bytes[i + 1]
                    ))
                });
                let fours = e.b.op(format!(
                    "shufflevector <32 x i8> {lo}, <32 x i8> {hi}, <64 x i32> <{interleave}>"
                ));
                e.b.ins(format!("store <64 x i8> {fours}, ptr {p}, align 4"));
            }
        });
        true
    }

    /// Copies element `(r, c)` of tile `t` from (or, with `store`, to) the window; `whole`
    /// says the window covers the tile, so no bounds test is needed.
    fn copy_elem(
        &mut self,
        e: &mut Emitter,
        t: usize,
        w: &WindowVals,
        (r, c): (&str, &str),
        store: bool,
        whole: bool,
    ) {
        let tile_elem = self.tiles[t].decl.elem;
        let body = |h: &mut HostPhases, e: &mut Emitter| {
            if store {
                let v = h.read_raw(e, t, r, c);
                e.window_write(w, r, c, &v, tile_elem);
            } else if h.tiles[t].widened && w.elem == Ty::Bf16 {
                let bits = e.window_read(w, r, c, Ty::Bf16);
                let v = widen_bits(e, &bits);
                h.write_raw(e, t, r, c, &v);
            } else {
                let v = e.window_read(w, r, c, tile_elem);
                h.write_raw(e, t, r, c, &v);
            }
        };
        if whole {
            body(self, e);
            return;
        }
        let inside = e.window_contains(w, r, c);
        e.branch_on(&inside, &mut |e, taken| {
            if taken {
                body(self, e);
            } else if !store {
                let zero = if tile_elem == Ty::F32 { "0.0" } else { "0" };
                self.write_raw(e, t, r, c, zero);
            }
        });
    }

    /// Pointer to element `(r, c)` of tile `t`.
    fn elem_ptr(&self, e: &mut Emitter, t: usize, r: &str, c: &str) -> String {
        let tile = &self.tiles[t];
        if let Some(view) = &tile.view {
            let base = e.b.op(format!("load ptr, ptr {}", view.base));
            let stride = e.b.op(format!("load i32, ptr {}", view.stride));
            // Quads: a view row is four of the tile's rows, the stride its bytes.
            let (r, c) = match tile.layout {
                Layout::Pairs => e.pair_coords(r, c),
                Layout::Quads => {
                    let four = e.b.op(format!("lshr i32 {r}, 2"));
                    let lane = e.b.op(format!("and i32 {r}, 3"));
                    let c4 = e.b.op(format!("shl nuw i32 {c}, 2"));
                    (four, e.b.op(format!("add nuw i32 {c4}, {lane}")))
                }
                Layout::RowMajor => (r.to_string(), c.to_string()),
            };
            let [r, c, stride] = [&r, &c, &stride].map(|x| e.b.op(format!("zext i32 {x} to i64")));
            let rs = e.b.op(format!("mul nuw i64 {r}, {stride}"));
            let ix = e.b.op(format!("add nuw i64 {rs}, {c}"));
            return e.b.op(format!(
                "getelementptr inbounds {}, ptr {base}, i64 {ix}",
                lty(tile.decl.elem)
            ));
        }
        let cols = tile.decl.cols;
        let ix = match tile.layout {
            Layout::RowMajor => {
                let rc = e.b.op(format!("mul nuw i32 {r}, {cols}"));
                e.b.op(format!("add nuw i32 {rc}, {c}"))
            }
            Layout::Pairs => {
                let (pair, lane) = e.pair_coords(r, c);
                let row = e.b.op(format!("mul nuw i32 {pair}, {}", 2 * cols));
                e.b.op(format!("add nuw i32 {row}, {lane}"))
            }
            Layout::Quads => {
                let four = e.b.op(format!("lshr i32 {r}, 2"));
                let lane = e.b.op(format!("and i32 {r}, 3"));
                let row = e.b.op(format!("mul nuw i32 {four}, {}", 4 * cols));
                let c4 = e.b.op(format!("shl nuw i32 {c}, 2"));
                let a = e.b.op(format!("add nuw i32 {row}, {c4}"));
                e.b.op(format!("add nuw i32 {a}, {lane}"))
            }
        };
        at(e, lty(tile.decl.elem), &tile.ptr, &ix)
    }

    /// The distance in bytes between rows of the row-major tile `t`, as an `i64`.
    fn row_bytes(&self, e: &mut Emitter, t: usize) -> String {
        let tile = &self.tiles[t];
        let size = tile.decl.elem.size_bytes();
        match &tile.view {
            Some(view) => {
                let stride = e.b.op(format!("load i32, ptr {}", view.stride));
                let wide = e.b.op(format!("zext i32 {stride} to i64"));
                e.b.op(format!("mul nuw i64 {wide}, {size}"))
            }
            None => (tile.decl.cols * size).to_string(),
        }
    }

    /// Element `(r, c)` of tile `t` in the tile's own type (`i16` bits for 16-bit tiles).
    fn read_raw(&self, e: &mut Emitter, t: usize, r: &str, c: &str) -> String {
        let p = self.elem_ptr(e, t, r, c);
        let elem = self.tiles[t].decl.elem;
        let md = e.mem_md.clone();
        e.b.op(format!(
            "load {}, ptr {p}, align {}{md}",
            lty(elem),
            elem.size_bytes()
        ))
    }

    /// Element `(r, c)` of tile `t` as f32.
    fn read(&self, e: &mut Emitter, t: usize, r: &str, c: &str) -> String {
        let v = self.read_raw(e, t, r, c);
        convert(&mut e.b, &v, self.tiles[t].decl.elem, Ty::F32)
    }

    /// The factors a scaled dot's sums at row `r` and column `c` take ([`scaled_sum`]):
    /// scalars in `loop_dot`, and in a register block (`lanes`) 16-lane vectors of columns
    /// `c..c + 16`, a row's value splatted. `Columns`: the column's i32 scale for K group `g`
    /// (an `i32` value, "0" for an ungrouped scale); `Dequant`: the row's offset and scale
    /// for group `g`, then the column's scale for it.
    fn scale_factors(
        &self,
        e: &mut Emitter,
        s: DotScale,
        (r, c): (&str, &str),
        g: &str,
        lanes: bool,
    ) -> Vec<String> {
        let column = |h: &Self, e: &mut Emitter, t: TileId, g: &str| {
            let t = t as usize;
            if lanes {
                let ty = lty(h.tiles[t].decl.elem);
                let p = h.elem_ptr(e, t, g, c);
                e.b.op(format!("load <16 x {ty}>, ptr {p}, align 4"))
            } else {
                h.read_raw(e, t, g, c)
            }
        };
        let row = |h: &Self, e: &mut Emitter, t: TileId| {
            let v = h.read_raw(e, t as usize, r, g);
            if lanes {
                splat(e, "float", &v)
            } else {
                v
            }
        };
        match s {
            DotScale::Columns { scale, .. } => vec![column(self, e, scale, g)],
            DotScale::Dequant { offset, rows, cols } => vec![
                row(self, e, offset),
                row(self, e, rows),
                column(self, e, cols, g),
            ],
        }
    }

    /// Where a scaled dot's sums start for row `r` and K group `g`: the row's offset for the
    /// group (splatted with `lanes`), or 0.
    fn sum_start(&self, e: &mut Emitter, s: DotScale, r: &str, g: &str, lanes: bool) -> String {
        match s.sum_start() {
            Some(o) => {
                let v = self.read_raw(e, o as usize, r, g);
                if lanes {
                    splat(e, "i32", &v)
                } else {
                    v
                }
            }
            None if lanes => "zeroinitializer".to_string(),
            None => "0".to_string(),
        }
    }

    fn write_raw(&self, e: &mut Emitter, t: usize, r: &str, c: &str, v: &str) {
        let p = self.elem_ptr(e, t, r, c);
        let elem = self.tiles[t].decl.elem;
        let md = e.mem_md.clone();
        e.b.ins(format!(
            "store {} {v}, ptr {p}, align {}{md}",
            lty(elem),
            elem.size_bytes()
        ));
    }

    /// `acc[m][n] = fma(a[m][k], b[k][n], acc[m][n])` (integer tiles: `acc + a b` in wrapping
    /// i32), m, then k ascending, then n (vectorised). With `scale` (integer operands), each
    /// element's products are summed first, m, then n, then per K group k, and each group's
    /// sum scaled ([`scaled_sum`]) into `acc`.
    fn loop_dot(&mut self, e: &mut Emitter, [acc, a, b]: [usize; 3], scale: Option<DotScale>) {
        let (m, n, k) = (
            self.tiles[acc].decl.rows,
            self.tiles[acc].decl.cols,
            self.tiles[a].decl.cols,
        );
        let int = self.tiles[a].decl.elem.is_dot_int();
        // An operand as its sum's type: integers extended to i32, floats as f32.
        let operand = |h: &Self, e: &mut Emitter, t: usize, r: &str, c: &str| {
            if int {
                let v = h.read_raw(e, t, r, c);
                convert(&mut e.b, &v, h.tiles[t].decl.elem, Ty::I32)
            } else {
                h.read(e, t, r, c)
            }
        };
        if let Some(s) = scale {
            let groups = s.groups(&e.k.tiles);
            let len = k / groups;
            let acc_ty = lty(self.tiles[acc].decl.elem);
            self.parallel_loop(e, m, LoopHint::Plain, |h, e, i| {
                h.parallel_loop(e, n, LoopHint::Plain, |h, e, j| {
                    let old = h.read_raw(e, acc, i, j);
                    let r = e.carried_loop(groups, acc_ty, &[old], |e, g, old| {
                        let start = h.sum_start(e, s, i, g, false);
                        let k0 = e.b.op(format!("mul nuw i32 {g}, {len}"));
                        let sum = e.carried_loop(len, "i32", &[start], |e, step, sum| {
                            let kk = &e.b.op(format!("add nuw i32 {k0}, {step}"));
                            let x = operand(h, e, a, i, kk);
                            let y = operand(h, e, b, kk, j);
                            let p = e.b.op(format!("mul i32 {x}, {y}"));
                            vec![e.b.op(format!("add i32 {}, {p}", sum[0]))]
                        });
                        let factors = h.scale_factors(e, s, (i, j), g, false);
                        vec![scaled_sum(&mut e.b, s, &factors, &sum[0], &old[0], false)]
                    });
                    h.write_raw(e, acc, i, j, &r[0]);
                })
            });
            return;
        }
        // As declared: a widened tile's `decl.elem` is f32.
        let pairs = e.k.bf16_pair_dot(a as TileId, b as TileId);
        self.parallel_loop(e, m, LoopHint::Plain, |h, e, i| {
            h.sequential_loop(e, k, |h, e, step| {
                let kk = &dot_step(&mut e.b, step, k, pairs);
                let x = operand(h, e, a, i, kk);
                h.parallel_loop(e, n, LoopHint::Vectorize, |h, e, j| {
                    let y = operand(h, e, b, kk, j);
                    let r = if int {
                        let s = h.read_raw(e, acc, i, j);
                        let p = e.b.op(format!("mul i32 {x}, {y}"));
                        e.b.op(format!("add i32 {s}, {p}"))
                    } else {
                        let s = h.read(e, acc, i, j);
                        e.b.call(
                            "float",
                            "llvm.fma.f32",
                            &[("float", &x), ("float", &y), ("float", &s)],
                        )
                    };
                    h.write_raw(e, acc, i, j, &r);
                })
            })
        });
    }

    /// `acc += a b` in register blocks (see the module doc): `vdpbf16ps` on bf16 pairs,
    /// `vpdpwssd` on i16 pairs or `vpdpbusd` on fours of bytes (shapes checked by
    /// [`pairs_shape`]; integers optionally times a per-column `scale`), or `fma` on f32
    /// vectors, 16-bit operands widened (N a multiple of 16).
    fn blocked_dot(
        &mut self,
        e: &mut Emitter,
        tiles: [usize; 3],
        scale: Option<DotScale>,
        micro: Micro,
        steps: Option<&fused::Steps>,
    ) -> Lowered<()> {
        let [acc, _, _] = tiles;
        // Rows x 16-column vectors per block: 16 accumulators where 32 registers hold a
        // vector each, 6 where 16 registers hold half of one.
        // A pairs `b` of `fma` blocks is widened in the vector once per register block row:
        // 12 rows share each widening (24 accumulators). `vdpbf16ps` blocks take 6 rows (24
        // accumulators): each row of `b` loaded serves 6 rows of `a` (with 4, at K = 3584 the
        // GEMM ran about 7% slower on Zen 5); other blocks keep 4 (with 6 the f32-activation
        // GEMM ran 17% slower, and the integer dots were no faster), but that `fma` blocks
        // of at most 32 columns take 8 rows (16 accumulators, where 4 rows gave 8, each
        // chain's `fma` latency in the way: prefill attention's `P · V` ran 3 to 5% slower).
        // `vdpbf16ps` blocks of one column vector take 8 rows: with 6 accumulators each
        // chain waited on the instruction's latency (the few-row GEMM, `gemm.xwt_narrow`,
        // ran 15% slower), and 12 or 16 weight rows 4 KiB apart (K = 2048) fell into one
        // set of the L1 cache (slower still).
        // On the AMX level (Intel CPUs, whose two FMA ports also run the shifts and masks
        // that widen `fma` blocks' bf16 weights) wider `fma` blocks take 5 rows: each vector
        // of `b` loaded serves 5 rows (the f32-activation GEMM ran 5 to 10% faster on a
        // 2-core Xeon than with 4; 6 rows spill, 7 x 3 and 8 x 2 ran slower).
        // A dot scaled per K group keeps two vectors per accumulator (the block's totals and
        // the group's sums): 4 rows x 32 columns (16 registers; 4 x 64 would spill, and with
        // 2 x 64 a C model of Q6_K's block ran 15 to 20% slower, each vector of `b` serving 2
        // rows where it serves 4).
        let pairs_b = micro == Micro::Fma && self.tiles[tiles[2]].layout == Layout::Pairs;
        let narrow = self.tiles[acc].decl.cols <= 32;
        let one_vec = self.tiles[acc].decl.cols == 16;
        let grouped = scale.is_some_and(|s| s.groups(&e.k.tiles) > 1);
        let (mr_max, nr_max) = match (self.zmm, pairs_b, micro) {
            (true, false, Micro::Dpwssd | Micro::Dpbusd) if grouped => (4, 2),
            (true, false, Micro::Dpbf16) if one_vec => (8, 1),
            (true, true, _) => (12, 2),
            (true, false, Micro::Dpbf16) => (6, 4),
            (true, false, Micro::Fma) if narrow => (8, 2),
            (true, false, Micro::Fma) if self.amx => (5, 4),
            (true, false, _) => (4, 4),
            (false, _, _) => (6, 1),
        };
        let (m, n) = (self.tiles[acc].decl.rows, self.tiles[acc].decl.cols);
        let vecs = n / 16;
        let groups: Vec<(u32, u32)> = (0..vecs)
            .step_by(nr_max as usize)
            .map(|v0| (v0, nr_max.min(vecs - v0)))
            .collect();
        e.b.declare(match micro {
            Micro::Dpbf16 => "declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)",
            Micro::Dpwssd => "declare <16 x i32> @llvm.x86.avx512.vpdpwssd.512(<16 x i32>, <16 x i32>, <16 x i32>)",
            Micro::Dpbusd => "declare <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32>, <16 x i32>, <16 x i32>)",
            Micro::Fma => "declare <16 x float> @llvm.fma.v16f32(<16 x float>, <16 x float>, <16 x float>)",
        });
        let mr = mr_max.min(m);
        let mut result = Ok(());
        self.sequential_loop(e, m / mr, |h, e, mb| {
            let m0 = e.b.op(format!("mul nuw i32 {mb}, {mr}"));
            if steps.is_none() {
                h.prefetch_view_rows(e, tiles[1], &m0, mr);
            }
            for &(v0, nr) in &groups {
                let r = h.reg_block(e, tiles, scale, &m0, (mr, v0, nr), micro, steps);
                if result.is_ok() {
                    result = r;
                }
            }
        });
        result?;
        let rest = m % mr;
        if rest > 0 {
            for &(v0, nr) in &groups {
                let m0 = (m - rest).to_string();
                self.reg_block(e, tiles, scale, &m0, (rest, v0, nr), micro, steps)?;
            }
        }
        Ok(())
    }

    /// Rows `m0..m0 + mr` x column vectors `v0..v0 + nr` (16 columns each) of `acc += a b`:
    /// the accumulators stay in registers over all K steps (pairs for `vdpbf16ps` and
    /// `vpdpwssd`, fours for `vpdpbusd`), and with `steps` over every step of the enclosing
    /// loop too ([`FusedDot`]), each pointing the operands' views at its windows first. With
    /// `scale` they start at zero and, after the last step, are scaled ([`scaled_sum`]) into
    /// `acc`.
    #[allow(clippy::too_many_arguments)]
    fn reg_block(
        &mut self,
        e: &mut Emitter,
        [acc, a, b]: [usize; 3],
        scale: Option<DotScale>,
        m0: &str,
        (mr, v0, nr): (u32, u32, u32),
        micro: Micro,
        steps: Option<&fused::Steps>,
    ) -> Lowered<()> {
        let n = self.tiles[acc].decl.cols;
        let acc_elem = lty(self.tiles[acc].decl.elem);
        let acc_vt = format!("<16 x {acc_elem}>");
        // The sums' vectors: i32 for integer products (into an f32 `acc` when dequantized).
        let vt = match micro {
            Micro::Dpwssd | Micro::Dpbusd => "<16 x i32>".to_string(),
            Micro::Dpbf16 | Micro::Fma => acc_vt.clone(),
        };
        let pc = self.tiles[acc].ptr.clone();
        let rows: Vec<String> = (0..mr)
            .map(|r| e.b.op(format!("add nuw i32 {m0}, {r}")))
            .collect();
        // One base pointer, the block's accumulators at constant offsets from it (addresses
        // of their own, live across the K loop, were spilled and reloaded around it).
        let first = e.b.op(format!("mul nuw i32 {m0}, {n}"));
        let first = e.b.op(format!("add nuw i32 {first}, {}", v0 * 16));
        let block = at(e, acc_elem, &pc, &first);
        let acc_ptrs: Vec<String> = (0..mr)
            .flat_map(|r| (0..nr).map(move |j| r * n + j * 16))
            .map(|ix| {
                e.b.op(format!(
                    "getelementptr inbounds {acc_elem}, ptr {block}, i64 {ix}"
                ))
            })
            .collect();
        let k = self.tiles[a].decl.cols;
        let groups = scale.map_or(1, |s| s.groups(&e.k.tiles));
        if let Some(s) = scale.filter(|_| groups > 1) {
            // K in groups, each with its own scales (a K-quant block's sub-blocks): the
            // block's totals stay in registers over all groups, each group's sums start
            // from its offsets and are scaled into them.
            let len = k / groups;
            let totals: Vec<String> = acc_ptrs
                .iter()
                .map(|p| e.b.op(format!("load {acc_vt}, ptr {p}, align 64")))
                .collect();
            let out = e.carried_loop(groups, &acc_vt, &totals, |e, g, totals| {
                let k0 = e.b.op(format!("mul nuw i32 {g}, {len}"));
                let init = self.block_starts(e, s, &rows, g, nr);
                let pass = KPass {
                    tiles: [a, b],
                    rows: &rows,
                    cols: (v0, nr),
                    ks: (&k0, len),
                    micro,
                    vt: &vt,
                };
                let sums = self.k_pass(e, &pass, &init);
                self.scale_into(e, s, (&rows, v0, g), &sums, totals)
            });
            for (p, v) in acc_ptrs.iter().zip(out) {
                e.b.ins(format!("store {acc_vt} {v}, ptr {p}, align 64"));
            }
            return Ok(());
        }
        // A scaled dot's sums start from their row's offset, or 0.
        let init: Vec<String> = match scale {
            Some(s) => self.block_starts(e, s, &rows, "0", nr),
            None => acc_ptrs
                .iter()
                .map(|p| e.b.op(format!("load {vt}, ptr {p}, align 64")))
                .collect(),
        };
        let pass = KPass {
            tiles: [a, b],
            rows: &rows,
            cols: (v0, nr),
            ks: ("0", k),
            micro,
            vt: &vt,
        };
        let out = match steps {
            None => self.k_pass(e, &pass, &init),
            Some(steps) => {
                let mut result = Ok(());
                let out = e.carried_loop(&steps.trips, &vt, &init, |e, i, cur| {
                    let pointed = self.point_step(e, steps, i);
                    if result.is_ok() {
                        result = pointed;
                    }
                    if n == 16 {
                        let ahead = self.prefetch_steps_ahead(e, steps, a, m0, mr, i);
                        if result.is_ok() {
                            result = ahead;
                        }
                    } else if v0 == 0 {
                        self.prefetch_view_rows(e, a, m0, mr);
                    }
                    self.k_pass(e, &pass, cur)
                });
                result?;
                out
            }
        };
        let out = match scale {
            Some(s) => {
                let old: Vec<String> = acc_ptrs
                    .iter()
                    .map(|p| e.b.op(format!("load {acc_vt}, ptr {p}, align 64")))
                    .collect();
                self.scale_into(e, s, (&rows, v0, "0"), &out, &old)
            }
            None => out,
        };
        for (p, v) in acc_ptrs.iter().zip(out) {
            e.b.ins(format!("store {acc_vt} {v}, ptr {p}, align 64"));
        }
        Ok(())
    }

    /// Where a register block's sums start for K group `g`: each row's offset ([`Self::sum_start`],
    /// splatted) for each of its `nr` column vectors, row by row.
    fn block_starts(
        &self,
        e: &mut Emitter,
        s: DotScale,
        rows: &[String],
        g: &str,
        nr: u32,
    ) -> Vec<String> {
        rows.iter()
            .flat_map(|row| {
                let start = self.sum_start(e, s, row, g, true);
                std::iter::repeat_n(start, nr as usize)
            })
            .collect()
    }

    /// A register block's integer sums `sums` (rows `rows` x column vectors from `v0`, row by
    /// row) scaled ([`scaled_sum`]) into `old` with K group `g`'s factors, each row's and
    /// column vector's loaded once.
    fn scale_into(
        &self,
        e: &mut Emitter,
        s: DotScale,
        (rows, v0, g): (&[String], u32, &str),
        sums: &[String],
        old: &[String],
    ) -> Vec<String> {
        let nr = sums.len() / rows.len();
        let cols: Vec<String> = (0..nr as u32)
            .map(|j| ((v0 + j) * 16).to_string())
            .collect();
        let factors: Vec<Vec<String>> = rows
            .iter()
            .flat_map(|r| cols.iter().map(move |c| (r, c)))
            .map(|(r, c)| self.scale_factors(e, s, (r, c), g, true))
            .collect();
        sums.iter()
            .zip(old)
            .zip(&factors)
            .map(|((v, old), f)| scaled_sum(&mut e.b, s, f, v, old, true))
            .collect()
    }

    /// One pass of a register block over the K of `a` and `b` as their views or stack arrays
    /// hold them now: the accumulators `init` in, the updated ones out.
    fn k_pass(&self, e: &mut Emitter, pass: &KPass<'_>, init: &[String]) -> Vec<String> {
        let KPass {
            tiles: [a, b],
            rows,
            cols: (v0, nr),
            ks: (k_first, k_len),
            micro,
            vt,
        } = *pass;
        let k = self.tiles[a].decl.cols;
        let b_elem = self.tiles[b].decl.elem;
        let per_lane = micro.per_lane();
        let a_elem = self.tiles[a].decl.elem;
        // `b`'s base and distance between its rows of `per_lane` (a view's may be anywhere).
        let (pb, b_row, b_align) = match &self.tiles[b].view {
            Some(view) => {
                let base = e.b.op(format!("load ptr, ptr {}", view.base));
                let stride = e.b.op(format!("load i32, ptr {}", view.stride));
                (base, stride, b_elem.size_bytes())
            }
            None => {
                let row = per_lane * self.tiles[b].decl.cols;
                (self.tiles[b].ptr.clone(), row.to_string(), 64)
            }
        };
        let pairs = micro == Micro::Fma && e.k.bf16_pair_dot(a as TileId, b as TileId);
        // Row `kk` of `b` as the block's column vectors.
        let b_vectors = |e: &mut Emitter, kk: &str| -> Vec<String> {
            (0..nr)
                .map(|j| {
                    let col = (v0 + j) * 16 * per_lane;
                    let r = e.b.op(format!("mul nuw i32 {kk}, {b_row}"));
                    let ix = e.b.op(format!("add nuw i32 {r}, {col}"));
                    let p = at(e, lty(b_elem), &pb, &ix);
                    match (micro, b_elem) {
                        (Micro::Dpbf16, _) => {
                            e.b.op(format!("load <32 x bfloat>, ptr {p}, align {b_align}"))
                        }
                        (Micro::Dpwssd | Micro::Dpbusd, _) => {
                            e.b.op(format!("load <16 x i32>, ptr {p}, align {b_align}"))
                        }
                        (Micro::Fma, Ty::F32) => {
                            e.b.op(format!("load <16 x float>, ptr {p}, align {b_align}"))
                        }
                        (Micro::Fma, elem) => {
                            let bits = load_units(e, &p, elem, true, true);
                            e.b.op(format!("bitcast <16 x i32> {bits} to <16 x float>"))
                        }
                    }
                })
                .collect()
        };
        // Each row's splatted `a` value (`av`) times each column vector (`bv`) added to the
        // accumulators `cur`.
        let products = |e: &mut Emitter, av: &[String], bv: &[String], cur: &[String]| {
            let mut next = Vec::new();
            for (r, av) in av.iter().enumerate() {
                for (j, y) in bv.iter().enumerate() {
                    let c = &cur[r * nr as usize + j];
                    next.push(e.b.op(match micro {
                        Micro::Dpbf16 => format!(
                            "call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> {c}, <32 x bfloat> {av}, <32 x bfloat> {y})"
                        ),
                        Micro::Dpwssd => format!(
                            "call <16 x i32> @llvm.x86.avx512.vpdpwssd.512(<16 x i32> {c}, <16 x i32> {av}, <16 x i32> {y})"
                        ),
                        // The second operand is the unsigned one.
                        Micro::Dpbusd if a_elem == Ty::U8 => format!(
                            "call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> {c}, <16 x i32> {av}, <16 x i32> {y})"
                        ),
                        Micro::Dpbusd => format!(
                            "call <16 x i32> @llvm.x86.avx512.vpdpbusd.512(<16 x i32> {c}, <16 x i32> {y}, <16 x i32> {av})"
                        ),
                        Micro::Fma => format!(
                            "call <16 x float> @llvm.fma.v16f32(<16 x float> {av}, <16 x float> {y}, <16 x float> {c})"
                        ),
                    }));
                }
            }
            next
        };
        // On `fma` blocks, a bf16 `b` left in pairs ([`fma_pairs_b`]) or else a bf16 `a` read
        // in place runs a K pair per step: 16 columns of `b`'s pair in one load per column
        // vector, or `a`'s pair in one 32-bit broadcast per row, each half widened in the
        // vector (for `a`, five scalar instructions and a broadcast from a general register
        // per element had held the f32-activation GEMM at 62% of the `vfmadd` peak).
        let b_pairs = micro == Micro::Fma && self.tiles[b].layout == Layout::Pairs;
        let a_pairs = micro == Micro::Fma && !b_pairs && a_elem == Ty::Bf16 && k.is_multiple_of(2);
        if b_pairs || a_pairs {
            debug_assert_eq!(k_len, k, "the pair paths of `fma` blocks take all of K");
            return e.carried_loop(k / 2, vt, init, |e, step, cur| {
                let k0 = e.b.op(format!("shl nuw i32 {step}, 1"));
                let b_words: Vec<String> = if b_pairs {
                    (0..nr)
                        .map(|j| {
                            let r = e.b.op(format!("mul nuw i32 {step}, {b_row}"));
                            let ix = e.b.op(format!("add nuw i32 {r}, {}", (v0 + j) * 32));
                            let p = at(e, lty(b_elem), &pb, &ix);
                            e.b.op(format!("load <16 x i32>, ptr {p}, align {b_align}"))
                        })
                        .collect()
                } else {
                    Vec::new()
                };
                let a_words: Vec<String> = if a_pairs {
                    rows.iter()
                        .map(|row| self.lane_splat(e, a, row, &k0))
                        .collect()
                } else {
                    Vec::new()
                };
                let mut cur = cur.to_vec();
                for half in if pairs { [1, 0] } else { [0, 1] } {
                    let kk = e.b.op(format!("add nuw i32 {k0}, {half}"));
                    let bv: Vec<String> = if b_pairs {
                        b_words.iter().map(|w| bf16_half(e, w, half)).collect()
                    } else {
                        b_vectors(e, &kk)
                    };
                    let av: Vec<String> = if a_pairs {
                        a_words.iter().map(|w| bf16_half(e, w, half)).collect()
                    } else {
                        rows.iter()
                            .map(|row| {
                                let x = self.read(e, a, row, &kk);
                                splat(e, "float", &x)
                            })
                            .collect()
                    };
                    cur = products(e, &av, &bv, &cur);
                }
                cur
            });
        }
        let first_step = e.b.op(format!(
            "lshr exact i32 {k_first}, {}",
            per_lane.trailing_zeros()
        ));
        e.carried_loop(k_len / per_lane, vt, init, |e, step, cur| {
            let step = &e.b.op(format!("add nuw i32 {first_step}, {step}"));
            let kk = &dot_step(&mut e.b, step, k, pairs);
            let bv = b_vectors(e, kk);
            let av: Vec<String> = rows
                .iter()
                .map(|row| match micro {
                    Micro::Dpbf16 | Micro::Dpwssd | Micro::Dpbusd => {
                        let shift = per_lane.trailing_zeros();
                        let k0 = e.b.op(format!("shl nuw i32 {kk}, {shift}"));
                        let splat = self.lane_splat(e, a, row, &k0);
                        if micro == Micro::Dpbf16 {
                            e.b.op(format!("bitcast <16 x i32> {splat} to <32 x bfloat>"))
                        } else {
                            splat
                        }
                    }
                    Micro::Fma => {
                        let x = self.read(e, a, row, kk);
                        splat(e, "float", &x)
                    }
                })
                .collect();
            products(e, &av, &bv, cur)
        })
    }

    /// The 32 bits of row `row` of tile `t` from element `k0` on (the K pair or four a
    /// packed dot or [`bf16_half`] takes), splatted to 16 lanes.
    fn lane_splat(&self, e: &mut Emitter, t: usize, row: &str, k0: &str) -> String {
        let p = self.elem_ptr(e, t, row, k0);
        // A view's rows may start at any element.
        let size = self.tiles[t].decl.elem.size_bytes();
        let word = e.b.op(format!("load i32, ptr {p}, align {size}"));
        splat(e, "i32", &word)
    }

    /// In a fused K loop at step `i` of the register block of rows `m0 .. m0 + mr` of `a`
    /// and the dot's one column vector: prefetches into L1 the rows this block reads `AHEAD`
    /// steps later, or, past its last step, the next block's rows at the step it will then
    /// be at. Such dots are the few-row GEMMs (`gemm.xwt_narrow`, `gemm.xwt_exact_narrow`),
    /// whose weight rows stream from memory once: prefetching the next block's rows at the
    /// current step, as the wider dots do ([`Self::prefetch_view_rows`]), put twice the rows
    /// in the same L1 sets (a weight row of K = 2048 bf16 is 4 KiB) and left each block's
    /// first steps waiting on memory. On Zen 5 the MoE experts' f32-activation products took
    /// 13% less time this way (medians of 5 alternated runs), the bf16 ones about 5%
    /// (docs/measurements.md); the wider GEMMs, whose weight rows come from L2, gained on
    /// some shapes and lost on others, so they keep theirs.
    fn prefetch_steps_ahead(
        &mut self,
        e: &mut Emitter,
        steps: &fused::Steps,
        a: usize,
        m0: &str,
        mr: u32,
        i: &str,
    ) -> Lowered<()> {
        const AHEAD: u32 = 4;
        const LOCALITY: u32 = 3;
        // A step of the loop's range (whose windows the fused loop's check evaluated).
        let j = e.b.op(format!("add nuw i32 {i}, {AHEAD}"));
        let wrap = e.b.op(format!("icmp uge i32 {j}, {}", steps.trips));
        let step = e.b.op(format!("urem i32 {j}, {}", steps.trips));
        let next = e.b.op(format!("add nuw i32 {m0}, {mr}"));
        let row0 = e.b.op(format!("select i1 {wrap}, i32 {next}, i32 {m0}"));
        let Some(w) = self.step_window(e, steps, a, &step)? else {
            return Ok(());
        };
        let span = self.tiles[a].decl.cols * self.tiles[a].decl.elem.size_bytes();
        e.b.declare("declare void @llvm.prefetch.p0(ptr, i32, i32, i32)");
        for r in 0..mr {
            let line = e.b.op(format!("add nuw i32 {row0}, {r}"));
            for b in line_touches(span) {
                let p = e.window_line_addr(&w, &line, b);
                e.b.ins(format!(
                    "call void @llvm.prefetch.p0(ptr {p}, i32 0, i32 {LOCALITY}, i32 1)"
                ));
            }
        }
        Ok(())
    }

    /// For a [`View`] tile `t`: prefetches into L1 rows `m0 + mr .. m0 + 2 mr` of it (those
    /// the next row of register blocks reads, from L2 where the window's prefetch put them).
    /// Rows past the tile are prefetched too, harmlessly.
    fn prefetch_view_rows(&mut self, e: &mut Emitter, t: usize, m0: &str, mr: u32) {
        let tile = &self.tiles[t];
        let Some(view) = &tile.view else {
            return;
        };
        let span = tile.decl.cols * tile.decl.elem.size_bytes();
        let base = e.b.op(format!("load ptr, ptr {}", view.base));
        let row_bytes = self.row_bytes(e, t);
        let m0 = e.b.op(format!("zext i32 {m0} to i64"));
        e.b.declare("declare void @llvm.prefetch.p0(ptr, i32, i32, i32)");
        for r in mr..2 * mr {
            let row = e.b.op(format!("add i64 {m0}, {r}"));
            let start = e.b.op(format!("mul i64 {row}, {row_bytes}"));
            for b in line_touches(span) {
                let at = e.b.op(format!("add i64 {start}, {b}"));
                let p = e.b.op(format!("getelementptr i8, ptr {base}, i64 {at}"));
                e.b.ins(format!(
                    "call void @llvm.prefetch.p0(ptr {p}, i32 0, i32 3, i32 1)"
                ));
            }
        }
    }

    /// `acc += a b` on AMX (see the module doc). Shapes are checked by [`amx_shape`]. With
    /// `steps` (a fused K loop, [`fused`]), each 2 x 2 block of accumulator tiles stays in
    /// tile registers over every step, its operand tiles loaded where the step's views point.
    fn amx_dot(
        &mut self,
        e: &mut Emitter,
        [acc, a, b]: [usize; 3],
        steps: Option<&fused::Steps>,
    ) -> Lowered<()> {
        let (m, n, k) = (
            self.tiles[acc].decl.rows,
            self.tiles[acc].decl.cols,
            self.tiles[a].decl.cols,
        );
        let pc = self.tiles[acc].ptr.clone();
        for d in [
            "declare x86_amx @llvm.x86.tileloadd64.internal(i16, i16, ptr, i64)",
            "declare x86_amx @llvm.x86.tdpbf16ps.internal(i16, i16, i16, x86_amx, x86_amx, x86_amx)",
            "declare void @llvm.x86.tilestored64.internal(i16, i16, ptr, i64, x86_amx)",
        ] {
            e.b.declare(d);
        }
        let (mb, nb) = (m / 16, n / 16);
        for ib in (0..mb).step_by(2) {
            for jb in (0..nb).step_by(2) {
                let is: Vec<u32> = (ib..(ib + 2).min(mb)).collect();
                let js: Vec<u32> = (jb..(jb + 2).min(nb)).collect();
                let mut acc_ptrs = Vec::new();
                let mut init = Vec::new();
                for &i in &is {
                    for &j in &js {
                        let p = at(e, "float", &pc, &(i * 16 * n + j * 16).to_string());
                        init.push(amx_load(e, &p, &(n * 4).to_string()));
                        acc_ptrs.push(p);
                    }
                }
                let block = AmxBlock {
                    tiles: [a, b],
                    is: &is,
                    js: &js,
                    k,
                };
                let out = match steps {
                    None => self.amx_k_pass(e, &block, &init),
                    Some(steps) => {
                        let mut result = Ok(());
                        let out = e.carried_loop(&steps.trips, "x86_amx", &init, |e, i, cur| {
                            let pointed = self.point_step(e, steps, i);
                            if result.is_ok() {
                                result = pointed;
                            }
                            self.amx_k_pass(e, &block, cur)
                        });
                        result?;
                        out
                    }
                };
                for (p, t) in acc_ptrs.iter().zip(&out) {
                    e.b.ins(format!(
                        "call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr {p}, i64 {}, x86_amx {t})",
                        n * 4
                    ));
                }
            }
        }
        Ok(())
    }

    /// One pass of an AMX block over the K of its operand tiles: per 32-wide K step, the A
    /// tiles of its rows and the B tiles of its columns loaded, then `tdpbf16ps` into each
    /// accumulator of `cur` (row-major over the block); returns the new accumulators.
    fn amx_k_pass(&self, e: &mut Emitter, blk: &AmxBlock, cur: &[String]) -> Vec<String> {
        let [a, b] = blk.tiles;
        let a_stride = self.row_bytes(e, a);
        let b_stride = self.pair_row_bytes(e, b);
        let mut accs = cur.to_vec();
        for kk in 0..blk.k / 32 {
            let kc = (kk * 32).to_string();
            let ta: Vec<String> = blk
                .is
                .iter()
                .map(|&i| {
                    let p = self.elem_ptr(e, a, &(i * 16).to_string(), &kc);
                    amx_load(e, &p, &a_stride)
                })
                .collect();
            let tb: Vec<String> = blk
                .js
                .iter()
                .map(|&j| {
                    let p = self.elem_ptr(e, b, &kc, &(j * 16).to_string());
                    amx_load(e, &p, &b_stride)
                })
                .collect();
            for (x, ta) in ta.iter().enumerate() {
                for (y, tb) in tb.iter().enumerate() {
                    let t = &mut accs[x * blk.js.len() + y];
                    *t = e.b.op(format!(
                        "call x86_amx @llvm.x86.tdpbf16ps.internal(i16 16, i16 64, i16 64, x86_amx {t}, x86_amx {ta}, x86_amx {tb})"
                    ));
                }
            }
        }
        accs
    }

    /// The distance in bytes between pair rows (two rows each) of the pair-layout tile `t`,
    /// as an `i64`: its view's stride, or its stack array's `2 * cols` elements.
    fn pair_row_bytes(&self, e: &mut Emitter, t: usize) -> String {
        let tile = &self.tiles[t];
        match &tile.view {
            Some(_) => self.row_bytes(e, t),
            None => (2 * tile.decl.cols * tile.decl.elem.size_bytes()).to_string(),
        }
    }
}

/// The byte offsets a prefetch of `span` bytes from some address touches: one per 64 and the
/// last byte (a run that starts inside a cache line ends in the next).
fn line_touches(span: u32) -> impl Iterator<Item = u32> {
    (0..span).step_by(64).chain([span - 1])
}
