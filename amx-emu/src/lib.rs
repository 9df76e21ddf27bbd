//! Software AMX for tests. The `x86-64-v4-amx` host level is the one our AMX CPUs run, but
//! the machines that build and test LSE often have AVX512-BF16 and no AMX, where its tile
//! instructions raise SIGILL. [`install`] adds a SIGILL handler that runs those instructions
//! (`ldtilecfg`, `tilerelease`, `tilezero`, `tileloadd`, `tileloaddt1`, `tilestored`,
//! `tdpbf16ps`: what LLVM emits for LOOM's `tile_dot`) on a per-thread tile state as Intel's
//! SDM defines them, and lets that level run (`lse_dsl::rt::declare_amx_emulated`), so the
//! level's real machine code, LLVM's tile configuration and register allocation included,
//! is tested there. A trap per instruction makes it slow: tests only, never the CLI.
//!
//! Any other SIGILL, or a tile instruction the hardware would fault on, prints what it was
//! and where, and the process dies of SIGILL as it would have without the handler.

pub mod decode;
pub mod tiles;

/// How the `x86-64-v4-amx` level runs in this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Amx {
    /// The CPU has AMX: nothing installed.
    Native,
    /// Tile instructions run in the SIGILL handler.
    Emulated,
    /// The CPU lacks the rest of the level (AVX512-BF16), or this is not x86-64 Linux.
    Unavailable,
}

/// Makes the `x86-64-v4-amx` host level runnable in this process: natively where the CPU has
/// AMX, else through the emulator where the CPU has the rest of the level. Idempotent.
pub fn install() -> Amx {
    static STATE: std::sync::OnceLock<Amx> = std::sync::OnceLock::new();
    *STATE.get_or_init(|| {
        if lse_dsl::rt::cpu_supports("x86-64-v4-amx") {
            Amx::Native
        } else if !lse_dsl::rt::cpu_supports("x86-64-v4-bf16") {
            Amx::Unavailable
        } else {
            install_handler()
        }
    })
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn install_handler() -> Amx {
    // SAFETY: a zeroed sigaction is valid; we set the handler, flags and an empty mask.
    let ok = unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = trap::on_sigill as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(libc::SIGILL, &act, std::ptr::null_mut()) == 0
    };
    if !ok {
        return Amx::Unavailable;
    }
    lse_dsl::rt::declare_amx_emulated();
    Amx::Emulated
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn install_handler() -> Amx {
    Amx::Unavailable
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
mod trap {
    use crate::decode::{decode, Insn, Mem, MAX_LEN};
    use crate::tiles::{Fault, Tiles};
    use std::cell::UnsafeCell;

    thread_local! {
        /// This thread's tiles. Constant-initialised and without a destructor, so the handler
        /// reaches it without lazy initialisation.
        static TILES: UnsafeCell<Tiles> = const { UnsafeCell::new(Tiles::INIT) };
    }

    /// The SIGILL handler: runs the instruction at the faulting `rip` and steps over it, or
    /// restores the default action so that returning re-raises SIGILL and ends the process.
    pub(super) extern "C" fn on_sigill(
        _sig: libc::c_int,
        _info: *mut libc::siginfo_t,
        ctx: *mut libc::c_void,
    ) {
        // SAFETY: the kernel passes the interrupted context of this thread.
        let gregs = unsafe { &mut (*ctx.cast::<libc::ucontext_t>()).uc_mcontext.gregs };
        let rip = gregs[libc::REG_RIP as usize] as u64;
        // SAFETY: the faulting instruction is mapped code; the longest form read is within it
        // or the code that follows it.
        let code = unsafe { std::ptr::read_unaligned(rip as *const [u8; MAX_LEN]) };
        let Some(d) = decode(&code) else {
            return give_up("not an AMX instruction the emulator runs", rip);
        };
        let next = rip.wrapping_add(d.len as u64);
        // SAFETY: the addresses are the instruction's operands, valid as far as the code that
        // issued it is correct (as they must be for the hardware).
        let done = TILES.with(|t| unsafe { run(&mut *t.get(), d.insn, gregs, next) });
        match done {
            Ok(()) => gregs[libc::REG_RIP as usize] = next as i64,
            Err(Fault(why)) => give_up(why, rip),
        }
    }

    /// Runs `insn` on `t` with the interrupted registers; `next` is the following
    /// instruction's address (for rip-relative operands).
    unsafe fn run(t: &mut Tiles, insn: Insn, gregs: &[i64; 23], next: u64) -> Result<(), Fault> {
        match insn {
            Insn::LoadConfig(mem) => {
                let cfg = std::ptr::read_unaligned(address(mem, gregs, next) as *const [u8; 64]);
                t.load_config(&cfg)
            }
            Insn::Release => {
                t.release();
                Ok(())
            }
            Insn::Zero(tile) => t.zero(tile),
            Insn::Load { tile, mem } => {
                let (start, stride) = rows(mem, gregs);
                t.load(tile, start, stride)
            }
            Insn::Store { tile, mem } => {
                let (start, stride) = rows(mem, gregs);
                t.store(tile, start, stride)
            }
            Insn::DotBf16 { dst, a, b } => t.dot_bf16(dst, a, b),
        }
    }

    /// Value of x86 register `n` (0 = rax ... 15 = r15) in the interrupted context.
    fn reg(gregs: &[i64; 23], n: u8) -> u64 {
        const AT: [libc::c_int; 16] = [
            libc::REG_RAX,
            libc::REG_RCX,
            libc::REG_RDX,
            libc::REG_RBX,
            libc::REG_RSP,
            libc::REG_RBP,
            libc::REG_RSI,
            libc::REG_RDI,
            libc::REG_R8,
            libc::REG_R9,
            libc::REG_R10,
            libc::REG_R11,
            libc::REG_R12,
            libc::REG_R13,
            libc::REG_R14,
            libc::REG_R15,
        ];
        gregs[AT[n as usize] as usize] as u64
    }

    /// The effective address of an ordinary memory operand: `base + disp + (index << scale)`,
    /// the two parts [`rows`] gives, or `next + disp` when rip-relative.
    fn address(mem: Mem, gregs: &[i64; 23], next: u64) -> u64 {
        if mem.rip_relative {
            return next.wrapping_add(mem.disp as i64 as u64);
        }
        let (start, index) = rows(mem, gregs);
        start.wrapping_add(index)
    }

    /// A tile load/store operand's first row address (`base + disp`) and row stride
    /// (`index << scale`, 0 without an index register, as the SDM says).
    fn rows(mem: Mem, gregs: &[i64; 23]) -> (u64, u64) {
        let base = mem.base.map_or(0, |b| reg(gregs, b));
        let stride = mem.index.map_or(0, |i| reg(gregs, i) << mem.scale);
        (base.wrapping_add(mem.disp as i64 as u64), stride)
    }

    /// Prints `why` and `rip` (async-signal-safe: no allocation) and restores SIGILL's default
    /// action, so the instruction faults again on return and ends the process.
    fn give_up(why: &str, rip: u64) {
        let mut hex = *b"0x0000000000000000\n";
        for i in 0..16 {
            hex[2 + i] = b"0123456789abcdef"[(rip >> (60 - 4 * i) & 0xF) as usize];
        }
        // SAFETY: writes of valid buffers to stderr, and a signal() call, are allowed in a
        // handler.
        unsafe {
            let prefix = b"lse-amx-emu: SIGILL: ";
            libc::write(2, prefix.as_ptr().cast(), prefix.len());
            libc::write(2, why.as_ptr().cast(), why.len());
            libc::write(2, b" at ".as_ptr().cast(), 4);
            libc::write(2, hex.as_ptr().cast(), hex.len());
            libc::signal(libc::SIGILL, libc::SIG_DFL);
        }
    }
}
