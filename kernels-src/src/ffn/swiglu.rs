//! `ffn.swiglu.v1`: SwiGLU's element-wise step, `a = silu(a) · b`, with LOOM's own `silu`
//! (the dense MLP, the shared expert and the routed experts all use it).

use loom::kernel;

/// `a`, `b`: `n` values each (the gate and up projections); `a` is overwritten. One
/// work-item per element. Grid: x = ceil(n / 256).
#[kernel(name = "ffn.swiglu", version = 1, workgroup = 256)]
fn swiglu(a: &mut [f32; n], b: &[f32; n], n: u32) {
    let i = group_id() * group_size() + local_id();
    if i < n {
        a[i] = silu(a[i]) * b[i];
    }
}
