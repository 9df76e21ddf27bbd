//! Finding a kernel's build-script artifacts under `$OUT_DIR/loom/<fn_name>/` and turning
//! them into `include_bytes!`/`include_str!` expressions (the packed text artefacts become
//! `lse_dsl::rt::PackedText`s).

use std::path::{Path, PathBuf};

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote};

use lse_dsl::ir::Kernel;
use lse_dsl::rt::{host_symbol, HOST_CPUS, PACKED_ASM, PACKED_LL, PACKED_PTX, PTX_ARCHS};

/// Where a kernel's artifacts are, if its crate has the LOOM build script.
pub struct Artifacts {
    /// `$OUT_DIR/loom/<fn_name>`, present only when `build.hash` exists there.
    dir: Option<PathBuf>,
}

/// Looks for `$OUT_DIR/loom/<fn_name>/build.hash`. When it exists, every artifact the
/// expansion embeds must exist too; a missing one is an error naming the file (a build script
/// out of step with the kernel's targets), reported at `span`.
pub fn locate(k: &Kernel, span: Span) -> syn::Result<Artifacts> {
    let out_dir = std::env::var_os("OUT_DIR").map(PathBuf::from);
    locate_in(out_dir.as_deref(), k, span)
}

/// [`locate`] with an explicit `OUT_DIR` (`None`: unset).
fn locate_in(out_dir: Option<&Path>, k: &Kernel, span: Span) -> syn::Result<Artifacts> {
    let Some(out_dir) = out_dir else {
        return Ok(Artifacts { dir: None });
    };
    let dir = out_dir.join("loom").join(&k.fn_name);
    if !dir.join("build.hash").is_file() {
        return Ok(Artifacts { dir: None });
    }
    let mut expected: Vec<String> = vec!["build.hash".into()];
    for cpu in HOST_CPUS {
        expected.push(format!("host-{cpu}.{PACKED_LL}"));
        expected.push(format!("host-{cpu}.{PACKED_ASM}"));
    }
    for arch in &k.targets {
        for ext in ["hsaco", PACKED_LL, PACKED_ASM, "json"] {
            expected.push(format!("{arch}.{ext}"));
        }
    }
    for sm in PTX_ARCHS {
        for ext in [PACKED_PTX, PACKED_LL] {
            expected.push(format!("{sm}.{ext}"));
        }
    }
    for name in &expected {
        let path = dir.join(name);
        if !path.is_file() {
            return Err(syn::Error::new(
                span,
                format!(
                    "LOOM: build artifact `{}` is missing (the build script wrote `build.hash` \
                     but not this file; are the kernel's targets and the build script in step?)",
                    path.display()
                ),
            ));
        }
        if path.to_str().is_none() {
            return Err(syn::Error::new(
                span,
                format!(
                    "LOOM: artifact path `{}` is not valid UTF-8",
                    path.display()
                ),
            ));
        }
    }
    Ok(Artifacts { dir: Some(dir) })
}

impl Artifacts {
    /// Absolute path of one artifact as a string literal (checked UTF-8 in [`locate`]).
    fn path(&self, name: &str) -> String {
        let dir = self.dir.as_ref().expect("only called when artifacts exist");
        dir.join(name).to_string_lossy().into_owned()
    }

    /// `&[HostVariant, ..]`, one per `HOST_CPUS` entry, with the `extern "C"` declarations of
    /// the host entries; `&[]` without artifacts.
    pub fn host_tokens(&self, k: &Kernel) -> TokenStream {
        if self.dir.is_none() {
            return quote!(&[]);
        }
        let variants = HOST_CPUS.iter().map(|cpu| {
            let sym = format_ident!("{}", host_symbol(&k.fn_name, cpu));
            let ll = self.path(&format!("host-{cpu}.{PACKED_LL}"));
            let asm = self.path(&format!("host-{cpu}.{PACKED_ASM}"));
            quote! {
                {
                    unsafe extern "C" {
                        fn #sym(
                            bufs: *const ::lse_dsl::rt::RawBuf,
                            scalars: *const u64,
                            num_groups: *const u32,
                            group_begin: u32,
                            group_end: u32,
                        );
                    }
                    ::lse_dsl::rt::HostVariant {
                        cpu: #cpu,
                        entry: #sym,
                        llvm_ir: ::lse_dsl::rt::PackedText(include_bytes!(#ll)),
                        asm: ::lse_dsl::rt::PackedText(include_bytes!(#asm)),
                    }
                }
            }
        });
        quote!(&[#(#variants),*])
    }

    /// `&[PtxModule, ..]`, one per `PTX_ARCHS` entry; `&[]` without artifacts.
    pub fn ptx_tokens(&self) -> TokenStream {
        if self.dir.is_none() {
            return quote!(&[]);
        }
        let mods = PTX_ARCHS.iter().map(|sm| {
            let ptx = self.path(&format!("{sm}.{PACKED_PTX}"));
            let ll = self.path(&format!("{sm}.{PACKED_LL}"));
            quote! {
                ::lse_dsl::rt::PtxModule {
                    arch: #sm,
                    ptx: ::lse_dsl::rt::PackedText(include_bytes!(#ptx)),
                    llvm_ir: ::lse_dsl::rt::PackedText(include_bytes!(#ll)),
                }
            }
        });
        quote!(&[#(#mods),*])
    }

    /// `&[GpuObject, ..]`, one per target arch; `&[]` without artifacts.
    pub fn gpu_tokens(&self, k: &Kernel) -> TokenStream {
        if self.dir.is_none() {
            return quote!(&[]);
        }
        let objects = k.targets.iter().map(|arch| {
            let hsaco = self.path(&format!("{arch}.hsaco"));
            let ll = self.path(&format!("{arch}.{PACKED_LL}"));
            let asm = self.path(&format!("{arch}.{PACKED_ASM}"));
            let json = self.path(&format!("{arch}.json"));
            quote! {
                ::lse_dsl::rt::GpuObject {
                    arch: #arch,
                    code_object: include_bytes!(#hsaco),
                    llvm_ir: ::lse_dsl::rt::PackedText(include_bytes!(#ll)),
                    asm: ::lse_dsl::rt::PackedText(include_bytes!(#asm)),
                    metadata_json: include_str!(#json),
                }
            }
        });
        quote!(&[#(#objects),*])
    }

    /// `include_str!(".../build.hash")`, or `""` without artifacts.
    pub fn build_hash_tokens(&self) -> TokenStream {
        if self.dir.is_none() {
            return quote!("");
        }
        let p = self.path("build.hash");
        quote!(include_str!(#p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lse_dsl::ir::Kernel;

    fn kernel() -> Kernel {
        Kernel {
            fn_name: "demo".into(),
            name: "t.demo".into(),
            version: 1,
            workgroup_size: 64,
            subgroup: None,
            targets: vec!["gfx1100".into()],
            params: vec![],
            shared: vec![],
            tiles: vec![],
            locals: vec![],
            body: vec![],
        }
    }

    /// A fresh, empty directory under the system temp dir.
    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("loom-artifacts-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn all_files() -> Vec<String> {
        let mut v = vec!["build.hash".to_string()];
        for cpu in HOST_CPUS {
            v.push(format!("host-{cpu}.{PACKED_LL}"));
            v.push(format!("host-{cpu}.{PACKED_ASM}"));
        }
        for ext in ["hsaco", PACKED_LL, PACKED_ASM, "json"] {
            v.push(format!("gfx1100.{ext}"));
        }
        for sm in PTX_ARCHS {
            v.push(format!("{sm}.{PACKED_PTX}"));
            v.push(format!("{sm}.{PACKED_LL}"));
        }
        v
    }

    #[test]
    fn no_out_dir_or_no_build_hash_means_cpu_only() {
        let k = kernel();
        let a = locate_in(None, &k, Span::call_site()).unwrap();
        assert_eq!(a.host_tokens(&k).to_string(), quote!(&[]).to_string());
        assert_eq!(a.gpu_tokens(&k).to_string(), quote!(&[]).to_string());
        assert_eq!(a.ptx_tokens().to_string(), quote!(&[]).to_string());
        assert_eq!(a.build_hash_tokens().to_string(), "\"\"");
        let dir = scratch("empty");
        assert!(locate_in(Some(&dir), &k, Span::call_site())
            .unwrap()
            .dir
            .is_none());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn complete_artifacts_are_embedded_by_absolute_path() {
        let k = kernel();
        let out = scratch("full");
        let dir = out.join("loom").join("demo");
        std::fs::create_dir_all(&dir).unwrap();
        for f in all_files() {
            std::fs::write(dir.join(f), "x").unwrap();
        }
        let a = locate_in(Some(&out), &k, Span::call_site()).unwrap();
        let host = a.host_tokens(&k).to_string();
        for cpu in HOST_CPUS {
            assert!(host.contains(&host_symbol("demo", cpu)), "{host}");
            let ll = dir.join(format!("host-{cpu}.{PACKED_LL}"));
            assert!(
                host.contains(&format!("{:?}", ll.to_str().unwrap())),
                "{host}"
            );
        }
        let gpu = a.gpu_tokens(&k).to_string();
        assert!(gpu.contains("include_bytes !"), "{gpu}");
        assert!(gpu.contains(&format!(
            "{:?}",
            dir.join("gfx1100.hsaco").to_str().unwrap()
        )));
        let ptx = a.ptx_tokens().to_string();
        for sm in PTX_ARCHS {
            let p = dir.join(format!("{sm}.{PACKED_PTX}"));
            assert!(ptx.contains(&format!("{:?}", p.to_str().unwrap())), "{ptx}");
        }
        let hash = a.build_hash_tokens().to_string();
        assert!(hash.contains(&format!("{:?}", dir.join("build.hash").to_str().unwrap())));
        std::fs::remove_dir_all(out).unwrap();
    }

    #[test]
    fn a_missing_artifact_is_an_error_naming_it() {
        let k = kernel();
        let out = scratch("partial");
        let dir = out.join("loom").join("demo");
        std::fs::create_dir_all(&dir).unwrap();
        for f in all_files().into_iter().filter(|f| f != "gfx1100.json") {
            std::fs::write(dir.join(f), "x").unwrap();
        }
        let err = match locate_in(Some(&out), &k, Span::call_site()) {
            Ok(_) => panic!("a missing gfx1100.json must be reported"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains("gfx1100.json") && err.contains("missing"),
            "{err}"
        );
        std::fs::remove_dir_all(out).unwrap();
    }
}
