//! Tiles: `let t = tile::<T, ROWS, COLS>();` declarations and the tile statements
//! ([`TILE_STMTS`]: loads, stores, `tile_dot`, the elementwise and row operations, and
//! `prefetch`). Shapes and element types are checked here, at the span of the offending
//! argument; uniformity (tile statements only under uniform control flow, window expressions
//! uniform) is checked with the barriers in `uniformity`.

use syn::spanned::Spanned;

use super::cx::{Binding, Cx, Site};
use super::fold::eval;
use super::syntax::{err, strip, text};
use super::types::named_ty;
use crate::ir::{
    Access, Block, DotScale, Param, ParamId, Stmt, TileBinary, TileDecl, TileId, TileMem, TileOp,
    TileWindow, Ty,
};

/// The tile statements, by name.
pub(super) const TILE_STMTS: [&str; 25] = [
    "tile_zero",
    "tile_load",
    "tile_load_t",
    "tile_load_quads",
    "tile_load_packed",
    "tile_load_pairs",
    "tile_store",
    "tile_store_t",
    "tile_store_packed",
    "tile_store_pairs",
    "tile_dot",
    "tile_dot_scaled",
    "tile_dot_dequant",
    "tile_dequant",
    "tile_add",
    "tile_sub",
    "tile_mul",
    "tile_div",
    "tile_max",
    "tile_row_sum",
    "tile_row_max",
    "tile_exp",
    "tile_scale",
    "tile_copy",
    "prefetch",
];

/// The elementwise statement `name`'s operation.
fn binary_op(name: &str) -> Option<TileBinary> {
    Some(match name {
        "tile_add" => TileBinary::Add,
        "tile_sub" => TileBinary::Sub,
        "tile_mul" => TileBinary::Mul,
        "tile_div" => TileBinary::Div,
        "tile_max" => TileBinary::Max,
        _ => return None,
    })
}

/// Whether tiles of `elem` are integer tiles (i16, i8 and u8 operands, i32 accumulators).
fn is_int_tile(elem: Ty) -> bool {
    matches!(elem, Ty::I16 | Ty::I8 | Ty::U8 | Ty::I32)
}

/// Whether `tile_dot` takes operands of `a` and `b`: one float type (bf16, f16, f32), both
/// i16, or one i8 and one u8 (the signed-by-unsigned byte products of `vpdpbusd`).
fn dot_operands(a: Ty, b: Ty) -> bool {
    match (a, b) {
        (Ty::I8, Ty::U8) | (Ty::U8, Ty::I8) => true,
        (Ty::I32, _) | (Ty::I8 | Ty::U8, _) => false,
        _ => a == b,
    }
}

/// The error for a tile store to the read-only buffer `e`.
fn read_only(e: &syn::Expr) -> String {
    format!(
        "`{}` is read-only (`&[T]`); a tile store needs `&mut [T]`",
        text(e)
    )
}

/// Most rows or columns a tile may have.
const MAX_TILE_DIM: u32 = 256;

impl Cx {
    /// `let t = tile::<T, ROWS, COLS>();` (top level only, no `mut`, no annotation).
    pub(super) fn let_tile(
        &mut self,
        name: &str,
        mutable: bool,
        ann: Option<&syn::Type>,
        call: &syn::ExprCall,
    ) -> syn::Result<()> {
        let span = call.span();
        let usage = "write `let t = tile::<T, ROWS, COLS>();` with T one of bf16, f16, f32 (float tiles), i16, i8, u8 or i32 (integer tiles) and constant ROWS, COLS";
        if !self.top_level {
            return err(
                span,
                "`tile::<T, ROWS, COLS>()` is only allowed at the top level of the kernel body (a tile lives for the whole kernel)",
            );
        }
        if mutable || ann.is_some() || !call.args.is_empty() {
            return err(span, usage);
        }
        let syn::Expr::Path(p) = strip(&call.func) else {
            return err(span, usage);
        };
        let syn::PathArguments::AngleBracketed(args) = &p.path.segments[0].arguments else {
            return err(span, usage);
        };
        if args.args.len() != 3 {
            return err(args.span(), usage);
        }
        let elem = match &args.args[0] {
            syn::GenericArgument::Type(t) if text(t) == "i16" => Some(Ty::I16),
            syn::GenericArgument::Type(t) if text(t) == "i8" => Some(Ty::I8),
            syn::GenericArgument::Type(t) if text(t) == "u8" => Some(Ty::U8),
            syn::GenericArgument::Type(t) => {
                named_ty(t).filter(|t| matches!(t, Ty::Bf16 | Ty::F16 | Ty::F32 | Ty::I32))
            }
            _ => None,
        };
        let Some(elem) = elem else {
            return err(args.args[0].span(), usage);
        };
        let rows = self.tile_dim(&args.args[1], "ROWS")?;
        let cols = self.tile_dim(&args.args[2], "COLS")?;
        let decl = TileDecl {
            name: name.to_string(),
            elem,
            rows,
            cols,
        };
        self.check_shared_memory((decl.len() * elem.size_bytes()) as u64, span)?;
        self.tiles.push(decl);
        let id = (self.tiles.len() - 1) as TileId;
        self.bind(name, Binding::Tile(id));
        Ok(())
    }

    fn tile_dim(&mut self, a: &syn::GenericArgument, what: &str) -> syn::Result<u32> {
        let e = match a {
            syn::GenericArgument::Const(e) => e.clone(),
            syn::GenericArgument::Type(syn::Type::Path(p)) => syn::Expr::Path(syn::ExprPath {
                attrs: vec![],
                qself: None,
                path: p.path.clone(),
            }),
            _ => return err(a.span(), format!("`{what}` must be a constant expression")),
        };
        let v = self.without_hoist("a tile dimension", |cx| {
            cx.expr_of(&e, Ty::U32, "a tile dimension")
        })?;
        let n = eval(&v, self.workgroup).or_else(|why| {
            err(
                a.span(),
                format!("tile `{what}` must be a compile-time constant, but {why}"),
            )
        })?;
        if n == 0 || n > MAX_TILE_DIM {
            return err(
                a.span(),
                format!("tile `{what}` is {n}; it must be 1 to {MAX_TILE_DIM}"),
            );
        }
        Ok(n)
    }

    /// One tile statement `name(args)`.
    pub(super) fn tile_stmt(
        &mut self,
        name: &str,
        call: &syn::ExprCall,
        out: &mut Block,
    ) -> syn::Result<()> {
        let args: Vec<&syn::Expr> = call.args.iter().collect();
        let want = match name {
            "tile_zero" | "tile_exp" => 1,
            "tile_dot" | "prefetch" => 3,
            "tile_dot_scaled" | "tile_dequant" => 4,
            "tile_dot_dequant" => 6,
            "tile_load" | "tile_load_t" | "tile_load_quads" | "tile_load_packed"
            | "tile_load_pairs" | "tile_store" | "tile_store_t" | "tile_store_packed"
            | "tile_store_pairs" => 6,
            _ => 2,
        };
        // `tile_dot_scaled` takes an optional fifth, its rows' offsets.
        let optional = usize::from(name == "tile_dot_scaled");
        if args.len() < want || args.len() > want + optional {
            let takes = if optional == 0 {
                want.to_string()
            } else {
                format!("{want} or {}", want + optional)
            };
            return err(
                call.span(),
                format!("`{name}` takes {takes} arguments, found {}", args.len()),
            );
        }
        let op = match name {
            "tile_zero" => TileOp::Zero {
                dst: self.tile_arg(args[0])?,
            },
            "tile_load" | "tile_load_t" => {
                let dst = self.tile_arg(args[0])?;
                let from = self.window(&args[1..], name == "tile_load_t", false, dst)?;
                TileOp::Load { dst, from }
            }
            "tile_load_quads" | "tile_load_packed" | "tile_store_packed" => {
                let t = self.tile_arg(args[0])?;
                let d = &self.tiles[t as usize];
                if !matches!(d.elem, Ty::I8 | Ty::U8) {
                    return err(
                        args[0].span(),
                        format!(
                            "`{name}` moves i8 or u8 tiles (four values in each i32), `{}` is {}",
                            d.name,
                            d.elem.rust_name()
                        ),
                    );
                }
                let store = name == "tile_store_packed";
                let mut w = self.window(&args[1..], false, store, t)?;
                w.quads = name == "tile_load_quads";
                w.packed = name != "tile_load_quads";
                if store {
                    TileOp::Store { src: t, to: w }
                } else {
                    TileOp::Load { dst: t, from: w }
                }
            }
            "tile_load_pairs" => {
                let dst = self.tile_arg(args[0])?;
                let from = self.pairs_window(name, &args[1..], false, dst)?;
                TileOp::Load { dst, from }
            }
            "tile_store_pairs" => {
                let src = self.tile_arg(args[0])?;
                let to = self.pairs_window(name, &args[1..], true, src)?;
                TileOp::Store { src, to }
            }
            "tile_store" | "tile_store_t" => {
                let src = self.tile_arg(args[0])?;
                let to = self.window(&args[1..], name == "tile_store_t", true, src)?;
                TileOp::Store { src, to }
            }
            "tile_dot" | "tile_dot_scaled" | "tile_dot_dequant" => self.dot(name, &args)?,
            "prefetch" => TileOp::Prefetch {
                buf: self.prefetched_buffer(args[0])?,
                offset: self.expr_of(args[1], Ty::U32, "the offset of `prefetch`")?,
                len: self.expr_of(args[2], Ty::U32, "the length of `prefetch`")?,
            },
            "tile_dequant" => self.dequant(&args)?,
            "tile_exp" => TileOp::Exp {
                dst: self.f32_tile(args[0], name)?,
            },
            "tile_scale" => {
                let dst = self.f32_tile(args[0], name)?;
                let by = self.expr_of(args[1], Ty::F32, "the factor of `tile_scale`")?;
                TileOp::Scale { dst, by }
            }
            "tile_copy" => {
                let dst = self.tile_arg(args[0])?;
                let src = self.tile_arg(args[1])?;
                self.two_tiles(name, dst, src, args[1])?;
                let (d, s) = (&self.tiles[dst as usize], &self.tiles[src as usize]);
                if (d.rows, d.cols) != (s.rows, s.cols) {
                    return err(
                        args[1].span(),
                        format!(
                            "shape mismatch: `tile_copy` of a {}x{} tile into a {}x{} tile",
                            s.rows, s.cols, d.rows, d.cols
                        ),
                    );
                }
                let converts = (is_int_tile(d.elem), is_int_tile(s.elem)) == (false, false)
                    || (d.elem, s.elem) == (Ty::F32, Ty::I32);
                if !converts {
                    return err(
                        args[1].span(),
                        format!(
                            "dtype mismatch: `tile_copy` converts between float tiles or from an i32 tile to an f32 tile, not from {} to {}",
                            s.elem.rust_name(),
                            d.elem.rust_name()
                        ),
                    );
                }
                TileOp::Copy { dst, src }
            }
            "tile_row_sum" | "tile_row_max" => {
                let dst = self.f32_tile(args[0], name)?;
                let src = self.f32_tile(args[1], name)?;
                self.two_tiles(name, dst, src, args[1])?;
                let (d, s) = (&self.tiles[dst as usize], &self.tiles[src as usize]);
                if (d.rows, d.cols) != (s.rows, 1) {
                    return err(
                        args[0].span(),
                        format!(
                            "shape mismatch: `{name}` of a {}x{} tile goes into a {}x1 tile, `{}` is {}x{}",
                            s.rows, s.cols, s.rows, d.name, d.rows, d.cols
                        ),
                    );
                }
                let op = if name == "tile_row_sum" {
                    TileBinary::Add
                } else {
                    TileBinary::Max
                };
                TileOp::RowReduce { op, dst, src }
            }
            _ => {
                let op = binary_op(name).expect("every other tile statement is elementwise");
                let dst = self.f32_tile(args[0], name)?;
                let src = self.f32_tile(args[1], name)?;
                self.two_tiles(name, dst, src, args[1])?;
                let (d, s) = (&self.tiles[dst as usize], &self.tiles[src as usize]);
                let fits = |n: u32, of: u32| n == of || n == 1;
                if !fits(s.rows, d.rows) || !fits(s.cols, d.cols) {
                    return err(
                        args[1].span(),
                        format!(
                            "shape mismatch: `{name}` of a {}x{} tile into a {}x{} tile (the second tile must have the first's shape, one column or one row)",
                            s.rows, s.cols, d.rows, d.cols
                        ),
                    );
                }
                TileOp::Binary { op, dst, src }
            }
        };
        self.flush_pending(out);
        self.emit(
            out,
            Stmt::Tile(op),
            Site {
                span: call.span(),
                text: text(call),
            },
        );
        Ok(())
    }

    fn dot(&mut self, name: &str, args: &[&syn::Expr]) -> syn::Result<TileOp> {
        let acc = self.tile_arg(args[0])?;
        let a = self.tile_arg(args[1])?;
        let b = self.tile_arg(args[2])?;
        if acc == a || acc == b {
            return err(
                args[0].span(),
                "the accumulator of `tile_dot` cannot also be one of its operands",
            );
        }
        let (tc, ta, tb) = (
            &self.tiles[acc as usize],
            &self.tiles[a as usize],
            &self.tiles[b as usize],
        );
        // Float operands accumulate in f32, integer operands in i32 (dequantized: in f32).
        let int = ta.elem.is_dot_int();
        let dequant = name == "tile_dot_dequant";
        let want_acc = if int && !dequant { Ty::I32 } else { Ty::F32 };
        if ta.elem == Ty::I32 {
            return err(
                args[1].span(),
                format!(
                    "dtype mismatch: `tile_dot` operands are bf16, f16, f32, i16, i8 or u8 tiles, `{}` is i32",
                    ta.name
                ),
            );
        }
        if tc.elem != want_acc {
            return err(
                args[0].span(),
                format!(
                    "dtype mismatch: the accumulator of a `tile_dot` of {} tiles is an {} tile, `{}` is {}",
                    ta.elem.rust_name(),
                    want_acc.rust_name(),
                    tc.name,
                    tc.elem.rust_name()
                ),
            );
        }
        if !dot_operands(ta.elem, tb.elem) {
            return err(
                args[2].span(),
                format!(
                    "dtype mismatch: `tile_dot` operands must have one element type (or be one i8 and one u8 tile), found {} and {}",
                    ta.elem.rust_name(),
                    tb.elem.rust_name()
                ),
            );
        }
        if ta.cols != tb.rows {
            return err(
                args[2].span(),
                format!(
                    "shape mismatch: `tile_dot` of a {}x{} tile by a {}x{} tile (K must agree)",
                    ta.rows, ta.cols, tb.rows, tb.cols
                ),
            );
        }
        if (tc.rows, tc.cols) != (ta.rows, tb.cols) {
            return err(
                args[0].span(),
                format!(
                    "shape mismatch: a {}x{} by {}x{} product accumulates into a {}x{} tile, `{}` is {}x{}",
                    ta.rows, ta.cols, tb.rows, tb.cols, ta.rows, tb.cols, tc.name, tc.rows, tc.cols
                ),
            );
        }
        if args.len() > 3 && !int {
            return err(
                args[3].span(),
                format!(
                    "`{name}` takes integer operands (i16, i8, u8), found {}",
                    ta.elem.rust_name()
                ),
            );
        }
        let scale = match name {
            "tile_dot_scaled" => {
                let scale = self.dot_scale(args[3], acc, a)?;
                let groups = self.tiles[scale as usize].rows;
                Some(DotScale::Columns {
                    scale,
                    offset: args
                        .get(4)
                        .map(|o| self.dot_offset(o, acc, groups))
                        .transpose()?,
                })
            }
            "tile_dot_dequant" => Some(self.dot_dequant(&args[3..], acc, a)?),
            _ => None,
        };
        Ok(TileOp::Dot { acc, a, b, scale })
    }

    /// The scales of `tile_dot_dequant(acc, a, b, offset, rows, cols)`: f32 tiles of one row
    /// per group of K and `acc`'s columns (`cols`: `G` rows, K cut into `G` groups of `K / G`,
    /// a multiple of 4 when `G > 1`) and of `acc`'s rows and one column per group (`offset`,
    /// `rows`), for integer operands (checked by [`Self::dot`]).
    fn dot_dequant(&self, args: &[&syn::Expr], acc: TileId, a: TileId) -> syn::Result<DotScale> {
        let tc = &self.tiles[acc as usize];
        let cols = self.tile_arg(args[2])?;
        let tcol = &self.tiles[cols as usize];
        if tcol.elem != Ty::F32 || tcol.cols != tc.cols {
            return err(
                args[2].span(),
                format!(
                    "the column scale of `tile_dot_dequant` is an f32 tile of {} columns and one row per group of K, `{}` is {} {}x{}",
                    tc.cols,
                    tcol.name,
                    tcol.elem.rust_name(),
                    tcol.rows,
                    tcol.cols
                ),
            );
        }
        let g = tcol.rows;
        let [offset, rows] = self.f32_factors(
            "tile_dot_dequant",
            &args[..2],
            [("offset", tc.rows, g), ("row scale", tc.rows, g)],
        )?;
        self.k_groups(args[2], "the column scale", cols, a)?;
        Ok(DotScale::Dequant { offset, rows, cols })
    }

    /// `tile_dequant(acc, s, rows, cols)`: an f32 `acc`, an i32 `s` of its shape, f32 `rows`
    /// (`[M x 1]`) and `cols` (`[1 x N]`).
    fn dequant(&self, args: &[&syn::Expr]) -> syn::Result<TileOp> {
        let acc = self.tile_arg(args[0])?;
        let src = self.tile_arg(args[1])?;
        let (tc, ts) = (&self.tiles[acc as usize], &self.tiles[src as usize]);
        if tc.elem != Ty::F32 {
            return err(
                args[0].span(),
                format!(
                    "the accumulator of `tile_dequant` is an f32 tile, `{}` is {}",
                    tc.name,
                    tc.elem.rust_name()
                ),
            );
        }
        if ts.elem != Ty::I32 || (ts.rows, ts.cols) != (tc.rows, tc.cols) {
            return err(
                args[1].span(),
                format!(
                    "`tile_dequant` scales an i32 tile of its accumulator's shape ({}x{}), `{}` is {} {}x{}",
                    tc.rows,
                    tc.cols,
                    ts.name,
                    ts.elem.rust_name(),
                    ts.rows,
                    ts.cols
                ),
            );
        }
        let [rows, cols] = self.f32_factors(
            "tile_dequant",
            &args[2..],
            [("row scale", tc.rows, 1), ("column scale", 1, tc.cols)],
        )?;
        Ok(TileOp::Dequant {
            acc,
            src,
            rows,
            cols,
        })
    }

    /// The f32 factor tiles of `stmt` in `args`, each `(what, rows, cols)` as `want` says.
    fn f32_factors<const N: usize>(
        &self,
        stmt: &str,
        args: &[&syn::Expr],
        want: [(&str, u32, u32); N],
    ) -> syn::Result<[TileId; N]> {
        let mut ids = [0; N];
        for ((id, e), (what, rows, cols)) in ids.iter_mut().zip(args).zip(want) {
            *id = self.tile_arg(e)?;
            let t = &self.tiles[*id as usize];
            if t.elem != Ty::F32 || (t.rows, t.cols) != (rows, cols) {
                return err(
                    e.span(),
                    format!(
                        "the {what} of `{stmt}` is an f32 tile of {rows} rows and {cols} columns, `{}` is {} {}x{}",
                        t.name,
                        t.elem.rust_name(),
                        t.rows,
                        t.cols
                    ),
                );
            }
        }
        Ok(ids)
    }

    /// The scale tile of `tile_dot_scaled(acc, a, b, s)`: an i32 tile of `acc`'s columns and
    /// one row per group of K (`G` rows: K cut into `G` groups of `K / G`, a multiple of 4
    /// when `G > 1`), for integer operands (checked by [`Self::dot`]).
    fn dot_scale(&self, e: &syn::Expr, acc: TileId, a: TileId) -> syn::Result<TileId> {
        let s = self.tile_arg(e)?;
        let (tc, ts) = (&self.tiles[acc as usize], &self.tiles[s as usize]);
        if ts.elem != Ty::I32 || ts.cols != tc.cols {
            return err(
                e.span(),
                format!(
                    "the scale of `tile_dot_scaled` is an i32 tile of {} columns and one row per group of K, `{}` is {} {}x{}",
                    tc.cols,
                    ts.name,
                    ts.elem.rust_name(),
                    ts.rows,
                    ts.cols
                ),
            );
        }
        self.k_groups(e, "the scale", s, a)?;
        Ok(s)
    }

    /// Checks that the `G` rows of scale tile `scale` (`what`, at `e`) cut the K of operand
    /// `a` into groups whose K is a multiple of 4 (the byte dots' fours), when `G > 1`.
    fn k_groups(&self, e: &syn::Expr, what: &str, scale: TileId, a: TileId) -> syn::Result<()> {
        let k = self.tiles[a as usize].cols;
        let (g, name) = (
            self.tiles[scale as usize].rows,
            &self.tiles[scale as usize].name,
        );
        if g > 1 && (!k.is_multiple_of(g) || !(k / g).is_multiple_of(4)) {
            return err(
                e.span(),
                format!(
                    "{what} `{name}` cuts K = {k} into {g} groups; each group's K must be a multiple of 4"
                ),
            );
        }
        Ok(())
    }

    /// The row offsets of `tile_dot_scaled(acc, a, b, s, offset)`: an i32 tile of `acc`'s
    /// rows and one column per group of K (the scale's rows, `groups`).
    fn dot_offset(&self, e: &syn::Expr, acc: TileId, groups: u32) -> syn::Result<TileId> {
        let o = self.tile_arg(e)?;
        let (tc, to) = (&self.tiles[acc as usize], &self.tiles[o as usize]);
        if to.elem != Ty::I32 || to.rows != tc.rows || to.cols != groups {
            return err(
                e.span(),
                format!(
                    "the offset of `tile_dot_scaled` is an i32 tile of {} rows and {groups} column{} (one per group of K), `{}` is {} {}x{}",
                    tc.rows,
                    if groups == 1 { "" } else { "s" },
                    to.name,
                    to.elem.rust_name(),
                    to.rows,
                    to.cols
                ),
            );
        }
        Ok(o)
    }

    /// A tile argument of a statement that works on f32 tiles.
    fn f32_tile(&self, e: &syn::Expr, name: &str) -> syn::Result<TileId> {
        let t = self.tile_arg(e)?;
        let d = &self.tiles[t as usize];
        if d.elem != Ty::F32 {
            return err(
                e.span(),
                format!(
                    "dtype mismatch: `{name}` works on f32 tiles, `{}` is {}",
                    d.name,
                    d.elem.rust_name()
                ),
            );
        }
        Ok(t)
    }

    /// Refuses one tile in both places of a two-tile statement.
    fn two_tiles(&self, name: &str, dst: TileId, src: TileId, at: &syn::Expr) -> syn::Result<()> {
        if dst == src {
            return err(at.span(), format!("`{name}` needs two different tiles"));
        }
        Ok(())
    }

    fn tile_arg(&self, e: &syn::Expr) -> syn::Result<TileId> {
        if let syn::Expr::Path(p) = strip(e) {
            if let Some(id) = p.path.get_ident() {
                if let Some(Binding::Tile(t)) = self.lookup(&id.to_string()) {
                    return Ok(*t);
                }
            }
        }
        err(
            e.span(),
            format!(
                "expected a tile declared with `tile::<T, ROWS, COLS>()`, found `{}`",
                text(e)
            ),
        )
    }

    /// `mem, offset, stride, rows, cols` of a load (`write = false`) or store of `tile`.
    fn window(
        &mut self,
        args: &[&syn::Expr],
        transposed: bool,
        write: bool,
        tile: TileId,
    ) -> syn::Result<TileWindow> {
        let mem = if is_int_tile(self.tiles[tile as usize].elem) {
            self.int_memory_arg(args[0], write)?
        } else {
            self.memory_arg(args[0], write)?
        };
        let mut exprs = Vec::with_capacity(4);
        for (e, what) in args[1..].iter().zip(["offset", "stride", "rows", "cols"]) {
            let x = self.expr_of(e, Ty::U32, &format!("the tile window's {what}"))?;
            exprs.push(x);
        }
        let [offset, stride, rows, cols]: [_; 4] =
            exprs.try_into().expect("four window expressions");
        Ok(TileWindow {
            mem,
            offset,
            stride,
            rows,
            cols,
            transposed,
            quads: false,
            packed: false,
            pairs: false,
        })
    }

    /// The window of `tile_load_pairs` or `tile_store_pairs` (`name`) on a bf16 or f16 tile:
    /// a buffer of the tile's own type, two rows interleaved per memory row.
    fn pairs_window(
        &mut self,
        name: &str,
        args: &[&syn::Expr],
        write: bool,
        tile: TileId,
    ) -> syn::Result<TileWindow> {
        let (elem, tile_name) = {
            let d = &self.tiles[tile as usize];
            (d.elem, d.name.clone())
        };
        if !matches!(elem, Ty::Bf16 | Ty::F16) {
            return err(
                args[0].span(),
                format!(
                    "`{name}` takes bf16 or f16 tiles (two rows interleaved in each memory row), `{tile_name}` is {}",
                    elem.rust_name()
                ),
            );
        }
        let mut w = self.window(args, false, write, tile)?;
        let same = match w.mem {
            TileMem::Buffer(p) => {
                matches!(&self.params[p as usize], Param::Buffer { elem: b, .. } if *b == elem)
            }
            TileMem::Shared(_) => false,
        };
        if !same {
            return err(
                args[0].span(),
                format!(
                    "`{name}` reads and writes a buffer of the tile's type ({}), `{}` is not one",
                    elem.rust_name(),
                    text(args[0])
                ),
            );
        }
        w.pairs = true;
        Ok(w)
    }

    /// The i32 buffer parameter (`&mut` for a store) or i32 shared array the window of an
    /// integer tile reads or writes.
    fn int_memory_arg(&self, e: &syn::Expr, write: bool) -> syn::Result<TileMem> {
        let mem = match self.window_memory(e) {
            Some(Binding::Shared(id)) if self.shared[id as usize].elem == Ty::I32 => {
                return Ok(TileMem::Shared(id))
            }
            Some(Binding::Param(id)) => match &self.params[id as usize] {
                Param::Buffer {
                    elem: Ty::I32,
                    access,
                    ..
                } => {
                    if write && *access == Access::Read {
                        return err(e.span(), read_only(e));
                    }
                    return Ok(TileMem::Buffer(id));
                }
                Param::Buffer { elem, .. } => format!("`{}` holds {}", text(e), elem.rust_name()),
                Param::Scalar { .. } => format!("`{}` is a scalar", text(e)),
            },
            Some(Binding::Shared(id)) => format!(
                "`{}` holds {}",
                text(e),
                self.shared[id as usize].elem.rust_name()
            ),
            _ => format!("found `{}`", text(e)),
        };
        err(
            e.span(),
            format!("integer tiles load and store i32 buffers or i32 shared arrays; {mem}"),
        )
    }

    /// The buffer parameter, of any element type, that `prefetch` names.
    fn prefetched_buffer(&self, e: &syn::Expr) -> syn::Result<ParamId> {
        let what = match self.window_memory(e) {
            Some(Binding::Param(id)) => match &self.params[id as usize] {
                Param::Buffer { .. } => return Ok(id),
                Param::Scalar { .. } => "a scalar",
            },
            Some(Binding::Shared(_)) => "a shared array, in the cache already",
            _ => "not a buffer parameter",
        };
        err(
            e.span(),
            format!(
                "`prefetch` reads ahead in a buffer parameter; `{}` is {what}",
                text(e)
            ),
        )
    }

    /// What a window's memory argument names, when it is a plain name in scope.
    fn window_memory(&self, e: &syn::Expr) -> Option<Binding> {
        match strip(e) {
            syn::Expr::Path(p) => p
                .path
                .get_ident()
                .and_then(|id| self.lookup(&id.to_string()).cloned()),
            _ => None,
        }
    }

    /// The buffer parameter (f32, bf16 or f16; `&mut` for a store) or f32 shared array a
    /// window of a float tile reads or writes.
    fn memory_arg(&self, e: &syn::Expr, write: bool) -> syn::Result<TileMem> {
        let id = match self.window_memory(e) {
            Some(Binding::Param(id)) => id,
            Some(Binding::Shared(id)) => {
                let elem = self.shared[id as usize].elem;
                if elem != Ty::F32 {
                    return err(
                        e.span(),
                        format!(
                            "tiles load and store f32 shared arrays; `{}` holds {}",
                            text(e),
                            elem.rust_name()
                        ),
                    );
                }
                return Ok(TileMem::Shared(id));
            }
            _ => {
                return err(
                    e.span(),
                    format!(
                        "expected a buffer parameter or an f32 shared array, found `{}`",
                        text(e)
                    ),
                )
            }
        };
        match &self.params[id as usize] {
            Param::Buffer { elem, access, .. } => {
                if !matches!(elem, Ty::F32 | Ty::Bf16 | Ty::F16) {
                    return err(
                        e.span(),
                        format!(
                            "tiles load and store f32, bf16 or f16 buffers; `{}` holds {}",
                            text(e),
                            elem.rust_name()
                        ),
                    );
                }
                if write && *access == Access::Read {
                    return err(e.span(), read_only(e));
                }
                Ok(TileMem::Buffer(id))
            }
            Param::Scalar { .. } => {
                err(e.span(), format!("`{}` is a scalar, not a buffer", text(e)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::frontend::tests::*;
    use crate::ir::*;
    use crate::text::ir_text;

    /// The tile statements of `k`'s body, in order.
    fn tile_ops(k: &Kernel) -> Vec<&TileOp> {
        k.body
            .iter()
            .filter_map(|s| match s {
                Stmt::Tile(op) => Some(op),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn prefetch_names_a_buffer_of_any_type_and_uniform_offset_and_length() {
        let k = k("prefetch(ids, ids[group_id()] * 64 + n, 256);
            prefetch(hout, 0, n);");
        let ops = tile_ops(&k);
        assert!(
            matches!(
                ops[..],
                [
                    TileOp::Prefetch { buf: 2, .. },
                    TileOp::Prefetch { buf: 4, .. }
                ]
            ),
            "{ops:?}"
        );
        let text = ir_text(&k);
        assert!(text.contains("prefetch(ids, "), "{text}");
        assert!(text.contains("prefetch(hout, 0u32, n);"), "{text}");
    }

    #[test]
    fn prefetch_refuses_shared_arrays_scalars_other_arities_and_divergent_ranges() {
        for (body, want) in [
            ("let w = shared::<f32>(64);\nprefetch(w, 0, 64);", "`prefetch` reads ahead in a buffer parameter; `w` is a shared array, in the cache already"),
            ("prefetch(n, 0, 64);", "`n` is a scalar"),
            ("prefetch(x + 1, 0, 64);", "`x + 1` is not a buffer parameter"),
            ("prefetch(x, 0);", "`prefetch` takes 3 arguments, found 2"),
            ("prefetch(x, 0, 64, 1);", "`prefetch` takes 3 arguments, found 4"),
            ("prefetch(x, s, 64);", "the offset of `prefetch`"),
            ("prefetch(x, local_id(), 64);", "the offset and length of `prefetch` must be uniform"),
            ("prefetch(x, 0, out[0] as u32);", "the offset and length of `prefetch` must be uniform"),
            ("if local_id() < n { prefetch(x, 0, 64); }", "so the workgroup has no one range to prefetch"),
        ] {
            let msg = e(body);
            assert!(msg.contains(want), "{body}: {msg}");
        }
    }

    #[test]
    fn windows_on_buffers_and_f32_shared_arrays_name_their_memory() {
        let k = k("let w = shared::<f32>(256);
            let a = tile::<bf16, 16, 16>();
            let acc = tile::<f32, 16, 16>();
            w[local_id()] = x[local_id()];
            tile_load(a, h, 0, 16, 16, 16);
            tile_load_t(acc, w, 4, 16, n, 16);
            tile_store(acc, w, 0, 16, 16, n);
            tile_store_t(acc, out, 0, 16, 16, 16);");
        let mems: Vec<(TileMem, bool)> = tile_ops(&k)
            .iter()
            .map(|op| match op {
                TileOp::Load { from: w, .. } | TileOp::Store { to: w, .. } => (w.mem, w.transposed),
                op => panic!("{op:?}"),
            })
            .collect();
        assert_eq!(
            mems,
            [
                (TileMem::Buffer(3), false),
                (TileMem::Shared(0), true),
                (TileMem::Shared(0), false),
                (TileMem::Buffer(1), true),
            ]
        );
        let TileOp::Load { from, .. } = tile_ops(&k)[1] else {
            panic!()
        };
        assert_eq!(from.buffer(), None);
        let text = ir_text(&k);
        assert!(
            text.contains("tile_load_t(acc#t1, w#s0, 4u32, 16u32, n, 16u32);"),
            "{text}"
        );
        assert!(
            text.contains("tile_store(acc#t1, w#s0, 0u32, 16u32, 16u32, n);"),
            "{text}"
        );
        assert!(
            text.contains("tile_load(a#t0, h, 0u32, 16u32, 16u32, 16u32);"),
            "{text}"
        );
    }

    #[test]
    fn integer_shared_arrays_are_not_tile_windows() {
        for (ty, verb) in [("u32", "tile_load"), ("i32", "tile_store_t")] {
            let msg = e(&format!(
                "let q = shared::<{ty}>(256);
                let t = tile::<f32, 16, 16>();
                {verb}(t, q, 0, 16, 16, 16);"
            ));
            assert!(
                msg.contains(&format!(
                    "tiles load and store f32 shared arrays; `q` holds {ty}"
                )),
                "{msg}"
            );
        }
        let msg = e("let t = tile::<f32, 16, 16>(); let z = 0u32; tile_load(t, z, 0, 16, 16, 16);");
        assert!(
            msg.contains("expected a buffer parameter or an f32 shared array, found `z`"),
            "{msg}"
        );
    }

    #[test]
    fn integer_tiles_take_i32_memory_i16_operands_and_i32_accumulators() {
        let k = k("let q = shared::<i32>(256);
            let a = tile::<i16, 16, 16>();
            let b = tile::<i16, 16, 16>();
            let acc = tile::<i32, 16, 16>();
            let f = tile::<f32, 16, 16>();
            tile_load(b, q, 0, 16, 16, 16);
            tile_dot(acc, a, b);
            tile_store(acc, q, 0, 16, 16, 16);
            tile_copy(f, acc);");
        assert_eq!(k.tiles[0].elem, Ty::I16);
        assert_eq!(k.tiles[2].elem, Ty::I32);
        let text = ir_text(&k);
        assert!(text.contains("tile_dot(acc#t2, a#t0, b#t1);"), "{text}");
    }

    #[test]
    fn pairs_windows_move_half_tiles_on_buffers_of_their_type() {
        let k = k("let a = tile::<bf16, 16, 16>();
            let b = tile::<bf16, 16, 16>();
            tile_load_pairs(a, h, 0, 32, n, 16);
            tile_store_pairs(b, hout, 4, 32, 16, n);");
        let text = ir_text(&k);
        assert!(
            text.contains("tile_load_pairs(a#t0, h, 0u32, 32u32, n, 16u32);"),
            "{text}"
        );
        assert!(
            text.contains("tile_store_pairs(b#t1, hout, 4u32, 32u32, 16u32, n);"),
            "{text}"
        );
        let pairs: Vec<bool> = tile_ops(&k)
            .iter()
            .map(|op| match op {
                TileOp::Load { from: w, .. } | TileOp::Store { to: w, .. } => w.pairs,
                op => panic!("{op:?}"),
            })
            .collect();
        assert_eq!(pairs, [true, true]);
    }

    #[test]
    fn pairs_windows_refuse_other_tiles_and_memory() {
        let decls = "let g = shared::<f32>(256);
            let a = tile::<bf16, 16, 16>();
            let f = tile::<f32, 16, 16>();
            let o = tile::<f16, 16, 16>();";
        for (stmt, want) in [
            ("tile_load_pairs(f, x, 0, 32, 16, 16);", "`tile_load_pairs` takes bf16 or f16 tiles (two rows interleaved in each memory row), `f` is f32"),
            ("tile_load_pairs(a, x, 0, 32, 16, 16);", "`tile_load_pairs` reads and writes a buffer of the tile's type (bf16), `x` is not one"),
            ("tile_load_pairs(a, g, 0, 32, 16, 16);", "`tile_load_pairs` reads and writes a buffer of the tile's type (bf16), `g` is not one"),
            ("tile_store_pairs(o, h, 0, 32, 16, 16);", "read-only"),
            ("tile_store_pairs(o, hout, 0, 32, 16, 16);", "`tile_store_pairs` reads and writes a buffer of the tile's type (f16), `hout` is not one"),
            ("tile_load_pairs(a, h, 0, 32, 16);", "`tile_load_pairs` takes 6 arguments, found 5"),
        ] {
            let msg = e(&format!("{decls}\n{stmt}"));
            assert!(msg.contains(want), "{stmt}: {msg}");
        }
    }

    #[test]
    fn integer_tiles_refuse_float_memory_and_mixed_statements() {
        let decls = "let q = shared::<i32>(256);
            let g = shared::<f32>(256);
            let a = tile::<i16, 16, 16>();
            let b = tile::<i16, 16, 16>();
            let acc = tile::<i32, 16, 16>();
            let f = tile::<f32, 16, 16>();
            let hb = tile::<bf16, 16, 16>();";
        for (stmt, want) in [
            ("tile_load(a, x, 0, 16, 16, 16);", "integer tiles load and store i32 buffers or i32 shared arrays; `x` holds f32"),
            ("tile_load(a, g, 0, 16, 16, 16);", "integer tiles load and store i32 buffers or i32 shared arrays; `g` holds f32"),
            ("tile_load(a, ids, 0, 16, 16, 16);", "`ids` holds u32"),
            ("tile_load(a, n, 0, 16, 16, 16);", "`n` is a scalar"),
            ("tile_load(f, q, 0, 16, 16, 16);", "tiles load and store f32 shared arrays; `q` holds i32"),
            ("tile_dot(f, a, b);", "the accumulator of a `tile_dot` of i16 tiles is an i32 tile, `f` is f32"),
            ("tile_dot(acc, hb, hb);", "the accumulator of a `tile_dot` of bf16 tiles is an f32 tile, `acc` is i32"),
            ("tile_dot(f, acc, acc);", "`tile_dot` operands are bf16, f16, f32, i16, i8 or u8 tiles, `acc` is i32"),
            ("tile_dot(acc, a, hb);", "operands must have one element type (or be one i8 and one u8 tile), found i16 and bf16"),
            ("tile_copy(f, a);", "`tile_copy` converts between float tiles or from an i32 tile to an f32 tile, not from i16 to f32"),
            ("tile_copy(acc, f);", "not from f32 to i32"),
            ("tile_add(acc, acc);", "`tile_add` works on f32 tiles, `acc` is i32"),
            ("let v: i16 = 0;", "i16"),
        ] {
            let msg = e(&format!("{decls}\n{stmt}"));
            assert!(msg.contains(want), "{stmt}: {msg}");
        }
    }

    #[test]
    fn byte_tiles_dot_one_signed_by_one_unsigned_with_optional_group_scales_and_row_offsets() {
        let k = k("let q = shared::<i32>(256);
            let a = tile::<i8, 16, 16>();
            let b = tile::<u8, 16, 16>();
            let s = tile::<i32, 1, 16>();
            let acc = tile::<i32, 16, 16>();
            let o = tile::<i32, 16, 1>();
            let s4 = tile::<i32, 4, 16>();
            let o4 = tile::<i32, 16, 4>();
            tile_load(a, q, 0, 16, 16, 16);
            tile_load(b, q, 0, 16, 16, 16);
            tile_load(s, q, 0, 16, 1, 16);
            tile_load(o, q, 0, 1, 16, 1);
            tile_dot_scaled(acc, a, b, s);
            tile_dot_scaled(acc, a, b, s, o);
            tile_dot(acc, b, a);
            tile_dot_scaled(acc, a, b, s4, o4);
            tile_load_packed(a, q, 0, 4, 16, 16);");
        assert_eq!((k.tiles[0].elem, k.tiles[1].elem), (Ty::I8, Ty::U8));
        let text = ir_text(&k);
        assert!(
            text.contains("tile_load_packed(a#t0, q#s0, 0u32, 4u32, 16u32, 16u32);"),
            "{text}"
        );
        assert!(
            text.contains("tile_dot_scaled(acc#t3, a#t0, b#t1, s#t2);"),
            "{text}"
        );
        assert!(
            text.contains("tile_dot_scaled(acc#t3, a#t0, b#t1, s#t2, o#t4);"),
            "{text}"
        );
        assert!(text.contains("tile_dot(acc#t3, b#t1, a#t0);"), "{text}");
        assert!(
            text.contains("tile_dot_scaled(acc#t3, a#t0, b#t1, s4#t5, o4#t6);"),
            "{text}"
        );
        let grouped = k.body.iter().find_map(|st| match st {
            Stmt::Tile(TileOp::Dot {
                scale: Some(sc), ..
            }) if sc.groups(&k.tiles) == 4 => Some(*sc),
            _ => None,
        });
        assert!(grouped.is_some(), "{text}");
    }

    #[test]
    fn byte_tiles_dequantize_into_an_f32_accumulator_with_row_and_column_scales() {
        let k = k("let q = shared::<i32>(256);
            let f = shared::<f32>(16);
            let a = tile::<i8, 16, 16>();
            let b = tile::<u8, 16, 16>();
            let off = tile::<f32, 16, 1>();
            let dx = tile::<f32, 16, 1>();
            let dw = tile::<f32, 1, 16>();
            let acc = tile::<f32, 16, 16>();
            tile_load(a, q, 0, 16, 16, 16);
            tile_load(b, q, 0, 16, 16, 16);
            tile_load(off, f, 0, 1, 16, 1);
            tile_load(dx, f, 0, 1, 16, 1);
            tile_load(dw, f, 0, 16, 1, 16);
            tile_dot_dequant(acc, a, b, off, dx, dw);");
        let text = ir_text(&k);
        assert!(
            text.contains("tile_dot_dequant(acc#t5, a#t0, b#t1, off#t2, dx#t3, dw#t4);"),
            "{text}"
        );
    }

    #[test]
    fn dequantized_dots_refuse_float_operands_an_integer_accumulator_and_bad_scales() {
        let decls = "let a = tile::<i8, 16, 16>();
            let u = tile::<u8, 16, 16>();
            let g = tile::<f32, 16, 16>();
            let acc = tile::<f32, 16, 16>();
            let iacc = tile::<i32, 16, 16>();
            let col = tile::<f32, 16, 1>();
            let row = tile::<f32, 1, 16>();
            let icol = tile::<i32, 16, 1>();
            let wide = tile::<f32, 1, 8>();
            let col2 = tile::<f32, 16, 2>();
            let row2 = tile::<f32, 2, 16>();
            let col3 = tile::<f32, 16, 3>();
            let row3 = tile::<f32, 3, 16>();
            let col8 = tile::<f32, 16, 8>();
            let row8 = tile::<f32, 8, 16>();";
        for (stmt, want) in [
            ("tile_dot_dequant(acc, g, g, col, col, row);", "`tile_dot_dequant` takes integer operands (i16, i8, u8), found f32"),
            ("tile_dot_dequant(iacc, a, u, col, col, row);", "the accumulator of a `tile_dot` of i8 tiles is an f32 tile, `iacc` is i32"),
            ("tile_dot_dequant(acc, a, u, icol, col, row);", "the offset of `tile_dot_dequant` is an f32 tile of 16 rows and 1 columns, `icol` is i32 16x1"),
            ("tile_dot_dequant(acc, a, u, col, row, row);", "the row scale of `tile_dot_dequant` is an f32 tile of 16 rows and 1 columns, `row` is f32 1x16"),
            ("tile_dot_dequant(acc, a, u, col, col, wide);", "the column scale of `tile_dot_dequant` is an f32 tile of 16 columns and one row per group of K, `wide` is f32 1x8"),
            ("tile_dot_dequant(acc, a, u, col, col, col);", "the column scale of `tile_dot_dequant` is an f32 tile of 16 columns and one row per group of K, `col` is f32 16x1"),
            ("tile_dot_dequant(acc, a, u, col, col);", "`tile_dot_dequant` takes 6 arguments, found 5"),
            ("tile_dot_dequant(acc, a, u, col, col, row2);", "the offset of `tile_dot_dequant` is an f32 tile of 16 rows and 2 columns, `col` is f32 16x1"),
            ("tile_dot_dequant(acc, a, u, col2, col, row2);", "the row scale of `tile_dot_dequant` is an f32 tile of 16 rows and 2 columns, `col` is f32 16x1"),
            ("tile_dot_dequant(acc, a, u, col3, col3, row3);", "the column scale `row3` cuts K = 16 into 3 groups"),
            ("tile_dot_dequant(acc, a, u, col8, col8, row8);", "the column scale `row8` cuts K = 16 into 8 groups; each group's K must be a multiple of 4"),
        ] {
            let msg = e(&format!("{decls}\n{stmt}"));
            assert!(msg.contains(want), "{stmt}: {msg}");
        }
    }

    #[test]
    fn integer_sums_dequantize_into_an_f32_accumulator_with_row_and_column_scales() {
        let k = k("let q = shared::<i32>(256);
            let f = shared::<f32>(16);
            let s = tile::<i32, 16, 16>();
            let dx = tile::<f32, 16, 1>();
            let dw = tile::<f32, 1, 16>();
            let acc = tile::<f32, 16, 16>();
            tile_load(s, q, 0, 16, 16, 16);
            tile_load(dx, f, 0, 1, 16, 1);
            tile_load(dw, f, 0, 16, 1, 16);
            tile_dequant(acc, s, dx, dw);");
        let text = ir_text(&k);
        assert!(
            text.contains("tile_dequant(acc#t3, s#t0, dx#t1, dw#t2);"),
            "{text}"
        );
    }

    #[test]
    fn dequant_refuses_float_sums_integer_accumulators_and_bad_shapes() {
        let decls = "let s = tile::<i32, 16, 16>();
            let narrow = tile::<i32, 16, 8>();
            let g = tile::<f32, 16, 16>();
            let acc = tile::<f32, 16, 16>();
            let iacc = tile::<i32, 16, 16>();
            let col = tile::<f32, 16, 1>();
            let row = tile::<f32, 1, 16>();
            let wide = tile::<f32, 1, 8>();";
        for (stmt, want) in [
            ("tile_dequant(iacc, s, col, row);", "the accumulator of `tile_dequant` is an f32 tile, `iacc` is i32"),
            ("tile_dequant(acc, g, col, row);", "`tile_dequant` scales an i32 tile of its accumulator's shape (16x16), `g` is f32 16x16"),
            ("tile_dequant(acc, narrow, col, row);", "`narrow` is i32 16x8"),
            ("tile_dequant(acc, s, row, row);", "the row scale of `tile_dequant` is an f32 tile of 16 rows and 1 columns, `row` is f32 1x16"),
            ("tile_dequant(acc, s, col, wide);", "the column scale of `tile_dequant` is an f32 tile of 1 rows and 16 columns, `wide` is f32 1x8"),
            ("tile_dequant(acc, s, col);", "`tile_dequant` takes 4 arguments, found 3"),
        ] {
            let msg = e(&format!("{decls}\n{stmt}"));
            assert!(msg.contains(want), "{stmt}: {msg}");
        }
    }

    #[test]
    fn byte_tiles_refuse_same_signed_operands_and_bad_scales() {
        let decls = "let q = shared::<i32>(256);
            let a = tile::<i8, 16, 16>();
            let u = tile::<u8, 16, 16>();
            let h = tile::<i16, 16, 16>();
            let acc = tile::<i32, 16, 16>();
            let f = tile::<f32, 16, 16>();
            let s = tile::<i32, 1, 16>();
            let g = tile::<f32, 16, 16>();
            let sf = tile::<f32, 1, 16>();
            let s2 = tile::<i32, 2, 16>();
            let s3 = tile::<i32, 3, 16>();
            let s8 = tile::<i32, 8, 16>();
            let s2n = tile::<i32, 2, 8>();
            let o = tile::<i32, 16, 1>();
            let o2 = tile::<i32, 16, 2>();
            let of = tile::<f32, 16, 1>();
            let o8 = tile::<i32, 8, 1>();";
        for (stmt, want) in [
            ("tile_dot(acc, a, a);", "found i8 and i8"),
            ("tile_dot(acc, u, u);", "found u8 and u8"),
            ("tile_dot(acc, a, h);", "found i8 and i16"),
            ("tile_dot(f, a, u);", "the accumulator of a `tile_dot` of i8 tiles is an i32 tile, `f` is f32"),
            ("tile_dot_scaled(f, g, g, sf);", "`tile_dot_scaled` takes integer operands (i16, i8, u8), found f32"),
            ("tile_dot_scaled(acc, a, u, sf);", "the scale of `tile_dot_scaled` is an i32 tile of 16 columns and one row per group of K, `sf` is f32 1x16"),
            ("tile_dot_scaled(acc, a, u, s2n);", "`s2n` is i32 2x8"),
            ("tile_dot_scaled(acc, a, u, s3);", "the scale `s3` cuts K = 16 into 3 groups; each group's K must be a multiple of 4"),
            ("tile_dot_scaled(acc, a, u, s8);", "the scale `s8` cuts K = 16 into 8 groups"),
            ("tile_dot_scaled(acc, a, u, s2, o);", "the offset of `tile_dot_scaled` is an i32 tile of 16 rows and 2 columns (one per group of K), `o` is i32 16x1"),
            ("tile_dot_scaled(acc, a, u, s, o2);", "`o2` is i32 16x2"),
            ("tile_dot_scaled(acc, a, u);", "`tile_dot_scaled` takes 4 or 5 arguments, found 3"),
            ("tile_dot_scaled(acc, a, u, s, o, o);", "`tile_dot_scaled` takes 4 or 5 arguments, found 6"),
            ("tile_dot_scaled(acc, a, u, s, of);", "the offset of `tile_dot_scaled` is an i32 tile of 16 rows and 1 column (one per group of K), `of` is f32 16x1"),
            ("tile_dot_scaled(acc, a, u, s, o8);", "`o8` is i32 8x1"),
            ("tile_dot_scaled(acc, a, u, s, s);", "`s` is i32 1x16"),
            ("tile_load(a, x, 0, 16, 16, 16);", "integer tiles load and store i32 buffers or i32 shared arrays; `x` holds f32"),
            ("tile_copy(f, u);", "not from u8 to f32"),
            ("tile_load_quads(h, q, 0, 16, 16, 16);", "`tile_load_quads` moves i8 or u8 tiles (four values in each i32), `h` is i16"),
            ("tile_load_packed(h, q, 0, 4, 16, 16);", "`tile_load_packed` moves i8 or u8 tiles (four values in each i32), `h` is i16"),
            ("tile_load_packed(a, x, 0, 4, 16, 16);", "integer tiles load and store i32 buffers or i32 shared arrays; `x` holds f32"),
            ("tile_store_packed(h, q, 0, 4, 16, 16);", "`tile_store_packed` moves i8 or u8 tiles (four values in each i32), `h` is i16"),
            ("tile_load_quads(a, x, 0, 16, 16, 16);", "integer tiles load and store i32 buffers or i32 shared arrays; `x` holds f32"),
            ("let v: i8 = 0;", "i8"),
        ] {
            let msg = e(&format!("{decls}\n{stmt}"));
            assert!(msg.contains(want), "{stmt}: {msg}");
        }
    }
}
