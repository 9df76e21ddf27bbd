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
//! are written.

use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{format_ident, quote};

use lse_dsl::ir::{Access, Kernel, Param, Ty};

/// The `Args` struct and its `Launch` impl for kernel `k` (placed in the kernel's module,
/// next to `KERNEL`).
pub(crate) fn tokens(k: &Kernel) -> TokenStream2 {
    let mut generics = Vec::new();
    let mut struct_bounds = Vec::new();
    let mut launch_bounds = Vec::new();
    let mut fields = Vec::new();
    let mut conversions = Vec::new();
    for p in &k.params {
        let name = syn::Ident::new(p.name(), Span::call_site());
        match p {
            Param::Buffer { elem, access, .. } => {
                let g = format_ident!("B{}", generics.len());
                let elem_ty = ty_tokens(*elem);
                let role = match access {
                    Access::Read => quote!(::lse_dsl::rt::In<#elem_ty>),
                    Access::ReadWrite => quote!(::lse_dsl::rt::Out<#elem_ty>),
                };
                let doc = match access {
                    Access::Read => format!("`{}: &[{}]`", p.name(), elem.rust_name()),
                    Access::ReadWrite => format!("`{}: &mut [{}]`", p.name(), elem.rust_name()),
                };
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
         one anything `lse_dsl::rt::Out`, a scalar its own type."
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

            fn into_args(self) -> ::std::vec::Vec<A> {
                ::std::vec![#(#conversions),*]
            }
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
    }
}
