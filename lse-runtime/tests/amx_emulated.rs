//! The AMX host level through the emulator (`lse-amx-emu`) on a CPU with AVX512-BF16 and no
//! AMX: tests can ask for the level by name (the differential tests do), `LSE_HOST_CPU` may
//! name it, and it is never what the runtime picks by itself. One test: it sets the
//! environment.

use lse_amx_emu::Amx;
use lse_runtime::device::{Device, Pool};

#[test]
fn an_emulated_amx_level_runs_when_named_and_is_never_the_default() {
    let amx = lse_amx_emu::install();
    if amx != Amx::Emulated {
        eprintln!("skipped: AMX is {amx:?} on this CPU, not emulated");
        return;
    }
    assert_eq!(
        Device::open(Pool::Host).unwrap().arch(),
        "host-x86-64-v4-bf16"
    );
    assert_eq!(
        Device::host_variant("x86-64-v4-amx").map(|d| d.arch()),
        Some("host-x86-64-v4-amx".to_string())
    );
    std::env::set_var("LSE_HOST_CPU", "x86-64-v4-amx");
    assert_eq!(
        Device::open(Pool::Host).unwrap().arch(),
        "host-x86-64-v4-amx"
    );
}
