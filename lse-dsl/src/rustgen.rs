//! The Rust CPU lowering: a kernel in work-item-loop form ([`crate::wil`]) becomes one Rust
//! function with the [`crate::rt::CpuEntry`] signature, the CPU reference every other backend
//! is compared against.
//!
//! Shape of the generated function: decode buffers and scalars, allocate shared arrays, then
//! loop over the linearised workgroup ids (`x` fastest). Per workgroup, shared arrays are
//! zeroed, [`VarStorage::PerItem`] variables are `[T; WG]` arrays, and the phases run in
//! order: a region is `for lid in 0..WG { .. }`, uniform phases read work-item 0's values,
//! collectives evaluate their arguments per work-item into temporaries and combine them in
//! the tree order [`crate::ir`] fixes. Arithmetic follows the IR semantics exactly
//! (wrapping integer ops, saturating casts, NaN-ignoring `max`/`min`, lazy `&&`/`||`/select).
//!
//! Names in the generated code: locals are `v<id>_<name>`, parameters `p<id>_<name>`, shared
//! arrays `sh<id>_<name>`; internal names (`lid`, `gid`, `WG`, ...) never take those forms,
//! so nothing the kernel author writes can collide with them.

use proc_macro2::{Ident, Literal, Span, TokenStream};
use quote::{format_ident, quote};

/// Whether generated code names `bf16` or `f16` anywhere, nested groups included.
fn names_half(tokens: &TokenStream) -> bool {
    tokens.clone().into_iter().any(|t| match t {
        proc_macro2::TokenTree::Ident(i) => i == "bf16" || i == "f16",
        proc_macro2::TokenTree::Group(g) => names_half(&g.stream()),
        _ => false,
    })
}

use crate::ir::{
    BinOp, Builtin, CollectiveOp, DotScale, Expr, ExprKind, Kernel, MathFn, Param, Stmt,
    TileBinary, TileId, TileMem, TileOp, TileWindow, Ty, UnOp, VarId,
};
use crate::wil::{Phase, VarStorage, WilKernel};

/// The generated entry as tokens: `pub fn <fn_ident>(bufs: &[RawBuf], scalars: &[u64],
/// num_groups: [u32; 3], group_begin: u32, group_end: u32)`, i.e. a [`crate::rt::CpuEntry`].
///
/// The tokens refer to `::lse_dsl`, so the crate they are expanded in must depend on
/// `lse-dsl`. They compile warning-free (the lints that structured codegen trips, such as
/// unused `mut`, are allowed on the function).
pub fn cpu_entry_tokens(w: &WilKernel, fn_ident: &Ident) -> TokenStream {
    Gen { w, k: w.kernel }.entry(fn_ident)
}

/// The generated entry as pretty-printed Rust source (what `lse kernels show --emit rust`
/// prints). `fn_name` becomes the function's name.
pub fn cpu_entry_source(w: &WilKernel, fn_name: &str) -> String {
    let ident = Ident::new(&sanitize(fn_name), Span::call_site());
    let tokens = cpu_entry_tokens(w, &ident);
    match syn::parse2::<syn::File>(tokens.clone()) {
        Ok(file) => prettyplease::unparse(&file),
        // Cannot happen for tokens this module builds; keep the raw text rather than panic.
        Err(_) => tokens.to_string(),
    }
}

/// Makes a kernel-chosen name usable inside a generated identifier (drops `r#`).
fn sanitize(name: &str) -> String {
    let s: String = name
        .trim_start_matches("r#")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with(|c: char| c.is_ascii_digit()) {
        format!("_{s}")
    } else {
        s
    }
}

/// Where an expression is evaluated: inside a region loop (`lid` in scope) or as work-item 0
/// (uniform phase conditions and bounds).
#[derive(Clone, Copy, PartialEq, Eq)]
enum At {
    Lid,
    Item0,
}

struct Gen<'a> {
    w: &'a WilKernel<'a>,
    k: &'a Kernel,
}

fn ty_tokens(ty: Ty) -> TokenStream {
    match ty {
        Ty::F32 => quote!(f32),
        Ty::I32 => quote!(i32),
        Ty::U32 => quote!(u32),
        Ty::Bool => quote!(bool),
        Ty::Bf16 => quote!(bf16),
        Ty::F16 => quote!(f16),
        Ty::I16 => quote!(i16),
        Ty::I8 => quote!(i8),
        Ty::U8 => quote!(u8),
    }
}

fn zero(ty: Ty) -> TokenStream {
    match ty {
        Ty::F32 => quote!(0.0f32),
        Ty::I32 => quote!(0i32),
        Ty::U32 => quote!(0u32),
        Ty::Bool => quote!(false),
        Ty::Bf16 => quote!(bf16::ZERO),
        Ty::F16 => quote!(f16::ZERO),
        Ty::I16 => quote!(0i16),
        Ty::I8 => quote!(0i8),
        Ty::U8 => quote!(0u8),
    }
}

fn f32_lit(v: f32) -> TokenStream {
    if v.is_nan() {
        let bits = Literal::u32_suffixed(v.to_bits());
        quote!(f32::from_bits(#bits))
    } else if v == f32::INFINITY {
        quote!(f32::INFINITY)
    } else if v == f32::NEG_INFINITY {
        quote!(f32::NEG_INFINITY)
    } else if v.is_sign_negative() {
        let lit = Literal::f32_suffixed(-v);
        quote!(-#lit)
    } else {
        let lit = Literal::f32_suffixed(v);
        quote!(#lit)
    }
}

fn const_tokens(bits: u32, ty: Ty) -> TokenStream {
    match ty {
        Ty::F32 => f32_lit(f32::from_bits(bits)),
        Ty::U32 => {
            let lit = Literal::u32_suffixed(bits);
            quote!(#lit)
        }
        Ty::I32 => {
            let v = bits as i32;
            if v == i32::MIN {
                quote!(i32::MIN)
            } else if v < 0 {
                let lit = Literal::i32_suffixed(-v);
                quote!(-#lit)
            } else {
                let lit = Literal::i32_suffixed(v);
                quote!(#lit)
            }
        }
        Ty::Bool => {
            if bits != 0 {
                quote!(true)
            } else {
                quote!(false)
            }
        }
        Ty::Bf16 => {
            let lit = Literal::u16_suffixed(bits as u16);
            quote!(bf16::from_bits(#lit))
        }
        Ty::F16 => {
            let lit = Literal::u16_suffixed(bits as u16);
            quote!(f16::from_bits(#lit))
        }
        Ty::I16 => {
            let lit = Literal::i16_unsuffixed(bits as i16);
            quote!((#lit as i16))
        }
        Ty::I8 => {
            let lit = Literal::i8_unsuffixed(bits as i8);
            quote!((#lit as i8))
        }
        Ty::U8 => {
            let lit = Literal::u8_suffixed(bits as u8);
            quote!(#lit)
        }
    }
}

/// The element type and zero of a tile's `Vec` in the generated Rust: `i32` for integer
/// tiles, `f32` for float tiles.
fn tile_storage(elem: Ty) -> (TokenStream, TokenStream) {
    match elem {
        Ty::I16 | Ty::I8 | Ty::U8 | Ty::I32 => (quote!(i32), quote!(0i32)),
        _ => (quote!(f32), quote!(0.0f32)),
    }
}

/// Name of the typed load helper the generated function defines for `ty`.
fn load_fn(ty: Ty) -> Ident {
    format_ident!("load_{}", ty.rust_name())
}

/// Whether the tokens [`Gen::expr`] emits for `e` need parentheses to be used as an operand
/// or method receiver.
fn needs_parens(e: &Expr) -> bool {
    match &e.kind {
        ExprKind::Const(bits) => match e.ty {
            Ty::F32 => {
                let v = f32::from_bits(*bits);
                !v.is_nan() && v.is_sign_negative() && v.is_finite()
            }
            Ty::I32 => (*bits as i32) < 0 && *bits as i32 != i32::MIN,
            _ => false,
        },
        ExprKind::Var(_) | ExprKind::Param(_) | ExprKind::Load { .. } => false,
        ExprKind::SharedLoad { .. } => false,
        ExprKind::Builtin(b) => *b == Builtin::LocalId,
        ExprKind::Unary(..) | ExprKind::Cast(_) | ExprKind::Select(..) => true,
        ExprKind::Binary(op, ..) => {
            !(e.ty.is_int()
                && matches!(
                    op,
                    BinOp::Add | BinOp::Sub | BinOp::Mul | BinOp::Shl | BinOp::Shr
                ))
        }
        ExprKind::Math(f, _) => *f == MathFn::Rsqrt,
    }
}

/// Whether evaluating `e` as work-item 0 reads anything per-work-item (so it matters which
/// work-item is chosen); used only to keep the generated code tidy.
fn uses_vars_or_lid(e: &Expr) -> bool {
    let mut vars = Vec::new();
    crate::wil::expr_vars(e, &mut vars);
    !vars.is_empty() || mentions_lid(e)
}

fn mentions_lid(e: &Expr) -> bool {
    e.any(&|x| matches!(x.kind, ExprKind::Builtin(Builtin::LocalId)))
}

/// `<prefix><id>_<name>`: unique by id, readable by name.
fn named(prefix: &str, id: u32, name: &str) -> Ident {
    format_ident!("{}{}_{}", prefix, id, sanitize(name))
}

impl Gen<'_> {
    fn var_ident(&self, v: VarId) -> Ident {
        let name = self.k.locals.get(v as usize).map(|l| l.name.as_str());
        named("v", v, name.unwrap_or("var"))
    }

    fn param_ident(&self, p: u32) -> Ident {
        let name = self.k.params.get(p as usize).map(|p| p.name());
        named("p", p, name.unwrap_or("param"))
    }

    fn shared_ident(&self, s: u32) -> Ident {
        let name = self.k.shared.get(s as usize).map(|a| a.name.as_str());
        named("sh", s, name.unwrap_or("shared"))
    }

    fn tile_ident(&self, t: TileId) -> Ident {
        let name = self.k.tiles.get(t as usize).map(|d| d.name.as_str());
        named("t", t, name.unwrap_or("tile"))
    }

    fn storage(&self, v: VarId) -> VarStorage {
        self.w
            .storage
            .get(v as usize)
            .copied()
            .unwrap_or(VarStorage::Private)
    }

    /// The whole entry function.
    fn entry(&self, fn_ident: &Ident) -> TokenStream {
        let k = self.k;
        let id = k.id();
        let wg = Literal::usize_unsuffixed(k.workgroup_size as usize);
        let n_bufs = k
            .params
            .iter()
            .filter(|p| matches!(p, Param::Buffer { .. }))
            .count();
        let n_scalars = k.params.len() - n_bufs;
        let (n_bufs_lit, n_scalars_lit) = (
            Literal::usize_unsuffixed(n_bufs),
            Literal::usize_unsuffixed(n_scalars),
        );
        let buf_msg = format!("LOOM kernel `{id}`: expected {n_bufs} buffer argument(s), got {{}}");
        let scalar_msg =
            format!("LOOM kernel `{id}`: expected {n_scalars} scalar argument(s), got {{}}");

        let mut decode = Vec::new();
        let (mut bi_n, mut si_n) = (0usize, 0usize);
        for (pid, p) in k.params.iter().enumerate() {
            let ident = self.param_ident(pid as u32);
            match p {
                Param::Buffer { .. } => {
                    let bi = Literal::usize_unsuffixed(bi_n);
                    bi_n += 1;
                    decode.push(quote!(let #ident: &::lse_dsl::rt::RawBuf = &bufs[#bi];));
                }
                Param::Scalar { ty, .. } => {
                    let si = Literal::usize_unsuffixed(si_n);
                    si_n += 1;
                    let value = match ty {
                        Ty::F32 => quote!(f32::from_bits(scalars[#si] as u32)),
                        Ty::I32 => quote!(scalars[#si] as u32 as i32),
                        Ty::Bf16 => quote!(bf16::from_bits(scalars[#si] as u16)),
                        Ty::F16 => quote!(f16::from_bits(scalars[#si] as u16)),
                        Ty::I16 => quote!(scalars[#si] as u16 as i16),
                        Ty::I8 => quote!(scalars[#si] as u8 as i8),
                        Ty::U8 => quote!(scalars[#si] as u8),
                        Ty::Bool => quote!(scalars[#si] != 0),
                        Ty::U32 => quote!(scalars[#si] as u32),
                    };
                    let t = ty_tokens(*ty);
                    decode.push(quote!(let #ident: #t = #value;));
                }
            }
        }

        let mut shared_alloc = Vec::new();
        let mut shared_zero = Vec::new();
        for (sid, a) in k.shared.iter().enumerate() {
            let ident = self.shared_ident(sid as u32);
            let t = ty_tokens(a.elem);
            let z = zero(a.elem);
            let len = Literal::usize_unsuffixed(a.len as usize);
            shared_alloc.push(quote!(let mut #ident: ::std::vec::Vec<#t> = ::std::vec![#z; #len];));
            shared_zero.push(quote!(#ident.fill(#z);));
        }
        for (tid, t) in k.tiles.iter().enumerate() {
            let ident = self.tile_ident(tid as TileId);
            let len = Literal::usize_unsuffixed(t.len() as usize);
            let (ty, z) = tile_storage(t.elem);
            shared_alloc
                .push(quote!(let mut #ident: ::std::vec::Vec<#ty> = ::std::vec![#z; #len];));
            shared_zero.push(quote!(#ident.fill(#z);));
        }

        let mut per_item = Vec::new();
        for (v, local) in k.locals.iter().enumerate() {
            if self.storage(v as VarId) == VarStorage::PerItem {
                let ident = self.var_ident(v as VarId);
                let t = ty_tokens(local.ty);
                let z = zero(local.ty);
                per_item.push(quote!(let mut #ident: [#t; WG] = [#z; WG];));
            }
        }

        // One typed load helper per buffer element type: `load_f32(buf, i)` reads better
        // than a turbofish once the pretty printer wraps long lines.
        let mut elems: Vec<Ty> = Vec::new();
        for p in &k.params {
            if let Param::Buffer { elem, .. } = p {
                if !elems.contains(elem) {
                    elems.push(*elem);
                }
            }
        }
        let loaders: Vec<TokenStream> = elems
            .iter()
            .map(|&ty| {
                let f = load_fn(ty);
                let t = ty_tokens(ty);
                quote! {
                    #[inline(always)]
                    fn #f(buf: &::lse_dsl::rt::RawBuf, i: u32) -> #t {
                        load(buf, i)
                    }
                }
            })
            .collect();
        let body = self.phases(&self.w.phases);
        // The 16-bit types are imported where the generated code names them: in parameters,
        // locals and tiles, or only in a conversion inside an expression
        // (`f16_to_f32(f32_to_f16(x))`).
        let half_use = if loaders.iter().chain([&body]).any(names_half) {
            quote!(
                use ::lse_dsl::__private::half::{bf16, f16};
            )
        } else {
            quote!()
        };
        let doc = format!(
            " CPU reference entry of LOOM kernel `{id}` (workgroup {}), generated by \
             `lse_dsl::rustgen`.",
            k.workgroup_size
        );

        quote! {
            #[doc = #doc]
            #[allow(
                unused_mut,
                unused_variables,
                unused_assignments,
                unused_parens,
                unused_imports,
                unused_braces,
                unused_comparisons,
                unreachable_code,
                while_true,
                non_snake_case,
                clippy::all
            )]
            pub fn #fn_ident(
                bufs: &[::lse_dsl::rt::RawBuf],
                scalars: &[u64],
                num_groups: [u32; 3],
                group_begin: u32,
                group_end: u32,
            ) {
                use ::lse_dsl::rt::access::{load, store};
                #half_use
                #(#loaders)*
                const WG: usize = #wg;
                assert!(bufs.len() == #n_bufs_lit, #buf_msg, bufs.len());
                assert!(scalars.len() == #n_scalars_lit, #scalar_msg, scalars.len());
                #(#decode)*
                #(#shared_alloc)*
                let groups_x = num_groups[0].max(1) as u64;
                let groups_y = num_groups[1].max(1) as u64;
                for group in group_begin..group_end {
                    let g = group as u64;
                    let gid: [u32; 3] = [
                        (g % groups_x) as u32,
                        (g / groups_x % groups_y) as u32,
                        (g / (groups_x * groups_y)) as u32,
                    ];
                    #(#shared_zero)*
                    #(#per_item)*
                    #body
                }
            }
        }
    }

    fn phases(&self, phases: &[Phase]) -> TokenStream {
        let parts = phases.iter().map(|p| self.phase(p));
        quote!(#(#parts)*)
    }

    fn phase(&self, p: &Phase) -> TokenStream {
        match p {
            Phase::Region(block) => {
                let body = self.block(block);
                quote! {
                    for lid in 0..WG {
                        #body
                    }
                }
            }
            Phase::If {
                cond,
                then_phases,
                else_phases,
            } => {
                let c = self.uniform_expr(cond);
                let t = self.phases(then_phases);
                if else_phases.is_empty() {
                    quote!(if #c { #t })
                } else {
                    let e = self.phases(else_phases);
                    quote!(if #c { #t } else { #e })
                }
            }
            Phase::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                let range = self.range(start, end, step, At::Item0);
                let body = self.phases(body);
                match self.storage(*var) {
                    VarStorage::PerItem => {
                        // Not produced by `wil::transform`; kept correct for any storage map.
                        let v = self.var_ident(*var);
                        quote!(for it in #range { for lid in 0..WG { #v[lid] = it; } #body })
                    }
                    _ => {
                        let v = self.var_ident(*var);
                        quote!(for #v in #range { #body })
                    }
                }
            }
            Phase::While { cond, body } => {
                let c = self.uniform_expr(cond);
                let body = self.phases(body);
                quote!(while #c { #body })
            }
            Phase::Collective { op, dst, args } => self.collective(*op, dst, args),
            Phase::Tile(op) => self.tile_op(op),
        }
    }

    /// A tile statement through `lse_dsl::rt::tile` (the reference semantics).
    fn tile_op(&self, op: &TileOp) -> TokenStream {
        let decl = |t: TileId| &self.k.tiles[t as usize];
        match op {
            TileOp::Zero { dst } => {
                let t = self.tile_ident(*dst);
                let (_, z) = tile_storage(decl(*dst).elem);
                quote!(#t.fill(#z);)
            }
            TileOp::Load { dst, from } => {
                let t = self.tile_ident(*dst);
                let cols = decl(*dst).cols;
                let w = self.window(from);
                let read = self.window_reader(from.mem);
                let round = match decl(*dst).elem {
                    Ty::Bf16 => quote!(|x| bf16::from_f32(x).to_f32()),
                    Ty::F16 => quote!(|x| f16::from_f32(x).to_f32()),
                    Ty::I16 => quote!(|x: i32| x as i16 as i32),
                    Ty::I8 => quote!(|x: i32| x as i8 as i32),
                    Ty::U8 => quote!(|x: i32| x as u8 as i32),
                    _ => quote!(|x| x),
                };
                if from.quads || from.packed {
                    quote!(::lse_dsl::rt::tile::load_bytes(&mut #t, #cols, #w, #read, #round);)
                } else {
                    quote!(::lse_dsl::rt::tile::load(&mut #t, #cols, #w, #read, #round);)
                }
            }
            TileOp::Store { src, to } => {
                let t = self.tile_ident(*src);
                let cols = decl(*src).cols;
                let w = self.window(to);
                let write = match to.mem {
                    TileMem::Buffer(buf) => {
                        let p = self.param_ident(buf);
                        match self.buffer_elem(buf, Ty::F32) {
                            Ty::Bf16 => quote!(|i, x| store(#p, i, bf16::from_f32(x))),
                            Ty::F16 => quote!(|i, x| store(#p, i, f16::from_f32(x))),
                            elem => {
                                let t = ty_tokens(elem);
                                quote!(|i, x: #t| store(#p, i, x))
                            }
                        }
                    }
                    TileMem::Shared(array) => {
                        let a = self.shared_ident(array);
                        let t = ty_tokens(self.k.shared[array as usize].elem);
                        quote!(|i, x: #t| #a[i as usize] = x)
                    }
                };
                if to.packed {
                    let read = self.window_reader(to.mem);
                    quote!(::lse_dsl::rt::tile::store_bytes(&#t, #cols, #w, #read, #write);)
                } else {
                    quote!(::lse_dsl::rt::tile::store(&#t, #cols, #w, #write);)
                }
            }
            TileOp::Dot { acc, a, b, scale } => {
                let (c, x, y) = (
                    self.tile_ident(*acc),
                    self.tile_ident(*a),
                    self.tile_ident(*b),
                );
                let (n, k) = (decl(*acc).cols, decl(*a).cols);
                if let Some(DotScale::Dequant { offset, rows, cols }) = scale {
                    let (o, r, s) = (
                        self.tile_ident(*offset),
                        self.tile_ident(*rows),
                        self.tile_ident(*cols),
                    );
                    quote!(::lse_dsl::rt::tile::dot_dequant(&mut #c, &#x, &#y, #n, #k, &#o, &#r, &#s);)
                } else if decl(*acc).elem == Ty::I32 {
                    let some = |t: Option<TileId>| match t {
                        Some(t) => {
                            let t = self.tile_ident(t);
                            quote!(Some(&#t))
                        }
                        None => quote!(None),
                    };
                    let (s, o) = match scale {
                        Some(DotScale::Columns { scale, offset }) => (Some(*scale), *offset),
                        _ => (None, None),
                    };
                    let (s, o) = (some(s), some(o));
                    quote!(::lse_dsl::rt::tile::dot_int(&mut #c, &#x, &#y, #n, #k, #s, #o);)
                } else {
                    let pairs = self.k.bf16_pair_dot(*a, *b);
                    quote!(::lse_dsl::rt::tile::dot(&mut #c, &#x, &#y, #n, #k, #pairs);)
                }
            }
            TileOp::Dequant {
                acc,
                src,
                rows,
                cols,
            } => {
                let (c, s, r, q) = (
                    self.tile_ident(*acc),
                    self.tile_ident(*src),
                    self.tile_ident(*rows),
                    self.tile_ident(*cols),
                );
                let n = decl(*acc).cols;
                quote!(::lse_dsl::rt::tile::dequant(&mut #c, &#s, #n, &#r, &#q);)
            }
            TileOp::Binary { op, dst, src } => {
                let (d, s) = (self.tile_ident(*dst), self.tile_ident(*src));
                let cols = decl(*dst).cols;
                let (sr, sc) = (decl(*src).rows, decl(*src).cols);
                let f = tile_binary_fn(*op);
                quote!(::lse_dsl::rt::tile::binary(&mut #d, #cols, &#s, #sr, #sc, #f);)
            }
            TileOp::RowReduce { op, dst, src } => {
                let (d, s) = (self.tile_ident(*dst), self.tile_ident(*src));
                let cols = decl(*src).cols;
                let f = tile_binary_fn(*op);
                quote!(::lse_dsl::rt::tile::row_reduce(&mut #d, &#s, #cols, #f);)
            }
            TileOp::Exp { dst } => {
                let t = self.tile_ident(*dst);
                quote!(::lse_dsl::rt::tile::map(&mut #t, ::lse_dsl::math::exp);)
            }
            TileOp::Scale { dst, by } => {
                let t = self.tile_ident(*dst);
                let by = self.uniform_expr(by);
                quote!({
                    let by: f32 = #by;
                    ::lse_dsl::rt::tile::map(&mut #t, |x| x * by);
                })
            }
            TileOp::Copy { dst, src } => {
                let (d, s) = (self.tile_ident(*dst), self.tile_ident(*src));
                let round = match (decl(*dst).elem, decl(*src).elem) {
                    (_, Ty::I32) => quote!(|x: i32| x as f32),
                    (Ty::Bf16, _) => quote!(|x: f32| bf16::from_f32(x).to_f32()),
                    (Ty::F16, _) => quote!(|x: f32| f16::from_f32(x).to_f32()),
                    _ => quote!(|x: f32| x),
                };
                quote!(::lse_dsl::rt::tile::copy(&mut #d, &#s, #round);)
            }
            // A hint for the cache: the reference evaluates its range, as every statement
            // evaluates its arguments, and has no use for it.
            TileOp::Prefetch { offset, len, .. } => {
                let (offset, len) = (self.uniform_expr(offset), self.uniform_expr(len));
                quote!(let _: (u32, u32) = (#offset, #len);)
            }
        }
    }

    /// A closure reading element `i` of a window's memory: a buffer's element (16-bit floats
    /// widened to f32), or a shared array's.
    fn window_reader(&self, mem: TileMem) -> TokenStream {
        match mem {
            TileMem::Buffer(buf) => {
                let p = self.param_ident(buf);
                let elem = self.buffer_elem(buf, Ty::F32);
                let f = load_fn(elem);
                if matches!(elem, Ty::F32 | Ty::I32) {
                    quote!(|i| #f(#p, i))
                } else {
                    quote!(|i| #f(#p, i).to_f32())
                }
            }
            // An f32 or i32 shared array (the front end refuses others).
            TileMem::Shared(array) => {
                let a = self.shared_ident(array);
                quote!(|i| #a[i as usize])
            }
        }
    }

    /// A tile window as an `lse_dsl::rt::tile::Window` value (fields evaluated as item 0).
    fn window(&self, w: &TileWindow) -> TokenStream {
        let [offset, stride, rows, cols] = w.exprs().map(|e| self.uniform_expr(e));
        let (transposed, quads, packed, pairs) = (w.transposed, w.quads, w.packed, w.pairs);
        quote!(::lse_dsl::rt::tile::Window {
            offset: #offset,
            stride: #stride,
            rows: #rows,
            cols: #cols,
            transposed: #transposed,
            quads: #quads,
            packed: #packed,
            pairs: #pairs,
        })
    }

    /// An expression evaluated once per workgroup, as work-item 0.
    fn uniform_expr(&self, e: &Expr) -> TokenStream {
        if uses_vars_or_lid(e) {
            self.expr(e, At::Item0)
        } else {
            self.expr(e, At::Lid)
        }
    }

    /// `start..end` or `(start..end).step_by(step as usize)`.
    fn range(&self, start: &Expr, end: &Expr, step: &Expr, at: At) -> TokenStream {
        let s = self.atom(start, at);
        let e = self.atom(end, at);
        let unit_step = matches!(step.kind, ExprKind::Const(1));
        if unit_step {
            quote!(#s..#e)
        } else {
            let st = self.atom(step, at);
            quote!((#s..#e).step_by(#st as usize))
        }
    }

    fn collective(&self, op: CollectiveOp, dst: &[VarId], args: &[Expr]) -> TokenStream {
        let arg = |i: usize| {
            args.get(i)
                .map(|a| self.expr(a, At::Lid))
                .unwrap_or_default()
        };
        let arg_ty = |i: usize| args.get(i).map(|a| a.ty).unwrap_or(Ty::U32);
        let set = |i: usize, value: TokenStream| match dst.get(i) {
            Some(&v) => self.assign(v, value, At::Lid),
            None => quote!(),
        };
        // The tree of `ir::tree_steps`, within each group of `width` work-items.
        let width = op.width(self.k) as usize;
        let steps: Vec<usize> = crate::ir::tree_steps(width as u32)
            .map(|s| s as usize)
            .collect();
        let n_steps = steps.len();
        let steps = quote!({ let steps: [usize; #n_steps] = [#(#steps),*]; steps });
        match op {
            CollectiveOp::ReduceSum
            | CollectiveOp::ReduceMax
            | CollectiveOp::ReduceMin
            | CollectiveOp::SubgroupSum
            | CollectiveOp::SubgroupMax
            | CollectiveOp::SubgroupMin => {
                let ty = arg_ty(0);
                let t = ty_tokens(ty);
                let z = zero(ty);
                let a0 = arg(0);
                let combine = match (op.reduction(), ty.is_int()) {
                    (CollectiveOp::ReduceSum, true) => quote!(a.wrapping_add(b)),
                    (CollectiveOp::ReduceSum, false) => quote!(a + b),
                    (CollectiveOp::ReduceMax, _) => quote!(a.max(b)),
                    _ => quote!(a.min(b)),
                };
                let out = set(0, quote!(red[lid / #width * #width]));
                quote! {
                    {
                        let mut red: [#t; WG] = [#z; WG];
                        for lid in 0..WG {
                            red[lid] = #a0;
                        }
                        for base in (0..WG).step_by(#width) {
                            for s in #steps {
                                for i in base..base + s {
                                    let (a, b) = (red[i], red[i + s]);
                                    red[i] = #combine;
                                }
                            }
                        }
                        for lid in 0..WG {
                            #out
                        }
                    }
                }
            }
            CollectiveOp::Argmax => {
                let (a0, a1) = (arg(0), arg(1));
                let out0 = set(0, quote!(vals[0]));
                let out1 = set(1, quote!(idxs[0]));
                quote! {
                    {
                        let mut vals: [f32; WG] = [0.0f32; WG];
                        let mut idxs: [u32; WG] = [0u32; WG];
                        for lid in 0..WG {
                            vals[lid] = #a0;
                            idxs[lid] = #a1;
                        }
                        for s in #steps {
                            for i in 0..s {
                                let (av, ai, bv, bi) = (vals[i], idxs[i], vals[i + s], idxs[i + s]);
                                // Larger value wins, ties go to the lower index, NaN never
                                // beats a number.
                                let b_wins = if bv.is_nan() {
                                    av.is_nan() && bi < ai
                                } else {
                                    av.is_nan() || bv > av || (bv == av && bi < ai)
                                };
                                if b_wins {
                                    vals[i] = bv;
                                    idxs[i] = bi;
                                }
                            }
                        }
                        for lid in 0..WG {
                            #out0
                            #out1
                        }
                    }
                }
            }
            CollectiveOp::Broadcast | CollectiveOp::SubgroupShuffle => {
                let ty = arg_ty(0);
                let t = ty_tokens(ty);
                let z = zero(ty);
                let (a0, a1) = (arg(0), arg(1));
                // `broadcast` names a work-item of the workgroup, `subgroup_shuffle` a lane of
                // the caller's subgroup (modulo its size).
                let from = if op.is_subgroup() {
                    quote!(lid / #width * #width + lanes[lid] as usize % #width)
                } else {
                    quote!(lanes[lid] as usize)
                };
                let out = set(0, quote!(src[#from]));
                quote! {
                    {
                        let mut src: [#t; WG] = [#z; WG];
                        let mut lanes: [u32; WG] = [0u32; WG];
                        for lid in 0..WG {
                            src[lid] = #a0;
                            lanes[lid] = #a1;
                        }
                        for lid in 0..WG {
                            #out
                        }
                    }
                }
            }
        }
    }

    /// `v = value;` for the variable's storage, in a region (`lid` in scope).
    fn assign(&self, v: VarId, value: TokenStream, at: At) -> TokenStream {
        let ident = self.var_ident(v);
        match self.storage(v) {
            VarStorage::PerItem => {
                let slot = if at == At::Lid {
                    quote!(lid)
                } else {
                    quote!(0)
                };
                quote!(#ident[#slot] = #value;)
            }
            _ => quote!(#ident = #value;),
        }
    }

    fn block(&self, block: &[Stmt]) -> TokenStream {
        let stmts = block.iter().map(|s| self.stmt(s));
        quote!(#(#stmts)*)
    }

    /// One statement inside a region.
    fn stmt(&self, s: &Stmt) -> TokenStream {
        match s {
            Stmt::Let { var, value } => {
                let e = self.expr(value, At::Lid);
                match self.storage(*var) {
                    VarStorage::PerItem => self.assign(*var, e, At::Lid),
                    _ => {
                        let ident = self.var_ident(*var);
                        let ty = self
                            .k
                            .locals
                            .get(*var as usize)
                            .map(|l| l.ty)
                            .unwrap_or(value.ty);
                        let t = ty_tokens(ty);
                        quote!(let mut #ident: #t = #e;)
                    }
                }
            }
            Stmt::Assign { var, value } => self.assign(*var, self.expr(value, At::Lid), At::Lid),
            Stmt::Store { buf, index, value } => {
                let b = self.param_ident(*buf);
                let i = self.expr(index, At::Lid);
                let v = self.expr(value, At::Lid);
                // The value's type (every literal is suffixed) fixes the element type.
                quote!(store(#b, #i, #v);)
            }
            Stmt::SharedStore {
                array,
                index,
                value,
            } => {
                let a = self.shared_ident(*array);
                let i = self.atom(index, At::Lid);
                let v = self.expr(value, At::Lid);
                quote!(#a[#i as usize] = #v;)
            }
            Stmt::If {
                cond,
                then_body,
                else_body,
            } => {
                let c = self.expr(cond, At::Lid);
                let t = self.block(then_body);
                if else_body.is_empty() {
                    quote!(if #c { #t })
                } else {
                    let e = self.block(else_body);
                    quote!(if #c { #t } else { #e })
                }
            }
            Stmt::For {
                var,
                start,
                end,
                step,
                body,
            } => {
                let range = self.range(start, end, step, At::Lid);
                let b = self.block(body);
                let v = self.var_ident(*var);
                match self.storage(*var) {
                    // Not produced by `wil::transform` for a loop inside a region.
                    VarStorage::PerItem => quote!(for it in #range { #v[lid] = it; #b }),
                    _ => quote!(for #v in #range { #b }),
                }
            }
            Stmt::While { cond, body } => {
                let c = self.expr(cond, At::Lid);
                let b = self.block(body);
                quote!(while #c { #b })
            }
            Stmt::Break => quote!(break;),
            Stmt::Continue => quote!(continue;),
            // `wil::transform` never leaves these inside a region; a barrier is a no-op for
            // a single work-item anyway.
            Stmt::Barrier => quote!(),
            Stmt::Collective { .. } | Stmt::Tile(_) => {
                quote!(::std::unreachable!("LOOM: collective or tile statement inside a work-item region");)
            }
        }
    }

    fn buffer_elem(&self, buf: u32, fallback: Ty) -> Ty {
        match self.k.params.get(buf as usize) {
            Some(Param::Buffer { elem, .. }) => *elem,
            _ => fallback,
        }
    }

    /// `e`, parenthesised when needed as an operand.
    fn atom(&self, e: &Expr, at: At) -> TokenStream {
        let t = self.expr(e, at);
        if needs_parens(e) {
            quote!((#t))
        } else {
            t
        }
    }

    fn expr(&self, e: &Expr, at: At) -> TokenStream {
        match &e.kind {
            ExprKind::Const(bits) => const_tokens(*bits, e.ty),
            ExprKind::Var(v) => {
                let ident = self.var_ident(*v);
                match (self.storage(*v), at) {
                    (VarStorage::PerItem, At::Lid) => quote!(#ident[lid]),
                    (VarStorage::PerItem, At::Item0) => quote!(#ident[0]),
                    _ => quote!(#ident),
                }
            }
            ExprKind::Param(p) => {
                let ident = self.param_ident(*p);
                quote!(#ident)
            }
            ExprKind::Load { buf, index } => {
                let b = self.param_ident(*buf);
                let f = load_fn(self.buffer_elem(*buf, e.ty));
                let i = self.expr(index, at);
                quote!(#f(#b, #i))
            }
            ExprKind::SharedLoad { array, index } => {
                let a = self.shared_ident(*array);
                let i = self.atom(index, at);
                quote!(#a[#i as usize])
            }
            ExprKind::Builtin(b) => match b {
                Builtin::LocalId => match at {
                    At::Lid => quote!(lid as u32),
                    At::Item0 => quote!(0u32),
                },
                Builtin::GroupId(d) => {
                    let d = Literal::usize_unsuffixed((*d).min(2) as usize);
                    quote!(gid[#d])
                }
                Builtin::NumGroups(d) => {
                    let d = Literal::usize_unsuffixed((*d).min(2) as usize);
                    quote!(num_groups[#d])
                }
                Builtin::GroupSize => {
                    let lit = Literal::u32_suffixed(self.k.workgroup_size);
                    quote!(#lit)
                }
            },
            ExprKind::Unary(op, a) => {
                let x = self.atom(a, at);
                match (op, a.ty) {
                    (UnOp::Neg, Ty::I32) => quote!(#x.wrapping_neg()),
                    (UnOp::Neg, _) => quote!(-#x),
                    (UnOp::Not, _) => quote!(!#x),
                }
            }
            ExprKind::Binary(op, a, b) => self.binary(*op, a, b, at),
            ExprKind::Cast(a) => {
                let x = self.atom(a, at);
                let t = ty_tokens(e.ty);
                quote!(#x as #t)
            }
            ExprKind::Math(f, args) => self.math(*f, args, at),
            ExprKind::Select(c, a, b) => {
                let c = self.expr(c, at);
                let a = self.expr(a, at);
                let b = self.expr(b, at);
                quote!(if #c { #a } else { #b })
            }
        }
    }

    fn binary(&self, op: BinOp, a: &Expr, b: &Expr, at: At) -> TokenStream {
        let x = self.atom(a, at);
        let y = self.atom(b, at);
        let int = a.ty.is_int();
        match op {
            BinOp::Add if int => quote!(#x.wrapping_add(#y)),
            BinOp::Sub if int => quote!(#x.wrapping_sub(#y)),
            BinOp::Mul if int => quote!(#x.wrapping_mul(#y)),
            BinOp::Shl | BinOp::Shr => {
                let amount = if b.ty == Ty::U32 {
                    y
                } else {
                    quote!((#y as u32))
                };
                if op == BinOp::Shl {
                    quote!(#x.wrapping_shl(#amount))
                } else {
                    quote!(#x.wrapping_shr(#amount))
                }
            }
            BinOp::Add => quote!(#x + #y),
            BinOp::Sub => quote!(#x - #y),
            BinOp::Mul => quote!(#x * #y),
            BinOp::Div => quote!(#x / #y),
            BinOp::Rem => quote!(#x % #y),
            BinOp::BitAnd => quote!(#x & #y),
            BinOp::BitOr => quote!(#x | #y),
            BinOp::BitXor => quote!(#x ^ #y),
            BinOp::And => quote!(#x && #y),
            BinOp::Or => quote!(#x || #y),
            BinOp::Lt => quote!(#x < #y),
            BinOp::Le => quote!(#x <= #y),
            BinOp::Gt => quote!(#x > #y),
            BinOp::Ge => quote!(#x >= #y),
            BinOp::Eq => quote!(#x == #y),
            BinOp::Ne => quote!(#x != #y),
        }
    }

    fn math(&self, f: MathFn, args: &[Expr], at: At) -> TokenStream {
        let arg = |i: usize| args.get(i).map(|a| self.atom(a, at)).unwrap_or_default();
        let first_ty = args.first().map(|a| a.ty).unwrap_or(Ty::F32);
        let (a, b, c) = (arg(0), arg(1), arg(2));
        match f {
            MathFn::Exp => quote!(::lse_dsl::math::exp(#a)),
            MathFn::Log => quote!(::lse_dsl::math::log(#a)),
            MathFn::Sigmoid => quote!(::lse_dsl::math::sigmoid(#a)),
            MathFn::Silu => quote!(::lse_dsl::math::silu(#a)),
            MathFn::Tanh => quote!(::lse_dsl::math::tanh(#a)),
            MathFn::Sqrt => quote!(#a.sqrt()),
            MathFn::Rsqrt => quote!(1.0f32 / #a.sqrt()),
            MathFn::Fma => quote!(#a.mul_add(#b, #c)),
            MathFn::Max => quote!(#a.max(#b)),
            MathFn::Min => quote!(#a.min(#b)),
            MathFn::Abs => match first_ty {
                Ty::I32 => quote!(#a.wrapping_abs()),
                Ty::U32 => quote!(#a),
                _ => quote!(#a.abs()),
            },
            MathFn::Bf16ToF32 | MathFn::F16ToF32 => quote!(#a.to_f32()),
            MathFn::F32ToBf16 => quote!(bf16::from_f32(#a)),
            MathFn::F32ToF16 => quote!(f16::from_f32(#a)),
            MathFn::F32FromBits => quote!(f32::from_bits(#a)),
            MathFn::F16FromBits => quote!(f16::from_bits(#a as u16)),
            MathFn::Bf16FromBits => quote!(bf16::from_bits(#a as u16)),
        }
    }
}

/// The f32 function of a tile statement's elementwise operation, as the generated Rust
/// applies it (`f32::max` ignores a NaN operand, like LLVM's `maxnum`).
fn tile_binary_fn(op: TileBinary) -> TokenStream {
    match op {
        TileBinary::Add => quote!(|a: f32, b: f32| a + b),
        TileBinary::Sub => quote!(|a: f32, b: f32| a - b),
        TileBinary::Mul => quote!(|a: f32, b: f32| a * b),
        TileBinary::Div => quote!(|a: f32, b: f32| a / b),
        TileBinary::Max => quote!(|a: f32, b: f32| a.max(b)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Local, SharedArray};
    use crate::wil::transform;

    fn e(kind: ExprKind, ty: Ty) -> Expr {
        Expr::new(kind, ty)
    }

    fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
        let ty = if op.is_comparison() || matches!(op, BinOp::And | BinOp::Or) {
            Ty::Bool
        } else {
            a.ty
        };
        e(ExprKind::Binary(op, Box::new(a), Box::new(b)), ty)
    }

    fn var(v: VarId, ty: Ty) -> Expr {
        e(ExprKind::Var(v), ty)
    }

    fn lid() -> Expr {
        e(ExprKind::Builtin(Builtin::LocalId), Ty::U32)
    }

    fn base_kernel(params: Vec<Param>, locals: Vec<(&str, Ty)>, body: Vec<Stmt>) -> Kernel {
        Kernel {
            fn_name: "k".into(),
            name: "test.k".into(),
            version: 3,
            workgroup_size: 8,
            subgroup: None,
            targets: vec![],
            params,
            shared: vec![],
            tiles: vec![],
            locals: locals
                .into_iter()
                .map(|(n, ty)| Local { name: n.into(), ty })
                .collect(),
            body,
        }
    }

    fn source(k: &Kernel) -> String {
        let w = transform(k);
        let src = cpu_entry_source(&w, "k");
        // The tokens must form a valid Rust file (the pretty printer only sees parsed ones).
        syn::parse_str::<syn::File>(&src).expect("generated code parses");
        src
    }

    /// out[i] = x[i] * factor when i < n, with i = group_id * group_size + local_id.
    fn scale_kernel() -> Kernel {
        let params = vec![
            Param::Buffer {
                name: "x".into(),
                elem: Ty::F32,
                access: crate::ir::Access::Read,
                len: None,
            },
            Param::Buffer {
                name: "out".into(),
                elem: Ty::F32,
                access: crate::ir::Access::ReadWrite,
                len: None,
            },
            Param::Scalar {
                name: "n".into(),
                ty: Ty::U32,
            },
            Param::Scalar {
                name: "factor".into(),
                ty: Ty::F32,
            },
        ];
        let i = bin(
            BinOp::Add,
            bin(
                BinOp::Mul,
                e(ExprKind::Builtin(Builtin::GroupId(0)), Ty::U32),
                e(ExprKind::Builtin(Builtin::GroupSize), Ty::U32),
            ),
            lid(),
        );
        let body = vec![
            Stmt::Let { var: 0, value: i },
            Stmt::If {
                cond: bin(BinOp::Lt, var(0, Ty::U32), e(ExprKind::Param(2), Ty::U32)),
                then_body: vec![Stmt::Store {
                    buf: 1,
                    index: var(0, Ty::U32),
                    value: bin(
                        BinOp::Mul,
                        e(
                            ExprKind::Load {
                                buf: 0,
                                index: Box::new(var(0, Ty::U32)),
                            },
                            Ty::F32,
                        ),
                        e(ExprKind::Param(3), Ty::F32),
                    ),
                }],
                else_body: vec![],
            },
        ];
        base_kernel(params, vec![("i", Ty::U32)], body)
    }

    #[test]
    fn elementwise_kernel_is_one_region_with_scalar_locals() {
        let src = source(&scale_kernel());
        assert!(src.contains("pub fn k("), "{src}");
        assert!(src.contains("const WG: usize = 8;"), "{src}");
        assert!(
            src.contains("let p3_factor: f32 = f32::from_bits(scalars[1] as u32);"),
            "{src}"
        );
        assert!(src.contains("let p2_n: u32 = scalars[0] as u32;"), "{src}");
        assert!(
            src.contains("let p1_out: &::lse_dsl::rt::RawBuf = &bufs[1];"),
            "{src}"
        );
        assert_eq!(src.matches("for lid in 0..WG").count(), 1, "{src}");
        assert!(
            src.contains("let mut v0_i: u32 = gid[0].wrapping_mul(8u32).wrapping_add(lid as u32)")
                || src.contains(
                    "let mut v0_i: u32 = gid[0].wrapping_mul(8u32).wrapping_add((lid as u32))"
                ),
            "{src}"
        );
        assert!(src.contains("store(p1_out, v0_i, load_f32(p0_x, v0_i) * p3_factor)"));
        assert!(
            !src.contains("half"),
            "no 16-bit types, no half import: {src}"
        );
    }

    #[test]
    fn collective_in_uniform_loop_uses_per_item_arrays_and_tree() {
        // let a = lid as i32; for it in 0..4 { let s = reduce_sum(a); a = a + s; }
        // let (m, i) = argmax(a as f32, lid);
        let a = || var(0, Ty::I32);
        let body = vec![
            Stmt::Let {
                var: 0,
                value: e(ExprKind::Cast(Box::new(lid())), Ty::I32),
            },
            Stmt::For {
                var: 1,
                start: Expr::const_u32(0),
                end: Expr::const_u32(4),
                step: Expr::const_u32(1),
                body: vec![
                    Stmt::Collective {
                        op: CollectiveOp::ReduceSum,
                        dst: vec![2],
                        args: vec![a()],
                    },
                    Stmt::Assign {
                        var: 0,
                        value: bin(BinOp::Add, a(), var(2, Ty::I32)),
                    },
                ],
            },
            Stmt::Collective {
                op: CollectiveOp::Argmax,
                dst: vec![3, 4],
                args: vec![e(ExprKind::Cast(Box::new(a())), Ty::F32), lid()],
            },
        ];
        let k = base_kernel(
            vec![],
            vec![
                ("a", Ty::I32),
                ("it", Ty::U32),
                ("s", Ty::I32),
                ("m", Ty::F32),
                ("i", Ty::U32),
            ],
            body,
        );
        let src = source(&k);
        assert!(
            src.contains("let mut v0_a: [i32; WG] = [0i32; WG];"),
            "{src}"
        );
        assert!(
            src.contains("let mut v2_s: [i32; WG] = [0i32; WG];"),
            "{src}"
        );
        assert!(src.contains("for v1_it in 0u32..4u32"), "{src}");
        assert!(
            src.contains("let (a, b) = (red[i], red[i + s]);")
                && src.contains("red[i] = a.wrapping_add(b);"),
            "{src}"
        );
        assert!(
            src.contains("v0_a[lid] = v0_a[lid].wrapping_add(v2_s[lid]);"),
            "{src}"
        );
        assert!(src.contains("v3_m[lid] = vals[0];"), "{src}");
        assert!(src.contains("v4_i[lid] = idxs[0];"), "{src}");
        assert!(src.contains("vals[lid] = v0_a[lid] as f32;"), "{src}");
    }

    #[test]
    fn uniform_phases_read_work_item_zero_and_shared_arrays_are_zeroed() {
        // let mut n = 4; while n > 0 { sh[lid] = n; barrier; n = n - 1; }
        let n = || var(0, Ty::U32);
        let body = vec![
            Stmt::Let {
                var: 0,
                value: Expr::const_u32(4),
            },
            Stmt::While {
                cond: bin(BinOp::Gt, n(), Expr::const_u32(0)),
                body: vec![
                    Stmt::SharedStore {
                        array: 0,
                        index: lid(),
                        value: n(),
                    },
                    Stmt::Barrier,
                    Stmt::Assign {
                        var: 0,
                        value: bin(BinOp::Sub, n(), Expr::const_u32(1)),
                    },
                ],
            },
        ];
        let mut k = base_kernel(vec![], vec![("n", Ty::U32)], body);
        k.shared.push(SharedArray {
            name: "tile".into(),
            elem: Ty::U32,
            len: 8,
        });
        let src = source(&k);
        assert!(src.contains("while v0_n[0] > 0u32"), "{src}");
        assert!(src.contains("let mut sh0_tile: ::std::vec::Vec<u32> = ::std::vec![0u32; 8];"));
        assert!(src.contains("sh0_tile.fill(0u32);"), "{src}");
        assert!(
            src.contains("sh0_tile[(lid as u32) as usize] = v0_n[lid];"),
            "{src}"
        );
        assert_eq!(src.matches("for lid in 0..WG").count(), 3, "{src}");
    }

    #[test]
    fn constants_keep_their_exact_values() {
        let cases: Vec<(Expr, &str)> = vec![
            (Expr::const_f32(-1.5), "-1.5f32"),
            (Expr::const_f32(f32::NEG_INFINITY), "f32::NEG_INFINITY"),
            (
                Expr::const_f32(f32::from_bits(0x7fc0_0001)),
                "f32::from_bits(2143289345u32)",
            ),
            (Expr::const_f32(0.1), "0.1f32"),
            (Expr::const_i32(i32::MIN), "i32::MIN"),
            (Expr::const_i32(-7), "-7i32"),
            (Expr::const_u32(u32::MAX), "4294967295u32"),
            (Expr::const_bool(true), "true"),
        ];
        for (c, want) in cases {
            let ExprKind::Const(bits) = c.kind else {
                unreachable!()
            };
            let got = const_tokens(bits, c.ty).to_string().replace(' ', "");
            assert_eq!(got, want);
            syn::parse_str::<syn::Expr>(&got).expect("constant parses");
        }
    }

    #[test]
    fn math_and_16_bit_types_lower_to_half_and_std() {
        // out[0] = f32_to_bf16(fma(rsqrt(x[0]), exp(x[0]), -x[0]).max(1.0))
        let x0 = || {
            e(
                ExprKind::Load {
                    buf: 0,
                    index: Box::new(Expr::const_u32(0)),
                },
                Ty::Bf16,
            )
        };
        let xf = || e(ExprKind::Math(MathFn::Bf16ToF32, vec![x0()]), Ty::F32);
        let inner = e(
            ExprKind::Math(
                MathFn::Fma,
                vec![
                    e(ExprKind::Math(MathFn::Rsqrt, vec![xf()]), Ty::F32),
                    e(ExprKind::Math(MathFn::Exp, vec![xf()]), Ty::F32),
                    e(ExprKind::Unary(UnOp::Neg, Box::new(xf())), Ty::F32),
                ],
            ),
            Ty::F32,
        );
        let maxed = e(
            ExprKind::Math(MathFn::Max, vec![inner, Expr::const_f32(1.0)]),
            Ty::F32,
        );
        let body = vec![Stmt::Store {
            buf: 0,
            index: Expr::const_u32(0),
            value: e(ExprKind::Math(MathFn::F32ToBf16, vec![maxed]), Ty::Bf16),
        }];
        let params = vec![Param::Buffer {
            name: "x".into(),
            elem: Ty::Bf16,
            access: crate::ir::Access::ReadWrite,
            len: None,
        }];
        let src = source(&base_kernel(params, vec![], body));
        // The pretty printer breaks long lines; compare without whitespace.
        let flat: String = src.chars().filter(|c| !c.is_whitespace()).collect();
        for want in [
            "use::lse_dsl::__private::half::{bf16,f16};",
            "store(p0_x,0u32,bf16::from_f32(",
            "(1.0f32/load_bf16(p0_x,0u32).to_f32().sqrt())",
            ".mul_add(::lse_dsl::math::exp(load_bf16(p0_x,0u32).to_f32()),(-load_bf16(p0_x,0u32).to_f32())",
            ".max(1f32)",
        ] {
            assert!(flat.contains(want), "missing `{want}` in\n{src}");
        }
    }

    #[test]
    fn names_are_sanitised() {
        assert_eq!(sanitize("r#type"), "type");
        assert_eq!(sanitize("x"), "x");
        assert_eq!(sanitize("9a"), "_9a");
    }
}
