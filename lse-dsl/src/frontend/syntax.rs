//! Helpers over the source syntax shared by the lowering modules: stripping parentheses,
//! operator tables, which constructs are unsupported, and the common diagnostics.

use proc_macro2::Span;

use super::render::tokens_text;
use crate::ir::{BinOp, Expr, Ty};

pub(super) fn err<T>(span: Span, msg: impl std::fmt::Display) -> syn::Result<T> {
    Err(syn::Error::new(span, msg))
}

/// `e` with ` (<note>)` after each of its messages, spans kept.
pub(super) fn noted(e: syn::Error, note: &str) -> syn::Error {
    let mut out: Option<syn::Error> = None;
    for one in e {
        let one = syn::Error::new(one.span(), format!("{one} ({note})"));
        match &mut out {
            None => out = Some(one),
            Some(o) => o.combine(one),
        }
    }
    out.unwrap_or_else(|| syn::Error::new(Span::call_site(), note))
}

/// Source text of an expression, for messages.
pub(super) fn text(e: &impl quote::ToTokens) -> String {
    tokens_text(&e.to_token_stream())
}

/// `e` without redundant parentheses and invisible groups.
pub(super) fn strip(e: &syn::Expr) -> &syn::Expr {
    match e {
        syn::Expr::Paren(p) => strip(&p.expr),
        syn::Expr::Group(g) => strip(&g.expr),
        _ => e,
    }
}

/// Whether `e` has no type of its own and takes it from context (integer literals without a
/// suffix, and arithmetic made only of them).
pub(super) fn needs_context(e: &syn::Expr) -> bool {
    match strip(e) {
        syn::Expr::Lit(l) => matches!(&l.lit, syn::Lit::Int(i) if i.suffix().is_empty()),
        syn::Expr::Unary(u) => needs_context(&u.expr),
        syn::Expr::Binary(b) => {
            arith_op(&b.op).is_some() && needs_context(&b.left) && needs_context(&b.right)
        }
        syn::Expr::If(i) => match (&i.else_branch, block_expr(&i.then_branch)) {
            (Some((_, els)), Some(then)) => needs_context(then) && needs_context(els),
            _ => false,
        },
        syn::Expr::Block(b) if b.label.is_none() => block_expr(&b.block).is_some_and(needs_context),
        _ => false,
    }
}

/// The single expression of a `{ e }` block.
pub(super) fn block_expr(b: &syn::Block) -> Option<&syn::Expr> {
    match b.stmts.as_slice() {
        [syn::Stmt::Expr(e, None)] => Some(e),
        _ => None,
    }
}

/// The IR operator of an arithmetic or bitwise source operator (`+`, `<<`, ...).
pub(super) fn arith_op(op: &syn::BinOp) -> Option<BinOp> {
    use syn::BinOp as S;
    Some(match op {
        S::Add(_) => BinOp::Add,
        S::Sub(_) => BinOp::Sub,
        S::Mul(_) => BinOp::Mul,
        S::Div(_) => BinOp::Div,
        S::Rem(_) => BinOp::Rem,
        S::BitAnd(_) => BinOp::BitAnd,
        S::BitOr(_) => BinOp::BitOr,
        S::BitXor(_) => BinOp::BitXor,
        S::Shl(_) => BinOp::Shl,
        S::Shr(_) => BinOp::Shr,
        _ => return None,
    })
}

/// The IR operator of a compound assignment (`+=` -> `Add`).
pub(super) fn compound_op(op: &syn::BinOp) -> Option<BinOp> {
    use syn::BinOp as S;
    Some(match op {
        S::AddAssign(_) => BinOp::Add,
        S::SubAssign(_) => BinOp::Sub,
        S::MulAssign(_) => BinOp::Mul,
        S::DivAssign(_) => BinOp::Div,
        S::RemAssign(_) => BinOp::Rem,
        S::BitAndAssign(_) => BinOp::BitAnd,
        S::BitOrAssign(_) => BinOp::BitOr,
        S::BitXorAssign(_) => BinOp::BitXor,
        S::ShlAssign(_) => BinOp::Shl,
        S::ShrAssign(_) => BinOp::Shr,
        _ => return None,
    })
}

/// The message for using a 16-bit storage value as a number.
pub(super) fn storage_value_msg(ty: Ty, what: &str) -> String {
    let conv = if ty == Ty::Bf16 {
        "bf16_to_f32"
    } else {
        "f16_to_f32"
    };
    format!(
        "{what} is not defined for {t}: {t} values take + - * / and comparisons; convert with `{conv}(x)` first",
        t = ty.rust_name()
    )
}

/// Which unsupported construct `e` is, if it is one.
pub(super) fn unsupported_kind(e: &syn::Expr) -> Option<&'static str> {
    use syn::Expr as E;
    Some(match e {
        E::Return(_) => "`return`",
        E::Closure(_) => "closures",
        E::Loop(_) => "`loop` (use `while`)",
        E::Match(_) => "`match` (use `if`)",
        E::Macro(_) => "macros",
        E::Reference(_) => "references",
        E::Struct(_) => "struct expressions",
        E::Tuple(_) => "tuples (the only tuple is `let (v, i) = argmax(..)`)",
        E::Unsafe(_) => "`unsafe` blocks",
        E::Array(_) | E::Repeat(_) => "arrays (use `shared::<T>(N)` or a buffer)",
        E::Field(_) => "field access",
        E::Range(_) => "ranges outside `for` loops",
        E::Try(_) | E::TryBlock(_) => "`?` and `try`",
        E::Async(_) | E::Await(_) => "`async`/`.await`",
        E::Let(_) => "`let` patterns in conditions (`if let`, `while let`)",
        E::Yield(_) => "`yield`",
        E::Const(_) => "`const` blocks",
        E::Infer(_) => "`_` expressions",
        E::Verbatim(_) => "this syntax",
        _ => return None,
    })
}

/// Requires `v` to have type `ty`.
pub(super) fn expect(v: &Expr, ty: Ty, span: Span, what: &str) -> syn::Result<()> {
    if v.ty == ty {
        Ok(())
    } else {
        err(
            span,
            format!(
                "type mismatch: {what} must be {}, found {}",
                ty.rust_name(),
                v.ty.rust_name()
            ),
        )
    }
}
