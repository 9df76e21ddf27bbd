//! What the host and GPU tile lowerings share: evaluating a tile window and reading or
//! writing the buffer or shared-array element behind a tile element, and a loop that carries values in
//! registers (the register-blocked and per-element dots).

use super::{convert, lty, Emitter, Lowered};
use lse_dsl::ir::{Expr, Param, TileMem, TileWindow, Ty};

/// A tile window with its expressions evaluated.
#[derive(Clone)]
pub(crate) struct WindowVals {
    /// Base pointer of the buffer or shared array.
    base: String,
    /// Its pointer type: the target's buffer pointer, or its shared-array pointer
    /// (`ptr addrspace(3)` on a GPU, `ptr` on the host).
    pub ptr_ty: &'static str,
    /// Whether the window is on a shared array (writable by the work-items, never prefetched
    /// or read in place).
    pub shared: bool,
    /// The buffer's or shared array's element type.
    pub elem: Ty,
    offset: String,
    /// Elements between consecutive rows (columns, when transposed) in the memory.
    pub stride: String,
    pub rows: String,
    pub cols: String,
    pub transposed: bool,
    /// Four rows per i32 element, row `r` in byte `r % 4` ([`lse_dsl::ir::TileWindow::quads`]).
    pub quads: bool,
    /// Four columns per i32 element, column `c` in byte `c % 4`
    /// ([`lse_dsl::ir::TileWindow::packed`]).
    pub packed: bool,
    /// Two rows per memory row, row `r` at element `2 c + r % 2` of memory row `r / 2`
    /// ([`lse_dsl::ir::TileWindow::pairs`]).
    pub pairs: bool,
}

impl WindowVals {
    /// The same window starting at element `offset` of its memory.
    pub fn at_offset(&self, offset: &str) -> WindowVals {
        WindowVals {
            offset: offset.to_string(),
            ..self.clone()
        }
    }
}

impl Emitter<'_> {
    /// `w` with `offset, stride, rows, cols` evaluated by `eval` (the host evaluates them as
    /// work-item 0, the GPU on every work-item); an error when the window's parameter is not
    /// a buffer or its shared array is not declared.
    pub fn tile_window(
        &mut self,
        w: &TileWindow,
        eval: &mut dyn FnMut(&mut Self, &Expr) -> Lowered<String>,
    ) -> Lowered<WindowVals> {
        let (base, ptr_ty, elem) = match w.mem {
            TileMem::Buffer(p) => {
                let (Some(Param::Buffer { elem, .. }), Some(Some(buf))) =
                    (self.k.params.get(p as usize), self.bufs.get(p as usize))
                else {
                    return Err(format!("tile window on parameter {p}, not a buffer"));
                };
                (buf.clone(), self.buf_ptr, *elem)
            }
            TileMem::Shared(a) => {
                let (Some(decl), Some(base)) =
                    (self.k.shared.get(a as usize), self.shared.get(a as usize))
                else {
                    return Err(format!("tile window on shared array {a}, not declared"));
                };
                if !matches!(decl.elem, Ty::F32 | Ty::I32) {
                    return Err(format!(
                        "tile window on shared array {a} of {}, not f32 or i32",
                        decl.elem.rust_name()
                    ));
                }
                (base.clone(), self.shared_ptr, decl.elem)
            }
        };
        let [offset, stride, rows, cols] = w.exprs();
        let (offset, stride) = (eval(self, offset)?, eval(self, stride)?);
        let (rows, cols) = (eval(self, rows)?, eval(self, cols)?);
        Ok(WindowVals {
            base,
            ptr_ty,
            shared: matches!(w.mem, TileMem::Shared(_)),
            elem,
            offset,
            stride,
            rows,
            cols,
            transposed: w.transposed,
            quads: w.quads,
            packed: w.packed,
            pairs: w.pairs,
        })
    }

    /// `r < rows && c < cols`: whether tile element `(r, c)` is inside the window.
    pub fn window_contains(&mut self, w: &WindowVals, r: &str, c: &str) -> String {
        let in_r = self.b.op(format!("icmp ult i32 {r}, {}", w.rows));
        let in_c = self.b.op(format!("icmp ult i32 {c}, {}", w.cols));
        self.b.op(format!("and i1 {in_r}, {in_c}"))
    }

    /// The buffer or shared-array element behind tile element `(r, c)`, converted to `to`.
    pub fn window_read(&mut self, w: &WindowVals, r: &str, c: &str, to: Ty) -> String {
        let p = self.window_elem_ptr(w, r, c);
        let (ty, md) = (lty(w.elem), self.mem_md.clone());
        let v = self.b.op(format!(
            "load {ty}, {} {p}, align {}{md}",
            w.ptr_ty,
            w.elem.size_bytes()
        ));
        if w.quads || w.packed {
            // Byte r % 4 (c % 4 when packed) of the word.
            let lane = self
                .b
                .op(format!("and i32 {}, 3", if w.packed { c } else { r }));
            let bits = self.b.op(format!("shl nuw i32 {lane}, 3"));
            let byte = self.b.op(format!("lshr i32 {v}, {bits}"));
            return convert(&mut self.b, &byte, w.elem, to);
        }
        convert(&mut self.b, &v, w.elem, to)
    }

    /// Stores `v` (of type `from`) to the buffer or shared-array element behind tile element
    /// `(r, c)`.
    pub fn window_write(&mut self, w: &WindowVals, r: &str, c: &str, v: &str, from: Ty) {
        if w.packed {
            // Byte c % 4 of word `offset + r * stride + c / 4` (little-endian, as every target
            // is), the byte tile's value as it is. Addressed as byte `4 (offset + r * stride)
            // + c` so a row's bytes are consecutive in `c` (one vector store on the host; as
            // word `c / 4` plus byte `c % 4` LLVM stored them one by one).
            let scaled = self.b.op(format!("mul nuw i32 {r}, {}", w.stride));
            let word = self.b.op(format!("add nuw i32 {}, {scaled}", w.offset));
            let word = self.b.op(format!("zext i32 {word} to i64"));
            let first = self.b.op(format!("shl nuw i64 {word}, 2"));
            let c64 = self.b.op(format!("zext i32 {c} to i64"));
            let at = self.b.op(format!("add nuw i64 {first}, {c64}"));
            let q = self.b.op(format!(
                "getelementptr inbounds i8, {} {}, i64 {at}",
                w.ptr_ty, w.base
            ));
            let md = self.mem_md.clone();
            self.b
                .ins(format!("store i8 {v}, {} {q}, align 1{md}", w.ptr_ty));
            return;
        }
        let p = self.window_elem_ptr(w, r, c);
        let v = convert(&mut self.b, v, from, w.elem);
        let (ty, md) = (lty(w.elem), self.mem_md.clone());
        self.b.ins(format!(
            "store {ty} {v}, {} {p}, align {}{md}",
            w.ptr_ty,
            w.elem.size_bytes()
        ));
    }

    /// `&mem[offset + major * stride + minor]`, `(major, minor)` being `(r, c)`, `(c, r)` for a
    /// transposed window, `(r / 4, c)` for a quads window, `(r, c / 4)` for a packed one or
    /// `(r / 2, 2 c + r % 2)` for a pairs window; no wrap-around (an index that would wrap is
    /// out of bounds).
    pub fn window_elem_ptr(&mut self, w: &WindowVals, r: &str, c: &str) -> String {
        let (four, two, lane);
        let (major, minor) = match (w.transposed, w.quads, w.packed, w.pairs) {
            (true, ..) => (c, r),
            (false, true, ..) => {
                four = self.b.op(format!("lshr i32 {r}, 2"));
                (four.as_str(), c)
            }
            (false, false, true, _) => {
                four = self.b.op(format!("lshr i32 {c}, 2"));
                (r, four.as_str())
            }
            (false, false, false, true) => {
                (two, lane) = self.pair_coords(r, c);
                (two.as_str(), lane.as_str())
            }
            (false, false, false, false) => (r, c),
        };
        let scaled = self.b.op(format!("mul nuw i32 {major}, {}", w.stride));
        let base = self.b.op(format!("add nuw i32 {}, {scaled}", w.offset));
        let ix = self.b.op(format!("add nuw i32 {base}, {minor}"));
        let ix64 = self.b.op(format!("zext i32 {ix} to i64"));
        self.b.op(format!(
            "getelementptr inbounds {}, {} {}, i64 {ix64}",
            lty(w.elem),
            w.ptr_ty,
            w.base
        ))
    }

    /// Where element `(r, c)` of a two-rows-in-one layout lies (a pairs window, or a pair-layout
    /// tile): memory row `r / 2`, element `2 c + r % 2` of it.
    pub fn pair_coords(&mut self, r: &str, c: &str) -> (String, String) {
        let pair = self.b.op(format!("lshr i32 {r}, 1"));
        let odd = self.b.op(format!("and i32 {r}, 1"));
        let c2 = self.b.op(format!("shl nuw i32 {c}, 1"));
        let lane = self.b.op(format!("or disjoint i32 {c2}, {odd}"));
        (pair, lane)
    }

    /// The address `byte` bytes past the start of buffer line `line` of the window (a row, a
    /// column of a transposed window, two rows of a pairs window), with no promise that it
    /// lies in the buffer: for prefetches, which may point past its end. Computed in 64 bits,
    /// so it cannot wrap.
    pub fn window_line_addr(&mut self, w: &WindowVals, line: &str, byte: u32) -> String {
        let off = self.b.op(format!("zext i32 {} to i64", w.offset));
        let line = self.b.op(format!("zext i32 {line} to i64"));
        let stride = self.b.op(format!("zext i32 {} to i64", w.stride));
        let start = self.b.op(format!("mul i64 {line}, {stride}"));
        let start = self.b.op(format!("add i64 {off}, {start}"));
        let bytes = self
            .b
            .op(format!("mul i64 {start}, {}", w.elem.size_bytes()));
        let at = self.b.op(format!("add i64 {bytes}, {byte}"));
        self.b.op(format!(
            "getelementptr i8, {} {}, i64 {at}",
            w.ptr_ty, w.base
        ))
    }

    /// A sequential loop `iv = 0..n` (`n` an `i32` constant or value, at least 1) carrying
    /// values of type `ty` from `init`: `body` maps the iteration's values to the next ones
    /// (it may hold loops of its own: the values flow from the block it ends in); returns the
    /// values after the last iteration.
    pub fn carried_loop(
        &mut self,
        n: impl std::fmt::Display,
        ty: &str,
        init: &[String],
        body: impl FnOnce(&mut Self, &str, &[String]) -> Vec<String>,
    ) -> Vec<String> {
        let pre = self.b.cur.clone();
        let (lbody, exit) = (self.b.label("carry.body"), self.b.label("carry.exit"));
        self.b.br(&lbody);
        self.b.start(&lbody);
        let iv = self.b.fresh();
        let next_iv = self.b.fresh();
        let cur: Vec<String> = init.iter().map(|_| self.b.fresh()).collect();
        let phis_at = self.b.body.len();
        let next = body(self, &iv, &cur);
        let latch = self.b.cur.clone();
        self.b.ins(format!("{next_iv} = add nuw i32 {iv}, 1"));
        let more = self.b.op(format!("icmp ult i32 {next_iv}, {n}"));
        self.b.cbr(&more, &lbody, &exit);
        self.b.start(&exit);
        let mut phis = format!("  {iv} = phi i32 [ 0, %{pre} ], [ {next_iv}, %{latch} ]\n");
        for ((c, i), x) in cur.iter().zip(init).zip(&next) {
            phis.push_str(&format!(
                "  {c} = phi {ty} [ {i}, %{pre} ], [ {x}, %{latch} ]\n"
            ));
        }
        self.b.body.insert_str(phis_at, &phis);
        next
    }
}
