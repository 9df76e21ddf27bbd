//! Host: compile hand-built kernels for every host cpu, link each object into a shared
//! library, and load and run it on real buffers on every level this CPU can run.

use super::kernels;
use crate::{compile_host, host_llvm_text};
use half::{bf16, f16};
use lse_dsl::ir::{Kernel, Stmt};
use lse_dsl::rt::tile::Window;
use lse_dsl::rt::{host_symbol, HostEntry, RawBuf, HOST_CPUS};
use lse_dsl::wil::{Phase, VarStorage, WilKernel};
use std::ffi::CString;

/// A loaded shared library holding one host entry.
struct Lib {
    handle: *mut libc::c_void,
    entry: HostEntry,
    _dir: tempfile::TempDir,
}

impl Drop for Lib {
    fn drop(&mut self) {
        // SAFETY: handle came from dlopen and no function pointer outlives `self`.
        unsafe { libc::dlclose(self.handle) };
    }
}

/// [`load_wil`] of `k`'s work-item-loop form.
fn load(k: &Kernel, cpu: &str) -> (Option<Lib>, crate::CompiledHost) {
    load_wil(k, &lse_dsl::wil::transform(k), cpu)
}

/// Compiles `w` for the host level `cpu` and links it into a shared library, on every level;
/// loads the library only where this CPU can run the level (`None` elsewhere: its code would
/// stop the test process with SIGILL; the AMX level runs through [`lse_amx_emu`] on CPUs with
/// AVX512-BF16 and no AMX), so a test checks every level's code and runs the ones it can.
fn load_wil(k: &Kernel, w: &WilKernel, cpu: &str) -> (Option<Lib>, crate::CompiledHost) {
    lse_amx_emu::install();
    let c = compile_host(w, cpu).unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap();
    let obj = dir.path().join("k.o");
    let so = dir.path().join("libk.so");
    std::fs::write(&obj, &c.object).unwrap();
    let lld = crate::link::find_tool("ld.lld").unwrap();
    let st = std::process::Command::new(lld)
        .arg("-shared")
        .arg(&obj)
        .arg("-o")
        .arg(&so)
        .status()
        .unwrap();
    assert!(st.success());
    if !lse_dsl::rt::cpu_supports(cpu) {
        return (None, c);
    }
    let path = CString::new(so.to_str().unwrap()).unwrap();
    // SAFETY: loading a library we just linked; it has no initialisers.
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    assert!(!handle.is_null(), "dlopen failed for {cpu}: {:?}", unsafe {
        std::ffi::CStr::from_ptr(libc::dlerror())
    });
    let sym = CString::new(host_symbol(&k.fn_name, cpu)).unwrap();
    // SAFETY: the symbol is the host entry, which has the HostEntry ABI.
    let entry = unsafe {
        let p = libc::dlsym(handle, sym.as_ptr());
        assert!(!p.is_null(), "symbol {sym:?} missing");
        std::mem::transmute::<*mut libc::c_void, HostEntry>(p)
    };
    (
        Some(Lib {
            handle,
            entry,
            _dir: dir,
        }),
        c,
    )
}

/// A plain (not quads, not pairs) tile window of the reference semantics.
fn window(offset: u32, stride: u32, rows: u32, cols: u32, transposed: bool) -> Window {
    Window {
        offset,
        stride,
        rows,
        cols,
        transposed,
        quads: false,
        packed: false,
        pairs: false,
    }
}

fn raw<T>(v: &mut [T]) -> RawBuf {
    RawBuf {
        ptr: v.as_mut_ptr() as *mut u8,
        len: v.len(),
    }
}

/// Runs `check` on the library of every host level this CPU can run, and returns the
/// `x86-64-v4` level's assembly (compiled on any CPU) for the caller's checks.
fn on_every_level(k: &Kernel, mut check: impl FnMut(&str, &Lib)) -> String {
    let mut v4 = String::new();
    for cpu in HOST_CPUS {
        let (lib, c) = load(k, cpu);
        if cpu == "x86-64-v4" {
            v4 = c.asm;
        }
        if let Some(lib) = lib {
            check(cpu, &lib);
        }
    }
    v4
}

fn run(lib: &Lib, bufs: &[RawBuf], scalars: &[u64], groups: [u32; 3], begin: u32, end: u32) {
    // SAFETY: buffers are live and sized for the launch; the entry follows the HostEntry ABI.
    unsafe { (lib.entry)(bufs.as_ptr(), scalars.as_ptr(), groups.as_ptr(), begin, end) };
}

#[test]
fn store_id_runs_on_every_cpu() {
    let k = kernels::store_id();
    for cpu in HOST_CPUS {
        let (Some(lib), _) = load(&k, cpu) else {
            continue;
        };
        let n = 200u32;
        let mut out = vec![u32::MAX; 256];
        let bufs = [raw(&mut out)];
        // Two calls over disjoint group ranges, like the runtime's threads.
        run(&lib, &bufs, &[n as u64, 3], [4, 1, 1], 0, 1);
        run(&lib, &bufs, &[n as u64, 3], [4, 1, 1], 1, 4);
        for (i, &v) in out.iter().enumerate() {
            let want = if (i as u32) < n {
                i as u32 * 3
            } else {
                u32::MAX
            };
            assert_eq!(v, want, "{cpu} out[{i}]");
        }
    }
}

#[test]
fn reduce_runs_on_every_cpu() {
    let k = kernels::reduce();
    let wg = kernels::REDUCE_WG as usize;
    let groups = 3;
    let mut x: Vec<f32> = (0..wg * groups)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.37)
        .collect();
    x[wg + 7] = f32::NAN; // group 1: NaN never wins argmax
    x[2 * wg + 3] = 1000.0; // group 2: tie between two lanes, lower index wins
    x[2 * wg + 9] = 1000.0;
    for cpu in HOST_CPUS {
        let (Some(lib), _) = load(&k, cpu) else {
            continue;
        };
        let mut xs = x.clone();
        let (mut sums, mut maxes, mut idx, mut bc, mut maxv) = (
            vec![0f32; groups],
            vec![0f32; groups],
            vec![0u32; groups],
            vec![0f32; groups],
            vec![0f32; groups],
        );
        let bufs = [
            raw(&mut xs),
            raw(&mut sums),
            raw(&mut maxes),
            raw(&mut idx),
            raw(&mut bc),
            raw(&mut maxv),
        ];
        run(&lib, &bufs, &[], [groups as u32, 1, 1], 0, groups as u32);
        for g in 0..groups {
            // w[lid] = tile[63 - lid] = x[g*64 + 63 - lid]; argmax index is 63 - lid.
            let w: Vec<f32> = (0..wg).map(|l| x[g * wg + wg - 1 - l]).collect();
            let mut a = w.clone();
            let mut s = wg / 2;
            while s > 0 {
                for i in 0..s {
                    a[i] += a[i + s];
                }
                s /= 2;
            }
            assert_eq!(sums[g].to_bits(), a[0].to_bits(), "{cpu} sum g{g}");
            let mut best = (f32::NAN, u32::MAX);
            for (l, &v) in w.iter().enumerate() {
                let i = (wg - 1 - l) as u32;
                let wins = if v.is_nan() {
                    best.0.is_nan() && i < best.1
                } else {
                    best.0.is_nan() || v > best.0 || (v == best.0 && i < best.1)
                };
                if wins {
                    best = (v, i);
                }
            }
            assert_eq!((maxes[g], idx[g]), best, "{cpu} argmax g{g}");
            assert_eq!(bc[g].to_bits(), w[5].to_bits(), "{cpu} broadcast g{g}");
            assert_eq!(
                maxv[g],
                w.iter().copied().fold(f32::NAN, f32::max),
                "{cpu} max g{g}"
            );
        }
        assert_eq!(idx[2], 3, "tie goes to the lower index");
    }
}

#[test]
fn halves_match_the_half_crate() {
    let k = kernels::halves();
    let specials = [
        0.0f32,
        -0.0,
        1.0,
        -2.5,
        1.0e30,
        -1.0e30,
        f32::INFINITY,
        f32::NEG_INFINITY,
        3.0e-39,
        65504.0,
        70000.0,
    ];
    let mut xb: Vec<u16> = specials
        .iter()
        .map(|&v| bf16::from_f32(v).to_bits())
        .collect();
    xb.extend([0x7fc1u16, 0xff81, 0x3f81, 0x0001, 0x8001]); // NaNs (quiet, signalling), odd values
    xb.extend((0..45u16).map(|i| i.wrapping_mul(2731)));
    let n = xb.len();
    let xh: Vec<u16> = (0..n as u16)
        .map(|i| i.wrapping_mul(1777) ^ 0x3c00)
        .collect();
    let s = 1.0f32 + 1.0 / 256.0; // exercises round-to-nearest-even on the way back
    for cpu in HOST_CPUS {
        let (Some(lib), _) = load(&k, cpu) else {
            continue;
        };
        let (mut x, mut h) = (xb.clone(), xh.clone());
        let (mut of, mut ob, mut oh, mut oi) =
            (vec![0f32; n], vec![0u16; n], vec![0u16; n], vec![0i32; n]);
        let bufs = [
            raw(&mut x),
            raw(&mut h),
            raw(&mut of),
            raw(&mut ob),
            raw(&mut oh),
            raw(&mut oi),
        ];
        let groups = n.div_ceil(32) as u32;
        run(
            &lib,
            &bufs,
            &[n as u64, s.to_bits() as u64],
            [groups, 1, 1],
            0,
            groups,
        );
        for i in 0..n {
            let f = bf16::from_bits(xb[i]).to_f32() * s;
            assert_eq!(
                of[i].to_bits(),
                f.to_bits(),
                "{cpu} f[{i}] from {:#x}",
                xb[i]
            );
            assert_eq!(
                ob[i],
                bf16::from_f32(f).to_bits(),
                "{cpu} bf16[{i}] of {f:e}"
            );
            let hv = f16::from_bits(xh[i]).to_f32() + f;
            let want_h = f16::from_f32(hv).to_bits();
            assert_eq!(
                oh[i],
                want_h,
                "{cpu} f16[{i}] of {hv:e} ({:#x})",
                hv.to_bits()
            );
            assert_eq!(oi[i], f as i32, "{cpu} i32[{i}] of {f:e}");
        }
    }
}

/// Runs a form of `kernels::dot_rows` (or `dot_rows_masked` when `masked`) on every cpu,
/// checks it against a sequential reference, and returns the x86-64-v4 assembly.
fn run_dot_rows(k: &Kernel, w: &WilKernel, masked: bool) -> String {
    let (rows, k_len, n_rows) = (128usize, 40usize, 100usize);
    let wv: Vec<u16> = (0..rows * k_len)
        .map(|i| bf16::from_f32(((i * 13 % 29) as f32 - 14.0) * 0.125).to_bits())
        .collect();
    let x: Vec<f32> = (0..k_len).map(|i| (i as f32 - 20.0) * 0.5).collect();
    let extra: Vec<u32> = (0..rows as u32).map(|r| r % 5).collect();
    let mut v4 = String::new();
    for cpu in HOST_CPUS {
        let (lib, c) = load_wil(k, w, cpu);
        if cpu == "x86-64-v4" {
            v4 = c.asm;
        }
        let Some(lib) = lib else {
            continue;
        };
        let (mut wb, mut xb, mut out, mut eb) =
            (wv.clone(), x.clone(), vec![0f32; rows], extra.clone());
        let bufs = [raw(&mut wb), raw(&mut xb), raw(&mut out), raw(&mut eb)];
        let nb = if masked { 4 } else { 3 };
        run(
            &lib,
            &bufs[..nb],
            &[k_len as u64, n_rows as u64],
            [2, 1, 1],
            0,
            2,
        );
        for r in 0..rows {
            let mut acc = 0f32;
            for kk in 0..k_len {
                acc += bf16::from_bits(wv[r * k_len + kk]).to_f32() * x[kk];
            }
            if masked {
                for _ in 0..extra[r] {
                    acc += 1.0;
                }
                if r >= n_rows {
                    acc = -1.0;
                }
            }
            assert_eq!(out[r].to_bits(), acc.to_bits(), "{cpu} row {r}");
        }
    }
    v4
}

/// Packed single-precision arithmetic on ymm/zmm registers.
fn has_packed_fp(asm: &str) -> bool {
    asm.lines().any(|l| {
        let l = l.trim_start();
        (l.starts_with("vmulps") || l.starts_with("vaddps"))
            && (l.contains("ymm") || l.contains("zmm"))
    })
}

#[test]
fn per_item_dot_products_vectorise_across_work_items() {
    // A sequential f32 accumulation per work-item: only the interchange of the uniform `k`
    // loop with the work-item loop lets LLVM vectorise it.
    let k = kernels::dot_rows();
    let asm = run_dot_rows(&k, &lse_dsl::wil::transform(&k), false);
    assert!(has_packed_fp(&asm), "not vectorised:\n{asm}");
    // The same under a divergent `if`, with a loop whose bound is loaded (not interchanged).
    let k = kernels::dot_rows_masked();
    let asm = run_dot_rows(&k, &lse_dsl::wil::transform(&k), true);
    assert!(has_packed_fp(&asm), "masked form not vectorised:\n{asm}");
}

#[test]
fn interchange_also_works_inside_a_uniform_phase_loop() {
    // The `k` loop as a phase (as the transform would make it if it held a barrier).
    let k = kernels::dot_rows();
    let Stmt::For {
        var,
        start,
        end,
        step,
        body,
    } = &k.body[2]
    else {
        panic!("dot_rows shape")
    };
    let w = WilKernel {
        kernel: &k,
        storage: vec![
            VarStorage::PerItem,
            VarStorage::PerItem,
            VarStorage::Uniform,
        ],
        phases: vec![
            Phase::Region(k.body[..2].to_vec()),
            Phase::For {
                var: *var,
                start: start.clone(),
                end: end.clone(),
                step: step.clone(),
                body: vec![Phase::Region(body.clone())],
            },
            Phase::Region(k.body[3..].to_vec()),
        ],
    };
    let asm = run_dot_rows(&k, &w, false);
    assert!(has_packed_fp(&asm), "not vectorised:\n{asm}");
}

/// [`kernels::BOUND_AFTER_REDUCTION_SRC`]: loop bounds named by `let`s of the region before
/// a reduction are written out in the region after it, so both regions' loops interchange
/// with the work-item loop and vectorise (read from per-work-item slots, the bounds differed
/// per work-item and both regions ran scalar); every level gives the exact results (the
/// squares and sums are exact in f32).
#[test]
fn loop_bounds_named_before_a_reduction_stay_uniform_after_it() {
    let k = kernels::from_source(kernels::BOUND_AFTER_REDUCTION_SRC);
    let (wide, groups) = (100usize, 3usize);
    let n = wide * groups;
    let x: Vec<f32> = (0..n).map(|i| (i % 9) as f32 * 0.25 - 1.0).collect();
    let mut want = vec![-1f32; n];
    for g in 0..groups {
        let (first, width) = (g * wide, if g == 0 { wide } else { wide / 2 });
        let seg = &x[first..first + width];
        let total: f32 = seg.iter().map(|v| v * v).sum();
        for (o, v) in want[first..first + width].iter_mut().zip(seg) {
            *o = v * total;
        }
    }
    for cpu in HOST_CPUS {
        let (lib, c) = load(&k, cpu);
        if cpu == "x86-64-v4" {
            // The products `x * total` (the second region) and `v * v` (the first).
            let scalar = c.asm.lines().any(|l| {
                let l = l.trim_start();
                l.starts_with("vmulss") || (l.starts_with("vfmadd") && l.contains("ss\t"))
            });
            assert!(
                !scalar && c.asm.contains("vmulps"),
                "not vectorised:\n{}",
                c.asm
            );
        }
        let Some(lib) = lib else {
            continue;
        };
        let (mut xs, mut out) = (x.clone(), vec![-1f32; n]);
        let bufs = [raw(&mut xs), raw(&mut out)];
        run(
            &lib,
            &bufs,
            &[n as u64, wide as u64],
            [groups as u32, 1, 1],
            0,
            groups as u32,
        );
        for (i, (got, want)) in out.iter().zip(&want).enumerate() {
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "{cpu} element {i}: {got} vs {want}"
            );
        }
    }
}

#[test]
fn host_text_has_the_entry_abi() {
    let k = kernels::store_id();
    let w = lse_dsl::wil::transform(&k);
    let t = host_llvm_text(&w, "x86-64-v3");
    assert!(
        t.contains("define void @loom_host_k_store_id_x86_64_v3(ptr noalias"),
        "{t}"
    );
    assert!(t.contains("llvm.loop.parallel_accesses"));
    assert!(t.contains("llvm.loop.vectorize.enable"));
    assert!(host_llvm_text(&w, "pentium").starts_with("; LOOM emit error"));
    assert!(compile_host(&w, "pentium").is_err());
}

#[test]
fn index_arithmetic_is_non_wrapping_and_work_item_loops_stay_rolled() {
    // `w[row * k_len + k]`: the index's sum of products gets `nuw`, so LLVM can split the
    // zero-extension over its terms.
    let k = kernels::dot_rows();
    let t = host_llvm_text(&lse_dsl::wil::transform(&k), "x86-64-v4");
    assert!(t.contains("mul nuw i32"), "{t}");
    assert!(t.contains("llvm.loop.unroll.disable"), "{t}");
    assert!(t.contains("\"prefer-vector-width\"=\"512\""), "{t}");
    // Arithmetic outside an index keeps wrapping semantics: `store_id`'s `gid * g + lid`
    // is a `let` and its stored value `gid * scale` is not an index.
    let k = kernels::store_id();
    let t = host_llvm_text(&lse_dsl::wil::transform(&k), "x86-64-v3");
    assert!(!t.contains("mul nuw"), "{t}");
    assert!(!t.contains("prefer-vector-width"), "{t}");
}

#[test]
fn work_item_loops_of_at_most_64_unroll_once_vectorised_on_vector_levels() {
    let scale = |wg: u32| {
        kernels::from_source(&format!(
            "#[loom::kernel(name = \"test.scale\", version = 1, workgroup = {wg})]
             fn scale(x: &mut [f32]) {{
                 let i = group_id() * group_size() + local_id();
                 x[i] = x[i] * 2.0;
             }}"
        ))
    };
    const FOLLOWUP: &str = "llvm.loop.vectorize.followup_vectorized";
    let k = scale(64);
    let w = lse_dsl::wil::transform(&k);
    for cpu in ["x86-64-v3", "x86-64-v4"] {
        let t = host_llvm_text(&w, cpu);
        assert!(
            t.contains(FOLLOWUP) && t.contains("llvm.loop.unroll.full"),
            "{cpu}: {t}"
        );
    }
    let t = host_llvm_text(&w, "x86-64");
    assert!(!t.contains(FOLLOWUP), "baseline: {t}");
    let k = scale(256);
    let t = host_llvm_text(&lse_dsl::wil::transform(&k), "x86-64-v4");
    assert!(!t.contains(FOLLOWUP), "256 work-items: {t}");
}

/// `let lid = local_id(); let col = group_id() * 64 + lid; let n = num_groups() * 64;
/// let mut acc = 0.0; for k in 0..k_len { acc = acc + m[k * n + col] * x[k]; }
/// out[col] = acc;` with params `(m: &[f32], x: &[f32], out: &mut [f32], k_len: u32)`.
fn column_dots() -> Kernel {
    use super::kernels::{bin, buffer, builtin, load, local, param, scalar, var};
    use lse_dsl::ir::{Access, BinOp, Builtin, Expr, Ty};
    let u = |v| var(v, Ty::U32);
    let m_index = bin(BinOp::Add, bin(BinOp::Mul, u(4), u(2)), u(1));
    let prod = bin(
        BinOp::Mul,
        load(0, m_index, Ty::F32),
        load(1, u(4), Ty::F32),
    );
    Kernel {
        fn_name: "k_column_dots".into(),
        name: "test.k_column_dots".into(),
        version: 1,
        workgroup_size: 64,
        subgroup: None,
        targets: vec![],
        params: vec![
            buffer("m", Ty::F32, Access::Read),
            buffer("x", Ty::F32, Access::Read),
            buffer("out", Ty::F32, Access::ReadWrite),
            scalar("k_len", Ty::U32),
        ],
        shared: vec![],
        tiles: vec![],
        locals: vec![
            local("lid", Ty::U32),
            local("col", Ty::U32),
            local("n", Ty::U32),
            local("acc", Ty::F32),
            local("k", Ty::U32),
        ],
        body: vec![
            Stmt::Let {
                var: 0,
                value: builtin(Builtin::LocalId),
            },
            Stmt::Let {
                var: 1,
                value: bin(
                    BinOp::Add,
                    bin(
                        BinOp::Mul,
                        builtin(Builtin::GroupId(0)),
                        Expr::const_u32(64),
                    ),
                    u(0),
                ),
            },
            Stmt::Let {
                var: 2,
                value: bin(
                    BinOp::Mul,
                    builtin(Builtin::NumGroups(0)),
                    Expr::const_u32(64),
                ),
            },
            Stmt::Let {
                var: 3,
                value: Expr::const_f32(0.0),
            },
            Stmt::For {
                var: 4,
                start: Expr::const_u32(0),
                end: param(3, Ty::U32),
                step: Expr::const_u32(1),
                body: vec![Stmt::Assign {
                    var: 3,
                    value: bin(BinOp::Add, var(3, Ty::F32), prod),
                }],
            },
            Stmt::Store {
                buf: 2,
                index: u(1),
                value: var(3, Ty::F32),
            },
        ],
    }
}

#[test]
fn index_lets_keep_accesses_consecutive_across_work_items() {
    // `col` and `n` are named by `let`s in a split region: the host lowering writes them
    // out at their uses, so `m[k * n + col]` is seen as consecutive across work-items
    // (packed loads, no gathers) while `x[k]` is the same for all of them.
    let k = column_dots();
    let (groups, k_len) = (2usize, 19usize);
    let cols = groups * 64;
    let m: Vec<f32> = (0..k_len * cols)
        .map(|i| ((i * 7 % 23) as f32 - 11.0) * 0.375)
        .collect();
    let x: Vec<f32> = (0..k_len).map(|i| (i as f32 - 9.0) * 0.625).collect();
    let v4 = on_every_level(&k, |cpu, lib| {
        let (mut mb, mut xb, mut out) = (m.clone(), x.clone(), vec![0f32; cols]);
        let bufs = [raw(&mut mb), raw(&mut xb), raw(&mut out)];
        run(lib, &bufs, &[k_len as u64], [groups as u32, 1, 1], 0, 2);
        for col in 0..cols {
            let mut acc = 0f32;
            for kk in 0..k_len {
                acc += m[kk * cols + col] * x[kk];
            }
            assert_eq!(out[col].to_bits(), acc.to_bits(), "{cpu} column {col}");
        }
    });
    assert!(has_packed_fp(&v4), "not vectorised:\n{v4}");
    assert!(
        !v4.contains("vgather"),
        "gathers for consecutive loads:\n{v4}"
    );
}

/// [`kernels::ROW_GATHER_SRC`]: a `let` read from memory with one value for the workgroup
/// (`split::uniform_lets`) is evaluated once, so `x[src + i]` is read as consecutive
/// elements (vector loads) on every level, where a per-work-item `src` made it a gather; the
/// copied rows are right on every level.
#[test]
fn a_workgroup_uniform_let_read_from_memory_keeps_row_reads_consecutive() {
    let k = kernels::from_source(kernels::ROW_GATHER_SRC);
    let h = 150usize;
    let rows: Vec<u32> = vec![3, 0, 4, 3];
    let x: Vec<f32> = (0..5 * h).map(|i| i as f32 * 0.5 - 7.0).collect();
    let v4 = on_every_level(&k, |cpu, lib| {
        let (mut xb, mut rb, mut out) = (x.clone(), rows.clone(), vec![0f32; rows.len() * h]);
        let bufs = [raw(&mut xb), raw(&mut rb), raw(&mut out)];
        let n = rows.len() as u32;
        run(lib, &bufs, &[h as u64], [n, 1, 1], 0, n);
        for (r, &t) in rows.iter().enumerate() {
            let t = t as usize;
            assert_eq!(
                out[r * h..(r + 1) * h],
                x[t * h..(t + 1) * h],
                "{cpu} row {r}"
            );
        }
    });
    assert!(
        !v4.contains("vgather") && !v4.contains("vpgather"),
        "gathers for a row's consecutive elements:\n{v4}"
    );
}

/// The elementwise and row tile statements on every host level agree bit for bit with the
/// reference semantics of `lse_dsl::rt::tile` (what the generated Rust calls), through a
/// softmax-like chain with broadcasts, and a NaN that `tile_max` ignores.
#[test]
fn tile_elementwise_and_row_statements_match_the_reference_on_every_cpu() {
    use lse_dsl::rt::tile;
    let k = kernels::tile_ops();
    let mut x: Vec<f32> = (0..70u32)
        .map(|i| ((i.wrapping_mul(2_654_435_761) >> 7) % 2001) as f32 / 250.0 - 4.0)
        .collect();
    x[40] = f32::NAN; // `other` (0, 5): `tile_max` keeps t's value there
    let v: Vec<f32> = (0..12).map(|i| 0.3 * i as f32 - 1.1).collect();
    let s = 0.75f32;
    // The reference, statement by statement.
    let (mut t, other) = (x[..35].to_vec(), x[35..].to_vec());
    let (mut row, mut sum, col) = (v[..5].to_vec(), vec![0f32; 5], v[5..].to_vec());
    tile::map(&mut t, |a| a * s);
    tile::row_reduce(&mut row, &t, 7, f32::max);
    tile::binary(&mut t, 7, &row, 5, 1, |a, b| a - b);
    tile::map(&mut t, lse_dsl::math::exp);
    tile::row_reduce(&mut sum, &t, 7, |a, b| a + b);
    tile::binary(&mut t, 7, &sum, 5, 1, |a, b| a / b);
    tile::binary(&mut t, 7, &col, 1, 7, |a, b| a * b);
    tile::binary(&mut t, 7, &row, 5, 1, |a, b| a + b);
    tile::binary(&mut t, 7, &other, 5, 7, f32::max);
    assert!(!t[5].is_nan());
    let half: Vec<u16> = t.iter().map(|&a| bf16::from_f32(a).to_bits()).collect();
    for cpu in HOST_CPUS {
        let (Some(lib), _) = load(&k, cpu) else {
            continue;
        };
        let (mut xs, mut vs) = (x.clone(), v.clone());
        let (mut y, mut sums, mut p) = (vec![0f32; 35], vec![0f32; 5], vec![bf16::ZERO; 35]);
        let bufs = [
            raw(&mut xs),
            raw(&mut vs),
            raw(&mut y),
            raw(&mut sums),
            raw(&mut p),
        ];
        run(&lib, &bufs, &[s.to_bits() as u64], [1, 1, 1], 0, 1);
        for i in 0..35 {
            assert_eq!(
                y[i].to_bits(),
                t[i].to_bits(),
                "{cpu} y[{i}]: {} vs {}",
                y[i],
                t[i]
            );
            assert_eq!(p[i].to_bits(), half[i], "{cpu} p[{i}]");
        }
        for r in 0..5 {
            assert_eq!(sums[r].to_bits(), sum[r].to_bits(), "{cpu} sums[{r}]");
        }
    }
}

/// Row reductions over whole 16 x 16 blocks (vectorised across rows on x86-64-v4) add and max
/// each row's columns in increasing order from the row's starting value, as the reference
/// does, on every host level: values of mixed magnitudes (so that another order gives other
/// sums), NaN (ignored by the maximum, kept by the sum), infinities and signed zeros.
#[test]
fn tile_row_reductions_over_whole_blocks_match_the_reference_on_every_cpu() {
    use lse_dsl::rt::tile;
    let k = kernels::from_source(kernels::TILE_ROW_BLOCKS_SRC);
    let (rows, cols) = (32, 48);
    let mut x: Vec<f32> = (0..rows * cols)
        .map(|i| {
            let h = (i as u32).wrapping_mul(2_654_435_761);
            let mag = 2f32.powi((h >> 27) as i32 - 16);
            let sign = if h & 1 == 0 { 1.0 } else { -1.0 };
            sign * mag * (1.0 + ((h >> 8) % 1000) as f32 / 1000.0)
        })
        .collect();
    x[3 * cols + 17] = f32::NAN;
    x[5 * cols] = f32::INFINITY;
    x[6 * cols + 47] = f32::NEG_INFINITY;
    x[7 * cols..8 * cols].fill(-0.0);
    x[8 * cols..9 * cols].fill(f32::NAN);
    let mut v: Vec<f32> = (0..2 * rows).map(|i| i as f32 * 0.5 - 9.0).collect();
    v[rows + 8] = f32::NEG_INFINITY;
    let (mut sum, mut max) = (v[..rows].to_vec(), v[rows..].to_vec());
    tile::row_reduce(&mut sum, &x, cols as u32, |a, b| a + b);
    tile::row_reduce(&mut max, &x, cols as u32, f32::max);
    let backwards: Vec<f32> = (0..rows)
        .map(|r| (0..cols).rev().fold(v[r], |a, c| a + x[r * cols + c]))
        .collect();
    assert!(
        (0..rows).any(|r| backwards[r].to_bits() != sum[r].to_bits()),
        "the inputs do not tell the column order apart"
    );
    assert!(max[3].is_finite() && max[8].is_infinite() && sum[3].is_nan());
    for cpu in HOST_CPUS {
        let (Some(lib), _) = load(&k, cpu) else {
            continue;
        };
        let (mut xs, mut vs) = (x.clone(), v.clone());
        let (mut sums, mut maxes) = (vec![0f32; rows], vec![0f32; rows]);
        let bufs = [raw(&mut xs), raw(&mut vs), raw(&mut sums), raw(&mut maxes)];
        run(&lib, &bufs, &[], [1, 1, 1], 0, 1);
        for r in 0..rows {
            assert_eq!(sums[r].to_bits(), sum[r].to_bits(), "{cpu} sums[{r}]");
            assert_eq!(maxes[r].to_bits(), max[r].to_bits(), "{cpu} maxes[{r}]");
        }
    }
}

/// A dot operand loaded from a read-only buffer is read in place when its window is whole,
/// copied (zero-padded) when ragged and zero before its first load, and one loaded from a
/// writable buffer keeps the values it was loaded with after the buffer is overwritten:
/// every host level agrees bit for bit with the reference order (`fma` in increasing k).
#[test]
fn dot_operands_read_in_place_or_copied_match_the_reference_on_every_cpu() {
    let k = kernels::from_source(kernels::TILE_IN_PLACE_SRC);
    let x0: Vec<f32> = (0..64).map(|i| 0.37 * i as f32 - 11.0).collect();
    let w: Vec<f32> = (0..340u32)
        .map(|i| ((i.wrapping_mul(2_654_435_761) >> 9) % 1001) as f32 / 125.0 - 4.0)
        .collect();
    for rows in [4u32, 3, 0] {
        let mut want = vec![0f32; 64];
        for (r, out) in want.chunks_mut(16).enumerate() {
            for (c, o) in out.iter_mut().enumerate() {
                for j in 0..16 {
                    *o = 0f32.mul_add(w[j * 16 + c], *o);
                }
                for j in 0..16 {
                    *o = x0[r * 16 + j].mul_add(w[j * 16 + c], *o);
                }
                let v = |j: usize| {
                    if (r as u32) < rows {
                        w[256 + r * 20 + j]
                    } else {
                        0.0
                    }
                };
                for j in 0..16 {
                    *o = v(j).mul_add(w[j * 16 + c], *o);
                }
            }
        }
        for cpu in HOST_CPUS {
            let (Some(lib), _) = load(&k, cpu) else {
                continue;
            };
            let (mut x, mut ws, mut y) = (x0.clone(), w.clone(), vec![0f32; 64]);
            let bufs = [raw(&mut x), raw(&mut ws), raw(&mut y)];
            run(&lib, &bufs, &[u64::from(rows)], [1, 1, 1], 0, 1);
            for (i, (got, want)) in y.iter().zip(&want).enumerate() {
                assert_eq!(got.to_bits(), want.to_bits(), "{cpu} rows={rows} y[{i}]");
            }
            assert_eq!(x[..64], w[..64], "{cpu}: x's window was not overwritten");
        }
    }
}

/// f32 to i32 and u32 as Rust's `as` casts them (toward zero, NaN to 0, out of range to the
/// nearest end), on every host level, the vector loop and its scalar remainder alike.
#[test]
fn float_to_int_casts_saturate_as_rust_does_on_every_cpu() {
    let k = kernels::from_source(kernels::FLOAT_CASTS_SRC);
    let mut x = vec![
        f32::NAN,
        -f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.0,
        -0.0,
        -0.5,
        -1.0,
        0.99,
        -2.7,
        2_147_483_520.0,
        2_147_483_648.0,
        -2_147_483_648.0,
        -2_147_483_904.0,
        4_294_967_040.0,
        4_294_967_296.0,
        1.0e30,
        -1.0e30,
        f32::MIN_POSITIVE,
    ];
    x.extend((0..21).map(|j| (j as f32 - 10.0) * 3.3e8));
    let n = x.len();
    for cpu in HOST_CPUS {
        let (Some(lib), _) = load(&k, cpu) else {
            continue;
        };
        let mut xs = x.clone();
        let (mut i, mut u) = (vec![7i32; n], vec![7u32; n]);
        let bufs = [raw(&mut xs), raw(&mut i), raw(&mut u)];
        let groups = n.div_ceil(16) as u32;
        run(&lib, &bufs, &[n as u64], [groups, 1, 1], 0, groups);
        for (j, &v) in x.iter().enumerate() {
            assert_eq!(i[j], v as i32, "{cpu} {v:e} as i32");
            assert_eq!(u[j], v as u32, "{cpu} {v:e} as u32");
        }
    }
}

/// A tile is zero at the start of every workgroup wherever a statement could read it before
/// a load writes it (`t`, loaded on even workgroups only), even when the same thread ran a
/// workgroup that loaded it just before; a tile always loaded before use (`u`) is not
/// zero-filled at all.
#[test]
fn tiles_read_before_any_load_are_zero_in_every_workgroup_on_every_cpu() {
    let k = kernels::from_source(kernels::TILE_ZERO_FILL_SRC);
    let groups = 8usize;
    let x: Vec<f32> = (0..groups * 32 + 1).map(|i| i as f32 + 1.0).collect();
    for cpu in HOST_CPUS {
        let (Some(lib), _) = load(&k, cpu) else {
            continue;
        };
        let mut xs = x.clone();
        let (mut y, mut z) = (vec![-1f32; groups * 32], vec![-1f32; groups * 32]);
        let bufs = [raw(&mut xs), raw(&mut y), raw(&mut z)];
        run(&lib, &bufs, &[], [groups as u32, 1, 1], 0, groups as u32);
        for g in 0..groups {
            let block = g * 32..g * 32 + 32;
            let want: &[f32] = if g % 2 == 0 {
                &x[block.clone()]
            } else {
                &[0.0; 32]
            };
            assert_eq!(y[block.clone()], *want, "{cpu} workgroup {g}: t");
            assert_eq!(
                z[block],
                x[g * 32 + 1..g * 32 + 33],
                "{cpu} workgroup {g}: u"
            );
        }
    }
    let ir = host_llvm_text(&lse_dsl::wil::transform(&k), "x86-64-v4");
    assert_eq!(ir.matches("call void @llvm.memset").count(), 1, "{ir}");
}

/// A tile load prefetches the window of its loop's next step only when that window's offset
/// can be computed ahead safely: here it divides by `n - i`, which is 0 one step past the
/// end, and every host level runs the loop without evaluating it (no division trap).
#[test]
fn loop_windows_whose_next_offset_could_trap_are_not_prefetched() {
    let k = kernels::from_source(kernels::TILE_LOOP_OFFSETS_SRC);
    let n = 4u32;
    let x: Vec<f32> = (0..272).map(|i| i as f32).collect();
    for cpu in HOST_CPUS {
        let (Some(lib), _) = load(&k, cpu) else {
            continue;
        };
        let (mut xs, mut y) = (x.clone(), vec![0f32; 64]);
        let bufs = [raw(&mut xs), raw(&mut y)];
        run(&lib, &bufs, &[u64::from(n)], [1, 1, 1], 0, 1);
        for i in 0..n as usize {
            let from = 16 / (n as usize - i) * 16;
            assert_eq!(y[i * 16..i * 16 + 16], x[from..from + 16], "{cpu} row {i}");
        }
    }
}

/// `prefetch` changes no value on any level, whatever its range: inside the buffer, past its
/// end, wrapping in `u32`, empty or 4 MiB long; and it is a loop of `prefetcht1` (into L2) on
/// every level, with no such instruction for the copy alone.
#[test]
fn prefetches_change_nothing_whatever_their_range() {
    let k = kernels::from_source(kernels::PREFETCH_SRC);
    let (n, groups) = (4u32, 3u32);
    let x: Vec<f32> = (0..16 * n * groups).map(|i| i as f32 - 7.5).collect();
    for cpu in HOST_CPUS {
        let (lib, c) = load(&k, cpu);
        assert!(c.asm.contains("prefetcht1"), "{cpu}:\n{}", c.asm);
        let Some(lib) = lib else {
            continue;
        };
        for (ahead, len) in [
            (16, 16),
            (3 << 20, 64),
            (u32::MAX - 40, 100),
            (0, 0),
            (5, 1 << 20),
        ] {
            let (mut xs, mut y) = (x.clone(), vec![0f32; x.len()]);
            let bufs = [raw(&mut xs), raw(&mut y)];
            let scalars = [n, ahead, len].map(u64::from);
            run(&lib, &bufs, &scalars, [groups, 1, 1], 0, groups);
            let want: Vec<f32> = x.iter().map(|v| v * 2.0).collect();
            assert_eq!(y, want, "{cpu} ahead {ahead} len {len}");
        }
    }
}

/// Values that exercise 16-bit rounding: zeros, infinities, NaN, subnormals, the largest
/// finite values, ties, and a spread of ordinary numbers (as f32, rounded by the caller).
fn half_operands(n: usize) -> Vec<f32> {
    let special = [
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        1e-40,
        -3e-39,
        6e-8,
        65504.0,
        3.3e38,
        1.0,
        1.0078125,
        -2.5,
    ];
    (0..n)
        .map(|i| match special.get(i % 23) {
            Some(&v) => v,
            None => ((i as u32).wrapping_mul(2_654_435_761) >> 9) as f32 / 7919.0 - 500.0,
        })
        .collect()
}

/// bf16 and f16 arithmetic, negation and comparisons on every host level give the `half`
/// crate's results bit for bit (its operators are what the generated Rust runs).
#[test]
fn half_values_match_the_half_crate_on_every_cpu() {
    let k = kernels::from_source(kernels::HALF_VALUES_SRC);
    let n = 300usize;
    let ops = half_operands(n + 7);
    let a: Vec<bf16> = ops[..n].iter().map(|&v| bf16::from_f32(v)).collect();
    let b: Vec<bf16> = ops[7..].iter().map(|&v| bf16::from_f32(v)).collect();
    let c: Vec<f16> = ops[3..n + 3]
        .iter()
        .map(|&v| f16::from_f32(v / 64.0))
        .collect();
    let d: Vec<f16> = ops[5..n + 5].iter().map(|&v| f16::from_f32(v)).collect();
    for cpu in HOST_CPUS {
        let (Some(lib), _) = load(&k, cpu) else {
            continue;
        };
        let (mut a2, mut b2, mut c2, mut d2) = (a.clone(), b.clone(), c.clone(), d.clone());
        let mut out_b = vec![bf16::ZERO; 2 * n];
        let mut out_h = vec![f16::ZERO; 2 * n];
        let mut flags = vec![u32::MAX; n];
        let bufs = [
            raw(&mut a2),
            raw(&mut b2),
            raw(&mut c2),
            raw(&mut d2),
            raw(&mut out_b),
            raw(&mut out_h),
            raw(&mut flags),
        ];
        run(
            &lib,
            &bufs,
            &[n as u64],
            [n.div_ceil(32) as u32, 1, 1],
            0,
            10,
        );
        for i in 0..n {
            let (x, y, p, q) = (a[i], b[i], c[i], d[i]);
            let want_b = [(x + y) * x - y / x, -x];
            let want_h = [p * q - (p + q) / q, -q];
            for j in 0..2 {
                assert_eq!(
                    out_b[2 * i + j].to_bits(),
                    want_b[j].to_bits(),
                    "{cpu} bf16 {i}.{j}: x {x} y {y}"
                );
                assert_eq!(
                    out_h[2 * i + j].to_bits(),
                    want_h[j].to_bits(),
                    "{cpu} f16 {i}.{j}: p {p} q {q}"
                );
            }
            let want_f = u32::from(x < y)
                | u32::from(x == y) << 1
                | u32::from(p >= q) << 2
                | u32::from(p != q) << 3;
            assert_eq!(flags[i], want_f, "{cpu} flags {i}: {x} {y} {p} {q}");
        }
    }
}

/// `f32_from_bits`, `f16_from_bits` and `bf16_from_bits` give the values with the word's bits
/// (the low 16 for the 16-bit types) on every host level, NaN payloads, infinities and
/// subnormals included.
#[test]
fn from_bits_builtins_keep_the_bits_on_every_cpu() {
    let k = kernels::from_source(kernels::FROM_BITS_SRC);
    let mut u: Vec<u32> = vec![
        0,
        0x8000_0000,
        0x7f80_0000,
        0xff80_0001,
        0x0000_0001,
        0x3c00,
    ];
    u.extend((0..200u32).map(|i| i.wrapping_mul(0x9E37_79B9)));
    let n = u.len();
    for cpu in HOST_CPUS {
        let (Some(lib), _) = load(&k, cpu) else {
            continue;
        };
        let mut u2 = u.clone();
        let (mut f, mut h, mut b) = (vec![0f32; n], vec![f16::ZERO; n], vec![bf16::ZERO; n]);
        let bufs = [raw(&mut u2), raw(&mut f), raw(&mut h), raw(&mut b)];
        let groups = n.div_ceil(32) as u32;
        run(&lib, &bufs, &[n as u64], [groups, 1, 1], 0, groups);
        for i in 0..n {
            assert_eq!(f[i].to_bits(), u[i], "{cpu} f32 {i}");
            assert_eq!(h[i].to_bits(), u[i] as u16, "{cpu} f16 {i}");
            assert_eq!(b[i].to_bits(), (u[i] >> 8) as u16, "{cpu} bf16 {i}");
        }
    }
}

/// `op` folded over `v` by the tree of `ir::tree_steps` (the collectives' definition).
fn tree<T: Copy>(v: &[T], op: impl Fn(T, T) -> T) -> T {
    let mut v = v.to_vec();
    for s in lse_dsl::ir::tree_steps(v.len() as u32) {
        for i in 0..s as usize {
            v[i] = op(v[i], v[i + s as usize]);
        }
    }
    v[0]
}

/// The subgroup built-ins on every host level: reductions in the tree order within each
/// subgroup of 8 (bit for bit), a shuffle within the subgroup with the lane taken modulo 8,
/// subgroup ids and lanes; NaN ignored by `subgroup_max`.
#[test]
fn subgroup_builtins_follow_their_definition_on_every_cpu() {
    let k = kernels::from_source(kernels::SUBGROUPS_SRC);
    let n = 64usize;
    let mut x: Vec<f32> = (0..n)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 8) as f32 / 1e6 - 7.0)
        .collect();
    x[13] = f32::NAN;
    let u: Vec<u32> = (0..n as u32).map(|i| (i * 7919) % 13).collect();
    for cpu in HOST_CPUS {
        let (Some(lib), _) = load(&k, cpu) else {
            continue;
        };
        let (mut xs, mut us) = (x.clone(), u.clone());
        let (mut sums, mut maxes, mut shuf) = (vec![0f32; n], vec![0f32; n], vec![0f32; n]);
        let (mut mins, mut ids) = (vec![0u32; n], vec![0u32; n]);
        let bufs = [
            raw(&mut xs),
            raw(&mut us),
            raw(&mut sums),
            raw(&mut maxes),
            raw(&mut mins),
            raw(&mut shuf),
            raw(&mut ids),
        ];
        run(&lib, &bufs, &[], [2, 1, 1], 0, 2);
        for i in 0..n {
            let g = &x[i / 8 * 8..i / 8 * 8 + 8];
            let lane = i % 8;
            let want_sum = tree(g, |a, b| a + b);
            let want_max = tree(g, f32::max);
            assert_eq!(sums[i].to_bits(), want_sum.to_bits(), "{cpu} sum {i}");
            assert_eq!(maxes[i].to_bits(), want_max.to_bits(), "{cpu} max {i}");
            assert!(!maxes[i].is_nan(), "{cpu} max {i} is NaN");
            let want_min = tree(&u[i / 8 * 8..i / 8 * 8 + 8], u32::min);
            assert_eq!(mins[i], want_min, "{cpu} min {i}");
            let from = (7 - lane + u[i] as usize * 8) % 8;
            assert_eq!(shuf[i].to_bits(), g[from].to_bits(), "{cpu} shuffle {i}");
            assert_eq!(ids[i], ((i % 32) / 8 * 100 + lane) as u32, "{cpu} ids {i}");
        }
    }
}

/// A subgroup spanning the whole workgroup reduces exactly as the workgroup collective does.
#[test]
fn a_workgroup_wide_subgroup_matches_the_workgroup_collective_on_every_cpu() {
    let k = kernels::from_source(kernels::WHOLE_SUBGROUP_SRC);
    let x: Vec<f32> = (0..16).map(|i| 1.0 / (i as f32 + 0.37) - 0.9).collect();
    for cpu in HOST_CPUS {
        let (Some(lib), _) = load(&k, cpu) else {
            continue;
        };
        let mut xs = x.clone();
        let (mut sub, mut whole, mut rev) = (vec![0f32; 16], vec![0f32; 16], vec![0f32; 16]);
        let bufs = [raw(&mut xs), raw(&mut sub), raw(&mut whole), raw(&mut rev)];
        run(&lib, &bufs, &[], [1, 1, 1], 0, 1);
        let want = tree(&x, |a, b| a + b);
        for i in 0..16 {
            assert_eq!(sub[i].to_bits(), want.to_bits(), "{cpu} sub {i}");
            assert_eq!(whole[i].to_bits(), want.to_bits(), "{cpu} whole {i}");
            assert_eq!(rev[i].to_bits(), x[15 - i].to_bits(), "{cpu} rev {i}");
        }
    }
}

/// Pseudo-random codes below 16 (a 4-bit quantisation's) and f32 values in [-4, 4).
fn codes_and_values(n: usize) -> (Vec<u32>, Vec<f32>) {
    let hash = |i: usize| (i as u32).wrapping_mul(2_654_435_761) >> 7;
    let q = (0..n).map(|i| hash(i) % 16).collect();
    let x = (0..n)
        .map(|i| (hash(i + n) % 2001) as f32 / 250.0 - 4.0)
        .collect();
    (q, x)
}

/// Tile loads and stores on shared arrays ([`kernels::TILE_SHARED_SRC`]), whole (where the
/// host takes its transposed-block copies) and ragged: every host level agrees bit for bit
/// with the reference semantics of `lse_dsl::rt::tile`, which the generated Rust calls;
/// the dot operand loaded from `wq` keeps its values after the work-items overwrite `wq`.
#[test]
fn shared_array_windows_match_the_reference_on_every_cpu() {
    use lse_dsl::rt::tile;
    let k = kernels::from_source(kernels::TILE_SHARED_SRC);
    let text = host_llvm_text(&lse_dsl::wil::transform(&k), "x86-64-v4");
    assert!(
        text.contains("shufflevector <16 x i32>"),
        "the whole transposed windows take the block transpose: {text}"
    );
    let (q, x) = codes_and_values(512);
    let scale = 0.375f32;
    for (rows, cols) in [(16u32, 16u32), (5, 11), (16, 9), (3, 16)] {
        // The reference, statement by statement.
        let mut wq: Vec<f32> = q.iter().map(|&c| (c as f32 - 8.0) * scale).collect();
        let mut staged = vec![-1f32; 512];
        let (mut a, mut b, mut acc) = (vec![0f32; 128], vec![0f32; 256], vec![0f32; 128]);
        tile::load(
            &mut a,
            16,
            window(0, 16, 8, cols, false),
            |i| wq[i as usize],
            |v| v,
        );
        tile::load(
            &mut b,
            16,
            window(256, 16, rows, cols, false),
            |i| wq[i as usize],
            |v| v,
        );
        wq.copy_from_slice(&x);
        tile::dot(&mut acc, &a, &b, 16, 16, false);
        tile::load(
            &mut b,
            16,
            window(1, 17, rows, cols, true),
            |i| wq[i as usize],
            |v| v,
        );
        tile::dot(&mut acc, &a, &b, 16, 16, false);
        let want_y = acc.clone();
        tile::store(&acc, 16, window(3, 20, rows, cols, false), |i, v| {
            staged[i as usize] = v
        });
        tile::store(&b, 16, window(200, 16, rows, cols, true), |i, v| {
            staged[i as usize] = v
        });
        assert!(staged.contains(&-1.0), "a window leaves elements unwritten");
        for cpu in HOST_CPUS {
            let (Some(lib), _) = load(&k, cpu) else {
                continue;
            };
            let (mut qs, mut xs) = (q.clone(), x.clone());
            let (mut y, mut back) = (vec![0f32; 128], vec![0f32; 512]);
            let bufs = [raw(&mut qs), raw(&mut xs), raw(&mut y), raw(&mut back)];
            let scalars = [scale.to_bits() as u64, u64::from(rows), u64::from(cols)];
            run(&lib, &bufs, &scalars, [1, 1, 1], 0, 1);
            let at = format!("{cpu} rows={rows} cols={cols}");
            for (i, (got, want)) in y.iter().zip(&want_y).enumerate() {
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{at} y[{i}]: {got} vs {want}"
                );
            }
            for (i, (got, want)) in back.iter().zip(&staged).enumerate() {
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{at} back[{i}]: {got} vs {want}"
                );
            }
        }
    }
}

/// Adds to each `(exact, abs)` of a 32 x 32 block the f64 sum and absolute sum of its
/// products `a[i][kk] b[kk][j]` over 32 `kk` (32 x 32 row-major tiles).
fn add_products(bound: &mut [(f64, f64)], a: &[f32], b: &[f32]) {
    for (i, (exact, abs)) in bound.iter_mut().enumerate() {
        for kk in 0..32 {
            let p = a[i / 32 * 32 + kk] as f64 * b[kk * 32 + i % 32] as f64;
            *exact += p;
            *abs += p.abs();
        }
    }
}

/// The first `m` rows and `n` columns of the 32-column tile `acc` as stored to a 32-column
/// `y` (its other elements 0).
fn stored_block(acc: &[f32], m: u32, n: u32) -> Vec<f32> {
    use lse_dsl::rt::tile;
    let mut y = vec![0f32; (m * 32) as usize];
    let at = window(0, 32, m, n, false);
    tile::store(acc, 32, at, |i, v| y[i as usize] = v);
    y
}

/// Checks a float `tile_dot` result `y` of level `cpu` against the reference `want`: bit for
/// bit on the levels without a bf16 matrix instruction, and everywhere within
/// `64 2^-24 sum |a_j b_j|` of the f64 product `bound` (`(exact, abs)` per element); a NaN
/// or an infinity in `want` must be in `y` too.
fn assert_dot_matches(cpu: &str, case: &str, y: &[f32], want: &[f32], bound: &[(f64, f64)]) {
    let matrix = cpu.ends_with("-amx") || (cpu.ends_with("-bf16") && !lse_dsl::rt::intel_cpu());
    for (i, (got, want)) in y.iter().zip(want).enumerate() {
        let at = format!("{cpu} {case} y[{i}]: {got} vs {want}");
        if !want.is_finite() {
            assert_eq!(got.is_nan(), want.is_nan(), "{at}");
            assert!(want.is_nan() || got == want, "{at}");
            continue;
        }
        // Outside the stored block `bound` may hold a NaN operand's products; `y` is 0 there.
        let (exact, abs) = bound[i];
        if !matrix || !exact.is_finite() {
            assert_eq!(got.to_bits(), want.to_bits(), "{at}");
        }
        if exact.is_finite() {
            let tol = 64.0 * 2f64.powi(-24) * abs;
            assert!((*got as f64 - exact).abs() <= tol, "{at}, exact {exact}");
        }
    }
}

/// Every masked vector load and store of the host code (a work-item's guarded access,
/// vectorised) has a prefetch 2 KiB ahead of its address before it, for reading or for
/// writing, on each level that makes masked accesses (the AVX2 and AVX-512 ones;
/// [`kernels::BOUND_AFTER_REDUCTION_SRC`] loads `x` and stores `out` under `if`), and the
/// module still runs: `loop_bounds_named_before_a_reduction_stay_uniform_after_it` checks its
/// results on every level.
#[test]
fn masked_vector_accesses_are_prefetched_ahead() {
    let k = kernels::from_source(kernels::BOUND_AFTER_REDUCTION_SRC);
    let w = lse_dsl::wil::transform(&k);
    for cpu in HOST_CPUS {
        let c = compile_host(&w, cpu).unwrap_or_else(|e| panic!("{e}"));
        let count = |pattern: &str| {
            c.llvm_ir_opt
                .lines()
                .filter(|l| !l.starts_with("declare") && l.contains(pattern))
                .count()
        };
        let loads = count("@llvm.masked.load.");
        let stores = count("@llvm.masked.store.");
        if cpu == "x86-64" {
            assert_eq!(loads + stores, 0, "{cpu}: SSE2 has no masked accesses");
            continue;
        }
        assert!(loads > 0 && stores > 0, "{cpu}:\n{}", c.llvm_ir_opt);
        let ir = &c.llvm_ir_opt;
        assert_eq!(
            count("@llvm.prefetch.p0(ptr %"),
            loads + stores,
            "{cpu}:\n{ir}"
        );
        assert_eq!(count(", i32 0, i32 3, i32 1)"), loads, "{cpu}: reads\n{ir}");
        assert_eq!(
            count(", i32 1, i32 3, i32 1)"),
            stores,
            "{cpu}: writes\n{ir}"
        );
        assert_eq!(count(", i64 2048"), loads + stores, "{cpu}:\n{ir}");
        assert!(c.asm.contains("prefetcht0\t2048("), "{cpu}:\n{}", c.asm);
    }
}

/// [`kernels::MASKED_CARRY_SRC`] on every level: the work-items outside the divergent `if`
/// keep the value they had (the host reads such a variable into a register for the masked
/// loop and writes every work-item's value back), the others get the loop's `fma` chain.
#[test]
fn values_carried_around_a_masked_uniform_loop_survive_for_inactive_work_items() {
    let k = kernels::from_source(kernels::MASKED_CARRY_SRC);
    let (n, k_len, live) = (128usize, 9usize, 77usize);
    let x: Vec<f32> = (0..n * k_len)
        .map(|i| (i % 13) as f32 * 0.37 - 2.0)
        .collect();
    let want: Vec<f32> = (0..n)
        .map(|r| {
            let mut acc = 7.0f32;
            if r < live {
                for j in 0..k_len {
                    acc = x[r * k_len + j].mul_add(2.0, acc);
                }
            }
            acc
        })
        .collect();
    for cpu in HOST_CPUS {
        let (Some(lib), _) = load(&k, cpu) else {
            continue;
        };
        let mut xs = x.clone();
        let mut out = vec![0f32; n];
        let bufs = [raw(&mut xs), raw(&mut out)];
        run(
            &lib,
            &bufs,
            &[n as u64, k_len as u64, live as u64],
            [2, 1, 1],
            0,
            2,
        );
        for (r, (got, want)) in out.iter().zip(&want).enumerate() {
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "{cpu} row {r}: {got} vs {want}"
            );
        }
    }
}

/// A dequantising bf16 GEMM block through a shared array ([`kernels::TILE_SHARED_BF16_SRC`]),
/// whole and ragged: bit for bit the reference order on the levels without a matrix
/// instruction for it, and within the bound `k 2^-24 sum |a_j b_j|` of an f64 product of the
/// same bf16 operands on every level this CPU runs (`vdpbf16ps`, AMX); every level compiles.
#[test]
fn shared_array_operands_of_a_bf16_dot_match_the_reference_on_every_cpu() {
    use lse_dsl::rt::tile;
    let k = kernels::from_source(kernels::TILE_SHARED_BF16_SRC);
    let (q, x) = codes_and_values(32 * 64);
    let scale = 0.3f32;
    let round = |v: f32| bf16::from_f32(v).to_f32();
    let w: Vec<f32> = q.iter().map(|&c| (c as f32 - 8.0) * scale).collect();
    for (m, n) in [(32u32, 32u32), (7, 19)] {
        let (mut a, mut b, mut acc) = (vec![0f32; 1024], vec![0f32; 1024], vec![0f32; 1024]);
        let mut bound = vec![(0f64, 0f64); 1024];
        for k0 in [0u32, 32] {
            let wq: Vec<f32> = (0..1024usize)
                .map(|i| w[i / 32 * 64 + k0 as usize + i % 32])
                .collect();
            let at_a = window(k0, 64, m, 32, false);
            tile::load(&mut a, 32, at_a, |i| x[i as usize], round);
            let at_b = window(0, 32, 32, n, true);
            tile::load(&mut b, 32, at_b, |i| wq[i as usize], round);
            tile::dot(&mut acc, &a, &b, 32, 32, true);
            add_products(&mut bound, &a, &b);
        }
        let want = stored_block(&acc, m, n);
        for cpu in HOST_CPUS {
            let (Some(lib), _) = load(&k, cpu) else {
                continue;
            };
            let (mut qs, mut xs) = (q.clone(), x.clone());
            let mut y = vec![0f32; (m * 32) as usize];
            let bufs = [raw(&mut qs), raw(&mut xs), raw(&mut y)];
            let scalars = [scale.to_bits() as u64, u64::from(m), u64::from(n)];
            run(&lib, &bufs, &scalars, [1, 1, 1], 0, 1);
            assert_dot_matches(cpu, &format!("m={m} n={n}"), &y, &want, &bound);
        }
    }
}

/// Pairs windows ([`kernels::TILE_PAIRS_SRC`]), whole and ragged, against the reference
/// semantics on every level: the loads and stores move element `(r, c)` to and from
/// `offset + (r / 2) * stride + 2 c + r % 2`, outside the window a load gives 0 and a store
/// writes nothing, and dots on pairs-loaded operands (read in place on the AVX512-BF16 levels)
/// give the products of the values loaded. Small integers make every sum exact, so each
/// level's summation order gives the same bits.
#[test]
fn pairs_windows_load_store_and_feed_dots_as_the_reference_on_every_cpu() {
    use lse_dsl::rt::tile;
    let k = kernels::from_source(kernels::TILE_PAIRS_SRC);
    let ir = host_llvm_text(&lse_dsl::wil::transform(&k), "x86-64-v4-bf16");
    assert!(ir.contains("dpbf16ps"), "{ir}");
    let small = |i: usize, seed: usize| ((i * 7 + seed) % 7) as f32 - 3.0;
    let xp: Vec<bf16> = (0..2048).map(|i| bf16::from_f32(small(i, 1))).collect();
    let xa: Vec<bf16> = (0..1024).map(|i| bf16::from_f32(small(i / 3, 2))).collect();
    let xh: Vec<f16> = (0..2048).map(|i| f16::from_f32(small(i / 5, 3))).collect();
    let xc: Vec<f16> = (0..1024).map(|i| f16::from_f32(small(i / 2, 4))).collect();
    for (rows, cols) in [(64u32, 32u32), (63, 19), (2, 16)] {
        let pairs = |stride| Window {
            pairs: true,
            ..window(0, stride, rows, cols, false)
        };
        let plain = |stride, rows, cols| window(0, stride, rows, cols, false);
        let loaded = |w: Window, cols: u32, len: usize, read: &dyn Fn(u32) -> f32| {
            let mut t = vec![0f32; len];
            tile::load(&mut t, cols, w, read, |v| v);
            t
        };
        let p = loaded(pairs(64), 32, 2048, &|i| xp[i as usize].to_f32());
        let h = loaded(plain(32, rows, cols), 32, 2048, &|i| {
            xh[i as usize].to_f32()
        });
        let mut want_yh = vec![f16::from_f32(99.0); 2048];
        tile::store(&h, 32, pairs(64), |i, v| {
            want_yh[i as usize] = f16::from_f32(v)
        });
        let a = loaded(plain(64, 16, 64), 64, 1024, &|i| xa[i as usize].to_f32());
        let c = loaded(plain(64, 16, 64), 64, 1024, &|i| xc[i as usize].to_f32());
        let d = loaded(pairs(64), 32, 2048, &|i| xh[i as usize].to_f32());
        let (mut want_y, mut want_z) = (vec![0f32; 512], vec![0f32; 512]);
        tile::dot(&mut want_y, &a, &p, 32, 64, true);
        tile::dot(&mut want_z, &c, &d, 32, 64, false);
        for cpu in HOST_CPUS {
            let (Some(lib), _) = load(&k, cpu) else {
                continue;
            };
            let (mut xp, mut xa, mut xh, mut xc) = (xp.clone(), xa.clone(), xh.clone(), xc.clone());
            let mut yb = vec![bf16::from_f32(99.0); 2048];
            let mut yh = vec![f16::from_f32(99.0); 2048];
            let (mut y, mut z) = (vec![-1f32; 512], vec![-1f32; 512]);
            let bufs = [
                raw(&mut xp),
                raw(&mut xa),
                raw(&mut xh),
                raw(&mut xc),
                raw(&mut yb),
                raw(&mut yh),
                raw(&mut y),
                raw(&mut z),
            ];
            run(
                &lib,
                &bufs,
                &[u64::from(rows), u64::from(cols)],
                [1, 1, 1],
                0,
                1,
            );
            let yb: Vec<f32> = yb.iter().map(|v| v.to_f32()).collect();
            assert_eq!(yb, p, "{cpu} {rows} x {cols}: tile_load_pairs");
            assert_eq!(yh, want_yh, "{cpu} {rows} x {cols}: tile_store_pairs");
            assert_eq!(y, want_y, "{cpu} {rows} x {cols}: bf16 dot");
            assert_eq!(z, want_z, "{cpu} {rows} x {cols}: f16 dot");
        }
    }
}

/// `(n, m, k)` for the fused K loop tests (16 x 32 tiles, K steps of 32, K up to
/// [`FUSED_K_MAX`]): whole steps, a partial last step, short rows, short columns, no steps,
/// one value of K, and 129 whole steps (the host's chunks of steps: 128 and 1 where a step's
/// `b` is 2 KiB of bf16, 64, 64 and 1 where it is 4 KiB of f32).
const FUSED_K_SHAPES: [(usize, usize, usize); 9] = [
    (16, 32, 96),
    (16, 32, 160),
    (16, 32, 32),
    (16, 32, 100),
    (11, 32, 96),
    (16, 20, 64),
    (16, 32, 0),
    (16, 32, 1),
    (16, 32, FUSED_K_MAX),
];

/// The largest K of [`FUSED_K_SHAPES`].
const FUSED_K_MAX: usize = 129 * 32;

/// A dot's K loop ([`kernels::TILE_FUSED_K_SRC`]) run in one pass per register block where
/// every step's windows are whole (whole K steps, `n` and `m` filling the tiles) and as
/// written elsewhere (a partial last step, short rows or columns, no steps) gives the
/// reference's sums on every level. Small integers make every sum exact, so any order gives
/// the same bits; with sums that round, the levels that run the dot as FMAs give the
/// reference's bits too (its order). With a constant step the AVX512-BF16 levels emit the
/// dot twice (fused and as written), with a run-time step once.
#[test]
fn fused_k_loops_match_the_reference_on_every_cpu() {
    let k = kernels::from_source(kernels::TILE_FUSED_K_SRC);
    let dots = |k: &Kernel| {
        host_llvm_text(&lse_dsl::wil::transform(k), "x86-64-v4-bf16")
            .matches("call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(")
            .count()
    };
    let runtime_step = kernels::from_source(
        &kernels::TILE_FUSED_K_SRC.replace("step_by(32)", "step_by(m / m * 32)"),
    );
    assert_eq!(dots(&k), 2 * dots(&runtime_step));
    let small = |i: usize, seed: usize| ((i * 5 + seed) % 9) as f32 - 4.0;
    let rough = |i: usize, seed: usize| ((i * 37 + seed * 11) % 101) as f32 / 17.0 - 2.9;
    let fma_levels = ["x86-64", "x86-64-v3", "x86-64-v4"];
    let kmax = FUSED_K_MAX;
    let y0: Vec<f32> = (0..16 * 32).map(|i| small(i, 3) * 10.0).collect();
    // Small integers on every level; values whose sums round on the levels that run the dot
    // as FMAs (the pairs `b` read in place and widened per K pair).
    let values: [fn(usize, usize) -> f32; 2] = [small, rough];
    for (val, cpus) in values.into_iter().zip([&HOST_CPUS[..], &fma_levels]) {
        let w: Vec<bf16> = (0..16 * kmax).map(|i| bf16::from_f32(val(i, 1))).collect();
        let x: Vec<bf16> = (0..kmax * 32)
            .map(|i| bf16::from_f32(val(i / 3, 2)))
            .collect();
        for (n, m, kk) in FUSED_K_SHAPES {
            let w: Vec<bf16> = w[..16 * kk].to_vec();
            // xp[(k / 2)][c][k % 2] = x[k][c]
            let mut xp = vec![bf16::ZERO; kmax * 32];
            for kr in 0..kk {
                for c in 0..32 {
                    xp[(kr / 2) * 64 + 2 * c + kr % 2] = x[kr * 32 + c];
                }
            }
            // The reference's order: each pair's odd k first.
            let mut want = y0.clone();
            for r in 0..n {
                for c in 0..m {
                    let order = (0..kk.div_ceil(2)).flat_map(|i| [2 * i + 1, 2 * i]);
                    let at = &mut want[r * 32 + c];
                    *at = order.filter(|&j| j < kk).fold(*at, |acc, j| {
                        w[r * kk + j].to_f32().mul_add(x[j * 32 + c].to_f32(), acc)
                    });
                }
            }
            for cpu in cpus {
                let (Some(lib), _) = load(&k, cpu) else {
                    continue;
                };
                let (mut xp, mut w, mut y) = (xp.clone(), w.clone(), y0.clone());
                let bufs = [raw(&mut xp), raw(&mut w), raw(&mut y)];
                let scalars = [m as u64, n as u64, kk as u64];
                run(&lib, &bufs, &scalars, [1, 1, 1], 0, 1);
                assert_eq!(y, want, "{cpu}: n {n}, m {m}, k {kk}");
            }
        }
    }
}

/// An f32 dot's K loop ([`kernels::TILE_FUSED_F32_K_SRC`]) with `a` loaded from bf16 rows
/// and `b` from f32 rows: on the levels with FMA the host stores `a` as bf16, reads both in
/// place and runs the loop in one pass per register block where every step's windows are
/// whole, and as written elsewhere (a partial last step, short rows or columns, no steps).
/// Every level gives the reference's bits (one `fma` per product, in increasing k; special weights
/// among them, a NaN's payload aside).
#[test]
fn fused_f32_k_loops_with_bf16_rows_match_the_reference_on_every_cpu() {
    let k = kernels::from_source(kernels::TILE_FUSED_F32_K_SRC);
    let text = |k: &Kernel, cpu: &str| host_llvm_text(&lse_dsl::wil::transform(k), cpu);
    let fmas = |k: &Kernel| {
        text(k, "x86-64-v4")
            .matches("call <16 x float> @llvm.fma.v16f32(")
            .count()
    };
    let runtime_step = kernels::from_source(
        &kernels::TILE_FUSED_F32_K_SRC.replace("step_by(32)", "step_by(m / m * 32)"),
    );
    assert_eq!(fmas(&k), 2 * fmas(&runtime_step));
    // `a` is a 16-bit array where FMA runs the dot, an f32 one elsewhere.
    assert!(text(&k, "x86-64-v3").contains("[512 x i16]"));
    assert!(!text(&k, "x86-64").contains("[512 x i16]"));
    let val = |i: usize, seed: usize| ((i * 37 + seed * 11) % 101) as f32 / 17.0 - 2.9;
    let kmax = FUSED_K_MAX;
    let mut w: Vec<bf16> = (0..16 * kmax).map(|i| bf16::from_f32(val(i, 1))).collect();
    // A signaling NaN, an infinity, a subnormal and a negative zero, at even and odd K (the
    // host reads the rows a K pair at a time): the NaN and the infinity fill a row of `y`.
    for (at, bits) in [(5, 0x7f81), (162, 0x7f80), (327, 1), (480, 0x8000)] {
        w[at] = bf16::from_bits(bits);
    }
    let x: Vec<f32> = (0..kmax * 32).map(|i| val(i, 2)).collect();
    let y0: Vec<f32> = (0..16 * 32).map(|i| val(i, 3) * 10.0).collect();
    for (n, m, kk) in FUSED_K_SHAPES {
        let w: Vec<bf16> = w[..16 * kk].to_vec();
        let mut want = y0.clone();
        for r in 0..n {
            for c in 0..m {
                want[r * 32 + c] = (0..kk).fold(want[r * 32 + c], |acc, j| {
                    w[r * kk + j].to_f32().mul_add(x[j * 32 + c], acc)
                });
            }
        }
        for cpu in HOST_CPUS {
            let (Some(lib), _) = load(&k, cpu) else {
                continue;
            };
            let (mut x, mut w, mut y) = (x.clone(), w.clone(), y0.clone());
            let bufs = [raw(&mut x), raw(&mut w), raw(&mut y)];
            let scalars = [m as u64, n as u64, kk as u64];
            run(&lib, &bufs, &scalars, [1, 1, 1], 0, 1);
            // The same bits, but that a NaN's payload may come from either NaN operand.
            let bits = |v: &f32| {
                if v.is_nan() {
                    f32::NAN.to_bits()
                } else {
                    v.to_bits()
                }
            };
            let got: Vec<u32> = y.iter().map(bits).collect();
            let want: Vec<u32> = want.iter().map(bits).collect();
            assert_eq!(got, want, "{cpu}: n {n}, m {m}, k {kk}");
        }
    }
}

/// bf16 and f16 dot operands ([`kernels::TILE_HALF_DOT_SRC`]) with zeros, subnormals,
/// infinities and NaNs (a signaling bf16 NaN among them), whole and ragged windows: on the
/// levels with FMA the host stores them widened to f32 (their loads widen, the dots read f32),
/// and every level agrees with the reference: bit for bit where no matrix instruction runs
/// the bf16 dot, within `k 2^-24 sum |a_j b_j|` of an f64 product of the same operands where
/// one does (`vdpbf16ps`, AMX), and NaN or infinite exactly where the reference is.
#[test]
fn widened_half_dot_operands_match_the_reference_on_every_cpu() {
    use lse_dsl::rt::tile;
    let k = kernels::from_source(kernels::TILE_HALF_DOT_SRC);
    let w = lse_dsl::wil::transform(&k);
    let allocas = |cpu: &str, ty: &str| {
        host_llvm_text(&w, cpu)
            .matches(&format!("[1024 x {ty}]"))
            .count()
    };
    // The four operand tiles are f32 arrays on the FMA levels only.
    assert_eq!(
        allocas("x86-64-v3", "float"),
        allocas("x86-64", "float") + 4
    );
    // Operands: finite values with a few specials in rows 3, 5, 6 and 7 of `x` and column 2
    // of `w` (a product of an infinity and a zero, a NaN, a signaling bf16 NaN, subnormals);
    // the finite ones in [-2, 2), from a seeded hash.
    let values = |seed: u32, bits: fn(f32) -> u16| -> Vec<u16> {
        (0..2048u32)
            .map(|i| bits(((i ^ seed).wrapping_mul(2_654_435_761) >> 9) as f32 / 4_194_304.0 - 2.0))
            .collect()
    };
    let to_bf16: fn(f32) -> u16 = |v| bf16::from_f32(v).to_bits();
    let to_f16: fn(f32) -> u16 = |v| f16::from_f32(v).to_bits();
    let (mut xb, mut wb, mut xh, mut wh) = (
        values(1, to_bf16),
        values(2, to_bf16),
        values(3, to_f16),
        values(4, to_f16),
    );
    xb[3 * 64 + 5] = 0x7f81; // a signaling NaN
    xb[5 * 64 + 40] = bf16::INFINITY.to_bits();
    wb[2 * 64 + 40] = 0; // times the infinity: NaN in y[5][2]
    wb[2 * 64 + 7] = bf16::from_f32(-3e-39).to_bits();
    xh[6 * 64 + 9] = f16::NEG_INFINITY.to_bits();
    xh[7 * 64 + 11] = f16::from_f32(6e-8).to_bits();
    wh[20 * 32 + 2] = f16::NAN.to_bits();
    for (m, n) in [(32u32, 32u32), (7, 19)] {
        let mut acc = vec![0f32; 1024];
        let mut bound = vec![(0f64, 0f64); 1024];
        for k0 in [0u32, 32] {
            let bf = |v: &[u16], i: u32| bf16::from_bits(v[i as usize]).to_f32();
            let hf = |v: &[u16], i: u32| f16::from_bits(v[i as usize]).to_f32();
            let loaded = |at: Window, read: &dyn Fn(u32) -> f32| {
                let mut t = vec![0f32; 1024];
                tile::load(&mut t, 32, at, read, |v| v);
                t
            };
            let a = loaded(window(k0, 64, m, 32, false), &|i| bf(&xb, i));
            let b = loaded(window(k0, 64, 32, n, true), &|i| bf(&wb, i));
            let c = loaded(window(k0, 64, m, 32, false), &|i| hf(&xh, i));
            let d = loaded(window(k0 * 32, 32, 32, n, false), &|i| hf(&wh, i));
            tile::dot(&mut acc, &a, &b, 32, 32, true);
            tile::dot(&mut acc, &c, &d, 32, 32, false);
            add_products(&mut bound, &a, &b);
            add_products(&mut bound, &c, &d);
        }
        let want = stored_block(&acc, m, n);
        assert!(want.iter().any(|v| v.is_nan()) && want.iter().any(|v| v.is_infinite()));
        for cpu in HOST_CPUS {
            let (Some(lib), _) = load(&k, cpu) else {
                continue;
            };
            let (mut xb, mut wb, mut xh, mut wh) = (xb.clone(), wb.clone(), xh.clone(), wh.clone());
            let mut y = vec![0f32; (m * 32) as usize];
            let bufs = [
                raw(&mut xb),
                raw(&mut wb),
                raw(&mut xh),
                raw(&mut wh),
                raw(&mut y),
            ];
            run(&lib, &bufs, &[u64::from(m), u64::from(n)], [1, 1, 1], 0, 1);
            assert_dot_matches(cpu, &format!("m={m} n={n}"), &y, &want, &bound);
        }
    }
}

/// Windows on a shared array are never prefetched (it is in the cache already), even in a
/// loop whose next offset is safe to compute; the loads still copy the right rows.
#[test]
fn shared_array_windows_are_not_prefetched() {
    let k = kernels::from_source(kernels::TILE_SHARED_LOOP_SRC);
    let w = lse_dsl::wil::transform(&k);
    let x: Vec<f32> = (0..256).map(|i| i as f32 * 0.5).collect();
    for cpu in HOST_CPUS {
        let text = host_llvm_text(&w, cpu);
        assert!(!text.contains("llvm.prefetch"), "{cpu}: {text}");
        let (Some(lib), _) = load(&k, cpu) else {
            continue;
        };
        let (mut xs, mut y) = (x.clone(), vec![0f32; 256]);
        let bufs = [raw(&mut xs), raw(&mut y)];
        run(&lib, &bufs, &[16], [1, 1, 1], 0, 1);
        assert_eq!(y, x, "{cpu}");
    }
}

/// `w` (`[32, 128]`) and `x` (`[48, 128]`) of xorshift values in `-range..=range`, seeded.
fn int_dot_operands(seed: u32, range: i32) -> (Vec<i32>, Vec<i32>) {
    let mut state = seed;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        (state % (2 * range as u32 + 1)) as i32 - range
    };
    let w: Vec<i32> = (0..32 * 128).map(|_| next()).collect();
    let x: Vec<i32> = (0..48 * 128).map(|_| next()).collect();
    (w, x)
}

/// Runs the integer dot test kernel `k` (`w`, `x`, `y` f32, `s` i32; `m`, `n`) on every host
/// level this CPU supports and checks both outputs against `want` (`[48, 32]`).
fn int_dot_matches_on_every_cpu(
    k: &Kernel,
    w: &[i32],
    x: &[i32],
    (m, n): (u32, u32),
    want: &[i32],
) {
    for cpu in HOST_CPUS {
        let (Some(lib), _) = load(k, cpu) else {
            continue;
        };
        let (mut ws, mut xs) = (w.to_vec(), x.to_vec());
        let (mut y, mut s) = (vec![0f32; 48 * 32], vec![0i32; 48 * 32]);
        let bufs = [raw(&mut ws), raw(&mut xs), raw(&mut y), raw(&mut s)];
        run(&lib, &bufs, &[u64::from(m), u64::from(n)], [1, 1, 1], 0, 1);
        assert_eq!(s, want, "{cpu} m={m} n={n}");
        let as_f32: Vec<f32> = want.iter().map(|&v| v as f32).collect();
        assert_eq!(y, as_f32, "{cpu} m={m} n={n}");
    }
}

/// Integer tiles on every host level: i32 values wrap to i16 as they load, products are
/// exact and sums wrap in i32 (the values make them overflow), so every level, the
/// `vpdpwssd` path included, equals the definition bit for bit; whole and partial windows.
#[test]
fn integer_tile_dots_match_the_definition_on_every_cpu() {
    let k = kernels::from_source(kernels::TILE_INT_DOT_SRC);
    let (w, x) = int_dot_operands(0x9e37_79b9, 40_000);
    for (m, n) in [(48u32, 32u32), (37, 19)] {
        let mut want = vec![0i32; 48 * 32];
        for r in 0..m as usize {
            for c in 0..n as usize {
                let dot = (0..128).fold(0i32, |s, kk| {
                    let p = i32::from(x[r * 128 + kk] as i16) * i32::from(w[c * 128 + kk] as i16);
                    s.wrapping_add(p)
                });
                want[r * 32 + c] = dot.wrapping_mul(2);
            }
        }
        int_dot_matches_on_every_cpu(&k, &w, &x, (m, n), &want);
    }
}

/// On the levels with AVX512-VNNI an i16 dot whose shapes suit it runs on `vpdpwssd`.
#[test]
fn integer_tile_dots_use_vpdpwssd_where_the_level_has_it() {
    let k = kernels::from_source(kernels::TILE_INT_DOT_SRC);
    let w = lse_dsl::wil::transform(&k);
    for cpu in HOST_CPUS {
        let text = host_llvm_text(&w, cpu);
        let vnni = lse_dsl::rt::host_level_target(cpu).is_some_and(|(_, f)| f.contains("vnni"));
        assert_eq!(text.contains("vpdpwssd"), vnni, "{cpu}");
    }
}

/// Byte tiles on every host level: i32 values wrap to i8 or u8 as they load, products are
/// exact and sums wrap in i32, a scaled dot multiplies each column's sum per group of K (from
/// its row's offset for the group, where it has one) by its scale for the group, so
/// every level, the `vpdpbusd` path (both operand orders) included, equals the definition bit
/// for bit; whole and partial windows, a packed window's `a` read in place when whole.
#[test]
fn byte_tile_dots_match_the_definition_on_every_cpu() {
    let k = kernels::from_source(kernels::TILE_BYTE_DOT_SRC);
    let (w, x) = int_dot_operands(0x2545_f491, 2_000);
    fn i8_(v: i32) -> i32 {
        i32::from(v as i8)
    }
    fn u8_(v: i32) -> i32 {
        i32::from(v as u8)
    }
    for (m, n) in [(48u32, 32u32), (37, 19)] {
        let mut want = vec![0i32; 48 * 32];
        for r in 0..m as usize {
            for c in 0..n as usize {
                let dot = |xa: fn(i32) -> i32, wb: fn(i32) -> i32| {
                    (0..128).fold(0i32, |s, kk| {
                        s.wrapping_add(xa(x[r * 128 + kk]) * wb(w[c * 128 + kk]))
                    })
                };
                // Per K step of 64 the scaled dot is scaled; the scale is linear, so over both
                // steps too.
                let scaled = dot(i8_, u8_).wrapping_mul(c as i32 - 9);
                // With row `r`'s offset `3 r - 50`, added to each K step's sum.
                let offset = 2 * (3 * r as i32 - 50);
                let offset_scaled = dot(i8_, u8_)
                    .wrapping_add(offset)
                    .wrapping_mul(c as i32 - 9);
                // Per group of 16 of each K step: row `r`'s offset for the group plus the
                // group's sum, times the column's scale for it; per group of 4, the sum
                // times the column's scale for it.
                let group = |kk0: usize, len: usize| {
                    (kk0..kk0 + len).fold(0i32, |s, kk| {
                        s.wrapping_add(i8_(x[r * 128 + kk]) * u8_(w[c * 128 + kk]))
                    })
                };
                let grouped = (0..8).fold(0i32, |s, q| {
                    let g = q % 4;
                    let (start, scale) = (w[128 + 4 * r + g], w[32 * g + c]);
                    s.wrapping_add(group(16 * q, 16).wrapping_add(start).wrapping_mul(scale))
                });
                let grouped4 = (0..32).fold(0i32, |s, q| {
                    let scale = w[320 + 32 * (q % 16) + c];
                    s.wrapping_add(group(4 * q, 4).wrapping_mul(scale))
                });
                let quad_rows = if n == 32 { 64 } else { 61 };
                let quads = (0..128)
                    .filter(|kk| kk % 64 < quad_rows)
                    .fold(0i32, |s, kk| {
                        s.wrapping_add(i8_(x[r * 128 + kk]) * u8_(w[c * 128 + kk]))
                    });
                // Column `kk` of the packed window at step `k0` is byte `kk % 4` of word
                // `k0 / 4 + kk / 4` of row `r`.
                let packed = (0..128)
                    .filter(|kk| kk % 64 < quad_rows)
                    .fold(0i32, |s, kk| {
                        let (k0, kc) = (kk / 64 * 64, kk % 64);
                        let word = x[r * 128 + k0 / 4 + kc / 4];
                        s.wrapping_add(i8_(word >> (8 * (kc % 4))) * u8_(w[c * 128 + kk]))
                    });
                want[r * 32 + c] = scaled
                    .wrapping_add(offset_scaled)
                    .wrapping_add(grouped)
                    .wrapping_add(grouped4)
                    .wrapping_add(dot(u8_, i8_))
                    .wrapping_add(dot(i8_, u8_))
                    .wrapping_add(quads)
                    .wrapping_add(packed);
            }
        }
        int_dot_matches_on_every_cpu(&k, &w, &x, (m, n), &want);
    }
}

/// Runs the one-workgroup kernel `k(x, w, s)` on every host level and checks its `s` (as long
/// as `want`) against `want`.
fn xw_kernel_matches_on_every_cpu(k: &Kernel, x: &[i32], w: &[i32], want: &[i32]) {
    for cpu in HOST_CPUS {
        let (Some(lib), _) = load(k, cpu) else {
            continue;
        };
        let (mut xs, mut ws, mut s) = (x.to_vec(), w.to_vec(), vec![0i32; want.len()]);
        run(
            &lib,
            &[raw(&mut xs), raw(&mut ws), raw(&mut s)],
            &[],
            [1, 1, 1],
            0,
            1,
        );
        assert_eq!(s, want, "{cpu}");
    }
}

/// A quads `b` tile read where it lies in a shared array only while the array holds what it
/// loaded: one the work-items overwrite before the dot is copied, one loaded after that is
/// read in place; both give the definition's sums on every host level.
#[test]
fn quads_tiles_from_shared_arrays_see_the_words_they_loaded_on_every_cpu() {
    let k = kernels::from_source(kernels::QUADS_SHARED_SRC);
    let (w, x) = int_dot_operands(0x1234_5679, 1 << 30);
    let byte = |words: &[i32], kk: usize, c: usize| {
        i32::from((words[16 * (kk / 4) + c] >> (8 * (kk % 4))) as u8)
    };
    let mut want = vec![0i32; 256];
    for r in 0..16 {
        for c in 0..16 {
            want[r * 16 + c] = (0..16).fold(0i32, |s, kk| {
                let xa = i32::from(x[r * 16 + kk] as i8);
                s.wrapping_add(xa * byte(&w[..64], kk, c))
                    .wrapping_add(xa * byte(&w[64..128], kk, c))
            });
        }
    }
    xw_kernel_matches_on_every_cpu(&k, &x, &w, &want);
}

/// Quads `b` tiles read in place from a buffer, in a K loop the host fuses with its dot,
/// give the definition's sums on every host level.
#[test]
fn quads_tiles_from_buffers_in_a_fused_k_loop_match_the_definition_on_every_cpu() {
    let k = kernels::from_source(kernels::QUADS_FUSED_SRC);
    let (w, x) = int_dot_operands(0x0bad_f00d, 1 << 30);
    let byte = |word: i32, kk: usize| (word >> (8 * (kk % 4))) as u8;
    let mut want = vec![0i32; 256];
    for r in 0..16 {
        for c in 0..16 {
            want[r * 16 + c] = (0..64).fold(0i32, |s, kk| {
                let xa = i32::from(byte(x[16 * r + kk / 4], kk) as i8);
                s.wrapping_add(xa * i32::from(byte(w[16 * (kk / 4) + c], kk)))
            });
        }
    }
    xw_kernel_matches_on_every_cpu(&k, &x, &w, &want);
}

/// `tile_store_packed` writes each element of the window as one byte (`c % 4` of word
/// `offset + r · stride + c / 4`) on every host level and leaves every other byte as it was:
/// whole and partial windows, a partial last word of a row.
#[test]
fn packed_stores_write_one_byte_per_element_on_every_cpu() {
    let k = kernels::from_source(kernels::TILE_PACKED_STORE_SRC);
    let x: Vec<i32> = (0..8 * 32).map(|i| (i * 37 % 255) - 127).collect();
    for (m, n) in [(8u32, 32u32), (5, 30), (3, 7)] {
        let y0: Vec<i32> = (0..80).map(|i| 0x5a5a_5a5a ^ (i * 0x0101_0101)).collect();
        let mut want = y0.clone();
        for r in 0..m as usize {
            for c in 0..n as usize {
                let (word, shift) = (1 + r * 9 + c / 4, 8 * (c % 4));
                want[word] = (want[word] & !(0xff << shift)) | ((x[r * 32 + c] & 0xff) << shift);
            }
        }
        for cpu in HOST_CPUS {
            let (Some(lib), _) = load(&k, cpu) else {
                continue;
            };
            let (mut xs, mut y) = (x.clone(), y0.clone());
            run(
                &lib,
                &[raw(&mut xs), raw(&mut y)],
                &[u64::from(m), u64::from(n)],
                [1, 1, 1],
                0,
                1,
            );
            assert_eq!(y, want, "{cpu} m={m} n={n}");
        }
    }
}

/// `tile_dot_dequant` on every host level, the `vpdpbusd` register blocks included (their
/// sums scaled where they are), equals the definition bit for bit: the exact integer sum of
/// each K step, then `acc + (f32(sum) + offset) · (row · col)` with one rounding each; and
/// `tile_dequant` of the steps' summed integer sums, `acc + f32(s) · (row · col)`, then
/// (the sums zeroed as that statement reads them: a `tile_zero` right after it) of the last
/// step's sums alone; then the last step's dot in 4 groups of 16 of K, each group's sum with
/// its own offsets and scales in turn; whole and partial windows, `y`'s values outside the
/// window untouched.
#[test]
fn dequantized_byte_dots_match_the_definition_on_every_cpu() {
    let k = kernels::from_source(kernels::TILE_DEQUANT_DOT_SRC);
    let (w, x) = int_dot_operands(0x6a09_e667, 300);
    let mut state = 0x3c6e_f372u32;
    let mut unit = || {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        (state % 20_001) as f32 / 10_000.0 - 1.0
    };
    // Offsets then row scales per step (96 each), then the grouped dot's offsets and row
    // scales (`[48, 4]` each).
    let sx: Vec<f32> = (0..576)
        .map(|i| {
            if (i < 192 && i % 96 < 48) || (192..384).contains(&i) {
                unit() * 4096.0
            } else {
                unit() / 64.0
            }
        })
        .collect();
    // Column scales per step (32 each), then the grouped dot's (`[4, 32]`).
    let sw: Vec<f32> = (0..192).map(|_| unit() / 32.0).collect();
    let y0: Vec<f32> = (0..48 * 32).map(|_| unit()).collect();
    for (m, n) in [(48u32, 32u32), (37, 19)] {
        let mut want = y0.clone();
        for r in 0..m as usize {
            for c in 0..n as usize {
                let (mut total, mut last) = (0i32, 0i32);
                for step in 0..2 {
                    let sum = (64 * step..64 * step + 64).fold(0i32, |s, kk| {
                        s.wrapping_add(
                            i32::from(x[r * 128 + kk] as i8) * i32::from(w[c * 128 + kk] as u8),
                        )
                    });
                    let d = sx[96 * step + 48 + r] * sw[32 * step + c];
                    want[r * 32 + c] += (sum as f32 + sx[96 * step + r]) * d;
                    total = total.wrapping_add(sum);
                    last = sum;
                }
                want[r * 32 + c] += total as f32 * (sx[96 + 48 + r] * sw[32 + c]);
                want[r * 32 + c] += last as f32 * (sx[96 + 48 + r] * sw[32 + c]);
                for g in 0..4 {
                    let sum = (64 + 16 * g..80 + 16 * g).fold(0i32, |s, kk| {
                        s.wrapping_add(
                            i32::from(x[r * 128 + kk] as i8) * i32::from(w[c * 128 + kk] as u8),
                        )
                    });
                    let d = sx[384 + r * 4 + g] * sw[64 + g * 32 + c];
                    want[r * 32 + c] += (sum as f32 + sx[192 + r * 4 + g]) * d;
                }
            }
        }
        for cpu in HOST_CPUS {
            let (Some(lib), _) = load(&k, cpu) else {
                continue;
            };
            let (mut ws, mut xs, mut sxs, mut sws) = (w.clone(), x.clone(), sx.clone(), sw.clone());
            let mut y = y0.clone();
            let bufs = [
                raw(&mut ws),
                raw(&mut xs),
                raw(&mut sxs),
                raw(&mut sws),
                raw(&mut y),
            ];
            run(&lib, &bufs, &[u64::from(m), u64::from(n)], [1, 1, 1], 0, 1);
            let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&y), bits(&want), "{cpu} m={m} n={n}");
        }
    }
}

/// On the levels with AVX512-VNNI a byte dot whose shapes suit it runs on `vpdpbusd`, a
/// dequantized one too.
#[test]
fn byte_tile_dots_use_vpdpbusd_where_the_level_has_it() {
    for src in [kernels::TILE_BYTE_DOT_SRC, kernels::TILE_DEQUANT_DOT_SRC] {
        let k = kernels::from_source(src);
        let w = lse_dsl::wil::transform(&k);
        for cpu in HOST_CPUS {
            let text = host_llvm_text(&w, cpu);
            let vnni = lse_dsl::rt::host_level_target(cpu).is_some_and(|(_, f)| f.contains("vnni"));
            assert_eq!(text.contains("vpdpbusd"), vnni, "{} {cpu}", k.name);
        }
    }
}
