//! Built-in functions and the method forms (`x.exp()`, `a.max(b)`, `a.mul_add(b, c)`), and
//! collectives used inside expressions (hoisted into a statement of their own, since the IR
//! keeps collectives as statements: every work-item must reach them together).

use proc_macro2::Span;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::Token;

use super::cx::{Cx, Site};
use super::syntax::{err, expect, storage_value_msg, strip, text};
use super::types::{ty_list, NUMERIC};
use crate::ir::{BinOp, Builtin, CollectiveOp, Expr, ExprKind, MathFn, Stmt, Ty};

type Args = Punctuated<syn::Expr, Token![,]>;

const BUILTINS: &str = "local_id, group_id, group_id_y, group_id_z, num_groups, num_groups_y, num_groups_z, group_size, barrier, shared, tile, tile_zero, tile_load, tile_load_t, tile_load_quads, tile_load_packed, tile_load_pairs, tile_store, tile_store_t, tile_store_packed, tile_store_pairs, tile_dot, tile_dot_scaled, tile_dot_dequant, tile_dequant, tile_add, tile_sub, tile_mul, tile_div, tile_max, tile_row_sum, tile_row_max, tile_exp, tile_scale, tile_copy, prefetch, reduce_sum, reduce_max, reduce_min, argmax, broadcast, subgroup_size, subgroup_id, subgroup_lane, subgroup_sum, subgroup_max, subgroup_min, subgroup_shuffle, exp, log, sigmoid, silu, tanh, sqrt, rsqrt, abs, max, min, fma, to_f32, bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16, f32_from_bits, f16_from_bits, bf16_from_bits";

/// Whether `name` is a LOOM built-in function.
pub(super) fn is_builtin(name: &str) -> bool {
    BUILTINS.split(", ").any(|b| b == name)
}

/// The collective a function name denotes.
pub(super) fn collective_op(name: &str) -> Option<CollectiveOp> {
    Some(match name {
        "reduce_sum" => CollectiveOp::ReduceSum,
        "reduce_max" => CollectiveOp::ReduceMax,
        "reduce_min" => CollectiveOp::ReduceMin,
        "argmax" => CollectiveOp::Argmax,
        "broadcast" => CollectiveOp::Broadcast,
        "subgroup_sum" => CollectiveOp::SubgroupSum,
        "subgroup_max" => CollectiveOp::SubgroupMax,
        "subgroup_min" => CollectiveOp::SubgroupMin,
        "subgroup_shuffle" => CollectiveOp::SubgroupShuffle,
        _ => return None,
    })
}

/// The name of a call to a plain function (`foo(...)`), if `e` is one.
pub(super) fn call_name(e: &syn::Expr) -> Option<(String, &syn::ExprCall)> {
    let syn::Expr::Call(c) = strip(e) else {
        return None;
    };
    Some((func_name(&c.func)?, c))
}

/// The name of a called function that is a single identifier (type arguments allowed).
fn func_name(func: &syn::Expr) -> Option<String> {
    let syn::Expr::Path(p) = strip(func) else {
        return None;
    };
    if p.qself.is_some() || p.path.segments.len() != 1 {
        return None;
    }
    Some(p.path.segments[0].ident.to_string())
}

/// A direct collective call `op(args)`, if `e` is one.
pub(super) fn as_collective(e: &syn::Expr) -> Option<(CollectiveOp, &syn::ExprCall)> {
    let (name, c) = call_name(e)?;
    let syn::Expr::Path(p) = strip(&c.func) else {
        return None;
    };
    if !p.path.segments[0].arguments.is_none() {
        return None;
    }
    collective_op(&name).map(|op| (op, c))
}

fn arity(name: &str, args: &Args, n: usize, span: Span) -> syn::Result<()> {
    if args.len() == n {
        return Ok(());
    }
    let plural = if n == 1 { "" } else { "s" };
    err(
        span,
        format!("`{name}` takes {n} argument{plural}, found {}", args.len()),
    )
}

impl Cx {
    /// Lowers the arguments of collective `op` and returns them with the result types.
    pub(super) fn collective_args(
        &mut self,
        op: CollectiveOp,
        c: &syn::ExprCall,
        want: Option<Ty>,
    ) -> syn::Result<(Vec<Expr>, Vec<Ty>)> {
        let name = op.name();
        let span = c.span();
        if op.is_subgroup() {
            self.subgroup_size(name, span)?;
        }
        match op {
            CollectiveOp::ReduceSum
            | CollectiveOp::ReduceMax
            | CollectiveOp::ReduceMin
            | CollectiveOp::SubgroupSum
            | CollectiveOp::SubgroupMax
            | CollectiveOp::SubgroupMin => {
                arity(name, &c.args, 1, span)?;
                let x = self.expr(&c.args[0], want)?;
                numeric(&x, c.args[0].span(), name)?;
                let ty = x.ty;
                Ok((vec![x], vec![ty]))
            }
            CollectiveOp::Broadcast | CollectiveOp::SubgroupShuffle => {
                arity(name, &c.args, 2, span)?;
                let x = self.expr(&c.args[0], want)?;
                numeric(&x, c.args[0].span(), name)?;
                let lane = self.expr_of(&c.args[1], Ty::U32, &format!("the lane of `{name}`"))?;
                let ty = x.ty;
                Ok((vec![x, lane], vec![ty]))
            }
            CollectiveOp::Argmax => {
                arity(name, &c.args, 2, span)?;
                let v = self.expr_of(&c.args[0], Ty::F32, "the value of `argmax`")?;
                let i = self.expr_of(&c.args[1], Ty::U32, "the index of `argmax`")?;
                Ok((vec![v, i], vec![Ty::F32, Ty::U32]))
            }
        }
    }

    /// The kernel's subgroup size, which `name` needs.
    fn subgroup_size(&self, name: &str, span: Span) -> syn::Result<u32> {
        self.subgroup.ok_or_else(|| {
            syn::Error::new(
                span,
                format!("`{name}` needs the kernel's subgroup size: add `subgroup = N` to `#[loom::kernel(...)]` (a power of two up to the workgroup size)"),
            )
        })
    }

    /// A collective inside an expression: hoisted before the statement into a fresh local.
    fn hoisted_collective(
        &mut self,
        op: CollectiveOp,
        c: &syn::ExprCall,
        want: Option<Ty>,
    ) -> syn::Result<Expr> {
        let name = op.name();
        if op == CollectiveOp::Argmax {
            return err(
                c.span(),
                "`argmax` returns a pair; bind it with `let (value, index) = argmax(v, i);`",
            );
        }
        if let Some(why) = self.no_hoist {
            return err(
                c.span(),
                format!("`{name}` cannot be used in {why}; compute it into a `let` first"),
            );
        }
        let (args, tys) = self.collective_args(op, c, want)?;
        let var = self.new_local(&format!("{name}_tmp"), tys[0]);
        let site = Site {
            span: c.span(),
            text: text(c),
        };
        self.pending.push((
            Stmt::Collective {
                op,
                dst: vec![var],
                args,
            },
            site,
        ));
        Ok(Expr::new(ExprKind::Var(var), tys[0]))
    }

    /// A call in value position.
    pub(super) fn call(&mut self, c: &syn::ExprCall, want: Option<Ty>) -> syn::Result<Expr> {
        let span = c.span();
        let Some(name) = func_name(&c.func) else {
            return err(
                c.func.span(),
                format!(
                    "unknown function `{}`; LOOM built-ins are: {BUILTINS}",
                    text(&c.func)
                ),
            );
        };
        if let Some(f) = self.fn_named(&name, c)? {
            return self.call_fn(f, c);
        }
        if name == "shared" {
            return err(
                span,
                "`shared::<T>(N)` must be the whole initializer of a top-level `let`",
            );
        }
        if let syn::Expr::Path(p) = strip(&c.func) {
            if !p.path.segments[0].arguments.is_none() {
                return err(p.span(), format!("`{name}` takes no type arguments"));
            }
        }
        let builtin = |b: Builtin| -> syn::Result<Expr> {
            arity(&name, &c.args, 0, span)?;
            Ok(Expr::new(ExprKind::Builtin(b), Ty::U32))
        };
        match name.as_str() {
            "local_id" => builtin(Builtin::LocalId),
            "group_id" => builtin(Builtin::GroupId(0)),
            "group_id_y" => builtin(Builtin::GroupId(1)),
            "group_id_z" => builtin(Builtin::GroupId(2)),
            "num_groups" => builtin(Builtin::NumGroups(0)),
            "num_groups_y" => builtin(Builtin::NumGroups(1)),
            "num_groups_z" => builtin(Builtin::NumGroups(2)),
            "group_size" => builtin(Builtin::GroupSize),
            "subgroup_size" | "subgroup_id" | "subgroup_lane" => {
                arity(&name, &c.args, 0, span)?;
                let n = Expr::const_u32(self.subgroup_size(&name, span)?);
                let lid = Expr::new(ExprKind::Builtin(Builtin::LocalId), Ty::U32);
                let op = match name.as_str() {
                    "subgroup_size" => return Ok(n),
                    "subgroup_id" => BinOp::Div,
                    _ => BinOp::Rem,
                };
                self.make_binary(op, lid, n, span)
            }
            "barrier" => err(span, "`barrier()` is a statement, not a value"),
            "exp" => self.math1(MathFn::Exp, &name, &c.args, span),
            "log" => self.math1(MathFn::Log, &name, &c.args, span),
            "sigmoid" => self.math1(MathFn::Sigmoid, &name, &c.args, span),
            "silu" => self.math1(MathFn::Silu, &name, &c.args, span),
            "tanh" => self.math1(MathFn::Tanh, &name, &c.args, span),
            "sqrt" => self.math1(MathFn::Sqrt, &name, &c.args, span),
            "rsqrt" => self.math1(MathFn::Rsqrt, &name, &c.args, span),
            "abs" => self.math1(MathFn::Abs, &name, &c.args, span),
            "max" | "min" => {
                arity(&name, &c.args, 2, span)?;
                let f = if name == "max" {
                    MathFn::Max
                } else {
                    MathFn::Min
                };
                self.minmax(f, &name, &c.args[0], &c.args[1], want, span)
            }
            "fma" => {
                arity(&name, &c.args, 3, span)?;
                self.fma(&c.args[0], &c.args[1], &c.args[2])
            }
            "to_f32" => self.widen_to_f32(&c.args, span),
            "bf16_to_f32" => {
                self.convert(MathFn::Bf16ToF32, &name, &c.args, span, Ty::Bf16, Ty::F32)
            }
            "f16_to_f32" => self.convert(MathFn::F16ToF32, &name, &c.args, span, Ty::F16, Ty::F32),
            "f32_to_bf16" => {
                self.convert(MathFn::F32ToBf16, &name, &c.args, span, Ty::F32, Ty::Bf16)
            }
            "f32_to_f16" => self.convert(MathFn::F32ToF16, &name, &c.args, span, Ty::F32, Ty::F16),
            "f32_from_bits" => {
                self.convert(MathFn::F32FromBits, &name, &c.args, span, Ty::U32, Ty::F32)
            }
            "f16_from_bits" => {
                self.convert(MathFn::F16FromBits, &name, &c.args, span, Ty::U32, Ty::F16)
            }
            "bf16_from_bits" => self.convert(
                MathFn::Bf16FromBits,
                &name,
                &c.args,
                span,
                Ty::U32,
                Ty::Bf16,
            ),
            _ => match collective_op(&name) {
                Some(op) => self.hoisted_collective(op, c, want),
                None => err(
                    c.func.span(),
                    format!("unknown function `{name}`; LOOM built-ins are: {BUILTINS}"),
                ),
            },
        }
    }

    /// A method call in value position.
    pub(super) fn method(
        &mut self,
        m: &syn::ExprMethodCall,
        want: Option<Ty>,
    ) -> syn::Result<Expr> {
        let name = m.method.to_string();
        let span = m.span();
        if m.turbofish.is_some() {
            return err(span, format!("`.{name}` takes no type arguments"));
        }
        let mut all = Args::new();
        all.push(m.receiver.as_ref().clone());
        all.extend(m.args.iter().cloned());
        let method_arity = |n: usize| -> syn::Result<()> {
            if m.args.len() == n {
                return Ok(());
            }
            let plural = if n == 1 { "" } else { "s" };
            err(
                span,
                format!(
                    "`.{name}()` takes {n} argument{plural}, found {}",
                    m.args.len()
                ),
            )
        };
        match name.as_str() {
            "exp" | "ln" | "sqrt" | "abs" => {
                method_arity(0)?;
                let f = match name.as_str() {
                    "exp" => MathFn::Exp,
                    "ln" => MathFn::Log,
                    "sqrt" => MathFn::Sqrt,
                    _ => MathFn::Abs,
                };
                self.math1(f, &format!(".{name}()"), &all, span)
            }
            "max" | "min" => {
                method_arity(1)?;
                let f = if name == "max" { MathFn::Max } else { MathFn::Min };
                self.minmax(f, &format!(".{name}()"), &m.receiver, &m.args[0], want, span)
            }
            "mul_add" => {
                method_arity(2)?;
                self.fma(&m.receiver, &m.args[0], &m.args[1])
            }
            "step_by" => err(span, "`.step_by(s)` is only allowed on the range of a `for` loop"),
            _ => err(
                m.method.span(),
                format!("method `.{name}()` is not supported in LOOM kernels; the methods are exp, ln, sqrt, abs, max, min and mul_add"),
            ),
        }
    }

    fn math1(&mut self, f: MathFn, name: &str, args: &Args, span: Span) -> syn::Result<Expr> {
        arity(name, args, 1, span)?;
        let x = self.expr(&args[0], Some(Ty::F32))?;
        if matches!(x.ty, Ty::Bf16 | Ty::F16) {
            return err(
                args[0].span(),
                storage_value_msg(x.ty, &format!("`{name}`")),
            );
        }
        expect(
            &x,
            Ty::F32,
            args[0].span(),
            &format!("the argument of `{name}`"),
        )?;
        Ok(super::fold::fold(
            Expr::new(ExprKind::Math(f, vec![x]), Ty::F32),
            self.workgroup,
        ))
    }

    fn minmax(
        &mut self,
        f: MathFn,
        name: &str,
        a: &syn::Expr,
        b: &syn::Expr,
        want: Option<Ty>,
        span: Span,
    ) -> syn::Result<Expr> {
        let (x, y) = self.operands(a, b, want)?;
        if x.ty != y.ty {
            return err(
                span,
                format!(
                    "type mismatch: `{name}` has arguments of type {} and {}; LOOM has no implicit conversions",
                    x.ty.rust_name(),
                    y.ty.rust_name()
                ),
            );
        }
        numeric(&x, span, name)?;
        let ty = x.ty;
        Ok(super::fold::fold(
            Expr::new(ExprKind::Math(f, vec![x, y]), ty),
            self.workgroup,
        ))
    }

    fn fma(&mut self, a: &syn::Expr, b: &syn::Expr, c: &syn::Expr) -> syn::Result<Expr> {
        let mut v = Vec::new();
        for (i, e) in [a, b, c].into_iter().enumerate() {
            let x = self.expr(e, Some(Ty::F32))?;
            if matches!(x.ty, Ty::Bf16 | Ty::F16) {
                return err(e.span(), storage_value_msg(x.ty, "`fma`"));
            }
            expect(
                &x,
                Ty::F32,
                e.span(),
                &format!("argument {} of `fma`", i + 1),
            )?;
            v.push(x);
        }
        Ok(super::fold::fold(
            Expr::new(ExprKind::Math(MathFn::Fma, v), Ty::F32),
            self.workgroup,
        ))
    }

    /// `to_f32(x)`: a bf16 or f16 value widened, an f32 value as it is. The one conversion that
    /// type-checks for every element type, so generic kernels read `&[W]` buffers with it.
    fn widen_to_f32(&mut self, args: &Args, span: Span) -> syn::Result<Expr> {
        arity("to_f32", args, 1, span)?;
        let x = self.expr(&args[0], Some(Ty::F32))?;
        match x.ty {
            Ty::Bf16 => Ok(Expr::new(
                ExprKind::Math(MathFn::Bf16ToF32, vec![x]),
                Ty::F32,
            )),
            Ty::F16 => Ok(Expr::new(
                ExprKind::Math(MathFn::F16ToF32, vec![x]),
                Ty::F32,
            )),
            Ty::F32 => Ok(x),
            other => err(
                args[0].span(),
                format!(
                    "`to_f32` takes bf16, f16 or f32, found {}; convert integers with `as f32`",
                    other.rust_name()
                ),
            ),
        }
    }

    fn convert(
        &mut self,
        f: MathFn,
        name: &str,
        args: &Args,
        span: Span,
        from: Ty,
        to: Ty,
    ) -> syn::Result<Expr> {
        arity(name, args, 1, span)?;
        let x = self.expr(&args[0], Some(from))?;
        expect(
            &x,
            from,
            args[0].span(),
            &format!("the argument of `{name}`"),
        )?;
        Ok(Expr::new(ExprKind::Math(f, vec![x]), to))
    }
}

fn numeric(x: &Expr, span: Span, name: &str) -> syn::Result<()> {
    if NUMERIC.contains(&x.ty) {
        return Ok(());
    }
    if matches!(x.ty, Ty::Bf16 | Ty::F16) {
        return err(span, storage_value_msg(x.ty, &format!("`{name}`")));
    }
    err(
        span,
        format!(
            "`{name}` takes {}, found {}",
            ty_list(&NUMERIC),
            x.ty.rust_name()
        ),
    )
}

#[cfg(test)]
mod tests {
    use crate::frontend::tests::*;
    use crate::ir::*;

    #[test]
    fn builtins_methods_and_constants_lower_to_ir() {
        let k = k("let a = s.exp().ln().sqrt().abs(); let b = s.max(1.0).min(2.0); let c = s.mul_add(2.0, 1.0);
                   let d = rsqrt(s); let g = group_id_y() + num_groups_z(); let i = f32::NEG_INFINITY;");
        let ExprKind::Math(MathFn::Abs, args) = &let_value(&k, "a").kind else {
            panic!()
        };
        assert!(matches!(&args[0].kind, ExprKind::Math(MathFn::Sqrt, _)));
        assert!(matches!(
            &let_value(&k, "b").kind,
            ExprKind::Math(MathFn::Min, _)
        ));
        assert!(matches!(&let_value(&k, "c").kind, ExprKind::Math(MathFn::Fma, v) if v.len() == 3));
        assert!(matches!(
            &let_value(&k, "d").kind,
            ExprKind::Math(MathFn::Rsqrt, _)
        ));
        let ExprKind::Binary(_, l, r) = &let_value(&k, "g").kind else {
            panic!()
        };
        assert_eq!(l.kind, ExprKind::Builtin(Builtin::GroupId(1)));
        assert_eq!(r.kind, ExprKind::Builtin(Builtin::NumGroups(2)));
        assert_eq!(*let_value(&k, "i"), Expr::const_f32(f32::NEG_INFINITY));
        assert!(
            e("let a = foo(1);").contains("unknown function `foo`; LOOM built-ins are: local_id")
        );
        assert!(e("let a = s.powi(2);").contains("method `.powi()` is not supported"));
        assert!(e("let a = max(s);").contains("`max` takes 2 arguments, found 1"));
        assert!(e("let a = local_id(1);").contains("`local_id` takes 0 arguments, found 1"));
        assert!(e("let a = s.exp(1.0);").contains("`.exp()` takes 0 arguments, found 1"));
    }

    #[test]
    fn to_f32_widens_half_types_and_passes_f32_through() {
        let k = k("let a = to_f32(h[0]); let b = to_f32(x[0]); let c = to_f32(2.0);");
        let ExprKind::Math(MathFn::Bf16ToF32, args) = &let_value(&k, "a").kind else {
            panic!("{:?}", let_value(&k, "a"))
        };
        assert_eq!(args[0].ty, Ty::Bf16);
        assert_eq!(local_ty(&k, "a"), Ty::F32);
        assert!(
            matches!(&let_value(&k, "b").kind, ExprKind::Load { .. }),
            "{:?}",
            let_value(&k, "b")
        );
        assert_eq!(local_ty(&k, "b"), Ty::F32);
        assert_eq!(*let_value(&k, "c"), Expr::const_f32(2.0));
        assert_eq!(
            e("let a = to_f32(n);"),
            "3:16: `to_f32` takes bf16, f16 or f32, found u32; convert integers with `as f32`"
        );
        assert!(e("let a = to_f32(s, s);").contains("`to_f32` takes 1 argument, found 2"));
    }

    #[test]
    fn collectives_become_statements() {
        let k = k("let v = x[local_id()]; let total = reduce_sum(v); let (best, at) = argmax(v, local_id());
                   let y = reduce_max(v) + broadcast(v, 0) * 2.0; let mut z = 0u32; z = reduce_min(local_id());");
        assert!(
            matches!(&k.body[1], Stmt::Collective { op: CollectiveOp::ReduceSum, dst, .. } if dst.len() == 1)
        );
        let Stmt::Collective {
            op: CollectiveOp::Argmax,
            dst,
            args,
        } = &k.body[2]
        else {
            panic!()
        };
        assert_eq!(dst.len(), 2);
        assert_eq!(k.locals[dst[0] as usize].name, "best");
        assert_eq!(k.locals[dst[1] as usize].ty, Ty::U32);
        assert_eq!(args.len(), 2);
        // Collectives inside an expression are hoisted before the statement, in order.
        assert!(matches!(
            &k.body[3],
            Stmt::Collective {
                op: CollectiveOp::ReduceMax,
                ..
            }
        ));
        let Stmt::Collective {
            op: CollectiveOp::Broadcast,
            args,
            ..
        } = &k.body[4]
        else {
            panic!()
        };
        assert_eq!(args[1], Expr::const_u32(0));
        assert!(matches!(&k.body[5], Stmt::Let { .. }));
        let z = k.locals.iter().position(|l| l.name == "z").unwrap() as u32;
        assert!(
            matches!(&k.body[7], Stmt::Collective { op: CollectiveOp::ReduceMin, dst, .. } if dst == &vec![z])
        );
        assert!(e("let a = argmax(s, 0) ;").contains("`argmax` returns a pair"));
        assert!(e("let (a, b) = reduce_sum(s);").contains("tuple patterns are only for"));
        assert!(e("let a = n > 0 && reduce_sum(n) > 0;")
            .contains("cannot be used in the right operand of `&&`"));
        assert!(e("while reduce_sum(n) > 0 { }").contains("cannot be used in a `while` condition"));
        assert!(e("let a = reduce_sum(true);")
            .contains("`reduce_sum` takes f32, i32 or u32, found bool"));
        assert!(e("let (a, b) = argmax(n, 0);")
            .contains("the value of `argmax` must be f32, found u32"));
    }
}
