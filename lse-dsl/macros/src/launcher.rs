//! The typed launcher of one kernel: the `Args` struct and its `lse_dsl::rt::Launch` impl.
//!
//! ```ignore
//! fn scale(x: &[f32], out: &mut [f32], n: u32, factor: f32)
//! ```
//!
//! gives
//!
//! ```ignore
//! pub struct Args<B0, B1> where B0: rt::In<f32>, B1: rt::Out<f32> {
//!     pub x: B0, pub out: B1, pub n: u32, pub factor: f32,
//! }
//! impl<A, B0, B1> rt::Launch<A> for Args<B0, B1>
//! where B0: rt::In<f32> + Into<A>, B1: rt::Out<f32> + Into<A>, A: From<u32> + From<i32> + From<f32>
//! { .. }
//! ```
//!
//! so rustc rejects a buffer of the wrong element type, a read-only buffer for a writable
//! parameter, a scalar of the wrong type and a missing or unknown field where the arguments
//! are written. A buffer with a declared length (`x: &[f32; n * 4]`) gets a run-time check in
//! `check_lengths`, which the runtime calls before every launch:
//!
//! ```ignore
//! fn check_lengths(&self, grid: [u32; 3]) -> Result<(), rt::ShapeError> {
//!     rt::check_length("x", "n * 4", <B0 as rt::In<f32>>::len(&self.x),
//!         &rt::Len::Mul(&rt::Len::Scalar("n", self.n), &rt::Len::Lit(4u64)))?;
//!     Ok(())
//! }
//! ```

use proc_macro2::{Literal, Span, TokenStream as TokenStream2};
use quote::{format_ident, quote};

use lse_dsl::ir::{Access, Kernel, LenExpr, LenOp, Param, Ty};

/// The `Args` struct and its `Launch` impl for kernel `k` (placed in the kernel's module,
/// next to `KERNEL`).
pub(crate) fn tokens(k: &Kernel) -> TokenStream2 {
    let mut generics = Vec::new();
    let mut struct_bounds = Vec::new();
    let mut launch_bounds = Vec::new();
    let mut fields = Vec::new();
    let mut conversions = Vec::new();
    let mut checks = Vec::new();
    for p in &k.params {
        let name = syn::Ident::new(p.name(), Span::call_site());
        match p {
            Param::Buffer {
                elem, access, len, ..
            } => {
                let g = format_ident!("B{}", generics.len());
                let elem_ty = ty_tokens(*elem);
                let role = match access {
                    Access::Read => quote!(::lse_dsl::rt::In<#elem_ty>),
                    Access::ReadWrite => quote!(::lse_dsl::rt::Out<#elem_ty>),
                };
                let m = if *access == Access::ReadWrite {
                    "mut "
                } else {
                    ""
                };
                let elem_name = elem.rust_name();
                let doc = match len {
                    Some(len) => format!("`{}: &{m}[{elem_name}; {len}]`", p.name()),
                    None => format!("`{}: &{m}[{elem_name}]`", p.name()),
                };
                if let Some(len) = len {
                    let (pname, declared, need) = (p.name(), len.to_string(), len_tokens(len));
                    checks.push(quote! {
                        ::lse_dsl::rt::check_length(
                            #pname,
                            #declared,
                            <#g as #role>::len(&self.#name),
                            &#need,
                        )?;
                    });
                }
                struct_bounds.push(quote!(#g: #role));
                launch_bounds.push(quote!(#g: #role + ::core::convert::Into<A>));
                fields.push(quote!(#[doc = #doc] pub #name: #g));
                conversions.push(quote!(::core::convert::Into::into(self.#name)));
                generics.push(g);
            }
            Param::Scalar { ty, .. } => {
                let ty_name = ty.rust_name();
                let doc = format!("`{}: {ty_name}`", p.name());
                let ty = ty_tokens(*ty);
                fields.push(quote!(#[doc = #doc] pub #name: #ty));
                conversions.push(quote!(<A as ::core::convert::From<#ty>>::from(self.#name)));
            }
        }
    }
    let id = k.id();
    let struct_doc = format!(
        "The arguments of one launch of `{id}`, one field per parameter: a read-only buffer \
         parameter takes anything that is `lse_dsl::rt::In` of its element type, a writable \
         one anything `lse_dsl::rt::Out`, a scalar its own type. A buffer whose parameter \
         declares a length (`&[T; len]`) must hold at least that many elements \
         (`check_lengths`, run by the runtime before each launch)."
    );
    quote! {
        #[doc = #struct_doc]
        pub struct Args<#(#generics),*>
        where
            #(#struct_bounds,)*
        {
            #(#fields,)*
        }

        impl<A, #(#generics),*> ::lse_dsl::rt::Launch<A> for Args<#(#generics),*>
        where
            #(#launch_bounds,)*
            A: ::core::convert::From<u32> + ::core::convert::From<i32> + ::core::convert::From<f32>,
        {
            fn kernel(&self) -> &'static ::lse_dsl::rt::KernelDef {
                &KERNEL
            }

            #[allow(unused_variables)]
            fn check_lengths(
                &self,
                grid: [u32; 3],
            ) -> ::core::result::Result<(), ::lse_dsl::rt::ShapeError> {
                #(#checks)*
                ::core::result::Result::Ok(())
            }

            fn into_args(self) -> ::std::vec::Vec<A> {
                ::std::vec![#(#conversions),*]
            }
        }
    }
}

/// A declared length as an `lse_dsl::rt::Len` built from the `Args` fields (`self`).
fn len_tokens(e: &LenExpr) -> TokenStream2 {
    match e {
        LenExpr::Lit(v) => {
            let v = Literal::u64_suffixed(*v);
            quote!(::lse_dsl::rt::Len::Lit(#v))
        }
        LenExpr::Grid(axis) => {
            let name = lse_dsl::ir::grid_count_name(*axis);
            let axis = usize::from(*axis);
            quote!(::lse_dsl::rt::Len::Scalar(#name, grid[#axis]))
        }
        LenExpr::Scalar(name) => {
            let field = syn::Ident::new(name, Span::call_site());
            quote!(::lse_dsl::rt::Len::Scalar(#name, self.#field))
        }
        LenExpr::Bin(op, a, b) => {
            let variant = match op {
                LenOp::Add => quote!(Add),
                LenOp::Sub => quote!(Sub),
                LenOp::Mul => quote!(Mul),
                LenOp::Div => quote!(Div),
                LenOp::Min => quote!(Min),
                LenOp::Max => quote!(Max),
            };
            let (a, b) = (len_tokens(a), len_tokens(b));
            quote!(::lse_dsl::rt::Len::#variant(&#a, &#b))
        }
    }
}

/// The Rust type of a LOOM buffer element or scalar type.
fn ty_tokens(ty: Ty) -> TokenStream2 {
    match ty {
        Ty::F32 => quote!(f32),
        Ty::I32 => quote!(i32),
        Ty::U32 => quote!(u32),
        Ty::Bool => quote!(bool),
        Ty::Bf16 => quote!(::lse_dsl::__private::half::bf16),
        Ty::F16 => quote!(::lse_dsl::__private::half::f16),
        Ty::I16 => quote!(i16),
        Ty::I8 => quote!(i8),
        Ty::U8 => quote!(u8),
    }
}
