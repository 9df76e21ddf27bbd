//! What the benches share: deterministic inputs and best-of timing.

use std::time::Instant;

/// Deterministic uniform values in [-1, 1): a 64-bit linear congruential generator.
pub struct Lcg(pub u64);

impl Lcg {
    pub fn next(&mut self) -> f32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
    }
}

/// `n` values in [-scale, scale) from [`Lcg`] seeded with `seed`.
pub fn random(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut rng = Lcg(seed);
    (0..n).map(|_| rng.next() * scale).collect()
}

/// Best wall time of at least `min_reps` runs of `f`, running more while their total stays
/// under `budget_s` seconds (at most 50), in seconds. On a shared VM whose host steals CPU
/// time in bursts, the best of many short runs finds one that ran undisturbed; a fixed count
/// of 3 often did not.
pub fn best_within(min_reps: usize, budget_s: f64, mut f: impl FnMut()) -> f64 {
    let start = Instant::now();
    let mut best = f64::INFINITY;
    for rep in 0..50 {
        if rep >= min_reps && start.elapsed().as_secs_f64() >= budget_s {
            break;
        }
        let t = Instant::now();
        f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    best
}
