//! Hand-built LOOM IR kernels for the codegen tests.

use lse_dsl::ir::*;

pub fn var(v: VarId, ty: Ty) -> Expr {
    Expr::new(ExprKind::Var(v), ty)
}
pub fn param(p: ParamId, ty: Ty) -> Expr {
    Expr::new(ExprKind::Param(p), ty)
}
pub fn bin(op: BinOp, a: Expr, b: Expr) -> Expr {
    let ty = if op.is_comparison() || matches!(op, BinOp::And | BinOp::Or) {
        Ty::Bool
    } else {
        a.ty
    };
    Expr::new(ExprKind::Binary(op, Box::new(a), Box::new(b)), ty)
}
pub fn builtin(b: Builtin) -> Expr {
    Expr::new(ExprKind::Builtin(b), Ty::U32)
}
pub fn load(buf: ParamId, index: Expr, ty: Ty) -> Expr {
    Expr::new(
        ExprKind::Load {
            buf,
            index: Box::new(index),
        },
        ty,
    )
}
pub fn math(f: MathFn, args: Vec<Expr>, ty: Ty) -> Expr {
    Expr::new(ExprKind::Math(f, args), ty)
}
pub fn local(name: &str, ty: Ty) -> Local {
    Local {
        name: name.into(),
        ty,
    }
}
pub fn buffer(name: &str, elem: Ty, access: Access) -> Param {
    Param::Buffer {
        name: name.into(),
        elem,
        access,
        len: None,
    }
}
pub fn scalar(name: &str, ty: Ty) -> Param {
    Param::Scalar {
        name: name.into(),
        ty,
    }
}
fn kernel(
    fn_name: &str,
    wg: u32,
    params: Vec<Param>,
    shared: Vec<SharedArray>,
    locals: Vec<Local>,
    body: Block,
) -> Kernel {
    Kernel {
        fn_name: fn_name.into(),
        name: format!("test.{fn_name}"),
        version: 1,
        workgroup_size: wg,
        subgroup: None,
        targets: vec!["gfx1201".into(), "gfx1100".into(), "gfx942".into()],
        params,
        shared,
        tiles: vec![],
        locals,
        body,
    }
}

/// `gid = group_id() * 64 + local_id(); if gid < n { out[gid] = gid * scale }`
/// with params `(out: &mut [u32], n: u32, scale: u32)`.
pub fn store_id() -> Kernel {
    let gid = bin(
        BinOp::Add,
        bin(
            BinOp::Mul,
            builtin(Builtin::GroupId(0)),
            builtin(Builtin::GroupSize),
        ),
        builtin(Builtin::LocalId),
    );
    kernel(
        "k_store_id",
        64,
        vec![
            buffer("out", Ty::U32, Access::ReadWrite),
            scalar("n", Ty::U32),
            scalar("scale", Ty::U32),
        ],
        vec![],
        vec![local("gid", Ty::U32)],
        vec![
            Stmt::Let { var: 0, value: gid },
            Stmt::If {
                cond: bin(BinOp::Lt, var(0, Ty::U32), param(1, Ty::U32)),
                then_body: vec![Stmt::Store {
                    buf: 0,
                    index: var(0, Ty::U32),
                    value: bin(BinOp::Mul, var(0, Ty::U32), param(2, Ty::U32)),
                }],
                else_body: vec![],
            },
        ],
    )
}

/// Workgroup size of [`reduce`].
pub const REDUCE_WG: u32 = 64;

/// Per workgroup g (WG = 64): `v = x[g*64 + lid]`, `tile[lid] = v`, barrier,
/// `w = tile[63 - lid]`, `s = reduce_sum(w)`, `(m, mi) = argmax(w, 63 - lid)`,
/// `b = broadcast(w, 5)`, `mx = reduce_max(w)`; work-item 0 writes
/// `sums[g] = s`, `maxes[g] = m`, `idx[g] = mi`, `bc[g] = b`, `maxv[g] = mx`.
/// Params: `(x: &[f32], sums: &mut [f32], maxes: &mut [f32], idx: &mut [u32], bc: &mut [f32], maxv: &mut [f32])`.
pub fn reduce() -> Kernel {
    let wg = REDUCE_WG;
    let lid = || builtin(Builtin::LocalId);
    let g = || builtin(Builtin::GroupId(0));
    let rev = || bin(BinOp::Sub, Expr::const_u32(wg - 1), lid());
    let f = Ty::F32;
    let w = || var(1, f);
    let store0 = |buf: ParamId, value: Expr| Stmt::Store {
        buf,
        index: g(),
        value,
    };
    kernel(
        "k_reduce",
        wg,
        vec![
            buffer("x", f, Access::Read),
            buffer("sums", f, Access::ReadWrite),
            buffer("maxes", f, Access::ReadWrite),
            buffer("idx", Ty::U32, Access::ReadWrite),
            buffer("bc", f, Access::ReadWrite),
            buffer("maxv", f, Access::ReadWrite),
        ],
        vec![SharedArray {
            name: "tile".into(),
            elem: f,
            len: wg,
        }],
        vec![
            local("v", f),
            local("w", f),
            local("s", f),
            local("m", f),
            local("mi", Ty::U32),
            local("b", f),
            local("mx", f),
        ],
        vec![
            Stmt::Let {
                var: 0,
                value: load(
                    0,
                    bin(BinOp::Add, bin(BinOp::Mul, g(), Expr::const_u32(wg)), lid()),
                    f,
                ),
            },
            Stmt::SharedStore {
                array: 0,
                index: lid(),
                value: var(0, f),
            },
            Stmt::Barrier,
            Stmt::Let {
                var: 1,
                value: Expr::new(
                    ExprKind::SharedLoad {
                        array: 0,
                        index: Box::new(rev()),
                    },
                    f,
                ),
            },
            Stmt::Collective {
                op: CollectiveOp::ReduceSum,
                dst: vec![2],
                args: vec![w()],
            },
            Stmt::Collective {
                op: CollectiveOp::Argmax,
                dst: vec![3, 4],
                args: vec![w(), rev()],
            },
            Stmt::Collective {
                op: CollectiveOp::Broadcast,
                dst: vec![5],
                args: vec![w(), Expr::const_u32(5)],
            },
            Stmt::Collective {
                op: CollectiveOp::ReduceMax,
                dst: vec![6],
                args: vec![w()],
            },
            Stmt::If {
                cond: bin(BinOp::Eq, lid(), Expr::const_u32(0)),
                then_body: vec![
                    store0(1, var(2, f)),
                    store0(2, var(3, f)),
                    store0(3, var(4, Ty::U32)),
                    store0(4, var(5, f)),
                    store0(5, var(6, f)),
                ],
                else_body: vec![],
            },
        ],
    )
}

/// `i = group_id() * 32 + local_id()`; if `i < n`:
/// `f = bf16_to_f32(x[i]) * s`, `out_f[i] = f`, `out_b[i] = f32_to_bf16(f)`,
/// `out_h[i] = f32_to_f16(f16_to_f32(h[i]) + f)`, `out_i[i] = f as i32` (saturating).
/// Params `(x: &[bf16], h: &[f16], out_f: &mut [f32], out_b: &mut [bf16], out_h: &mut [f16],
/// out_i: &mut [i32], n: u32, s: f32)`.
pub fn halves() -> Kernel {
    let i = || var(0, Ty::U32);
    let f = || var(1, Ty::F32);
    let gid = bin(
        BinOp::Add,
        bin(
            BinOp::Mul,
            builtin(Builtin::GroupId(0)),
            Expr::const_u32(32),
        ),
        builtin(Builtin::LocalId),
    );
    let x = math(MathFn::Bf16ToF32, vec![load(0, i(), Ty::Bf16)], Ty::F32);
    let h = math(MathFn::F16ToF32, vec![load(1, i(), Ty::F16)], Ty::F32);
    kernel(
        "k_halves",
        32,
        vec![
            buffer("x", Ty::Bf16, Access::Read),
            buffer("h", Ty::F16, Access::Read),
            buffer("out_f", Ty::F32, Access::ReadWrite),
            buffer("out_b", Ty::Bf16, Access::ReadWrite),
            buffer("out_h", Ty::F16, Access::ReadWrite),
            buffer("out_i", Ty::I32, Access::ReadWrite),
            scalar("n", Ty::U32),
            scalar("s", Ty::F32),
        ],
        vec![],
        vec![local("i", Ty::U32), local("f", Ty::F32)],
        vec![
            Stmt::Let { var: 0, value: gid },
            Stmt::If {
                cond: bin(BinOp::Lt, i(), param(6, Ty::U32)),
                then_body: vec![
                    Stmt::Let {
                        var: 1,
                        value: bin(BinOp::Mul, x, param(7, Ty::F32)),
                    },
                    Stmt::Store {
                        buf: 2,
                        index: i(),
                        value: f(),
                    },
                    Stmt::Store {
                        buf: 3,
                        index: i(),
                        value: math(MathFn::F32ToBf16, vec![f()], Ty::Bf16),
                    },
                    Stmt::Store {
                        buf: 4,
                        index: i(),
                        value: math(MathFn::F32ToF16, vec![bin(BinOp::Add, h, f())], Ty::F16),
                    },
                    Stmt::Store {
                        buf: 5,
                        index: i(),
                        value: Expr::new(ExprKind::Cast(Box::new(f())), Ty::I32),
                    },
                ],
                else_body: vec![],
            },
        ],
    )
}

/// LM-head-like product for the vectorisation check (WG = 64): work-item `lid` of group g
/// computes `out[g*64+lid] = sum_k bf16_to_f32(w[(g*64+lid)*k_len + k]) * x[k]` with a
/// sequential `for k in 0..k_len` loop. Params `(w: &[bf16], x: &[f32], out: &mut [f32], k_len: u32)`.
pub fn dot_rows() -> Kernel {
    let row = || var(0, Ty::U32);
    let acc = || var(1, Ty::F32);
    let k = || var(2, Ty::U32);
    let gid = bin(
        BinOp::Add,
        bin(
            BinOp::Mul,
            builtin(Builtin::GroupId(0)),
            Expr::const_u32(64),
        ),
        builtin(Builtin::LocalId),
    );
    let wi = bin(BinOp::Add, bin(BinOp::Mul, row(), param(3, Ty::U32)), k());
    let prod = bin(
        BinOp::Mul,
        math(MathFn::Bf16ToF32, vec![load(0, wi, Ty::Bf16)], Ty::F32),
        load(1, k(), Ty::F32),
    );
    kernel(
        "k_dot_rows",
        64,
        vec![
            buffer("w", Ty::Bf16, Access::Read),
            buffer("x", Ty::F32, Access::Read),
            buffer("out", Ty::F32, Access::ReadWrite),
            scalar("k_len", Ty::U32),
        ],
        vec![],
        vec![
            local("row", Ty::U32),
            local("acc", Ty::F32),
            local("k", Ty::U32),
        ],
        vec![
            Stmt::Let { var: 0, value: gid },
            Stmt::Let {
                var: 1,
                value: Expr::const_f32(0.0),
            },
            Stmt::For {
                var: 2,
                start: Expr::const_u32(0),
                end: param(3, Ty::U32),
                step: Expr::const_u32(1),
                body: vec![Stmt::Assign {
                    var: 1,
                    value: bin(BinOp::Add, acc(), prod),
                }],
            },
            Stmt::Store {
                buf: 2,
                index: row(),
                value: acc(),
            },
        ],
    )
}

/// [`dot_rows`] under a divergent `if`, with a second loop whose bound is loaded (so it
/// cannot be interchanged): `if row < n_rows { acc = dot; for j in 0..extra[row] { acc += 1 };
/// out[row] = acc } else { out[row] = -1 }`. Params `(w: &[bf16], x: &[f32], out: &mut [f32],
/// k_len: u32, n_rows: u32, extra: &[u32])`.
pub fn dot_rows_masked() -> Kernel {
    let mut k = dot_rows();
    k.fn_name = "k_dot_rows_masked".into();
    k.name = "test.k_dot_rows_masked".into();
    k.params.push(scalar("n_rows", Ty::U32));
    k.params.push(buffer("extra", Ty::U32, Access::Read));
    k.locals.push(local("j", Ty::U32));
    let row = || var(0, Ty::U32);
    let mut then_body = k.body[1..].to_vec();
    let store = then_body.pop().expect("dot_rows ends with its store");
    then_body.push(Stmt::For {
        var: 3,
        start: Expr::const_u32(0),
        end: load(5, row(), Ty::U32),
        step: Expr::const_u32(1),
        body: vec![Stmt::Assign {
            var: 1,
            value: bin(BinOp::Add, var(1, Ty::F32), Expr::const_f32(1.0)),
        }],
    });
    then_body.push(store);
    k.body = vec![
        k.body[0].clone(),
        Stmt::If {
            cond: bin(BinOp::Lt, row(), param(4, Ty::U32)),
            then_body,
            else_body: vec![Stmt::Store {
                buf: 2,
                index: row(),
                value: Expr::const_f32(-1.0),
            }],
        },
    ];
    k
}

/// Every elementwise and row tile statement, in the order an attention step uses them
/// (`y`, `sums` and `p` are 5 x 7, 5 and 5 x 7; `x` holds two 5 x 7 blocks, `v` a column of 5
/// then a row of 7).
pub const TILE_OPS_SRC: &str = r#"
#[loom::kernel(name = "test.tile_ops", version = 1, workgroup = 16)]
fn tile_ops(x: &[f32], v: &[f32], y: &mut [f32], sums: &mut [f32], p: &mut [bf16], s: f32) {
    let t = tile::<f32, 5, 7>();
    let other = tile::<f32, 5, 7>();
    let row = tile::<f32, 5, 1>();
    let sum = tile::<f32, 5, 1>();
    let col = tile::<f32, 1, 7>();
    let half = tile::<bf16, 5, 7>();
    tile_load(t, x, 0, 7, 5, 7);
    tile_load(other, x, 35, 7, 5, 7);
    tile_load(row, v, 0, 1, 5, 1);
    tile_load(col, v, 5, 7, 1, 7);
    tile_scale(t, s);
    tile_row_max(row, t);
    tile_sub(t, row);
    tile_exp(t);
    tile_row_sum(sum, t);
    tile_div(t, sum);
    tile_mul(t, col);
    tile_add(t, row);
    tile_max(t, other);
    tile_copy(half, t);
    tile_store(t, y, 0, 7, 5, 7);
    tile_store(sum, sums, 0, 1, 5, 1);
    tile_store(half, p, 0, 7, 5, 7);
}
"#;

/// [`TILE_OPS_SRC`] through the front end.
pub fn tile_ops() -> Kernel {
    from_source(TILE_OPS_SRC)
}

/// Row sums and maxima of a 32 x 48 tile (whole 16 x 16 blocks: the host's vectorised row
/// reductions), each starting from the value `v` holds for its row (sums, then maxima).
pub const TILE_ROW_BLOCKS_SRC: &str = r#"
#[loom::kernel(name = "test.tile_row_blocks", version = 1, workgroup = 16)]
fn tile_row_blocks(x: &[f32], v: &[f32], sums: &mut [f32], maxes: &mut [f32]) {
    let t = tile::<f32, 32, 48>();
    let sum = tile::<f32, 32, 1>();
    let max = tile::<f32, 32, 1>();
    tile_load(t, x, 0, 48, 32, 48);
    tile_load(sum, v, 0, 1, 32, 1);
    tile_load(max, v, 32, 1, 32, 1);
    tile_row_sum(sum, t);
    tile_row_max(max, t);
    tile_store(sum, sums, 0, 1, 32, 1);
    tile_store(max, maxes, 0, 1, 32, 1);
}
"#;

/// Dot operands the host may read in place and ones it must copy (`y` is 4 x 16; `x` holds a
/// 4 x 16 block; `w` a 16 x 16 block, then rows of 16 at stride 20 from element 256): `a` comes
/// from a writable buffer and is overwritten there after its load, `v` from a read-only
/// buffer through a window of `rows` rows (whole at 4, ragged below), and is dotted once
/// before any load (all zeros then).
pub const TILE_IN_PLACE_SRC: &str = r#"
#[loom::kernel(name = "test.tile_in_place", version = 1, workgroup = 16)]
fn tile_in_place(x: &mut [f32], w: &[f32], y: &mut [f32], rows: u32) {
    let a = tile::<f32, 4, 16>();
    let v = tile::<f32, 4, 16>();
    let b = tile::<f32, 16, 16>();
    let acc = tile::<f32, 4, 16>();
    tile_load(b, w, 0, 16, 16, 16);
    tile_dot(acc, v, b);
    tile_load(a, x, 0, 16, 4, 16);
    tile_store(b, x, 0, 16, 4, 16);
    tile_dot(acc, a, b);
    tile_load(v, w, 256, 20, rows, 16);
    tile_dot(acc, v, b);
    tile_store(acc, y, 0, 16, 4, 16);
}
"#;

/// Tile loads in a loop whose window offset divides by a value that is 0 one step past the
/// loop's end (`n - i` at `i = n`): `y` row `i` is `x` from element `16 / (n - i) * 16`.
pub const TILE_LOOP_OFFSETS_SRC: &str = r#"
#[loom::kernel(name = "test.tile_loop_offsets", version = 1, workgroup = 16)]
fn tile_loop_offsets(x: &[f32], y: &mut [f32], n: u32) {
    let t = tile::<f32, 1, 16>();
    for i in 0..n {
        tile_load(t, x, 16 / (n - i) * 16, 16, 1, 16);
        tile_store(t, y, i * 16, 16, 1, 16);
    }
}
"#;

/// A copy with a `prefetch` before each step, its range from scalars (the tests pass one
/// past the buffer's end, one that wraps in `u32`, an empty one and a long one).
pub const PREFETCH_SRC: &str = r#"
#[loom::kernel(name = "test.prefetch", version = 1, workgroup = 16)]
fn prefetch_copy(x: &[f32], y: &mut [f32], n: u32, ahead: u32, len: u32) {
    for i in 0..n {
        prefetch(x, (group_id() * n + i) * 16 + ahead, len);
        let j = (group_id() * n + i) * 16 + local_id();
        y[j] = x[j] * 2.0;
    }
}
"#;

/// `as i32` and `as u32` of f32 values: Rust's saturating casts.
pub const FLOAT_CASTS_SRC: &str = r#"
#[loom::kernel(name = "test.float_casts", version = 1, workgroup = 16)]
fn float_casts(x: &[f32], i: &mut [i32], u: &mut [u32], n: u32) {
    let at = group_id() * group_size() + local_id();
    if at < n {
        i[at] = x[at] as i32;
        u[at] = x[at] as u32;
    }
}
"#;

/// Tiles whose zeros a workgroup can see: `t` is loaded on even workgroups only, so an odd
/// one stores its declared zeros; `u` is loaded before every use, so its zero fill cannot be
/// seen (and the host skips it).
pub const TILE_ZERO_FILL_SRC: &str = r#"
#[loom::kernel(name = "test.tile_zero_fill", version = 1, workgroup = 16)]
fn tile_zero_fill(x: &[f32], y: &mut [f32], z: &mut [f32]) {
    let t = tile::<f32, 2, 16>();
    let u = tile::<f32, 2, 16>();
    if group_id() % 2 == 0 {
        tile_load(t, x, group_id() * 32, 16, 2, 16);
    }
    tile_store(t, y, group_id() * 32, 16, 2, 16);
    tile_load(u, x, group_id() * 32 + 1, 16, 2, 16);
    tile_store(u, z, group_id() * 32, 16, 2, 16);
}
"#;

/// bf16 and f16 as value types: arithmetic, negation and comparisons on 16-bit values.
pub const HALF_VALUES_SRC: &str = r#"
#[loom::kernel(name = "test.half_values", version = 1, workgroup = 32)]
fn half_values(a: &[bf16], b: &[bf16], c: &[f16], d: &[f16], out_b: &mut [bf16], out_h: &mut [f16], flags: &mut [u32], n: u32) {
    let i = group_id() * group_size() + local_id();
    if i < n {
        let x = a[i];
        let y = b[i];
        out_b[2 * i] = (x + y) * x - y / x;
        out_b[2 * i + 1] = -x;
        let p = c[i];
        let q = d[i];
        out_h[2 * i] = p * q - (p + q) / q;
        out_h[2 * i + 1] = -q;
        let mut f = 0u32;
        if x < y {
            f = f | 1;
        }
        if x == y {
            f = f | 2;
        }
        if p >= q {
            f = f | 4;
        }
        if p != q {
            f = f | 8;
        }
        flags[i] = f;
    }
}
"#;

/// The bit built-ins: each word read as an f32, its low 16 bits as an f16 and its bits 8..24
/// as a bf16.
pub const FROM_BITS_SRC: &str = r#"
#[loom::kernel(name = "test.from_bits", version = 1, workgroup = 32)]
fn from_bits(u: &[u32], f: &mut [f32], h: &mut [f16], b: &mut [bf16], n: u32) {
    let i = group_id() * group_size() + local_id();
    if i < n {
        f[i] = f32_from_bits(u[i]);
        h[i] = f16_from_bits(u[i]);
        b[i] = bf16_from_bits(u[i] >> 8);
    }
}
"#;

/// A kernel from LOOM source text, through the front end.
pub fn from_source(src: &str) -> Kernel {
    let mut ks = lse_dsl::frontend::kernels_in_file(src).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ks.len(), 1);
    ks.remove(0)
}

/// Every subgroup built-in, subgroups of 8 in workgroups of 32: a reversing shuffle whose
/// lane wraps modulo the subgroup size.
pub const SUBGROUPS_SRC: &str = r#"
#[loom::kernel(name = "test.subgroups", version = 1, workgroup = 32, subgroup = 8)]
fn subgroups(x: &[f32], u: &[u32], sums: &mut [f32], maxes: &mut [f32], mins: &mut [u32], shuf: &mut [f32], ids: &mut [u32]) {
    let i = group_id() * group_size() + local_id();
    let v = x[i];
    let s = subgroup_sum(v);
    let m = subgroup_max(v);
    let n = subgroup_min(u[i]);
    let r = subgroup_shuffle(v, subgroup_size() - 1 - subgroup_lane() + u[i] * 8);
    sums[i] = s;
    maxes[i] = m;
    mins[i] = n;
    shuf[i] = r;
    ids[i] = subgroup_id() * 100 + subgroup_lane();
}
"#;

/// Subgroups of 64 in workgroups of 128: wider than an RDNA wave or an NVIDIA warp (the LDS
/// path there), one CDNA wave (the shuffle path).
pub const WIDE_SUBGROUPS_SRC: &str = r#"
#[loom::kernel(name = "test.wide_subgroups", version = 1, workgroup = 128, subgroup = 64)]
fn wide_subgroups(x: &[f32], out: &mut [f32]) {
    let i = group_id() * group_size() + local_id();
    let s = subgroup_sum(x[i]);
    out[i] = subgroup_shuffle(s + x[i], 3);
}
"#;

/// [`store_id`] with two malformed statements in front: a store to a scalar parameter used
/// as a buffer, then a `!` on an f32. Only the first may be reported.
pub fn two_emit_errors() -> Kernel {
    let mut k = store_id();
    let not_a_buffer = Stmt::Store {
        buf: 1,
        index: Expr::const_u32(0),
        value: Expr::const_u32(0),
    };
    let bad_not = Stmt::Store {
        buf: 0,
        index: Expr::const_u32(0),
        value: Expr::new(
            ExprKind::Unary(UnOp::Not, Box::new(Expr::const_f32(1.0))),
            Ty::F32,
        ),
    };
    k.body.insert(0, bad_not);
    k.body.insert(0, not_a_buffer);
    k
}

/// A subgroup as wide as the workgroup: `subgroup_sum` is `reduce_sum`, bit for bit.
pub const WHOLE_SUBGROUP_SRC: &str = r#"
#[loom::kernel(name = "test.whole_subgroup", version = 1, workgroup = 16, subgroup = 16)]
fn whole_subgroup(x: &[f32], sub: &mut [f32], whole: &mut [f32], rev: &mut [f32]) {
    let i = local_id();
    sub[i] = subgroup_sum(x[i]);
    whole[i] = reduce_sum(x[i]);
    rev[i] = subgroup_shuffle(x[i], 15 - subgroup_lane());
}
"#;

/// A shared array and tiles that together take 56 KiB: over the 48 KiB of static shared
/// memory an NVIDIA block may declare, so NVPTX gives them as dynamic shared memory.
pub const WIDE_WORKGROUP_MEMORY_SRC: &str = r#"
#[loom::kernel(name = "test.wide_workgroup_memory", version = 1, workgroup = 64)]
fn wide_workgroup_memory(x: &[f32], w: &[f32], y: &mut [f32], n: u32) {
    let staged = shared::<f32>(2048);
    let a = tile::<f32, 64, 64>();
    let b = tile::<f32, 64, 64>();
    let acc = tile::<f32, 64, 64>();
    let lid = local_id();
    for j in 0u32..32u32 {
        staged[j * 64 + lid] = x[j * 64 + lid] * 2.0;
    }
    tile_load(a, staged, 0, 64, 32, 64);
    tile_load(b, w, 0, n, 64, n);
    tile_dot(acc, a, b);
    tile_store(acc, y, 0, n, 64, n);
}
"#;

/// Tile windows on f32 shared arrays (`q` holds 512 codes, `x` 512 values; `y` is 8 x 16,
/// `back` 512): the work-items dequantise `q` into `wq` (and fill `staged` with -1), `a` and
/// `b` are loaded from `wq`, then the work-items overwrite `wq` with `x` before `a` is
/// dotted (a tile keeps the values it was loaded with), `b` is reloaded transposed from the
/// new `wq` and dotted again; `acc` goes to `y` and, through windows of `rows x cols`, to
/// `staged` (and `b` transposed), which the work-items copy to `back`.
pub const TILE_SHARED_SRC: &str = r#"
#[loom::kernel(name = "test.tile_shared", version = 1, workgroup = 16)]
fn tile_shared(q: &[u32], x: &[f32], y: &mut [f32], back: &mut [f32], scale: f32, rows: u32, cols: u32) {
    let wq = shared::<f32>(512);
    let staged = shared::<f32>(512);
    let a = tile::<f32, 8, 16>();
    let b = tile::<f32, 16, 16>();
    let acc = tile::<f32, 8, 16>();
    let lid = local_id();
    for j in 0u32..32u32 {
        wq[j * 16 + lid] = (q[j * 16 + lid] as f32 - 8.0) * scale;
        staged[j * 16 + lid] = -1.0;
    }
    tile_load(a, wq, 0, 16, 8, cols);
    tile_load(b, wq, 256, 16, rows, cols);
    for j in 0u32..32u32 {
        wq[j * 16 + lid] = x[j * 16 + lid];
    }
    tile_dot(acc, a, b);
    tile_load_t(b, wq, 1, 17, rows, cols);
    tile_dot(acc, a, b);
    tile_store(acc, y, 0, 16, 8, 16);
    tile_store(acc, staged, 3, 20, rows, cols);
    tile_store_t(b, staged, 200, 16, rows, cols);
    for j in 0u32..32u32 {
        back[j * 16 + lid] = staged[j * 16 + lid];
    }
}
"#;

/// A per-work-item value set before a divergent `if` around a uniform loop that updates it:
/// the work-items outside the `if` must keep the value (`row < live` runs the loop).
pub const MASKED_CARRY_SRC: &str = r#"
#[loom::kernel(name = "test.masked_carry", version = 1, workgroup = 64)]
fn masked_carry(x: &[f32; n * k], out: &mut [f32; n], n: u32, k: u32, live: u32) {
    let row = group_id() * group_size() + local_id();
    let mut acc = 7.0;
    if row < live {
        for j in 0..k {
            acc = fma(x[row * k + j], 2.0, acc);
        }
    }
    if row < n {
        out[row] = acc;
    }
}
"#;

/// A segment width and start computed before a reduction and used as loop bounds and
/// indices after it (per-work-item variables of the work-item-loop form): each workgroup
/// scales its segment of `x` (`wide` elements for workgroup 0, `wide / 2` for the others,
/// from `group_id() * wide`) by the segment's sum of squares.
pub const BOUND_AFTER_REDUCTION_SRC: &str = r#"
#[loom::kernel(name = "test.bound_after_reduction", version = 1, workgroup = 64)]
fn bound_after_reduction(x: &[f32; n], out: &mut [f32; n], n: u32, wide: u32) {
    let width = if group_id() == 0 { wide } else { wide / 2 };
    let first = group_id() * wide;
    let mut ss = 0.0;
    for c0 in (0..width).step_by(group_size()) {
        if c0 + local_id() < width {
            let v = x[first + c0 + local_id()];
            ss = fma(v, v, ss);
        }
    }
    let total = reduce_sum(ss);
    for c0 in (0..width).step_by(group_size()) {
        if c0 + local_id() < width {
            out[first + c0 + local_id()] = x[first + c0 + local_id()] * total;
        }
    }
}
"#;

/// Each workgroup copies the row of `x` that `rows` names for it (`h` values, the
/// work-items striding over it): the row's start is a `let` read from memory before the loop,
/// the same for every work-item of the group.
pub const ROW_GATHER_SRC: &str = r#"
#[loom::kernel(name = "test.row_gather", version = 1, workgroup = 64)]
fn row_gather(x: &[f32], rows: &[u32; num_groups()], xs: &mut [f32; num_groups() * h], h: u32) {
    let src = rows[group_id()] * h;
    for c in 0..(h + 63) / 64 {
        let i = c * 64 + local_id();
        if i < h {
            xs[group_id() * h + i] = x[src + i];
        }
    }
}
"#;

/// A dequantising GEMM block through a shared array: `x` is `m x 64` f32, `q` the codes of a
/// `32 x 64` weight (row-major `[n, k]`), `y = x w^T` is `m x n` (row stride 32). Per K
/// step of 32 the work-items dequantise the block into `wq` (32 x 32, `[n, k]`), read
/// transposed into the bf16 operand `b`; shapes fit AMX, MFMA, WMMA and `mma.sync`.
pub const TILE_SHARED_BF16_SRC: &str = r#"
#[loom::kernel(name = "test.tile_shared_bf16", version = 1, workgroup = 64)]
fn tile_shared_bf16(q: &[u32], x: &[f32], y: &mut [f32], scale: f32, m: u32, n: u32) {
    let wq = shared::<f32>(1024);
    let a = tile::<bf16, 32, 32>();
    let b = tile::<bf16, 32, 32>();
    let acc = tile::<f32, 32, 32>();
    let lid = local_id();
    for k0 in (0u32..64u32).step_by(32) {
        for j in 0u32..16u32 {
            let i = j * 64 + lid;
            wq[i] = (q[i / 32 * 64 + k0 + i % 32] as f32 - 8.0) * scale;
        }
        tile_load(a, x, k0, 64, m, 32);
        tile_load_t(b, wq, 0, 32, 32, n);
        tile_dot(acc, a, b);
    }
    tile_store(acc, y, 0, 32, m, n);
}
"#;

/// bf16 and f16 dot operands loaded from buffers of their own types, untransposed and
/// transposed, whole or ragged (`m` rows of `y`, `n` columns): `y = xb wbᵀ + xh wh` over
/// K = 64 in two steps of 32, `xb` and `xh` `[m, 64]`, `wb` `[n, 64]`, `wh` `[64, 32]`.
pub const TILE_HALF_DOT_SRC: &str = r#"
#[loom::kernel(name = "test.tile_half_dot", version = 1, workgroup = 32)]
fn tile_half_dot(xb: &[bf16], wb: &[bf16], xh: &[f16], wh: &[f16], y: &mut [f32], m: u32, n: u32) {
    let a = tile::<bf16, 32, 32>();
    let b = tile::<bf16, 32, 32>();
    let c = tile::<f16, 32, 32>();
    let d = tile::<f16, 32, 32>();
    let acc = tile::<f32, 32, 32>();
    for k0 in (0u32..64u32).step_by(32) {
        tile_load(a, xb, k0, 64, m, 32);
        tile_load_t(b, wb, k0, 64, 32, n);
        tile_dot(acc, a, b);
        tile_load(c, xh, k0, 64, m, 32);
        tile_load(d, wh, k0 * 32, 32, 32, n);
        tile_dot(acc, c, d);
    }
    tile_store(acc, y, 0, 32, m, n);
}
"#;

/// Tile loads from a shared array in a loop, at offsets that depend on the loop variable:
/// nothing to prefetch (`y` row `i` is `x` from element `16 * i`).
pub const TILE_SHARED_LOOP_SRC: &str = r#"
#[loom::kernel(name = "test.tile_shared_loop", version = 1, workgroup = 16)]
fn tile_shared_loop(x: &[f32], y: &mut [f32], n: u32) {
    let s = shared::<f32>(256);
    let t = tile::<f32, 1, 16>();
    let lid = local_id();
    for j in 0u32..16u32 {
        s[j * 16 + lid] = x[j * 16 + lid];
    }
    for i in 0..n {
        tile_load(t, s, i * 16, 16, 1, 16);
        tile_store(t, y, i * 16, 16, 1, 16);
    }
}
"#;

/// An i16 dot into i32 over two K steps of 64: `a` from an i32 buffer, `b` from an i32
/// shared array the work-items fill (row `k`, column `c`) and `bt` the same values read
/// transposed from the buffer; then the i32 sums as f32 and as they are.
pub const TILE_INT_DOT_SRC: &str = r#"
#[loom::kernel(name = "test.tile_int_dot", version = 1, workgroup = 32)]
fn tile_int_dot(w: &[i32], x: &[i32], y: &mut [f32], s: &mut [i32], m: u32, n: u32) {
    let wq = shared::<i32>(2048);
    let a = tile::<i16, 48, 64>();
    let b = tile::<i16, 64, 32>();
    let bt = tile::<i16, 64, 32>();
    let acc = tile::<i32, 48, 32>();
    let f = tile::<f32, 48, 32>();
    let c = local_id();
    for k0 in (0u32..128u32).step_by(64) {
        for kk in 0u32..64u32 {
            wq[kk * 32 + c] = w[c * 128 + k0 + kk];
        }
        tile_load(a, x, k0, 128, m, 64);
        tile_load(b, wq, 0, 32, 64, n);
        tile_dot(acc, a, b);
        tile_load_t(bt, w, k0, 128, 64, n);
        tile_dot(acc, a, bt);
    }
    tile_copy(f, acc);
    tile_store(f, y, 0, 32, m, n);
    tile_store(acc, s, 0, 32, m, n);
}
"#;

/// Pairs windows (`rows` x `cols` of each 64 x 32 tile; whole at 64 x 32): `p` (bf16) loaded
/// from the pairs window of `xp` and stored plainly to `yb`; `h` (f16) loaded plainly from `xh`
/// and stored to the pairs window of `yh`; and two dots whose `b` operands come from pairs
/// windows and are used by nothing else (read in place on the AVX512-BF16 levels, widened on
/// the FMA levels): `y = a b` (bf16, `b` from `xp`) and `z = c d` (f16, `d` from `xh` read
/// as pairs).
pub const TILE_PAIRS_SRC: &str = r#"
#[loom::kernel(name = "test.tile_pairs", version = 1, workgroup = 32)]
fn tile_pairs(xp: &[bf16], xa: &[bf16], xh: &[f16], xc: &[f16], yb: &mut [bf16], yh: &mut [f16], y: &mut [f32], z: &mut [f32], rows: u32, cols: u32) {
    let p = tile::<bf16, 64, 32>();
    let h = tile::<f16, 64, 32>();
    let a = tile::<bf16, 16, 64>();
    let b = tile::<bf16, 64, 32>();
    let c = tile::<f16, 16, 64>();
    let d = tile::<f16, 64, 32>();
    let acc = tile::<f32, 16, 32>();
    let acc2 = tile::<f32, 16, 32>();
    tile_load_pairs(p, xp, 0, 64, rows, cols);
    tile_store(p, yb, 0, 32, 64, 32);
    tile_load(h, xh, 0, 32, rows, cols);
    tile_store_pairs(h, yh, 0, 64, rows, cols);
    tile_load(a, xa, 0, 64, 16, 64);
    tile_load_pairs(b, xp, 0, 64, rows, cols);
    tile_dot(acc, a, b);
    tile_store(acc, y, 0, 32, 16, 32);
    tile_load(c, xc, 0, 64, 16, 64);
    tile_load_pairs(d, xh, 0, 64, rows, cols);
    tile_dot(acc2, c, d);
    tile_store(acc2, z, 0, 32, 16, 32);
}
"#;

/// A GEMM's K loop in steps of 32: `acc` (16 x 32, from `y` `[n][m]`) plus `w` (`[n][k]`
/// bf16) times `xp` (`[k / 2][32][2]`, the pairs of a `[k][32]` bf16), each step's operands
/// loaded (read in place where whole) and dotted, then stored back into `y`. The host fuses
/// the loop into the dot's register blocks where every step's windows are whole.
pub const TILE_FUSED_K_SRC: &str = r#"
#[loom::kernel(name = "test.tile_fused_k", version = 1, workgroup = 32)]
fn tile_fused_k(xp: &[bf16], w: &[bf16], y: &mut [f32], m: u32, n: u32, k: u32) {
    let a = tile::<bf16, 16, 32>();
    let b = tile::<bf16, 32, 32>();
    let acc = tile::<f32, 16, 32>();
    tile_load(acc, y, 0, 32, n, m);
    for k0 in (0..k).step_by(32) {
        tile_load_pairs(b, xp, k0 * 32, 64, k - k0, m);
        tile_load(a, w, k0, k, n, k - k0);
        tile_dot(acc, a, b);
    }
    tile_store(acc, y, 0, 32, n, m);
}
"#;

/// An f32 dot's K loop of only its loads: `a` from bf16 weight rows (stored as bf16 and read
/// in place on the levels with FMA, widened as broadcast), `b` from f32 rows read in place.
pub const TILE_FUSED_F32_K_SRC: &str = r#"
#[loom::kernel(name = "test.tile_fused_f32_k", version = 1, workgroup = 32)]
fn tile_fused_f32_k(x: &[f32], w: &[bf16], y: &mut [f32], m: u32, n: u32, k: u32) {
    let a = tile::<f32, 16, 32>();
    let b = tile::<f32, 32, 32>();
    let acc = tile::<f32, 16, 32>();
    tile_load(acc, y, 0, 32, n, m);
    for k0 in (0..k).step_by(32) {
        tile_load(b, x, k0 * 32, 32, k - k0, m);
        tile_load(a, w, k0, k, n, k - k0);
        tile_dot(acc, a, b);
    }
    tile_store(acc, y, 0, 32, n, m);
}
"#;

/// Dequantized byte dots into f32 over two K steps of 64: `a` (i8) from an i32 buffer, `b`
/// (u8) from an i32 shared array the work-items fill (row `k`, column `c`), and per step
/// the rows' offsets and scales (`sx[96 s + r]`, `sx[96 s + 48 + r]`) and the columns'
/// scales (`sw[32 s + c]`): `acc += (f32(a b) + offset) · (rows · cols)` onto `y`'s window;
/// then the two steps' integer sums, gathered in the i32 tile `s`, go in once more by
/// `tile_dequant` with the second step's scales: `acc += f32(s) · (rows · cols)`.
pub const TILE_DEQUANT_DOT_SRC: &str = r#"
#[loom::kernel(name = "test.tile_dequant_dot", version = 1, workgroup = 32)]
fn tile_dequant_dot(w: &[i32], x: &[i32], sx: &[f32], sw: &[f32], y: &mut [f32], m: u32, n: u32) {
    let wq = shared::<i32>(2048);
    let a = tile::<i8, 48, 64>();
    let b = tile::<u8, 64, 32>();
    let offset = tile::<f32, 48, 1>();
    let rows = tile::<f32, 48, 1>();
    let cols = tile::<f32, 1, 32>();
    let acc = tile::<f32, 48, 32>();
    let s = tile::<i32, 48, 32>();
    let offset4 = tile::<f32, 48, 4>();
    let rows4 = tile::<f32, 48, 4>();
    let cols4 = tile::<f32, 4, 32>();
    let c = local_id();
    tile_load(acc, y, 0, 32, m, n);
    tile_zero(s);
    for step in 0u32..2u32 {
        let k0 = step * 64;
        for kk in 0u32..64u32 {
            wq[kk * 32 + c] = w[c * 128 + k0 + kk];
        }
        tile_load(a, x, k0, 128, m, 64);
        tile_load(b, wq, 0, 32, 64, n);
        tile_load(offset, sx, step * 96, 1, m, 1);
        tile_load(rows, sx, step * 96 + 48, 1, m, 1);
        tile_load(cols, sw, step * 32, 32, 1, n);
        tile_dot_dequant(acc, a, b, offset, rows, cols);
        tile_dot(s, a, b);
    }
    tile_dequant(acc, s, rows, cols);
    tile_zero(s);
    tile_dot(s, a, b);
    tile_dequant(acc, s, rows, cols);
    tile_load(offset4, sx, 192, 4, m, 4);
    tile_load(rows4, sx, 384, 4, m, 4);
    tile_load(cols4, sw, 64, 32, 4, n);
    tile_dot_dequant(acc, a, b, offset4, rows4, cols4);
    tile_store(acc, y, 0, 32, m, n);
}
"#;

/// A byte tile stored four columns to a word: `x`'s values (one per word) narrowed to i8,
/// then written by `tile_store_packed` into rows of 9 words of `y` from word 1, each value
/// one byte, the words' other bytes kept.
pub const TILE_PACKED_STORE_SRC: &str = r#"
#[loom::kernel(name = "test.tile_packed_store", version = 1, workgroup = 32)]
fn tile_packed_store(x: &[i32], y: &mut [i32], m: u32, n: u32) {
    let t = tile::<i8, 8, 32>();
    tile_load(t, x, 0, 32, m, n);
    tile_store_packed(t, y, 1, 9, m, n);
}
"#;

/// A K loop of only a packed `a` load, a quads `b` load from a buffer and their byte dot (a
/// loop the host runs fused, both operands read where they lie): over K = 64 in steps of 16,
/// `a[r][k]` byte `k % 4` of `x[16 r + k / 4]`, `b[k][c]` byte `k % 4` of `w[16 (k / 4) + c]`.
pub const QUADS_FUSED_SRC: &str = r#"
#[loom::kernel(name = "test.quads_fused", version = 1, workgroup = 16)]
fn quads_fused(x: &[i32], w: &[i32], s: &mut [i32]) {
    let a = tile::<i8, 16, 16>();
    let b = tile::<u8, 16, 16>();
    let acc = tile::<i32, 16, 16>();
    tile_zero(acc);
    for k0 in (0u32..64u32).step_by(16) {
        tile_load_packed(a, x, k0 / 4, 16, 16, 16);
        tile_load_quads(b, w, k0 / 4 * 16, 16, 16, 16);
        tile_dot(acc, a, b);
    }
    tile_store(acc, s, 0, 16, 16, 16);
}
"#;

/// A byte dot's `b` loaded by `tile_load_quads` from a shared array that the work-items
/// overwrite before the dot (`b`: the dot must see the words as loaded) and one loaded after
/// that (`b2`, read where it lies on the host): `acc = a · B1 + a · B2`, `B1` the bytes of
/// `w[0..64]`, `B2` of `w[64..128]` (four rows to a word, row `4 t + i` byte `i` of word
/// `16 t + c` of column `c`).
pub const QUADS_SHARED_SRC: &str = r#"
#[loom::kernel(name = "test.quads_shared", version = 1, workgroup = 16)]
fn quads_shared(x: &[i32], w: &[i32], s: &mut [i32]) {
    let wq = shared::<i32>(64);
    let a = tile::<i8, 16, 16>();
    let b = tile::<u8, 16, 16>();
    let b2 = tile::<u8, 16, 16>();
    let acc = tile::<i32, 16, 16>();
    let c = local_id();
    for t in 0u32..4u32 {
        wq[t * 16 + c] = w[t * 16 + c];
    }
    tile_load(a, x, 0, 16, 16, 16);
    tile_load_quads(b, wq, 0, 16, 16, 16);
    for t in 0u32..4u32 {
        wq[t * 16 + c] = w[64 + t * 16 + c];
    }
    tile_zero(acc);
    tile_dot(acc, a, b);
    tile_load_quads(b2, wq, 0, 16, 16, 16);
    tile_dot(acc, a, b2);
    tile_store(acc, s, 0, 16, 16, 16);
}
"#;

/// Byte dots into i32 over two K steps of 64: `a` (i8) and `au` (u8) from an i32 buffer,
/// `b` (u8) and `bi` (i8) from an i32 shared array the work-items fill (row `k`, column `c`),
/// `bt` (u8) the same values read transposed from the buffer, and a per-column scale `sc`
/// (column `c`'s is `c - 9`): `acc += sc · (a b)` (scaled), `acc += au bi`, `acc += a bt`,
/// and `acc += a bq` with `bq` the bytes of `b` packed four rows to a word by the work-items
/// and read by `tile_load_quads` (whole when `n` is 32, else without its last 3 rows of each
/// step), and `acc += ap b` with `ap` (i8) read from `x` by `tile_load_packed`, each word's
/// four bytes four columns (whole when `n` is 32, else its first 61 columns); `acc += Σ_g
/// sg[g] · (og[g] + (a b)_g)` over 4 groups of 16 of each K step (`sg[g][c] = w[32 g + c]`,
/// `og[r][g] = w[128 + 4 r + g]`) and `acc += Σ_g s16[g] · (a b)_g` over 16 groups of 4
/// (`s16[g][c] = w[320 + 32 g + c]`); then the i32 sums as f32 and as they are.
pub const TILE_BYTE_DOT_SRC: &str = r#"
#[loom::kernel(name = "test.tile_byte_dot", version = 2, workgroup = 32)]
fn tile_byte_dot(w: &[i32], x: &[i32], y: &mut [f32], s: &mut [i32], m: u32, n: u32) {
    let wq = shared::<i32>(2048);
    let wp = shared::<i32>(512);
    let sq = shared::<i32>(32);
    let so = shared::<i32>(48);
    let a = tile::<i8, 48, 64>();
    let au = tile::<u8, 48, 64>();
    let ap = tile::<i8, 48, 64>();
    let b = tile::<u8, 64, 32>();
    let bi = tile::<i8, 64, 32>();
    let bt = tile::<u8, 64, 32>();
    let bq = tile::<u8, 64, 32>();
    let sc = tile::<i32, 1, 32>();
    let off = tile::<i32, 48, 1>();
    let sg = tile::<i32, 4, 32>();
    let og = tile::<i32, 48, 4>();
    let s16 = tile::<i32, 16, 32>();
    let acc = tile::<i32, 48, 32>();
    let f = tile::<f32, 48, 32>();
    let c = local_id();
    sq[c] = c as i32 - 9;
    so[c] = 3 * c as i32 - 50;
    if c < 16 {
        so[c + 32] = 3 * (c + 32) as i32 - 50;
    }
    tile_load(sc, sq, 0, 32, 1, 32);
    tile_load(off, so, 0, 1, 48, 1);
    tile_load(sg, w, 0, 32, 4, 32);
    tile_load(og, w, 128, 4, 48, 4);
    tile_load(s16, w, 320, 32, 16, 32);
    for k0 in (0u32..128u32).step_by(64) {
        for kk in 0u32..64u32 {
            wq[kk * 32 + c] = w[c * 128 + k0 + kk];
        }
        tile_load(a, x, k0, 128, m, 64);
        tile_load(au, x, k0, 128, m, 64);
        tile_load(b, wq, 0, 32, 64, n);
        tile_load(bi, wq, 0, 32, 64, n);
        tile_dot_scaled(acc, a, b, sc);
        tile_dot_scaled(acc, a, b, sc, off);
        tile_dot_scaled(acc, a, b, sg, og);
        tile_dot_scaled(acc, a, b, s16);
        tile_dot(acc, au, bi);
        tile_load_t(bt, w, k0, 128, 64, n);
        tile_dot(acc, a, bt);
        for q in 0u32..16u32 {
            let mut word = 0u32;
            for i in 0u32..4u32 {
                word = word | (((w[c * 128 + k0 + 4 * q + i] as u32) & 255) << (8 * i));
            }
            wp[q * 32 + c] = word as i32;
        }
        tile_load_quads(bq, wp, 0, 32, 61 + 3 * (n / 32), n);
        tile_dot(acc, a, bq);
        tile_load_packed(ap, x, k0 / 4, 128, m, 61 + 3 * (n / 32));
        tile_dot(acc, ap, b);
    }
    tile_copy(f, acc);
    tile_store(f, y, 0, 32, m, n);
    tile_store(acc, s, 0, 32, m, n);
}
"#;
