//! The typed launcher `#[loom::kernel]` generates (`<kernel>::Args` and its
//! `lse_dsl::rt::Launch` impl): it names its kernel and hands the fields over in parameter
//! order, each converted by the runtime's argument type. Misuses that must not compile are in
//! `tests/ui/launch_*.rs`.

use lse_dsl::__private::half::bf16;
use lse_dsl::rt::Launch;

#[loom::kernel(name = "test.launcher", version = 2, workgroup = 32)]
fn mixed(w: &[bf16], ids: &[u32], out: &mut [f32], n: u32, bias: i32, scale: f32) {
    let i = local_id();
    if i < n {
        out[i] = to_f32(w[i]) * scale + (ids[i] as i32 + bias) as f32;
    }
}

#[loom::kernel(name = "test.launcher_generic", version = 1, workgroup = 32, elem = [bf16, f32])]
fn widen<W>(x: &[W], out: &mut [f32], n: u32) {
    let i = local_id();
    if i < n {
        out[i] = to_f32(x[i]);
    }
}

/// What a runtime would convert each field into: here, a description of it.
#[derive(Debug, PartialEq)]
enum Seen {
    Read(&'static str, usize),
    Write(&'static str, usize),
    U32(u32),
    I32(i32),
    F32(f32),
}

impl From<&Vec<bf16>> for Seen {
    fn from(v: &Vec<bf16>) -> Self {
        Seen::Read("bf16", v.len())
    }
}

impl From<&Vec<u32>> for Seen {
    fn from(v: &Vec<u32>) -> Self {
        Seen::Read("u32", v.len())
    }
}

impl From<&[f32]> for Seen {
    fn from(v: &[f32]) -> Self {
        Seen::Read("f32", v.len())
    }
}

impl From<&mut Vec<f32>> for Seen {
    fn from(v: &mut Vec<f32>) -> Self {
        Seen::Write("f32", v.len())
    }
}

impl From<u32> for Seen {
    fn from(v: u32) -> Self {
        Seen::U32(v)
    }
}

impl From<i32> for Seen {
    fn from(v: i32) -> Self {
        Seen::I32(v)
    }
}

impl From<f32> for Seen {
    fn from(v: f32) -> Self {
        Seen::F32(v)
    }
}

#[test]
fn args_name_their_kernel_and_convert_in_parameter_order() {
    let w = vec![bf16::ONE; 3];
    let ids = vec![1u32; 3];
    let mut out = vec![0.0f32; 3];
    let args = mixed::Args {
        scale: 0.5,
        out: &mut out,
        ids: &ids,
        w: &w,
        bias: -7,
        n: 3,
    };
    assert_eq!(Launch::<Seen>::kernel(&args).id, "test.launcher.v2");
    let seen: Vec<Seen> = args.into_args();
    assert_eq!(
        seen,
        [
            Seen::Read("bf16", 3),
            Seen::Read("u32", 3),
            Seen::Write("f32", 3),
            Seen::U32(3),
            Seen::I32(-7),
            Seen::F32(0.5),
        ]
    );
}

#[test]
fn each_instance_of_a_generic_kernel_has_its_own_launcher() {
    let mut out = vec![0.0f32; 2];
    let w = vec![bf16::ONE; 2];
    let args = widen_bf16::Args {
        x: &w,
        out: &mut out,
        n: 2,
    };
    assert_eq!(
        Launch::<Seen>::kernel(&args).id,
        "test.launcher_generic_bf16.v1"
    );
    let seen: Vec<Seen> = args.into_args();
    assert_eq!(seen[0], Seen::Read("bf16", 2));
    let x = [1.0f32, 2.0];
    let args = widen_f32::Args {
        x: &x[..],
        out: &mut out,
        n: 2,
    };
    assert_eq!(
        Launch::<Seen>::kernel(&args).id,
        "test.launcher_generic_f32.v1"
    );
    let seen: Vec<Seen> = args.into_args();
    assert_eq!(seen[0], Seen::Read("f32", 2));
}
