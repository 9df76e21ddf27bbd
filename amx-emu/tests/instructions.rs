//! The emulator under real instructions: inline assembly issues AMX instructions, which run
//! in the SIGILL handler on CPUs without AMX (natively where the CPU has it), and the results
//! are checked against plain Rust. Cases whose sums are exact in f32, so every summation
//! order gives the same bits.
#![cfg(all(target_arch = "x86_64", target_os = "linux"))]

use half::bf16;
use lse_amx_emu::tiles::palette1;
use lse_amx_emu::{install, Amx};
use std::arch::asm;

/// Whether the instructions can run here; prints why not otherwise.
fn runnable() -> bool {
    let amx = install();
    if amx == Amx::Unavailable {
        eprintln!("skipped: this CPU has neither AMX nor AVX512-BF16");
    }
    amx != Amx::Unavailable
}

/// `acc (m x n, stride acc_stride floats) += a (m x 2k bf16) b (k x 2n bf16)`, the operands
/// and accumulator loaded with `tileloadd` (a at a byte displacement of 8 from its base), the
/// product by `tdpbf16ps`, stored by `tilestored`.
fn tile_product(
    m: usize,
    n: usize,
    k: usize,
    a: &[bf16],
    b: &[bf16],
    acc: &mut [f32],
    acc_stride: usize,
) {
    let cfg = palette1(&[
        (m as u8, 4 * n as u16),
        (m as u8, 4 * k as u16),
        (k as u8, 4 * n as u16),
    ]);
    let a_base = a.as_ptr().cast::<u8>().wrapping_sub(8);
    // SAFETY: the configuration's shapes match the buffers: acc holds m rows of n floats at
    // its stride, a m rows of 2k bf16 (from a_base + 8), b k rows of 2n bf16.
    unsafe {
        asm!(
            "ldtilecfg [{cfg}]",
            "tileloadd tmm0, [{acc} + {acc_stride}*1]",
            "tileloadd tmm1, [{a} + {a_stride}*1 + 8]",
            "tileloadd tmm2, [{b} + {b_stride}*1]",
            "tdpbf16ps tmm0, tmm1, tmm2",
            "tilestored [{acc} + {acc_stride}*1], tmm0",
            "tilerelease",
            cfg = in(reg) cfg.as_ptr(),
            acc = in(reg) acc.as_mut_ptr(),
            acc_stride = in(reg) 4 * acc_stride,
            a = in(reg) a_base,
            a_stride = in(reg) 4 * k,
            b = in(reg) b.as_ptr(),
            b_stride = in(reg) 4 * n,
        );
    }
}

#[test]
fn a_tile_product_equals_the_plain_product_on_full_and_ragged_tiles() {
    if !runnable() {
        return;
    }
    for (m, n, k) in [(16, 16, 16), (3, 5, 7), (1, 1, 1), (16, 9, 2)] {
        let a: Vec<bf16> = (0..m * 2 * k)
            .map(|i| bf16::from_f32((i % 13) as f32 - 6.0))
            .collect();
        let b: Vec<bf16> = (0..k * 2 * n)
            .map(|i| bf16::from_f32((i % 9) as f32 * 0.5 - 2.0))
            .collect();
        let stride = n + 3;
        let mut acc: Vec<f32> = (0..m * stride).map(|i| i as f32).collect();
        let mut want = acc.clone();
        for r in 0..m {
            for c in 0..n {
                for kk in 0..2 * k {
                    want[r * stride + c] +=
                        a[r * 2 * k + kk].to_f32() * b[kk / 2 * 2 * n + 2 * c + kk % 2].to_f32();
                }
            }
        }
        tile_product(m, n, k, &a, &b, &mut acc, stride);
        assert_eq!(
            acc, want,
            "{m} x {n} x {k}: the padding columns must stay as they were"
        );
    }
}

#[test]
fn tilezero_clears_a_tile_and_each_thread_has_its_own_tiles() {
    if !runnable() {
        return;
    }
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            std::thread::spawn(move || {
                let cfg = palette1(&[(2, 8)]);
                let mut out = [f32::NAN; 4];
                let fill = [t as f32 + 1.0; 4];
                for _ in 0..200 {
                    // SAFETY: tile 0 is 2 rows of 8 bytes; `fill` and `out` hold 2 rows of 2
                    // floats at a stride of 8 bytes.
                    unsafe {
                        asm!(
                            "ldtilecfg [{cfg}]",
                            "tileloadd tmm0, [{fill} + {stride}*1]",
                            "tilestored [{out} + {stride}*1], tmm0",
                            cfg = in(reg) cfg.as_ptr(),
                            fill = in(reg) fill.as_ptr(),
                            out = in(reg) out.as_mut_ptr(),
                            stride = in(reg) 8usize,
                        );
                    }
                    assert_eq!(out, fill, "another thread's tile leaked into this one");
                    // SAFETY: as above.
                    unsafe {
                        asm!(
                            "tilezero tmm0",
                            "tilestored [{out} + {stride}*1], tmm0",
                            "tilerelease",
                            out = in(reg) out.as_mut_ptr(),
                            stride = in(reg) 8usize,
                        );
                    }
                    assert_eq!(out, [0.0; 4]);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn a_tile_load_without_an_index_register_repeats_its_first_row() {
    if !runnable() {
        return;
    }
    let cfg = palette1(&[(4, 8)]);
    let row = [1.5f32, -2.0];
    let mut out = [0f32; 8];
    // SAFETY: tile 0 is 4 rows of 8 bytes: read from `row` (stride 0), written to `out`
    // (4 rows of 2 floats at a stride of 8 bytes).
    unsafe {
        asm!(
            "ldtilecfg [{cfg}]",
            "tileloadd tmm0, [{row}]",
            "tilestored [{out} + {stride}*1], tmm0",
            "tilerelease",
            cfg = in(reg) cfg.as_ptr(),
            row = in(reg) row.as_ptr(),
            out = in(reg) out.as_mut_ptr(),
            stride = in(reg) 8usize,
        );
    }
    assert_eq!(out, [1.5, -2.0, 1.5, -2.0, 1.5, -2.0, 1.5, -2.0]);
}

/// The child side of [`other_illegal_instructions_still_end_the_process`]: with the handler
/// installed, runs `ud2` or a tile load before any configuration.
#[test]
fn child_runs_an_illegal_instruction() {
    let Ok(what) = std::env::var("LSE_AMX_EMU_CHILD") else {
        return;
    };
    install();
    let buf = [0u8; 64];
    // SAFETY: both instructions fault before touching memory.
    unsafe {
        match what.as_str() {
            "ud2" => asm!("ud2"),
            _ => asm!("tileloadd tmm0, [{p} + {p}*1]", p = in(reg) buf.as_ptr()),
        }
    }
    unreachable!("{what} returned");
}

#[test]
fn other_illegal_instructions_still_end_the_process() {
    if install() != Amx::Emulated {
        eprintln!("skipped: the emulator is not in use on this CPU");
        return;
    }
    for (what, why) in [
        ("ud2", "not an AMX instruction the emulator runs"),
        ("load", "tile not configured"),
    ] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "child_runs_an_illegal_instruction",
                "--nocapture",
            ])
            .env("LSE_AMX_EMU_CHILD", what)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(out.status.signal(), Some(libc::SIGILL), "{what}: {stderr}");
        assert!(
            stderr.contains(&format!("lse-amx-emu: SIGILL: {why} at 0x")),
            "{what}: {stderr}"
        );
    }
}
