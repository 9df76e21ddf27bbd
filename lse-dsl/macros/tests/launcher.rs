//! The typed launcher `#[loom::kernel]` generates (`<kernel>::Args` and its
//! `lse_dsl::rt::Launch` impl): it names its kernel and hands the fields over in parameter
//! order, each converted by the runtime's argument type, and checks the buffers' declared
//! lengths. Misuses that must not compile are in `tests/ui/launch_*.rs` and
//! `tests/ui/length_*.rs`.

use lse_dsl::__private::half::bf16;
use lse_dsl::rt::{Launch, LenFault, ShapeProblem};

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

/// Differences of consecutive rows' first elements: `x` `[rows, d]`, `out` `[rows - 1]`.
#[loom::kernel(name = "test.launcher_lengths", version = 1, workgroup = 32)]
fn steps(x: &[f32; rows * d], out: &mut [f32; rows - 1], rows: u32, d: u32) {
    let r = group_id();
    if local_id() == 0 && r + 1 < rows {
        out[r] = x[(r + 1) * d] - x[r * d];
    }
}

/// Labelled instances of two constants, which the input's declared length reads: `x` holds
/// `BYTES` words per `QK` outputs.
#[loom::kernel(
    name = "test.launcher_blocks",
    version = 1,
    workgroup = 32,
    consts = [small = (2, 3), large = (4, 5)]
)]
fn blocks<const QK: u32, const BYTES: u32>(x: &[u32; n / QK * BYTES], out: &mut [f32; n], n: u32) {
    let i = group_id() * group_size() + local_id();
    if i < n {
        out[i] = x[i / QK * BYTES] as f32;
    }
}

/// Each workgroup row `r` of the grid writes `out[r * d .. r * d + d]`: the output's length
/// follows the grid, not a scalar.
#[loom::kernel(name = "test.launcher_grid_lengths", version = 1, workgroup = 32)]
fn per_group(out: &mut [f32; num_groups_y() * d], d: u32) {
    for c in (0..d).step_by(group_size()) {
        if c + local_id() < d {
            out[group_id_y() * d + c + local_id()] = 1.0;
        }
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

#[test]
fn buffers_at_least_their_declared_lengths_pass_the_check() {
    let x = vec![0.0f32; 7];
    let mut out = vec![0.0f32; 2];
    let args = steps::Args {
        x: x.as_slice(),
        out: &mut out,
        rows: 3,
        d: 2,
    };
    assert_eq!(Launch::<Seen>::check_lengths(&args, [1, 1, 1]), Ok(()));
}

#[test]
fn a_buffer_shorter_than_its_declared_length_fails_the_check() {
    let x = vec![0.0f32; 5];
    let mut out = vec![0.0f32; 2];
    let args = steps::Args {
        x: x.as_slice(),
        out: &mut out,
        rows: 3,
        d: 2,
    };
    let err = Launch::<Seen>::check_lengths(&args, [1, 1, 1]).unwrap_err();
    assert_eq!((err.param, err.declared, err.len), ("x", "rows * d", 5));
    assert_eq!(err.problem, ShapeProblem::TooShort { need: 6 });
    assert_eq!(err.scalars, "rows = 3, d = 2");

    let x = vec![0.0f32; 6];
    let mut out = vec![0.0f32; 1];
    let args = steps::Args {
        x: x.as_slice(),
        out: &mut out,
        rows: 3,
        d: 2,
    };
    let err = Launch::<Seen>::check_lengths(&args, [1, 1, 1]).unwrap_err();
    assert_eq!((err.param, err.declared, err.len), ("out", "rows - 1", 1));
}

#[test]
fn a_length_reads_each_instances_constants() {
    assert_eq!(blocks_small::KERNEL.id, "test.launcher_blocks_small.v1");
    assert_eq!(blocks_large::KERNEL.id, "test.launcher_blocks_large.v1");
    let mut out = vec![0.0f32; 16];
    // 16 outputs take 8 blocks of 3 words in `small`, 4 blocks of 5 words in `large`.
    let x = vec![0u32; 23];
    let args = blocks_small::Args {
        x: &x,
        out: &mut out,
        n: 16,
    };
    let err = Launch::<Seen>::check_lengths(&args, [1, 1, 1]).unwrap_err();
    assert_eq!((err.param, err.declared, err.len), ("x", "n / 2 * 3", 23));
    assert_eq!(err.problem, ShapeProblem::TooShort { need: 24 });
    let args = blocks_large::Args {
        x: &x,
        out: &mut out,
        n: 16,
    };
    assert_eq!(Launch::<Seen>::check_lengths(&args, [1, 1, 1]), Ok(()));
    let x = vec![0u32; 19];
    let args = blocks_large::Args {
        x: &x,
        out: &mut out,
        n: 16,
    };
    let err = Launch::<Seen>::check_lengths(&args, [1, 1, 1]).unwrap_err();
    assert_eq!(
        (err.declared, err.problem),
        ("n / 4 * 5", ShapeProblem::TooShort { need: 20 })
    );
}

#[test]
fn a_declared_length_below_zero_fails_the_check_instead_of_wrapping() {
    let x: Vec<f32> = Vec::new();
    let mut out = vec![0.0f32; 4];
    let args = steps::Args {
        x: x.as_slice(),
        out: &mut out,
        rows: 0,
        d: 2,
    };
    let err = Launch::<Seen>::check_lengths(&args, [1, 1, 1]).unwrap_err();
    assert_eq!(err.param, "out");
    assert_eq!(err.problem, ShapeProblem::NoValue(LenFault::Negative));
}

#[test]
fn a_declared_length_may_read_the_grids_workgroup_counts() {
    let mut out = vec![0.0f32; 12];
    let args = per_group::Args {
        out: &mut out,
        d: 4,
    };
    assert_eq!(Launch::<Seen>::check_lengths(&args, [1, 3, 1]), Ok(()));
    let err = Launch::<Seen>::check_lengths(&args, [1, 4, 1]).unwrap_err();
    assert_eq!((err.param, err.declared), ("out", "num_groups_y() * d"));
    assert_eq!(err.problem, ShapeProblem::TooShort { need: 16 });
    assert_eq!(err.scalars, "num_groups_y() = 4, d = 4");
}
