//! The typed LOOM IR: what the front end produces and every lowering consumes.
//!
//! The IR is structured (blocks, `if`, `for`, `while`), not a CFG: both the GPU lowering
//! (LLVM text for AMDGPU) and the CPU work-item-loop transform want the source's loop and
//! branch structure, and a structured IR keeps the uniformity facts checked by the front end
//! meaningful downstream. Every expression carries its type; there are no implicit
//! conversions, so lowerings never guess.
//!
//! Semantics every backend must follow (the differential tests hold them to it):
//! - Integer `+ - *` wrap (two's complement). Shifts take the shift amount modulo 32.
//!   Exception: in a buffer or shared-array index, the `+`/`*` operations at the top of
//!   the index (its sum of products, not operands of other operators) must not wrap as
//!   `u32`: an index whose arithmetic would wrap is out of bounds, hence undefined, and
//!   lowerings may assume it does not happen (LLVM `nuw`).
//!   Integer division or remainder by zero is undefined (the CPU reference panics).
//! - Float to integer casts saturate and map NaN to 0 (Rust `as`, LLVM `fptosi.sat`).
//! - `max`/`min` on floats ignore a NaN operand (IEEE maxNum/minNum, Rust `f32::max`).
//! - `&&`, `||` and `Select` evaluate lazily: the untaken side is never evaluated, so
//!   `i < n && x[i] > 0.0` never reads out of bounds.
//! - Collectives: `reduce_sum` combines in a fixed pairwise tree over work-item ids
//!   (stride `wg/2, wg/4, …, 1`: `a[i] = a[i] + a[i + s]`), on every backend, so the CPU
//!   lowerings agree bit for bit. `argmax` picks the largest value, ties to the lower index,
//!   and a NaN value never wins over a number.

use serde::{Deserialize, Serialize};

/// The type of a value inside a kernel.
///
/// `Bf16` and `F16` are value types with `+ - * /`, negation and comparisons: each operation
/// runs on the values widened to f32 and rounds an arithmetic result once back to the 16-bit
/// type (as the `half` crate's operators do); everything else converts first (`bf16_to_f32`,
/// `f32_to_bf16`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Ty {
    F32,
    I32,
    U32,
    Bool,
    Bf16,
    F16,
    /// Only as the element of an integer tile's operands (`tile::<i16, R, C>()`): no value,
    /// variable, parameter or shared array has this type.
    I16,
    /// Signed 8-bit, only as the element of an integer tile's operands (`tile::<i8, R, C>()`).
    I8,
    /// Unsigned 8-bit, only as the element of an integer tile's operands
    /// (`tile::<u8, R, C>()`).
    U8,
}

impl Ty {
    /// The name a kernel author writes for this type.
    pub fn rust_name(self) -> &'static str {
        match self {
            Ty::F32 => "f32",
            Ty::I32 => "i32",
            Ty::U32 => "u32",
            Ty::Bool => "bool",
            Ty::Bf16 => "bf16",
            Ty::F16 => "f16",
            Ty::I16 => "i16",
            Ty::I8 => "i8",
            Ty::U8 => "u8",
        }
    }

    /// Size in bytes when stored in a buffer or shared array.
    pub fn size_bytes(self) -> u32 {
        match self {
            Ty::F32 | Ty::I32 | Ty::U32 => 4,
            Ty::Bf16 | Ty::F16 | Ty::I16 => 2,
            Ty::Bool | Ty::I8 | Ty::U8 => 1,
        }
    }

    pub fn is_float(self) -> bool {
        self == Ty::F32
    }

    pub fn is_int(self) -> bool {
        matches!(self, Ty::I32 | Ty::U32)
    }

    /// The integer element types of `tile_dot` operands (i16, i8, u8), whose products sum
    /// exactly in i32.
    pub fn is_dot_int(self) -> bool {
        matches!(self, Ty::I16 | Ty::I8 | Ty::U8)
    }
}

/// Whether a kernel may write a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Access {
    Read,
    ReadWrite,
}

/// A kernel parameter, in declaration order.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Param {
    /// A global buffer: `&[T]` (read) or `&mut [T]` (read-write), T in f32/bf16/f16/u32/i32;
    /// `&[T; len]` / `&mut [T; len]` also declares its minimum length.
    Buffer {
        name: String,
        elem: Ty,
        access: Access,
        /// The declared minimum length in elements, checked by the kernel's typed launcher
        /// before a launch; `None` for a plain `&[T]`. Launcher metadata only: no lowering
        /// reads it.
        #[serde(default)]
        len: Option<LenExpr>,
    },
    /// A scalar passed by value: f32, i32 or u32.
    Scalar { name: String, ty: Ty },
}

impl Param {
    pub fn name(&self) -> &str {
        match self {
            Param::Buffer { name, .. } | Param::Scalar { name, .. } => name,
        }
    }
}

/// A buffer's declared minimum length (`x: &[f32; rows * d]`): an expression over the
/// kernel's `u32` scalar parameters, the launch grid's workgroup counts (`num_groups()`,
/// `num_groups_y()`, `num_groups_z()`) and integer literals, evaluated by the launcher in
/// `u64` with checked arithmetic (overflow, a negative intermediate or a division by zero is
/// an error, never a wrap).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LenExpr {
    Lit(u64),
    /// A `u32` scalar parameter, by name.
    Scalar(String),
    /// The grid's workgroup count along axis 0 (x), 1 (y) or 2 (z).
    Grid(u8),
    Bin(LenOp, Box<LenExpr>, Box<LenExpr>),
}

/// The operations of a [`LenExpr`]: `+ - * /` (`/` truncates) and `min(a, b)`, `max(a, b)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LenOp {
    Add,
    Sub,
    Mul,
    Div,
    Min,
    Max,
}

impl LenOp {
    /// The symbol and binding strength of an infix operator; `None` for `min`/`max`, which
    /// are written as calls.
    fn infix(self) -> Option<(&'static str, u8)> {
        match self {
            LenOp::Add => Some(("+", 1)),
            LenOp::Sub => Some(("-", 1)),
            LenOp::Mul => Some(("*", 2)),
            LenOp::Div => Some(("/", 2)),
            LenOp::Min | LenOp::Max => None,
        }
    }
}

/// The builtin that reads the grid's workgroup count along `axis`: `num_groups()`,
/// `num_groups_y()`, `num_groups_z()`.
pub fn grid_count_name(axis: u8) -> &'static str {
    match axis {
        0 => "num_groups()",
        1 => "num_groups_y()",
        _ => "num_groups_z()",
    }
}

impl LenExpr {
    /// How strongly the expression binds when it is an operand (`u8::MAX`: never needs
    /// parentheses).
    fn strength(&self) -> u8 {
        match self {
            LenExpr::Bin(op, ..) => op.infix().map_or(u8::MAX, |(_, p)| p),
            _ => u8::MAX,
        }
    }
}

/// The canonical source form: `rows * d`, `(pos0 + t) * n`, `max(a, b) - 1`. Parentheses
/// appear exactly where the tree needs them (a right operand of equal strength keeps them:
/// `a - (b - c)`), so the text reads back to the same tree.
impl std::fmt::Display for LenExpr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LenExpr::Lit(v) => write!(f, "{v}"),
            LenExpr::Scalar(name) => f.write_str(name),
            LenExpr::Grid(axis) => f.write_str(grid_count_name(*axis)),
            LenExpr::Bin(op, a, b) => match op.infix() {
                None => {
                    let name = if *op == LenOp::Min { "min" } else { "max" };
                    write!(f, "{name}({a}, {b})")
                }
                Some((sym, p)) => {
                    if a.strength() < p {
                        write!(f, "({a})")?;
                    } else {
                        write!(f, "{a}")?;
                    }
                    write!(f, " {sym} ")?;
                    if b.strength() <= p {
                        write!(f, "({b})")
                    } else {
                        write!(f, "{b}")
                    }
                }
            },
        }
    }
}

/// A workgroup-shared array (LDS on AMDGPU), declared with `shared::<T>(LEN)`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SharedArray {
    pub name: String,
    /// f32, i32 or u32.
    pub elem: Ty,
    pub len: u32,
}

/// A tile: a `rows x cols` matrix owned by the whole workgroup, declared with
/// `let t = tile::<T, ROWS, COLS>();` (zero-filled). `elem` is `bf16` or `f16` (matrix
/// operands) or `f32` (accumulators and epilogue values). Where a tile lives is the
/// lowering's choice (registers, matrix-unit tiles, shared memory, a stack array).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TileDecl {
    pub name: String,
    pub elem: Ty,
    pub rows: u32,
    pub cols: u32,
}

impl TileDecl {
    /// Elements in the tile.
    pub fn len(&self) -> u32 {
        self.rows * self.cols
    }

    /// Whether the tile has no elements (never true for a declared tile).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A `let` binding or `for` loop variable. Names may repeat (shadowing); ids do not.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Local {
    pub name: String,
    pub ty: Ty,
}

/// Index into [`Kernel::locals`].
pub type VarId = u32;
/// Index into [`Kernel::params`]; the parameter is a buffer or a scalar as the use requires.
pub type ParamId = u32;
/// Index into [`Kernel::shared`].
pub type SharedId = u32;
/// Index into [`Kernel::tiles`].
pub type TileId = u32;

/// One LOOM kernel after the front end: typed, checked, with comptime constants folded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Kernel {
    /// The Rust function name; also the base of every symbol emitted for the kernel.
    pub fn_name: String,
    /// Stable name, e.g. `logits.lse_pick`.
    pub name: String,
    /// Version; the full id is `{name}.v{version}`.
    pub version: u32,
    /// Work-items per workgroup (1-D, a power of two, at most 1024).
    pub workgroup_size: u32,
    /// Work-items per subgroup (`subgroup = N`: a power of two from 2 to the workgroup size)
    /// for the `subgroup_*` built-ins; subgroup `j` is work-items `j·N .. (j+1)·N`.
    #[serde(default)]
    pub subgroup: Option<u32>,
    /// AMDGPU architectures to build code objects for, e.g. `gfx1201`.
    pub targets: Vec<String>,
    pub params: Vec<Param>,
    pub shared: Vec<SharedArray>,
    pub tiles: Vec<TileDecl>,
    pub locals: Vec<Local>,
    pub body: Block,
}

impl Kernel {
    /// `name.vN`, the id users and metadata see.
    pub fn id(&self) -> String {
        format!("{}.v{}", self.name, self.version)
    }

    /// Whether a `tile_dot` of tiles `a` and `b` multiplies two bf16 tiles, whose K pairs
    /// every target without a matrix instruction adds as `vdpbf16ps` does
    /// (`rt::tile::dot_step`).
    pub fn bf16_pair_dot(&self, a: TileId, b: TileId) -> bool {
        [a, b]
            .iter()
            .all(|&t| self.tiles[t as usize].elem == Ty::Bf16)
    }

    /// Whether the kernel has a `tile_dot` of two bf16 tiles (the dot whose instruction the
    /// runtime may pick per CPU: `KernelDef::bf16_dot`).
    pub fn has_bf16_dot(&self) -> bool {
        let mut found = false;
        each_tile_op(&self.body, &mut |op| {
            if let TileOp::Dot { a, b, .. } = op {
                found |= self.bf16_pair_dot(*a, *b);
            }
        });
        found
    }

    /// Bytes of shared memory the kernel declares (not counting collective scratch).
    pub fn shared_bytes(&self) -> u32 {
        self.shared
            .iter()
            .map(|s| s.elem.size_bytes() * s.len)
            .sum()
    }

    /// The kernel's shared arrays, then its tiles, laid out one after the other in one block
    /// of workgroup memory, each at a multiple of 16 bytes.
    pub fn workgroup_block(&self) -> WorkgroupBlock {
        let mut bytes = 0;
        let mut place = |size: u32| {
            let at = bytes;
            bytes = at + size.next_multiple_of(WORKGROUP_ALIGN);
            at
        };
        let shared = self
            .shared
            .iter()
            .map(|s| place(s.elem.size_bytes() * s.len))
            .collect();
        let tiles = self
            .tiles
            .iter()
            .map(|t| place(t.elem.size_bytes() * t.len()))
            .collect();
        WorkgroupBlock {
            shared,
            tiles,
            bytes,
        }
    }

    /// Bytes of dynamic shared memory an NVIDIA launch of the kernel gives it: its
    /// [`Kernel::workgroup_block`] when that is over [`NVIDIA_STATIC_SHARED_BYTES`] (ptxas
    /// refuses more static shared memory, so the PTX declares the block `extern` and the
    /// launch sizes it), else 0 (the arrays and tiles are static).
    pub fn nvidia_dynamic_shared_bytes(&self) -> u32 {
        let bytes = self.workgroup_block().bytes;
        if bytes > NVIDIA_STATIC_SHARED_BYTES {
            bytes
        } else {
            0
        }
    }
}

/// Alignment of each shared array and tile in a kernel's workgroup memory
/// ([`Kernel::workgroup_block`]); each takes its size rounded up to it.
pub const WORKGROUP_ALIGN: u32 = 16;

/// The most static shared memory an NVIDIA block may declare. Up to the front end's limit
/// (64 KiB, the smallest AMDGPU LDS), a kernel past it takes its arrays and tiles as dynamic
/// shared memory on NVIDIA GPUs ([`Kernel::nvidia_dynamic_shared_bytes`]).
pub const NVIDIA_STATIC_SHARED_BYTES: u32 = 48 * 1024;

/// Byte offsets of a kernel's shared arrays and tiles in one block of workgroup memory
/// ([`Kernel::workgroup_block`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkgroupBlock {
    /// Indexed by [`SharedId`].
    pub shared: Vec<u32>,
    /// Indexed by [`TileId`].
    pub tiles: Vec<u32>,
    /// The block's size: past the last one, rounded up to 16.
    pub bytes: u32,
}

pub type Block = Vec<Stmt>;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Stmt {
    /// Declares `var` and initialises it.
    Let {
        var: VarId,
        value: Expr,
    },
    /// Assigns to a `let mut` variable declared earlier.
    Assign {
        var: VarId,
        value: Expr,
    },
    /// `buf[index] = value` on a read-write buffer; `index` is u32.
    Store {
        buf: ParamId,
        index: Expr,
        value: Expr,
    },
    /// `arr[index] = value` on a shared array; `index` is u32.
    SharedStore {
        array: SharedId,
        index: Expr,
        value: Expr,
    },
    If {
        cond: Expr,
        then_body: Block,
        else_body: Block,
    },
    /// `for var in start..end` (step 1) or `for var in (start..end).step_by(step)`; `var` is
    /// i32 or u32 like the bounds, `end` is evaluated once before the first iteration.
    For {
        var: VarId,
        start: Expr,
        end: Expr,
        step: Expr,
        body: Block,
    },
    While {
        cond: Expr,
        body: Block,
    },
    /// Leaves the innermost loop. Only allowed in loops free of barriers and collectives.
    Break,
    /// Next iteration of the innermost loop. Same restriction as `Break`.
    Continue,
    /// Workgroup barrier with workgroup-scope memory ordering for shared and global memory.
    Barrier,
    /// A workgroup collective. Every work-item contributes `args` and receives the result in
    /// `dst` (one variable, or two for `Argmax`: value then index).
    Collective {
        op: CollectiveOp,
        dst: Vec<VarId>,
        args: Vec<Expr>,
    },
    /// A tile operation, done by the whole workgroup (uniform control flow only, like a
    /// collective); it synchronises the workgroup before and after like `barrier()`, but for
    /// [`TileOp::Prefetch`], which touches no memory a work-item can see.
    Tile(TileOp),
}

/// The memory a tile window reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TileMem {
    /// An f32, bf16 or f16 buffer parameter (read-write for a store).
    Buffer(ParamId),
    /// An f32 workgroup-shared array (`shared::<f32>(LEN)`), e.g. weights the work-items
    /// dequantised there before a `tile_load`, or an epilogue staged by a `tile_store`. The
    /// tile statement's barriers order it with the work-items' own accesses to the array.
    Shared(SharedId),
}

/// Where a tile load or store reads or writes a buffer or shared array (`mem`): element
/// `(r, c)` of the tile is element `offset + r * stride + c` of it (or
/// `offset + c * stride + r` when `transposed`), for `r < rows` and `c < cols`; elements
/// outside that window read as 0 and are not written. All four are uniform `u32`
/// expressions. A `quads` window (`tile_load_quads`, byte tiles only) holds four rows in each
/// i32 word: `(r, c)` is byte `r % 4` (little-endian) of element `offset + (r / 4) * stride + c`.
/// A `packed` window (`tile_load_packed`, byte tiles only) holds four columns in each i32
/// word, rows of bytes: `(r, c)` is byte `c % 4` of element `offset + r * stride + c / 4`.
/// A `pairs` window (`tile_load_pairs`, `tile_store_pairs`, bf16 and f16 tiles on buffers of
/// their type) interleaves each two rows in one memory row: `(r, c)` is element
/// `offset + (r / 2) * stride + 2 * c + r % 2`, the operand layout of `vdpbf16ps`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TileWindow {
    pub mem: TileMem,
    pub offset: Expr,
    pub stride: Expr,
    pub rows: Expr,
    pub cols: Expr,
    pub transposed: bool,
    #[serde(default)]
    pub quads: bool,
    #[serde(default)]
    pub packed: bool,
    #[serde(default)]
    pub pairs: bool,
}

impl TileWindow {
    /// The window's four expressions, in order.
    pub fn exprs(&self) -> [&Expr; 4] {
        [&self.offset, &self.stride, &self.rows, &self.cols]
    }

    /// The buffer parameter the window is on, or `None` for a shared array.
    pub fn buffer(&self) -> Option<ParamId> {
        match self.mem {
            TileMem::Buffer(p) => Some(p),
            TileMem::Shared(_) => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum TileOp {
    /// `tile_zero(t)`: every element becomes 0.
    Zero { dst: TileId },
    /// `tile_load(t, mem, offset, stride, rows, cols)` (`tile_load_t` for transposed): each
    /// element converted from the buffer's or shared array's type to the tile's (round to
    /// nearest even). `tile_load_quads` and `tile_load_packed` read a byte tile from a
    /// [`TileWindow::quads`] or [`TileWindow::packed`] window.
    Load { dst: TileId, from: TileWindow },
    /// `tile_store(t, mem, offset, stride, rows, cols)` (`tile_store_t` for transposed): each
    /// element converted to the buffer's or shared array's type.
    Store { src: TileId, to: TileWindow },
    /// `tile_dot(acc, a, b)`: `acc += a b` with `a: [M x K]` and `b: [K x N]` in bf16 or f16
    /// (both the same) or f32, `acc: [M x N]` f32. Products of 16-bit operands are exact in
    /// f32; the order in which the K products are summed belongs to the target (LOOM.md).
    /// Integer operands (both i16, or one i8 and one u8) accumulate exactly into an i32 `acc`
    /// (wrapping sums). `tile_dot_scaled` and `tile_dot_dequant` (integer operands only) set
    /// `scale`: what each element's sum of products is multiplied by ([`DotScale`]).
    Dot {
        acc: TileId,
        a: TileId,
        b: TileId,
        scale: Option<DotScale>,
    },
    /// `tile_dequant(acc, s, rows, cols)`: `acc[m][n] += f32(s[m][n]) · (rows[m][0] ·
    /// cols[0][n])` with `s` an i32 tile of `acc`'s shape, `rows` `[M x 1]` and `cols`
    /// `[1 x N]` f32 tiles, each operation one IEEE rounding (no fused multiply-add): the
    /// scaling of [`DotScale::Dequant`] without an offset, for integer sums gathered over
    /// several statements (a K-quant block's sub-blocks, each with its own integer scale).
    Dequant {
        acc: TileId,
        src: TileId,
        rows: TileId,
        cols: TileId,
    },
    /// `tile_add(dst, src)` (and `tile_sub`, `tile_mul`, `tile_div`, `tile_max`):
    /// `dst[r][c] = dst[r][c] op src[r'][c']`, both f32. `src` has `dst`'s shape, or one
    /// column (`ROWS x 1`: one value per row, `c' = 0`), or one row (`1 x COLS`: one value per
    /// column, `r' = 0`), as numpy broadcasts.
    Binary {
        op: TileBinary,
        dst: TileId,
        src: TileId,
    },
    /// `tile_row_sum(dst, src)` / `tile_row_max(dst, src)`: `dst[r][0] = dst[r][0] op src[r][0]
    /// op src[r][1] op ...`, in increasing column; `dst` is `ROWS x 1`, both f32. `op` is `Add`
    /// or `Max`.
    RowReduce {
        op: TileBinary,
        dst: TileId,
        src: TileId,
    },
    /// `tile_exp(t)`: every element of an f32 tile becomes LOOM's `exp` of it.
    Exp { dst: TileId },
    /// `tile_scale(t, s)`: every element of an f32 tile is multiplied by the uniform f32 `s`.
    Scale { dst: TileId, by: Expr },
    /// `tile_copy(dst, src)`: tiles of one shape; each element converted to `dst`'s type
    /// (round to nearest even).
    Copy { dst: TileId, src: TileId },
    /// `prefetch(buf, offset, len)`: a hint that the workgroup will soon read elements
    /// `offset .. offset + len` of buffer `buf` (any element type). It has no effect on any
    /// value: the host brings the range's cache lines towards the core (a range past the
    /// buffer's end included, harmlessly), the generated Rust evaluates the two expressions
    /// and nothing more, and the GPUs (which hide memory latency by running other waves) do
    /// nothing.
    Prefetch {
        buf: ParamId,
        offset: Expr,
        len: Expr,
    },
}

/// How a dot of integer operands scales each element's sum of products `s = (a b)[m][n]`
/// (over the statement's whole K) before adding it to `acc`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum DotScale {
    /// `tile_dot_scaled(acc, a, b, s[, offset])`: with `s` a `[G x N]` i32 tile, K cut into
    /// `G` groups of `K / G` (a multiple of 4), `acc[m][n] += Σ_g s[g][n] · (offset[m][g] +
    /// sum_g)` in wrapping i32 (`sum_g` the element's integer dot over group `g`, `offset` 0
    /// when absent): `s` a quantized block's per-column sub-block scales (one row per
    /// sub-block), `offset` an `[M x G]` i32 tile (what a weight's zero point takes off a
    /// row's sum over each sub-block); `acc` is i32.
    Columns {
        scale: TileId,
        offset: Option<TileId>,
    },
    /// `tile_dot_dequant(acc, a, b, offset, rows, cols)`: with `cols` a `[G x N]` f32 tile,
    /// K cut into `G` groups of `K / G` (a multiple of 4 when `G > 1`), and for `g = 0..G` in
    /// order `acc[m][n] += (f32(sum_g) + offset[m][g]) · (rows[m][g] · cols[g][n])` on an
    /// f32 `acc`, each operation one IEEE rounding (no fused multiply-add), with `offset` and
    /// `rows` `[M x G]` f32 tiles: blocks of symmetric 8-bit quants (Q8_0), one per group,
    /// times their activation and weight scales, `offset` taking off what a sign flip added
    /// to each block's integer sum.
    Dequant {
        offset: TileId,
        rows: TileId,
        cols: TileId,
    },
}

impl DotScale {
    /// The groups K is cut into, each scaled by its own row of the column scale (the
    /// `[G x N]` tile's `G`), given the kernel's tiles.
    pub fn groups(&self, tiles: &[TileDecl]) -> u32 {
        match *self {
            DotScale::Columns { scale, .. } => tiles[scale as usize].rows,
            DotScale::Dequant { cols, .. } => tiles[cols as usize].rows,
        }
    }

    /// The `[M x G]` i32 tile an integer scaled dot's sums start from, if any.
    pub fn sum_start(&self) -> Option<TileId> {
        match *self {
            DotScale::Columns { offset, .. } => offset,
            DotScale::Dequant { .. } => None,
        }
    }

    /// The tiles the scaling reads.
    pub fn tiles(&self) -> Vec<TileId> {
        match *self {
            DotScale::Columns { scale, offset } => std::iter::once(scale).chain(offset).collect(),
            DotScale::Dequant { offset, rows, cols } => vec![offset, rows, cols],
        }
    }
}

impl TileOp {
    /// The statement's expressions: a window's offset, stride, rows and cols, the factor
    /// of `tile_scale`, or a prefetch's offset and length. All are uniform.
    pub fn exprs(&self) -> Vec<&Expr> {
        match self {
            TileOp::Load { from: w, .. } | TileOp::Store { to: w, .. } => w.exprs().to_vec(),
            TileOp::Scale { by, .. } => vec![by],
            TileOp::Prefetch { offset, len, .. } => vec![offset, len],
            TileOp::Zero { .. }
            | TileOp::Dot { .. }
            | TileOp::Dequant { .. }
            | TileOp::Binary { .. }
            | TileOp::RowReduce { .. }
            | TileOp::Exp { .. }
            | TileOp::Copy { .. } => Vec::new(),
        }
    }
}

/// The f32 operation of an elementwise or row-reducing tile statement. `Max` ignores a NaN
/// operand (IEEE `maxNum`, Rust's `f32::max`), as `reduce_max` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TileBinary {
    Add,
    Sub,
    Mul,
    Div,
    Max,
}

impl TileBinary {
    /// The statement's name suffix: `tile_<suffix>`, `tile_row_<suffix>`.
    pub fn suffix(self) -> &'static str {
        match self {
            TileBinary::Add => "add",
            TileBinary::Sub => "sub",
            TileBinary::Mul => "mul",
            TileBinary::Div => "div",
            TileBinary::Max => "max",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CollectiveOp {
    /// `reduce_sum(x)`; f32, i32 or u32.
    ReduceSum,
    /// `reduce_max(x)`; f32 (NaN ignored), i32 or u32.
    ReduceMax,
    /// `reduce_min(x)`; f32 (NaN ignored), i32 or u32.
    ReduceMin,
    /// `argmax(value: f32, index: u32) -> (f32, u32)`; ties to the lower index.
    Argmax,
    /// `broadcast(x, lane: u32)`: the value of `x` on work-item `lane`.
    Broadcast,
    /// `subgroup_sum(x)`: `reduce_sum` within each subgroup (the kernel's `subgroup = N`).
    SubgroupSum,
    /// `subgroup_max(x)`: `reduce_max` within each subgroup.
    SubgroupMax,
    /// `subgroup_min(x)`: `reduce_min` within each subgroup.
    SubgroupMin,
    /// `subgroup_shuffle(x, lane: u32)`: the value of `x` on lane `lane % N` of the
    /// work-item's own subgroup; `lane` may differ between work-items.
    SubgroupShuffle,
}

impl CollectiveOp {
    /// The built-in's name as a kernel author writes it (and as the IR text prints it).
    pub fn name(self) -> &'static str {
        match self {
            CollectiveOp::ReduceSum => "reduce_sum",
            CollectiveOp::ReduceMax => "reduce_max",
            CollectiveOp::ReduceMin => "reduce_min",
            CollectiveOp::Argmax => "argmax",
            CollectiveOp::Broadcast => "broadcast",
            CollectiveOp::SubgroupSum => "subgroup_sum",
            CollectiveOp::SubgroupMax => "subgroup_max",
            CollectiveOp::SubgroupMin => "subgroup_min",
            CollectiveOp::SubgroupShuffle => "subgroup_shuffle",
        }
    }

    /// Whether the op works within each subgroup rather than across the workgroup.
    pub fn is_subgroup(self) -> bool {
        matches!(
            self,
            CollectiveOp::SubgroupSum
                | CollectiveOp::SubgroupMax
                | CollectiveOp::SubgroupMin
                | CollectiveOp::SubgroupShuffle
        )
    }

    /// The combining operation of a reduction (`ReduceSum` for `subgroup_sum`, ...), or the op
    /// itself.
    pub fn reduction(self) -> Self {
        match self {
            CollectiveOp::SubgroupSum => CollectiveOp::ReduceSum,
            CollectiveOp::SubgroupMax => CollectiveOp::ReduceMax,
            CollectiveOp::SubgroupMin => CollectiveOp::ReduceMin,
            op => op,
        }
    }

    /// Work-items one instance of the op spans in kernel `k`: the subgroup size for subgroup
    /// ops, the workgroup size otherwise.
    pub fn width(self, k: &Kernel) -> u32 {
        match (self.is_subgroup(), k.subgroup) {
            (true, Some(n)) => n,
            _ => k.workgroup_size,
        }
    }
}

/// The reduction tree every target follows, for `reduce_*`, `argmax` and `subgroup_*` over
/// `width` work-items (a power of two): for each step `s` yielded (`width / 2`, ..., 2, 1),
/// the value of lane `i < s` becomes `op(v[i], v[i + s])`, in that operand order; the result
/// is lane 0's. One definition, so the generated Rust and every lowering agree bit for bit.
pub fn tree_steps(width: u32) -> impl Iterator<Item = u32> {
    std::iter::successors((width >= 2).then_some(width / 2), |&s| {
        (s > 1).then_some(s / 2)
    })
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Expr {
    pub kind: ExprKind,
    pub ty: Ty,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum ExprKind {
    /// A constant; the payload is the value's bits (f32 bits, i32 as u32, bool as 0/1).
    Const(u32),
    Var(VarId),
    /// A scalar parameter.
    Param(ParamId),
    /// `buf[index]`; the type is the buffer's element type.
    Load {
        buf: ParamId,
        index: Box<Expr>,
    },
    /// `arr[index]` on a shared array.
    SharedLoad {
        array: SharedId,
        index: Box<Expr>,
    },
    Builtin(Builtin),
    Unary(UnOp, Box<Expr>),
    Binary(BinOp, Box<Expr>, Box<Expr>),
    /// `expr as T` between f32, i32, u32 (and bool to an integer).
    Cast(Box<Expr>),
    Math(MathFn, Vec<Expr>),
    /// `if cond { a } else { b }` as an expression; lazily evaluated.
    Select(Box<Expr>, Box<Expr>, Box<Expr>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Builtin {
    /// `local_id()`: the work-item's index in its workgroup (u32). The only divergent builtin.
    LocalId,
    /// `group_id()`, `group_id_y()`, `group_id_z()` (u32).
    GroupId(u8),
    /// `num_groups()`, `num_groups_y()`, `num_groups_z()` (u32).
    NumGroups(u8),
    /// `group_size()`: the workgroup size (u32 constant).
    GroupSize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum UnOp {
    /// `-x` (f32, i32).
    Neg,
    /// `!x` (bool: logical not; integers: bitwise not).
    Not,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
    Rem,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
    /// Lazy `&&` on bool.
    And,
    /// Lazy `||` on bool.
    Or,
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

impl BinOp {
    /// The Rust operator a kernel author writes.
    pub fn symbol(self) -> &'static str {
        use BinOp::*;
        match self {
            Add => "+",
            Sub => "-",
            Mul => "*",
            Div => "/",
            Rem => "%",
            BitAnd => "&",
            BitOr => "|",
            BitXor => "^",
            Shl => "<<",
            Shr => ">>",
            And => "&&",
            Or => "||",
            Lt => "<",
            Le => "<=",
            Gt => ">",
            Ge => ">=",
            Eq => "==",
            Ne => "!=",
        }
    }

    /// Comparisons and logical ops produce `bool`.
    pub fn is_comparison(self) -> bool {
        matches!(
            self,
            BinOp::Lt | BinOp::Le | BinOp::Gt | BinOp::Ge | BinOp::Eq | BinOp::Ne
        )
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MathFn {
    /// e^x (f32).
    Exp,
    /// Natural log (f32).
    Log,
    /// `1 / (1 + e^-x)` (f32).
    Sigmoid,
    /// `x * sigmoid(x)` (f32).
    Silu,
    /// Hyperbolic tangent (f32).
    Tanh,
    Sqrt,
    /// 1/sqrt(x).
    Rsqrt,
    /// `fma(a, b, c)` = a*b+c with one rounding.
    Fma,
    /// f32 (NaN-ignoring), i32, u32.
    Max,
    Min,
    Abs,
    /// bf16 -> f32 (exact).
    Bf16ToF32,
    /// f16 -> f32 (exact).
    F16ToF32,
    /// f32 -> bf16, round to nearest even (NaN stays NaN).
    F32ToBf16,
    /// f32 -> f16, round to nearest even.
    F32ToF16,
    /// u32 -> f32 with the same bits.
    F32FromBits,
    /// u32 -> f16 whose bits are the low 16 bits of the argument.
    F16FromBits,
    /// u32 -> bf16 whose bits are the low 16 bits of the argument.
    Bf16FromBits,
}

impl Expr {
    pub fn new(kind: ExprKind, ty: Ty) -> Expr {
        Expr { kind, ty }
    }

    pub fn const_u32(v: u32) -> Expr {
        Expr::new(ExprKind::Const(v), Ty::U32)
    }

    pub fn const_i32(v: i32) -> Expr {
        Expr::new(ExprKind::Const(v as u32), Ty::I32)
    }

    pub fn const_f32(v: f32) -> Expr {
        Expr::new(ExprKind::Const(v.to_bits()), Ty::F32)
    }

    pub fn const_bool(v: bool) -> Expr {
        Expr::new(ExprKind::Const(v as u32), Ty::Bool)
    }

    /// Whether `f` holds for this expression or any expression inside it.
    pub fn any(&self, f: &impl Fn(&Expr) -> bool) -> bool {
        f(self)
            || match &self.kind {
                ExprKind::Const(_)
                | ExprKind::Var(_)
                | ExprKind::Param(_)
                | ExprKind::Builtin(_) => false,
                ExprKind::Load { index, .. } | ExprKind::SharedLoad { index, .. } => index.any(f),
                ExprKind::Unary(_, a) | ExprKind::Cast(a) => a.any(f),
                ExprKind::Binary(_, a, b) => a.any(f) || b.any(f),
                ExprKind::Math(_, args) => args.iter().any(|a| a.any(f)),
                ExprKind::Select(c, a, b) => c.any(f) || a.any(f) || b.any(f),
            }
    }
}

/// `f` on every tile statement of `block`, nested ones included.
pub fn each_tile_op(block: &Block, f: &mut dyn FnMut(&TileOp)) {
    for s in block {
        match s {
            Stmt::Tile(op) => f(op),
            Stmt::If {
                then_body,
                else_body,
                ..
            } => {
                each_tile_op(then_body, f);
                each_tile_op(else_body, f);
            }
            Stmt::For { body, .. } | Stmt::While { body, .. } => each_tile_op(body, f),
            _ => {}
        }
    }
}
