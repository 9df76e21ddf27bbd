//! A first-come, first-served lock: concurrent scoring calls on one engine run one at a
//! time, in arrival order, as queued requests do when serving.

use std::sync::{Condvar, Mutex};

#[derive(Default)]
pub struct FifoLock {
    state: Mutex<(u64, u64)>,
    turn: Condvar,
}

/// Held while a call runs; the next ticket's holder runs when it drops.
pub struct FifoGuard<'a> {
    lock: &'a FifoLock,
}

impl FifoLock {
    /// Waits until every earlier caller has finished.
    pub fn acquire(&self) -> FifoGuard<'_> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let ticket = state.0;
        state.0 += 1;
        while state.1 != ticket {
            state = self.turn.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        FifoGuard { lock: self }
    }
}

impl Drop for FifoGuard<'_> {
    fn drop(&mut self) {
        let mut state = self.lock.state.lock().unwrap_or_else(|p| p.into_inner());
        state.1 += 1;
        self.lock.turn.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn callers_run_in_arrival_order() {
        let lock = Arc::new(FifoLock::default());
        let order = Arc::new(Mutex::new(Vec::new()));
        let first = lock.acquire();
        let handles: Vec<_> = (0..4u64)
            .map(|i| {
                let (lock2, order) = (Arc::clone(&lock), Arc::clone(&order));
                let h = std::thread::spawn(move || {
                    let _g = lock2.acquire();
                    order.lock().unwrap().push(i);
                });
                // Start thread i + 1 only once thread i holds its ticket (ticket i + 1).
                while lock.state.lock().unwrap().0 < i + 2 {
                    std::thread::sleep(Duration::from_millis(1));
                }
                h
            })
            .collect();
        drop(first);
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
    }
}
