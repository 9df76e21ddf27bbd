//! The canonical text of a kernel's IR: what `lse kernels show --emit ir` prints and what the
//! IR hash covers. Deterministic (no maps, no addresses), one statement per line, every
//! constant written with its type so that the text determines the IR.
//!
//! Names: parameters by name (Rust makes them unique), locals as `name#id`, shared arrays as
//! `name#sN`. Float constants use Rust's shortest round-trip form, infinities their Rust
//! names, and NaNs their bits.

use std::fmt::Write;

use sha2::{Digest, Sha256};

use crate::ir::{
    Access, Block, Builtin, DotScale, Expr, ExprKind, Kernel, MathFn, Param, Stmt, TileBinary,
    TileMem, TileOp, TileWindow, Ty, UnOp,
};

/// Canonical, deterministic, human-readable text of the IR (what `lse kernels show --emit ir`
/// prints); includes name, version, workgroup size, targets, params (with declared buffer
/// lengths), shared arrays, locals and the body.
pub fn ir_text(k: &Kernel) -> String {
    let mut p = Printer {
        k,
        out: String::new(),
    };
    p.header();
    p.block(&k.body, 1);
    p.out.push_str("}\n");
    p.out
}

/// Lower-case hex SHA-256 of [`ir_text`]: identifies a kernel's IR in metadata and caches.
pub fn ir_hash(k: &Kernel) -> String {
    let digest = Sha256::digest(ir_text(k).as_bytes());
    digest.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

struct Printer<'k> {
    k: &'k Kernel,
    out: String,
}

impl Printer<'_> {
    fn header(&mut self) {
        let k = self.k;
        let o = &mut self.out;
        let _ = writeln!(
            o,
            "kernel {} version {} fn {}",
            k.name, k.version, k.fn_name
        );
        let _ = writeln!(o, "workgroup {}", k.workgroup_size);
        if let Some(n) = k.subgroup {
            let _ = writeln!(o, "subgroup {n}");
        }
        let _ = writeln!(o, "targets {}", k.targets.join(", "));
        let _ = writeln!(o, "params {{");
        for (i, p) in k.params.iter().enumerate() {
            let _ = match p {
                Param::Buffer {
                    name,
                    elem,
                    access,
                    len,
                } => {
                    let m = if *access == Access::ReadWrite {
                        "mut "
                    } else {
                        ""
                    };
                    let elem = elem.rust_name();
                    match len {
                        Some(len) => writeln!(o, "  p{i} {name}: &{m}[{elem}; {len}]"),
                        None => writeln!(o, "  p{i} {name}: &{m}[{elem}]"),
                    }
                }
                Param::Scalar { name, ty } => writeln!(o, "  p{i} {name}: {}", ty.rust_name()),
            };
        }
        let _ = writeln!(o, "}}");
        let _ = writeln!(o, "shared {{");
        for (i, s) in k.shared.iter().enumerate() {
            let _ = writeln!(o, "  {}#s{i}: [{}; {}]", s.name, s.elem.rust_name(), s.len);
        }
        let _ = writeln!(o, "}}");
        if !k.tiles.is_empty() {
            let _ = writeln!(o, "tiles {{");
            for (i, t) in k.tiles.iter().enumerate() {
                let ty = t.elem.rust_name();
                let _ = writeln!(o, "  {}#t{i}: tile<{ty}, {}, {}>", t.name, t.rows, t.cols);
            }
            let _ = writeln!(o, "}}");
        }
        let _ = writeln!(o, "locals {{");
        for (i, l) in k.locals.iter().enumerate() {
            let _ = writeln!(o, "  {}#{i}: {}", l.name, l.ty.rust_name());
        }
        let _ = writeln!(o, "}}");
        self.out.push_str("body {\n");
    }

    fn line(&mut self, depth: usize, s: &str) {
        for _ in 0..depth {
            self.out.push_str("  ");
        }
        self.out.push_str(s);
        self.out.push('\n');
    }

    fn var(&self, v: u32) -> String {
        match self.k.locals.get(v as usize) {
            Some(l) => format!("{}#{v}", l.name),
            None => format!("?#{v}"),
        }
    }

    fn block(&mut self, b: &Block, depth: usize) {
        for s in b {
            self.stmt(s, depth);
        }
    }

    fn stmt(&mut self, s: &Stmt, depth: usize) {
        match s {
            Stmt::Let { var, value } => {
                let l = format!("let {} = {};", self.var(*var), self.expr(value));
                self.line(depth, &l);
            }
            Stmt::Assign { var, value } => {
                let l = format!("{} = {};", self.var(*var), self.expr(value));
                self.line(depth, &l);
            }
            Stmt::Store { buf, index, value } => {
                let l = format!(
                    "{}[{}] = {};",
                    self.param(*buf),
                    self.expr(index),
                    self.expr(value)
                );
                self.line(depth, &l);
            }
            Stmt::SharedStore {
                array,
                index,
                value,
            } => {
                let l = format!(
                    "{}[{}] = {};",
                    self.shared(*array),
                    self.expr(index),
                    self.expr(value)
                );
                self.line(depth, &l);
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                let l = format!("if {} {{", self.expr(cond));
                self.line(depth, &l);
                self.block(then_body, depth + 1);
                if !else_body.is_empty() {
                    self.line(depth, "} else {");
                    self.block(else_body, depth + 1);
                }
                self.line(depth, "}");
            }
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                let l = format!(
                    "for {} in ({}..{}).step_by({}) {{",
                    self.var(*var),
                    self.expr(start),
                    self.expr(end),
                    self.expr(step)
                );
                self.line(depth, &l);
                self.block(body, depth + 1);
                self.line(depth, "}");
            }
            Stmt::While { cond, body } => {
                let l = format!("while {} {{", self.expr(cond));
                self.line(depth, &l);
                self.block(body, depth + 1);
                self.line(depth, "}");
            }
            Stmt::Break => self.line(depth, "break;"),
            Stmt::Continue => self.line(depth, "continue;"),
            Stmt::Barrier => self.line(depth, "barrier();"),
            Stmt::Collective { op, dst, args } => {
                let dst: Vec<String> = dst.iter().map(|v| self.var(*v)).collect();
                let args: Vec<String> = args.iter().map(|a| self.expr(a)).collect();
                let lhs = if dst.len() == 1 {
                    dst[0].clone()
                } else {
                    format!("({})", dst.join(", "))
                };
                let l = format!("{lhs} = {}({});", op.name(), args.join(", "));
                self.line(depth, &l);
            }
            Stmt::Tile(op) => {
                let l = self.tile_op(op);
                self.line(depth, &l);
            }
        }
    }

    fn tile_op(&self, op: &TileOp) -> String {
        let window = |w: &TileWindow| {
            let [o, s, r, c] = w.exprs().map(|e| self.expr(e));
            let mem = match w.mem {
                TileMem::Buffer(p) => self.param(p),
                TileMem::Shared(a) => self.shared(a),
            };
            format!("{mem}, {o}, {s}, {r}, {c}")
        };
        match op {
            TileOp::Zero { dst } => format!("tile_zero({});", self.tile(*dst)),
            TileOp::Load { dst, from } => {
                let t = match (from.transposed, from.quads, from.packed, from.pairs) {
                    (true, ..) => "_t",
                    (_, true, ..) => "_quads",
                    (_, _, true, _) => "_packed",
                    (.., true) => "_pairs",
                    _ => "",
                };
                format!("tile_load{t}({}, {});", self.tile(*dst), window(from))
            }
            TileOp::Store { src, to } => {
                let t = match (to.transposed, to.packed, to.pairs) {
                    (true, ..) => "_t",
                    (_, true, _) => "_packed",
                    (.., true) => "_pairs",
                    _ => "",
                };
                format!("tile_store{t}({}, {});", self.tile(*src), window(to))
            }
            TileOp::Dot { acc, a, b, scale } => {
                let (acc, a, b) = (self.tile(*acc), self.tile(*a), self.tile(*b));
                match scale {
                    Some(DotScale::Columns { scale, offset }) => {
                        let offset =
                            offset.map_or(String::new(), |o| format!(", {}", self.tile(o)));
                        format!(
                            "tile_dot_scaled({acc}, {a}, {b}, {}{offset});",
                            self.tile(*scale)
                        )
                    }
                    Some(DotScale::Dequant { offset, rows, cols }) => format!(
                        "tile_dot_dequant({acc}, {a}, {b}, {}, {}, {});",
                        self.tile(*offset),
                        self.tile(*rows),
                        self.tile(*cols)
                    ),
                    None => format!("tile_dot({acc}, {a}, {b});"),
                }
            }
            TileOp::Dequant {
                acc,
                src,
                rows,
                cols,
            } => format!(
                "tile_dequant({}, {}, {}, {});",
                self.tile(*acc),
                self.tile(*src),
                self.tile(*rows),
                self.tile(*cols)
            ),
            TileOp::Binary { op, dst, src } => format!(
                "tile_{}({}, {});",
                op.suffix(),
                self.tile(*dst),
                self.tile(*src)
            ),
            TileOp::RowReduce { op, dst, src } => {
                let name = if *op == TileBinary::Add {
                    "sum"
                } else {
                    op.suffix()
                };
                format!("tile_row_{name}({}, {});", self.tile(*dst), self.tile(*src))
            }
            TileOp::Exp { dst } => format!("tile_exp({});", self.tile(*dst)),
            TileOp::Scale { dst, by } => {
                format!("tile_scale({}, {});", self.tile(*dst), self.expr(by))
            }
            TileOp::Copy { dst, src } => {
                format!("tile_copy({}, {});", self.tile(*dst), self.tile(*src))
            }
            TileOp::Prefetch { buf, offset, len } => format!(
                "prefetch({}, {}, {});",
                self.param(*buf),
                self.expr(offset),
                self.expr(len)
            ),
        }
    }

    fn tile(&self, t: u32) -> String {
        match self.k.tiles.get(t as usize) {
            Some(d) => format!("{}#t{t}", d.name),
            None => format!("?#t{t}"),
        }
    }

    fn param(&self, p: u32) -> String {
        self.k
            .params
            .get(p as usize)
            .map(|p| p.name().to_string())
            .unwrap_or_else(|| format!("?p{p}"))
    }

    fn shared(&self, s: u32) -> String {
        match self.k.shared.get(s as usize) {
            Some(a) => format!("{}#s{s}", a.name),
            None => format!("?#s{s}"),
        }
    }

    fn expr(&self, e: &Expr) -> String {
        match &e.kind {
            ExprKind::Const(bits) => constant(*bits, e.ty),
            ExprKind::Var(v) => self.var(*v),
            ExprKind::Param(p) => self.param(*p),
            ExprKind::Load { buf, index } => format!("{}[{}]", self.param(*buf), self.expr(index)),
            ExprKind::SharedLoad { array, index } => {
                format!("{}[{}]", self.shared(*array), self.expr(index))
            }
            ExprKind::Builtin(b) => builtin(*b).to_string(),
            ExprKind::Unary(op, a) => {
                let sym = match op {
                    UnOp::Neg => "-",
                    UnOp::Not => "!",
                };
                format!("{sym}{}", self.expr(a))
            }
            ExprKind::Binary(op, a, b) => {
                format!("({} {} {})", self.expr(a), op.symbol(), self.expr(b))
            }
            ExprKind::Cast(a) => format!("({} as {})", self.expr(a), e.ty.rust_name()),
            ExprKind::Math(f, args) => {
                let args: Vec<String> = args.iter().map(|a| self.expr(a)).collect();
                format!("{}({})", math_name(*f), args.join(", "))
            }
            ExprKind::Select(c, a, b) => {
                format!(
                    "select({}, {}, {})",
                    self.expr(c),
                    self.expr(a),
                    self.expr(b)
                )
            }
        }
    }
}

fn constant(bits: u32, ty: Ty) -> String {
    match ty {
        Ty::F32 => {
            let v = f32::from_bits(bits);
            if v.is_finite() {
                format!("{v:?}f32")
            } else if v == f32::INFINITY {
                "f32::INFINITY".to_string()
            } else if v == f32::NEG_INFINITY {
                "f32::NEG_INFINITY".to_string()
            } else {
                format!("f32::from_bits(0x{bits:08x})")
            }
        }
        Ty::I32 => format!("{}i32", bits as i32),
        Ty::U32 => format!("{bits}u32"),
        Ty::Bool => (bits != 0).to_string(),
        Ty::Bf16 | Ty::F16 => format!("{}::from_bits(0x{bits:04x})", ty.rust_name()),
        Ty::I16 => format!("{}i16", bits as i16),
        Ty::I8 => format!("{}i8", bits as i8),
        Ty::U8 => format!("{}u8", bits as u8),
    }
}

fn builtin(b: Builtin) -> &'static str {
    match b {
        Builtin::LocalId => "local_id()",
        Builtin::GroupId(0) => "group_id()",
        Builtin::GroupId(1) => "group_id_y()",
        Builtin::GroupId(_) => "group_id_z()",
        Builtin::NumGroups(axis) => crate::ir::grid_count_name(axis),
        Builtin::GroupSize => "group_size()",
    }
}

fn math_name(f: MathFn) -> &'static str {
    match f {
        MathFn::Exp => "exp",
        MathFn::Log => "log",
        MathFn::Sigmoid => "sigmoid",
        MathFn::Silu => "silu",
        MathFn::Tanh => "tanh",
        MathFn::Sqrt => "sqrt",
        MathFn::Rsqrt => "rsqrt",
        MathFn::Fma => "fma",
        MathFn::Max => "max",
        MathFn::Min => "min",
        MathFn::Abs => "abs",
        MathFn::Bf16ToF32 => "bf16_to_f32",
        MathFn::F16ToF32 => "f16_to_f32",
        MathFn::F32ToBf16 => "f32_to_bf16",
        MathFn::F32ToF16 => "f32_to_f16",
        MathFn::F32FromBits => "f32_from_bits",
        MathFn::F16FromBits => "f16_from_bits",
        MathFn::Bf16FromBits => "bf16_from_bits",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{BinOp, LenExpr, Local, SharedArray};

    fn kernel() -> Kernel {
        let i = Expr::new(ExprKind::Var(0), Ty::U32);
        Kernel {
            fn_name: "scale".into(),
            name: "example.scale".into(),
            version: 2,
            workgroup_size: 64,
            subgroup: None,
            targets: vec!["gfx942".into()],
            params: vec![
                Param::Buffer {
                    name: "x".into(),
                    elem: Ty::F32,
                    access: Access::Read,
                    len: None,
                },
                Param::Buffer {
                    name: "out".into(),
                    elem: Ty::F32,
                    access: Access::ReadWrite,
                    len: Some(LenExpr::Scalar("n".into())),
                },
                Param::Scalar {
                    name: "n".into(),
                    ty: Ty::U32,
                },
            ],
            shared: vec![SharedArray {
                name: "tile".into(),
                elem: Ty::F32,
                len: 64,
            }],
            tiles: vec![],
            locals: vec![Local {
                name: "i".into(),
                ty: Ty::U32,
            }],
            body: vec![
                Stmt::Let {
                    var: 0,
                    value: Expr::new(ExprKind::Builtin(Builtin::LocalId), Ty::U32),
                },
                Stmt::If {
                    cond: Expr::new(
                        ExprKind::Binary(
                            BinOp::Lt,
                            Box::new(i.clone()),
                            Box::new(Expr::new(ExprKind::Param(2), Ty::U32)),
                        ),
                        Ty::Bool,
                    ),
                    then_body: vec![Stmt::Store {
                        buf: 1,
                        index: i.clone(),
                        value: Expr::new(
                            ExprKind::Binary(
                                BinOp::Mul,
                                Box::new(Expr::new(
                                    ExprKind::Load {
                                        buf: 0,
                                        index: Box::new(i),
                                    },
                                    Ty::F32,
                                )),
                                Box::new(Expr::const_f32(0.5)),
                            ),
                            Ty::F32,
                        ),
                    }],
                    else_body: vec![],
                },
                Stmt::Barrier,
            ],
        }
    }

    #[test]
    fn text_shows_header_and_body() {
        let t = ir_text(&kernel());
        let expected = "\
kernel example.scale version 2 fn scale
workgroup 64
targets gfx942
params {
  p0 x: &[f32]
  p1 out: &mut [f32; n]
  p2 n: u32
}
shared {
  tile#s0: [f32; 64]
}
locals {
  i#0: u32
}
body {
  let i#0 = local_id();
  if (i#0 < n) {
    out[i#0] = (x[i#0] * 0.5f32);
  }
  barrier();
}
";
        assert_eq!(t, expected);
    }

    #[test]
    fn hash_is_sha256_of_the_text_and_tracks_changes() {
        let k = kernel();
        let h = ir_hash(&k);
        assert_eq!(h.len(), 64);
        assert!(h
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_eq!(h, ir_hash(&k.clone()));
        let mut k2 = k.clone();
        k2.workgroup_size = 128;
        assert_ne!(h, ir_hash(&k2));
        // SHA-256("abc") checks the hex encoding itself.
        let d = Sha256::digest(b"abc");
        assert_eq!(format!("{:02x}", d[0]), "ba");
    }

    #[test]
    fn constants_are_exact() {
        assert_eq!(constant(f32::INFINITY.to_bits(), Ty::F32), "f32::INFINITY");
        assert_eq!(
            constant(f32::NEG_INFINITY.to_bits(), Ty::F32),
            "f32::NEG_INFINITY"
        );
        assert_eq!(constant(0x7fc0_0001, Ty::F32), "f32::from_bits(0x7fc00001)");
        assert_eq!(constant(0.1f32.to_bits(), Ty::F32), "0.1f32");
        assert_eq!(constant(-3i32 as u32, Ty::I32), "-3i32");
        assert_eq!(constant(1, Ty::Bool), "true");
    }
}
