//! Test support for the front end's unit tests (a standard kernel signature to wrap bodies
//! in), and the tests of whole kernels: realistic ones, every kernel in `kernels-src`, the
//! file API's error locations and the IR hash.

use super::{kernels_in_file, parse_kernels};
use crate::ir::*;
use quote::quote;

/// The signature test bodies are wrapped in.
pub(super) const SIG: &str = "#[loom::kernel(name = \"t.k\", version = 1, workgroup = 64)]\nfn k(x: &[f32], out: &mut [f32], ids: &[u32], h: &[bf16], hout: &mut [bf16], n: u32, s: f32, m: i32)";

/// The kernel with `body` under the standard test signature (line 3 is the body's first).
pub(super) fn k(body: &str) -> Kernel {
    match try_k(body) {
        Ok(k) => k,
        Err(e) => panic!("expected the kernel to compile, got: {e}"),
    }
}

/// The kernel or the rendered errors for `body`.
pub(super) fn try_k(body: &str) -> Result<Kernel, String> {
    let src = format!("{SIG} {{\n{body}\n}}\n");
    let mut ks = kernels_in_file(&src)?;
    assert_eq!(ks.len(), 1);
    Ok(ks.remove(0))
}

/// The error for `body`, which must not compile.
pub(super) fn e(body: &str) -> String {
    match try_k(body) {
        Ok(k) => panic!("expected an error, got a kernel with body {:?}", k.body),
        Err(e) => e,
    }
}

/// The error `parse_kernels` gives for attribute tokens `attr` on `item` (a panic if it
/// gives kernels instead).
pub(super) fn attr_err(attr: proc_macro2::TokenStream, item: syn::ItemFn) -> String {
    match super::parse_kernels(attr, &item) {
        Ok(ks) => panic!("expected an error, got {} kernels", ks.len()),
        Err(e) => e.to_string(),
    }
}

/// The type of the last local called `name`.
pub(super) fn local_ty(k: &Kernel, name: &str) -> Ty {
    k.locals
        .iter()
        .rev()
        .find(|l| l.name == name)
        .unwrap_or_else(|| panic!("no local {name}"))
        .ty
}

/// The value of the top-level `let` of `name`.
pub(super) fn let_value<'a>(k: &'a Kernel, name: &str) -> &'a Expr {
    for s in &k.body {
        if let Stmt::Let { var, value } = s {
            if k.locals[*var as usize].name == name {
                return value;
            }
        }
    }
    panic!("no let {name}")
}

// ---- whole kernels -----------------------------------------------------------------

#[test]
fn softmax_row_kernel_compiles() {
    let src = r#"
use loom::kernel;
mod inner {
    /// Row-wise softmax: max, then sum of exp, then scale.
    #[loom::kernel(name = "test.softmax", version = 2, workgroup = 128, targets = ["gfx1100"])]
    pub fn softmax(x: &[f32], y: &mut [f32], cols: u32) {
        const WG: u32 = group_size();
        let part = shared::<f32>(WG);
        let row = group_id();
        let lid = local_id();
        let base = row * cols;
        let mut m = f32::NEG_INFINITY;
        for c in (lid..cols).step_by(WG) {
            m = m.max(x[base + c]);
        }
        part[lid] = m;
        barrier();
        let mut stride = WG / 2;
        while stride > 0 {
            if lid < stride {
                part[lid] = part[lid].max(part[lid + stride]);
            }
            barrier();
            stride >>= 1;
        }
        let row_max = broadcast(part[0], 0);
        let mut s = 0.0;
        for c in (lid..cols).step_by(WG) {
            s += (x[base + c] - row_max).exp();
        }
        let inv = 1.0 / reduce_sum(s);
        for c in (lid..cols).step_by(WG) {
            y[base + c] = (x[base + c] - row_max).exp() * inv;
        }
    }
}
fn not_a_kernel() {}
"#;
    let ks = kernels_in_file(src).unwrap();
    assert_eq!(ks.len(), 1);
    let k = &ks[0];
    assert_eq!(k.id(), "test.softmax.v2");
    assert_eq!(k.fn_name, "softmax");
    assert_eq!(k.targets, vec!["gfx1100"]);
    assert_eq!(k.shared_bytes(), 512);
    let text = crate::text::ir_text(k);
    if std::env::var_os("LOOM_SHOW_ERRORS").is_some() {
        eprintln!("{text}");
    }
    assert!(text.contains("row_max#"), "{text}");
    assert!(text.contains("reduce_sum("), "{text}");
}

#[test]
fn topk_style_kernel_with_while_and_break_compiles() {
    let k = k("
        let lid = local_id();
        let mut best = f32::NEG_INFINITY;
        let mut best_i = u32::MAX;
        let mut i = lid;
        while i < n {
            let v = x[i];
            if v != v { i += group_size(); continue; }
            if v > best || (v == best && i < best_i) { best = v; best_i = i; }
            if best == f32::INFINITY { break; }
            i += group_size();
        }
        let (top, top_i) = argmax(best, best_i);
        if lid == 0 { out[group_id()] = top; out[group_id() + 1] = top_i as f32; }
    ");
    assert!(k.body.iter().any(|s| matches!(
        s,
        Stmt::Collective {
            op: CollectiveOp::Argmax,
            ..
        }
    )));
}

#[test]
fn every_kernel_in_kernels_src_compiles() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../kernels-src/src");
    let files: Vec<_> = super::rust_files(&dir)
        .expect("kernels-src/src exists")
        .into_iter()
        .map(|p| {
            let src = std::fs::read_to_string(&p).unwrap();
            (p, src)
        })
        .collect();
    let ks = super::kernels_in_crate(&files).unwrap_or_else(|e| panic!("{e}"));
    assert!(ks.len() > 50, "{} kernels in {}", ks.len(), dir.display());
}

#[test]
fn parse_kernels_takes_attribute_tokens_and_item() {
    let item: syn::ItemFn = syn::parse_quote! {
        fn scale(x: &[f32], out: &mut [f32], n: u32, factor: f32) {
            let i = group_id() * group_size() + local_id();
            if i < n { out[i] = x[i] * factor; }
        }
    };
    let mut ks = parse_kernels(
        quote!(name = "example.scale", version = 1, workgroup = 256),
        &item,
    )
    .unwrap();
    assert_eq!(ks.len(), 1);
    let k = ks.remove(0);
    assert_eq!(k.workgroup_size, 256);
    assert_eq!(k.targets, super::DEFAULT_TARGETS.to_vec());
    assert_eq!(k.params.len(), 4);
    assert_eq!(
        k.locals,
        vec![Local {
            name: "i".into(),
            ty: Ty::U32
        }]
    );
    let err = parse_kernels(quote!(name = "x", version = 1), &item).unwrap_err();
    assert!(err.to_string().contains("needs `workgroup`"));
}

#[test]
fn file_errors_carry_line_and_column() {
    let src = "fn helper() {}\n#[kernel(name = \"a\", version = 1, workgroup = 3)]\nfn k() {}\n";
    let msg = kernels_in_file(src).unwrap_err();
    assert!(
        msg.starts_with("2:47: `workgroup` must be a power of two"),
        "{msg}"
    );
    let msg = kernels_in_file("#[kernel]\nfn k() {}\n").unwrap_err();
    assert!(
        msg.starts_with("1:1: #[loom::kernel] needs `name`"),
        "{msg}"
    );
    assert!(kernels_in_file("fn (").unwrap_err().starts_with("1:"));
}

#[test]
fn the_file_api_gives_every_instance_and_locates_instance_errors() {
    let src = "#[kernel(name = \"t.a\", version = 1, workgroup = 64)]\nfn a(x: &[f32]) {}\n\
               #[kernel(name = \"t.g\", version = 3, workgroup = 64, elem = [bf16, f32])]\n\
               fn g<W>(w: &[W], out: &mut [f32]) { out[0] = to_f32(w[0]); }\n";
    let ids: Vec<String> = kernels_in_file(src)
        .unwrap()
        .iter()
        .map(|k| k.id())
        .collect();
    assert_eq!(ids, ["t.a.v1", "t.g_bf16.v3", "t.g_f32.v3"]);
    let src = "#[kernel(name = \"t.g\", version = 1, workgroup = 64, elem = [f32, f16])]\n\
               fn g<W>(w: &[W], out: &mut [f32]) {\n    out[0] = f16_to_f32(w[0]);\n}\n";
    let msg = kernels_in_file(src).unwrap_err();
    assert!(
        msg == "3:25: type mismatch: the argument of `f16_to_f32` must be f16, found f32 \
                (in the `f32` instance)",
        "{msg}"
    );
}

#[test]
fn the_ir_hash_ignores_formatting_but_not_meaning() {
    let a = k("let i = local_id(); // comment\n if i < n { out[i] = x[i] * 2.0; }");
    let b = k("let i=local_id();\n\n if i<n {\n out[i]=x[i]*2.0;\n }");
    let c = k("let i = local_id(); if i < n { out[i] = x[i] * 3.0; }");
    use crate::text::ir_hash;
    assert_eq!(ir_hash(&a), ir_hash(&b));
    assert_ne!(ir_hash(&a), ir_hash(&c));
}

#[test]
fn declared_lengths_change_the_ir_text_and_hash_but_not_the_lowering() {
    let body = "{ let i = local_id(); if i < n { out[i] = x[i] * 2.0; } }";
    let attr = "#[kernel(name = \"t.k\", version = 1, workgroup = 64)]";
    let plain = format!("{attr}\nfn k(x: &[f32], out: &mut [f32], n: u32) {body}");
    let declared = format!("{attr}\nfn k(x: &[f32; n], out: &mut [f32; n], n: u32) {body}");
    let (a, b) = (
        kernels_in_file(&plain).unwrap().remove(0),
        kernels_in_file(&declared).unwrap().remove(0),
    );
    assert_eq!((&a.body, &a.locals), (&b.body, &b.locals));
    let rust = |k: &Kernel| crate::rustgen::cpu_entry_source(&crate::wil::transform(k), "k");
    assert_eq!(rust(&a), rust(&b));
    let text = crate::text::ir_text(&b);
    assert!(
        text.contains("p0 x: &[f32; n]\n  p1 out: &mut [f32; n]\n"),
        "{text}"
    );
    assert_ne!(crate::text::ir_hash(&a), crate::text::ir_hash(&b));
}

/// The workgroup block puts the shared arrays, then the tiles, one after the other at
/// multiples of 16 bytes; NVIDIA needs dynamic shared memory only past 48 KiB.
#[test]
fn the_workgroup_block_lays_arrays_then_tiles_at_multiples_of_16() {
    let src = r#"
#[kernel(name = "test.block", version = 1, workgroup = 16)]
fn block(x: &[f32], y: &mut [f32]) {
    let s = shared::<f32>(3);
    let t = tile::<bf16, 3, 3>();
    let u = tile::<f32, 64, 64>();
    let v = tile::<f32, 64, 64>();
    let w = tile::<f32, 64, 63>();
    let lid = local_id();
    s[lid % 3] = x[lid];
    tile_load(t, x, 0, 3, 3, 3);
    tile_load(u, x, 0, 64, 1, 1);
    tile_load(v, x, 0, 64, 1, 1);
    tile_load(w, x, 0, 64, 1, 1);
    tile_store(u, y, 0, 64, 1, 1);
}
"#;
    let k = &kernels_in_file(src).unwrap()[0];
    let block = k.workgroup_block();
    assert_eq!(block.shared, [0]);
    assert_eq!(block.tiles, [16, 48, 48 + 16384, 48 + 2 * 16384]);
    assert_eq!(block.bytes, 48 + 2 * 16384 + 64 * 63 * 4);
    assert_eq!(k.nvidia_dynamic_shared_bytes(), 0);
    let mut wider = k.clone();
    wider.tiles[3].cols = 64;
    assert_eq!(wider.nvidia_dynamic_shared_bytes(), 48 + 3 * 16384);
}
