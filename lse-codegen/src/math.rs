//! LOOM's f32 transcendental functions as LLVM IR, for every target: the exact operation
//! sequence that `lse_dsl::math` defines (and the generated Rust calls), so host code and the
//! CPU reference agree bit for bit, host loops vectorise (no libm call), and NVPTX, whose
//! LLVM 19 backend cannot select `llvm.exp.f32`/`llvm.log.f32`, gets the same results.
//! Algorithms and accuracy: `lse_dsl::math`'s module doc; the test below checks both.

use lse_dsl::math::consts;

/// Names of the functions [`definitions`] defines, by LOOM built-in.
pub(crate) const EXP_FN: &str = "loom_expf";
pub(crate) const LOG_FN: &str = "loom_logf";
pub(crate) const SIGMOID_FN: &str = "loom_sigmoidf";
pub(crate) const SILU_FN: &str = "loom_siluf";
pub(crate) const TANH_FN: &str = "loom_tanhf";

/// A call of LOOM function `name` (one of the names above) on the f32 `x`; the module then
/// carries [`definitions`].
pub(crate) fn call(b: &mut crate::emit::Builder, name: &str, x: &str) -> String {
    b.uses_math = true;
    b.op(format!("call float @{name}(float {x})"))
}

/// An f32 constant as an LLVM IR float literal (hex double, exact).
fn c(v: f32) -> String {
    format!("0x{:016X}", (v as f64).to_bits())
}

/// An f32 constant given by its bits.
fn cb(bits: u32) -> String {
    c(f32::from_bits(bits))
}

/// The intrinsic declarations [`definitions`] needs (the module must declare each once).
pub(crate) const DECLS: [&str; 6] = [
    "declare float @llvm.maxnum.f32(float, float)",
    "declare float @llvm.minnum.f32(float, float)",
    "declare float @llvm.rint.f32(float)",
    "declare float @llvm.fma.f32(float, float, float)",
    "declare float @llvm.fabs.f32(float)",
    "declare float @llvm.copysign.f32(float, float)",
];

/// The LLVM IR definitions of the functions named above (internal, always inlined), using
/// the intrinsics of [`DECLS`]. Target-independent IR.
pub(crate) fn definitions() -> String {
    let log2e = c(std::f32::consts::LOG2_E);
    let ln2_hi_e = cb(consts::EXP_LN2_HI);
    let ln2_lo_e = cb(consts::EXP_LN2_LO);
    let taylor = consts::exp_taylor().map(c);
    let ln2_hi_l = cb(consts::LOG_LN2_HI);
    let ln2_lo_l = cb(consts::LOG_LN2_LO);
    let [lg1, lg2, lg3, lg4] = consts::log_poly().map(c);
    let [th0, th1, th2, th3] = consts::tanh_taylor().map(c);
    let (exp_min, exp_max, tanh_small) = (
        c(consts::EXP_MIN),
        c(consts::EXP_MAX),
        c(consts::TANH_SMALL),
    );
    let min_normal = c(f32::MIN_POSITIVE);
    let two23 = c(8_388_608.0);
    let inf = "0x7FF0000000000000";
    let ninf = "0xFFF0000000000000";
    let nan = "0x7FF8000000000000";
    format!(
        "define internal float @{EXP_FN}(float %x) #9 {{
entry:
  %lo = call float @llvm.maxnum.f32(float %x, float {exp_min})
  %xc = call float @llvm.minnum.f32(float %lo, float {exp_max})
  %t = fmul float %xc, {log2e}
  %kf = call float @llvm.rint.f32(float %t)
  %nk = fneg float %kf
  %r0 = call float @llvm.fma.f32(float %nk, float {ln2_hi_e}, float %xc)
  %r = call float @llvm.fma.f32(float %nk, float {ln2_lo_e}, float %r0)
  %p6 = call float @llvm.fma.f32(float {t0}, float %r, float {t1})
  %p5 = call float @llvm.fma.f32(float %p6, float %r, float {t2})
  %p4 = call float @llvm.fma.f32(float %p5, float %r, float {t3})
  %p3 = call float @llvm.fma.f32(float %p4, float %r, float {t4})
  %p2 = call float @llvm.fma.f32(float %p3, float %r, float {t5})
  %p1 = call float @llvm.fma.f32(float %p2, float %r, float 1.0)
  %p = call float @llvm.fma.f32(float %p1, float %r, float 1.0)
  %k = fptosi float %kf to i32
  %k1 = sdiv i32 %k, 2
  %k2 = sub i32 %k, %k1
  %e1 = add i32 %k1, 127
  %b1 = shl i32 %e1, 23
  %s1 = bitcast i32 %b1 to float
  %e2 = add i32 %k2, 127
  %b2 = shl i32 %e2, 23
  %s2 = bitcast i32 %b2 to float
  %y1 = fmul float %p, %s1
  %y = fmul float %y1, %s2
  %isnan = fcmp uno float %x, 0.0
  %res = select i1 %isnan, float %x, float %y
  ret float %res
}}

define internal float @{LOG_FN}(float %x) #9 {{
entry:
  %sub = fcmp olt float %x, {min_normal}
  %xs = fmul float %x, {two23}
  %xn = select i1 %sub, float %xs, float %x
  %kadj = select i1 %sub, i32 -23, i32 0
  %ix = bitcast float %xn to i32
  %ix2 = add i32 %ix, 4913933
  %e = lshr i32 %ix2, 23
  %k0 = sub i32 %e, 127
  %k = add i32 %k0, %kadj
  %mb = and i32 %ix2, 8388607
  %mi = add i32 %mb, 1060439283
  %m = bitcast i32 %mi to float
  %f = fsub float %m, 1.0
  %d = fadd float %f, 2.0
  %s = fdiv float %f, %d
  %z = fmul float %s, %s
  %w = fmul float %z, %z
  %a1 = call float @llvm.fma.f32(float %w, float {lg4}, float {lg2})
  %t1 = fmul float %w, %a1
  %a2 = call float @llvm.fma.f32(float %w, float {lg3}, float {lg1})
  %t2 = fmul float %z, %a2
  %rr = fadd float %t2, %t1
  %hf = fmul float %f, 0.5
  %hfsq = fmul float %hf, %f
  %dk = sitofp i32 %k to float
  %q0 = fadd float %hfsq, %rr
  %q1 = fmul float %s, %q0
  %q2 = call float @llvm.fma.f32(float %dk, float {ln2_lo_l}, float %q1)
  %q3 = fsub float %q2, %hfsq
  %q4 = fadd float %q3, %f
  %y = call float @llvm.fma.f32(float %dk, float {ln2_hi_l}, float %q4)
  %iszero = fcmp oeq float %x, 0.0
  %r1 = select i1 %iszero, float {ninf}, float %y
  %isneg = fcmp olt float %x, 0.0
  %r2 = select i1 %isneg, float {nan}, float %r1
  %special = fcmp ueq float %x, {inf}
  %res = select i1 %special, float %x, float %r2
  ret float %res
}}

define internal float @{SIGMOID_FN}(float %x) #9 {{
entry:
  %nx = fneg float %x
  %e = call float @{EXP_FN}(float %nx)
  %d = fadd float 1.0, %e
  %r = fdiv float 1.0, %d
  ret float %r
}}

define internal float @{SILU_FN}(float %x) #9 {{
entry:
  %s = call float @{SIGMOID_FN}(float %x)
  %r = fmul float %x, %s
  ret float %r
}}

define internal float @{TANH_FN}(float %x) #9 {{
entry:
  %a = call float @llvm.fabs.f32(float %x)
  %z = fmul float %x, %x
  %p0 = call float @llvm.fma.f32(float {th0}, float %z, float {th1})
  %p1 = call float @llvm.fma.f32(float %p0, float %z, float {th2})
  %p2 = call float @llvm.fma.f32(float %p1, float %z, float {th3})
  %pz = fmul float %p2, %z
  %small = call float @llvm.fma.f32(float %pz, float %x, float %x)
  %m2 = fmul float -2.0, %a
  %e = call float @{EXP_FN}(float %m2)
  %n = fsub float 1.0, %e
  %d = fadd float 1.0, %e
  %q = fdiv float %n, %d
  %big = call float @llvm.copysign.f32(float %q, float %x)
  %issmall = fcmp olt float %a, {tanh_small}
  %isnan = fcmp uno float %x, 0.0
  %r1 = select i1 %isnan, float %x, float %big
  %res = select i1 %issmall, float %small, float %r1
  ret float %res
}}

attributes #9 = {{ alwaysinline nounwind }}
",
        t0 = taylor[0],
        t1 = taylor[1],
        t2 = taylor[2],
        t3 = taylor[3],
        t4 = taylor[4],
        t5 = taylor[5],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use inkwell::context::Context;
    use inkwell::memory_buffer::MemoryBuffer;
    use inkwell::targets::{InitializationConfig, Target};
    use inkwell::OptimizationLevel;

    type F = unsafe extern "C" fn(f32) -> f32;

    /// Distance in units in the last place between `got` and the f64 reference `want`.
    fn ulps(got: f32, want: f64) -> f64 {
        let w = want as f32;
        if got == w || (got.is_nan() && want.is_nan()) {
            return 0.0;
        }
        if !got.is_finite() || !w.is_finite() {
            return f64::INFINITY;
        }
        let ulp = (f32::from_bits(w.abs().to_bits() + 1) - w.abs()) as f64;
        ((got as f64) - want).abs() / ulp.max(f32::from_bits(1) as f64)
    }

    fn sigmoid64(x: f64) -> f64 {
        1.0 / (1.0 + (-x).exp())
    }

    /// One function under test: IR name, the Rust definition it must equal bit for bit, the
    /// f64 reference, the ulp bound and where it holds.
    struct Fun {
        ir: &'static str,
        rust: fn(f32) -> f32,
        reference: fn(f64) -> f64,
        max_ulp: f64,
        bounded: fn(f32) -> bool,
    }

    fn everywhere(_: f32) -> bool {
        true
    }

    /// `sigmoid` and `silu` flush to 0 where `sigmoid(x)` is below the smallest normal f32
    /// (`x < -87.3`: `exp(-x)` overflows or the quotient is subnormal).
    fn sigmoid_normal(x: f32) -> bool {
        x >= -87.0 || x.is_nan()
    }

    /// JIT-compiles the definitions for the host (target-independent IR) and sweeps every
    /// 61st f32 bit pattern: each IR function equals `lse_dsl::math` bit for bit and stays
    /// within its ulp bound of the f64 reference.
    #[test]
    fn ir_math_equals_the_rust_definitions_and_is_accurate() {
        let funs = [
            Fun {
                ir: EXP_FN,
                rust: lse_dsl::math::exp,
                reference: f64::exp,
                max_ulp: 1.0,
                bounded: everywhere,
            },
            Fun {
                ir: LOG_FN,
                rust: lse_dsl::math::log,
                reference: f64::ln,
                max_ulp: 1.0,
                bounded: everywhere,
            },
            Fun {
                ir: SIGMOID_FN,
                rust: lse_dsl::math::sigmoid,
                reference: sigmoid64,
                max_ulp: 3.0,
                bounded: sigmoid_normal,
            },
            Fun {
                ir: SILU_FN,
                rust: lse_dsl::math::silu,
                reference: |x| x * sigmoid64(x),
                max_ulp: 3.0,
                bounded: sigmoid_normal,
            },
            Fun {
                ir: TANH_FN,
                rust: lse_dsl::math::tanh,
                reference: f64::tanh,
                max_ulp: 4.0,
                bounded: everywhere,
            },
        ];
        Target::initialize_native(&InitializationConfig::default()).unwrap();
        let mut text = definitions();
        for d in DECLS {
            text.push_str(d);
            text.push('\n');
        }
        for f in &funs {
            text.push_str(&format!(
                "define float @t_{0}(float %x) {{\n  %r = call float @{0}(float %x)\n  ret float %r\n}}\n",
                f.ir
            ));
        }
        let ctx = Context::create();
        let buf = MemoryBuffer::create_from_memory_range_copy(text.as_bytes(), "math");
        let module = ctx.create_module_from_ir(buf).unwrap();
        module.verify().unwrap();
        let ee = module
            .create_jit_execution_engine(OptimizationLevel::Default)
            .unwrap();
        for f in &funs {
            let addr = ee.get_function_address(&format!("t_{}", f.ir)).unwrap();
            // SAFETY: the JIT-compiled function has the `float(float)` C signature.
            let jit = unsafe { std::mem::transmute::<usize, F>(addr) };
            let mut worst = 0.0f64;
            for bits in (0..=u32::MAX)
                .step_by(61)
                .chain([0x8000_0000, 0x7f80_0000, 0xff80_0000])
            {
                let x = f32::from_bits(bits);
                // SAFETY: as above.
                let got = unsafe { jit(x) };
                let want = (f.rust)(x);
                assert!(
                    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                    "{}({x:e}): IR {got:e}, Rust {want:e}",
                    f.ir
                );
                if !(f.bounded)(x) {
                    let silu_of_neg_inf = got.is_nan() && x == f32::NEG_INFINITY;
                    assert!(
                        got.abs() < 1e-35 || silu_of_neg_inf,
                        "{}({x:e}) = {got:e}",
                        f.ir
                    );
                    continue;
                }
                let reference = (f.reference)(x as f64);
                let u = ulps(got, reference);
                assert!(
                    u <= f.max_ulp,
                    "{}({x:e}) = {got:e}, f64 {reference:e}",
                    f.ir
                );
                worst = worst.max(u);
            }
            eprintln!("{}: worst {worst:.3} ulp", f.ir);
        }
        for (x, e, l) in [
            (0.0f32, 1.0f32, f32::NEG_INFINITY),
            (-0.0, 1.0, f32::NEG_INFINITY),
            (1.0, std::f32::consts::E, 0.0),
            (f32::INFINITY, f32::INFINITY, f32::INFINITY),
            (100.0, f32::INFINITY, 100f32.ln()),
        ] {
            let (ge, gl) = (lse_dsl::math::exp(x), lse_dsl::math::log(x));
            assert!(ge == e || (ge - e).abs() <= e * 2e-7, "exp({x}) = {ge}");
            assert!(gl == l || (gl - l).abs() <= 1e-6, "log({x}) = {gl}");
        }
        assert_eq!(lse_dsl::math::exp(f32::NEG_INFINITY), 0.0);
        assert!(lse_dsl::math::log(-200.0).is_nan() && lse_dsl::math::exp(f32::NAN).is_nan());
        assert_eq!(lse_dsl::math::tanh(f32::INFINITY), 1.0);
        assert_eq!(lse_dsl::math::tanh(f32::NEG_INFINITY), -1.0);
        assert_eq!(lse_dsl::math::sigmoid(f32::NEG_INFINITY), 0.0);
    }
}
