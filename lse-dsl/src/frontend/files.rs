//! Kernels and functions of whole source files, for build scripts and for the proc macro:
//! the fns under `#[loom::kernel(...)]` and `#[loom::function]` (top level and inside inline
//! `mod`s), the crate-wide set of functions every kernel may call, and errors rendered with
//! their file, line and column.

use std::path::{Path, PathBuf};

use proc_macro2::{Span, TokenStream};
use syn::spanned::Spanned;

use super::{check_function, parse_kernels_at};
use crate::ir;

/// Every `.rs` file under `dir` (recursively, not through links to directories, which may
/// form a cycle), sorted by path.
pub fn rust_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    walk_dir(dir, &mut out)?;
    out.sort();
    Ok(out)
}

fn walk_dir(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            walk_dir(&path, out)?;
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// For build scripts: the kernels of a crate's source files (`(path, text)`), each file's
/// in file order, a generic or constant kernel giving its instances in order. Every kernel
/// may call every `#[loom::function]` of the files (one crate-wide set: a name declared
/// twice is an error, as is a function no kernel or other function calls). Errors are
/// "path:line:col: message" lines (line and column 1-based), covering every kernel.
pub fn kernels_in_crate(files: &[(PathBuf, String)]) -> Result<Vec<ir::Kernel>, String> {
    let mut errors: Vec<String> = Vec::new();
    // The lines of error `e` in file `file`.
    let at = |file: usize, e: &syn::Error, fallback: Option<Span>| -> Vec<String> {
        let path = files[file].0.display().to_string();
        render_errors(e, fallback)
            .lines()
            .map(|line| {
                if path.is_empty() {
                    line.to_string()
                } else {
                    format!("{path}:{line}")
                }
            })
            .collect()
    };
    let mut parsed = Vec::new();
    for (i, (_, src)) in files.iter().enumerate() {
        match syn::parse_file(src) {
            Ok(f) => parsed.push((i, f)),
            Err(e) => errors.extend(at(i, &e, None)),
        }
    }
    // Every function with the index of its file.
    let mut functions: Vec<(usize, syn::ItemFn)> = Vec::new();
    for (i, file) in &parsed {
        match module_functions(file) {
            Ok(fs) => functions.extend(fs.into_iter().map(|f| (*i, f))),
            Err(e) => errors.extend(at(*i, &e, None)),
        }
    }
    for (j, (i, f)) in functions.iter().enumerate() {
        if let Some((first, _)) = functions[..j]
            .iter()
            .find(|(_, g)| g.sig.ident == f.sig.ident)
        {
            let e = syn::Error::new(
                f.sig.ident.span(),
                format!(
                    "`#[loom::function]` `{}` is declared twice (also in {}): the crate's functions share one namespace",
                    f.sig.ident,
                    files[*first].0.display()
                ),
            );
            errors.extend(at(*i, &e, None));
        }
        if let Err(e) = check_function(f) {
            errors.extend(at(*i, &e, None));
        }
    }
    if !errors.is_empty() {
        return Err(errors.join("\n"));
    }
    let items: Vec<syn::ItemFn> = functions.iter().map(|(_, f)| f.clone()).collect();
    let mut kernels = Vec::new();
    let mut kernel_fns = Vec::new();
    for (i, file) in &parsed {
        for (f, a) in kernel_items(&file.items) {
            kernel_fns.push(f);
            let tokens = match &a.meta {
                syn::Meta::List(l) => l.tokens.clone(),
                _ => TokenStream::new(),
            };
            match parse_kernels_at(tokens, f, &items, a.span()) {
                Ok(ks) => kernels.extend(ks),
                Err(e) => errors.extend(at(*i, &e, Some(a.span()))),
            }
        }
    }
    if let Some(j) = uncalled(&items, &kernel_fns) {
        let f = &items[j];
        let e = syn::Error::new(
            f.sig.ident.span(),
            format!(
                "`#[loom::function]` `{}` is never called by a kernel; remove it (its body is checked at its calls)",
                f.sig.ident
            ),
        );
        errors.extend(at(functions[j].0, &e, None));
    }
    if errors.is_empty() {
        Ok(kernels)
    } else {
        Err(errors.join("\n"))
    }
}

/// [`kernels_in_crate`] for one file's text: errors are "line:col: message" lines.
pub fn kernels_in_file(src: &str) -> Result<Vec<ir::Kernel>, String> {
    kernels_in_crate(&[(PathBuf::new(), src.to_string())])
}

/// The fns of a file (top level and inside inline `mod`s) that carry `#[loom::function]` (or
/// `#[function]`), in file order, without that attribute: functions every kernel of the
/// crate may call (`LOOM.md`, "Functions"). The attribute takes no arguments.
pub fn module_functions(file: &syn::File) -> syn::Result<Vec<syn::ItemFn>> {
    let mut out = Vec::new();
    for f in fns(&file.items) {
        let Some(a) = f.attrs.iter().find(|a| attr_is(a, "function")) else {
            continue;
        };
        if !matches!(a.meta, syn::Meta::Path(_)) {
            return Err(syn::Error::new(
                a.span(),
                "`#[loom::function]` takes no arguments",
            ));
        }
        let mut f = f.clone();
        f.attrs.retain(|a| !attr_is(a, "function"));
        out.push(f);
    }
    Ok(out)
}

/// Every fn of `items` and of their inline `mod`s, in order.
fn fns(items: &[syn::Item]) -> Vec<&syn::ItemFn> {
    let mut out = Vec::new();
    for item in items {
        match item {
            syn::Item::Fn(f) => out.push(f),
            syn::Item::Mod(m) => {
                if let Some((_, items)) = &m.content {
                    out.extend(fns(items));
                }
            }
            _ => {}
        }
    }
    out
}

/// Every `#[loom::kernel(...)]` attribute of the fns of `items`, with its fn, in order.
fn kernel_items(items: &[syn::Item]) -> Vec<(&syn::ItemFn, &syn::Attribute)> {
    fns(items)
        .into_iter()
        .flat_map(|f| {
            f.attrs
                .iter()
                .filter(|a| attr_is(a, "kernel"))
                .map(move |a| (f, a))
        })
        .collect()
}

/// The index of the first of `functions` that no fn of `kernels` and no other function calls.
fn uncalled(functions: &[syn::ItemFn], kernels: &[&syn::ItemFn]) -> Option<usize> {
    let mut from_kernels = Vec::new();
    for f in kernels {
        called_names(&f.block, &mut from_kernels);
    }
    // The names each function calls, gathered once.
    let from_functions: Vec<Vec<String>> = functions
        .iter()
        .map(|f| {
            let mut names = Vec::new();
            called_names(&f.block, &mut names);
            names
        })
        .collect();
    functions.iter().enumerate().position(|(i, f)| {
        let name = f.sig.ident.to_string();
        let by_other = from_functions
            .iter()
            .enumerate()
            .any(|(j, names)| j != i && names.contains(&name));
        !from_kernels.contains(&name) && !by_other
    })
}

/// The names of the plain functions called in `block`.
fn called_names(block: &syn::Block, out: &mut Vec<String>) {
    use syn::visit::Visit;
    struct Calls<'o>(&'o mut Vec<String>);
    impl<'ast> Visit<'ast> for Calls<'_> {
        fn visit_expr_call(&mut self, c: &'ast syn::ExprCall) {
            if let syn::Expr::Path(p) = &*c.func {
                if let Some(id) = p.path.get_ident() {
                    self.0.push(id.to_string());
                }
            }
            syn::visit::visit_expr_call(self, c);
        }
    }
    Calls(out).visit_block(block);
}

/// Whether `a` is `#[loom::<name>]` or `#[<name>]`.
fn attr_is(a: &syn::Attribute, name: &str) -> bool {
    let segs: Vec<String> = a
        .path()
        .segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect();
    match segs.as_slice() {
        [one] => one == name,
        [loom, one] => loom == "loom" && one == name,
        _ => false,
    }
}

/// `line:col: message` per error; errors without a location use `fallback`'s.
fn render_errors(e: &syn::Error, fallback: Option<Span>) -> String {
    e.clone()
        .into_iter()
        .map(|one| {
            let mut at = one.span().start();
            if at.line == 0 {
                if let Some(f) = fallback {
                    at = f.start();
                }
            }
            format!("{}:{}: {}", at.line, at.column + 1, one)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    const KERNEL: &str = "#[loom::kernel(name = \"t.k\", version = 1, workgroup = 64)]\nfn k(w: &[u32], out: &mut [f32]) {\n    out[0] = low(w, 3);\n}\n";
    const LOW: &str = "/// The low half.\n#[loom::function]\nfn low(w: &[u32], i: u32) -> f32 {\n    (w[i] & 65535) as f32\n}\n";

    fn crate_of(files: &[(&str, &str)]) -> Result<Vec<ir::Kernel>, String> {
        let files: Vec<(PathBuf, String)> = files
            .iter()
            .map(|(p, s)| (PathBuf::from(p), s.to_string()))
            .collect();
        kernels_in_crate(&files)
    }

    #[test]
    fn a_kernel_calls_the_functions_of_other_files() {
        let ks = crate_of(&[("src/bits.rs", LOW), ("src/k.rs", KERNEL)]).unwrap();
        let inline = kernels_in_file(
            "#[loom::kernel(name = \"t.k\", version = 1, workgroup = 64)]\nfn k(w: &[u32], out: &mut [f32]) { out[0] = (w[3] & 65535) as f32; }",
        )
        .unwrap();
        assert_eq!(ks[0].body, inline[0].body);
    }

    #[test]
    fn crate_errors_name_the_file_line_and_column() {
        let msg =
            crate_of(&[("src/a.rs", LOW), ("src/b.rs", LOW), ("src/k.rs", KERNEL)]).unwrap_err();
        assert_eq!(
            msg,
            "src/b.rs:3:4: `#[loom::function]` `low` is declared twice (also in src/a.rs): the crate's functions share one namespace"
        );
        let msg = crate_of(&[("src/a.rs", LOW)]).unwrap_err();
        assert_eq!(
            msg,
            "src/a.rs:3:4: `#[loom::function]` `low` is never called by a kernel; remove it (its body is checked at its calls)"
        );
        let bad = LOW.replace("-> f32", "-> f64");
        let msg = crate_of(&[("src/a.rs", &bad), ("src/k.rs", KERNEL)]).unwrap_err();
        assert_eq!(
            msg,
            "src/a.rs:3:30: bad return type `f64`: expected f32, i32, u32, bool, bf16 or f16 (or none, for a procedure)"
        );
        let wrong = KERNEL.replace("low(w, 3)", "low(w, out[0])");
        let msg = crate_of(&[("src/a.rs", LOW), ("src/k.rs", &wrong)]).unwrap_err();
        assert!(
            msg.starts_with(
                "src/k.rs:3:21: type mismatch: argument `i` of `low` must be u32, found f32"
            ),
            "{msg}"
        );
        let msg = crate_of(&[("src/a.rs", "fn (")]).unwrap_err();
        assert!(msg.starts_with("src/a.rs:1:"), "{msg}");
    }

    #[test]
    fn rust_files_lists_a_tree_sorted_without_following_directory_links() {
        let dir = std::env::temp_dir().join(format!("loom-files-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        for f in ["b.rs", "a.rs", "sub/c.rs", "notes.md"] {
            std::fs::write(dir.join(f), "").unwrap();
        }
        std::os::unix::fs::symlink(&dir, dir.join("sub/loop")).unwrap();
        let found = rust_files(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let names: Vec<PathBuf> = found
            .iter()
            .map(|p| p.strip_prefix(&dir).unwrap().to_path_buf())
            .collect();
        assert_eq!(
            names,
            ["a.rs", "b.rs", "sub/c.rs"].map(PathBuf::from).to_vec()
        );
        assert!(rust_files(&dir).is_err());
    }
}
