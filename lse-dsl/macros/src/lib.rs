//! `#[loom::kernel(...)]`: turns a LOOM kernel `fn` into a module describing the compiled
//! kernel.
//!
//! ```ignore
//! #[loom::kernel(name = "example.scale", version = 1, workgroup = 256)]
//! fn scale(x: &[f32], out: &mut [f32], n: u32, factor: f32) { ... }
//! ```
//!
//! expands to `pub mod scale { pub fn scale(..) {..} pub static KERNEL: KernelDef = ..;
//! pub const BUILD_IR_HASH: &str = ..; pub struct Args<..> {..} }`, `Args` being the kernel's
//! typed launcher (see `launcher`). The front end (`lse_dsl::frontend`) parses and
//! checks the body at expansion time (errors point at the offending span); the work-item-loop
//! transform and the Rust lowering (`lse_dsl::rustgen`) produce `scale::scale`, the CPU
//! reference entry that `KERNEL.cpu` points to.
//!
//! A generic kernel `fn k<W>(..)` with `elem = [bf16, f16, f32]` expands to one such module
//! per element type, `k_bf16`, `k_f16` and `k_f32`, each complete; a kernel
//! `fn k<const BM: u32>(..)` with `consts = [48, 16]` to one per value, `k_bm48` and `k_bm16`
//! (or per labelled entry, `consts = [q8_0 = (32, 34)]` giving `k_q8_0`).
//!
//! `#[loom::function]` declares a LOOM function or procedure any kernel of the crate may
//! call: it expands to nothing, and each kernel reads the crate's functions from its source
//! files (`crate_functions`) and inlines those it calls.
//!
//! The LLVM artifacts (host code and AMDGPU code objects) come from the crate's build script,
//! which writes them under `$OUT_DIR/loom/<fn_name>/`; the expansion embeds them with
//! `include_bytes!`/`include_str!` by absolute path. A crate without that build script (no
//! `OUT_DIR`, or no `$OUT_DIR/loom/<fn_name>/build.hash`) still gets a working kernel for the
//! CPU reference: `host` and `gpu` are empty and `BUILD_IR_HASH` is `""`.

mod artifacts;
mod launcher;

use proc_macro::TokenStream;
use proc_macro2::{Literal, TokenStream as TokenStream2};
use quote::quote;

use lse_dsl::ir::{Access, Kernel, Param};

/// Defines a LOOM kernel. See the crate documentation and `lse-dsl/LOOM.md`.
#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    let item_fn = match syn::parse::<syn::ItemFn>(item) {
        Ok(f) => f,
        Err(e) => return e.to_compile_error().into(),
    };
    match expand(attr.into(), &item_fn) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// Declares a LOOM function that every kernel of the crate may call (`lse-dsl/LOOM.md`,
/// "Functions"). It is LOOM, not Rust: the expansion checks its signature and leaves nothing;
/// each kernel that calls it reads it from its file and inlines it.
#[proc_macro_attribute]
pub fn function(attr: TokenStream, item: TokenStream) -> TokenStream {
    if let Some(t) = attr.into_iter().next() {
        return syn::Error::new(t.span().into(), "`#[loom::function]` takes no arguments")
            .to_compile_error()
            .into();
    }
    match syn::parse::<syn::ItemFn>(item).and_then(|f| lse_dsl::frontend::check_function(&f)) {
        Ok(()) => TokenStream::new(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn expand(attr: TokenStream2, item_fn: &syn::ItemFn) -> syn::Result<TokenStream2> {
    let functions = crate_functions()?;
    let kernels = lse_dsl::frontend::parse_kernels_with(attr, item_fn, &functions)?;
    kernels
        .iter()
        .map(|k| expand_one(k, item_fn))
        .collect::<syn::Result<TokenStream2>>()
}

/// The `#[loom::function]`s the kernel being expanded may call: those of its crate's `src/`
/// files and of its own file (a proc macro sees only its own item, so it reads them from the
/// files; a file without the word `function` has none and is not parsed). Their spans are
/// the attribute's: an error in one is reported at the kernel, naming the function, and at
/// the call (the build script's error gives its line).
fn crate_functions() -> syn::Result<Vec<syn::ItemFn>> {
    let mut paths = Vec::new();
    if let Some(dir) = std::env::var_os("CARGO_MANIFEST_DIR") {
        let src = std::path::Path::new(&dir).join("src");
        if src.is_dir() {
            paths = lse_dsl::frontend::rust_files(&src).map_err(|e| {
                syn::Error::new(
                    proc_macro2::Span::call_site(),
                    format!("listing {} for LOOM functions: {e}", src.display()),
                )
            })?;
        }
    }
    // The kernel's own file, where the compiler names one that can be found from here and
    // it is not among those already listed.
    let own = proc_macro::Span::call_site()
        .local_file()
        .and_then(|p| p.canonicalize().ok())
        .filter(|own| {
            !paths
                .iter()
                .any(|p| p.canonicalize().ok().as_ref() == Some(own))
        });
    paths.extend(own);
    let mut out: Vec<syn::ItemFn> = Vec::new();
    for path in paths {
        let fail = |what: String| {
            syn::Error::new(
                proc_macro2::Span::call_site(),
                format!("reading the LOOM functions of {}: {what}", path.display()),
            )
        };
        let src = std::fs::read_to_string(&path).map_err(|e| fail(e.to_string()))?;
        if !src.contains("function") {
            continue;
        }
        let file = syn::parse_file(&src).map_err(|e| fail(e.to_string()))?;
        out.extend(lse_dsl::frontend::module_functions(&file)?);
    }
    Ok(out)
}

/// The `pub mod <instance fn name>` of one kernel (the whole fn, or one element-type instance
/// of a generic fn).
fn expand_one(k: &Kernel, item_fn: &syn::ItemFn) -> syn::Result<TokenStream2> {
    let fn_ident = syn::Ident::new(&k.fn_name, item_fn.sig.ident.span());
    let w = lse_dsl::wil::transform(k);
    let cpu_fn = lse_dsl::rustgen::cpu_entry_tokens(&w, &fn_ident);
    let rust_src = lse_dsl::rustgen::cpu_entry_source(&w, &k.fn_name);
    let ir_text = lse_dsl::text::ir_text(k);
    let ir_hash = lse_dsl::text::ir_hash(k);
    let id = k.id();
    let fn_name = &k.fn_name;
    let wg = Literal::u32_suffixed(k.workgroup_size);
    let shared_bytes = Literal::u32_suffixed(k.shared_bytes());
    let nvidia_dynamic = Literal::u32_suffixed(k.nvidia_dynamic_shared_bytes());
    let params = param_infos(k);
    let bf16_dot = k.has_bf16_dot();
    let launcher = launcher::tokens(k);
    let docs = item_fn.attrs.iter().filter(|a| a.path().is_ident("doc"));

    let art = artifacts::locate(k, fn_ident.span())?;
    let host = art.host_tokens(k);
    let gpu = art.gpu_tokens(k);
    let ptx = art.ptx_tokens();
    let build_hash = art.build_hash_tokens();

    Ok(quote! {
        #(#docs)*
        pub mod #fn_ident {
            #cpu_fn

            /// Everything the runtime needs to run this kernel.
            pub static KERNEL: ::lse_dsl::rt::KernelDef = ::lse_dsl::rt::KernelDef {
                fn_name: #fn_name,
                id: #id,
                ir_hash: #ir_hash,
                ir_text: #ir_text,
                rust_src: #rust_src,
                workgroup_size: #wg,
                shared_bytes: #shared_bytes,
                nvidia_dynamic_shared_bytes: #nvidia_dynamic,
                params: &[#(#params),*],
                bf16_dot: #bf16_dot,
                cpu: #fn_ident,
                host: #host,
                gpu: #gpu,
                ptx: #ptx,
            };

            /// The IR hash the build script compiled the artifacts from (`""` when the crate
            /// has no LOOM build script). Equal to `KERNEL.ir_hash` when both saw the same IR.
            pub const BUILD_IR_HASH: &str = #build_hash;

            #launcher
        }
    })
}

/// `ParamInfo` literals in parameter order.
fn param_infos(k: &Kernel) -> Vec<TokenStream2> {
    k.params
        .iter()
        .map(|p| match p {
            Param::Buffer {
                name, elem, access, ..
            } => {
                let elem = elem.rust_name();
                let writable = *access == Access::ReadWrite;
                quote! {
                    ::lse_dsl::rt::ParamInfo {
                        name: #name,
                        kind: ::lse_dsl::rt::ParamKind::Buffer { elem: #elem, writable: #writable },
                    }
                }
            }
            Param::Scalar { name, ty } => {
                let ty = ty.rust_name();
                quote! {
                    ::lse_dsl::rt::ParamInfo {
                        name: #name,
                        kind: ::lse_dsl::rt::ParamKind::Scalar { ty: #ty },
                    }
                }
            }
        })
        .collect()
}
