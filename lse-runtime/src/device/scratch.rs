//! Working buffers needed only for a while (a GEMM's transposed activations, the
//! activations of a forward pass), kept by the device between uses: a fresh allocation cost
//! every use its page faults, or a `memset` of recycled heap memory. Before a pass's
//! activations came from here, a run of the 0.8B-shaped model at ctx 8192 allocated 18 GiB
//! afresh, and the kernel's clearing of those pages was 17% of its CPU time. A pass leaves
//! them kept for the next pass, and the integer GEMMs' quantized activations come from here
//! too: freed at the end of each pass and allocated again in the next, they cost a 512-token
//! pass of the 35B-A3B-shaped MoE model 43,600 page faults (170 MB) and 11% of its time.

use std::any::Any;
use std::mem;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use lse_dsl::rt::Elem;

use super::buffer::{BufError, DevSlice, DevSliceMut, DeviceBuf};
use super::pool::Device;

/// Buffers kept for reuse, at most this many: a forward pass holds about a dozen at once (a
/// DeltaNet layer's projections, gates and delta-rule matrices, and the GEMM's `xᵀ`).
const KEPT: usize = 32;

/// A kept buffer serves a call for at least 1/`SLACK` of its length, so that a small request
/// does not take a large buffer that the next large request then allocates again.
const SLACK: usize = 2;

/// The elements a fresh scratch buffer gets for a call of `len`: `len` rounded up to a
/// sixteenth of the power of two at or above it (at most 12.5% more), so that the calls of
/// lengths a little above it that follow find it kept. A mixture of experts' padded rows
/// differ by a few percent from layer to layer and pass to pass; buffers of exactly their
/// length were allocated afresh whenever a layer routed a few more rows than any before it.
fn capacity(len: usize) -> usize {
    let step = len
        .checked_next_power_of_two()
        .map_or(1, |p| (p / 16).max(1));
    len.div_ceil(step).saturating_mul(step)
}

/// A kept buffer (a `DeviceBuf<T>` for some `T`) and its size in bytes.
struct Kept {
    bytes: usize,
    buf: Box<dyn Any + Send>,
}

/// The buffers a device and its clones keep for [`Device::scratch`], and how many buffers
/// it has allocated for it.
#[derive(Clone, Default)]
pub(super) struct ScratchPool {
    kept: Arc<Mutex<Vec<Kept>>>,
    allocated: Arc<AtomicUsize>,
}

impl std::fmt::Debug for ScratchPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ScratchPool({} kept)", self.lock().len())
    }
}

impl ScratchPool {
    /// The kept buffers. A panic while the lock was held cannot leave the list inconsistent
    /// (each change is one push or remove), so a poisoned lock is taken as it is.
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Kept>> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The smallest kept buffer of `T` with at least `len` elements and at most [`SLACK`]
    /// times that, if any.
    fn take<T: Elem>(&self, len: usize) -> Option<DeviceBuf<T>> {
        let mut kept = self.lock();
        let most = len.saturating_mul(SLACK);
        let (i, _) = kept
            .iter()
            .enumerate()
            .filter_map(|(i, k)| k.buf.downcast_ref::<DeviceBuf<T>>().map(|b| (i, b.len())))
            .filter(|&(_, n)| n >= len && n <= most)
            .min_by_key(|&(_, n)| n)?;
        kept.swap_remove(i).buf.downcast().ok().map(|b| *b)
    }

    /// Keeps `buf` for a later call; when [`KEPT`] are kept already, in place of the smallest
    /// if that is smaller (the large buffers a long context needs stay).
    fn give<T: Elem + Send>(&self, buf: DeviceBuf<T>) {
        let bytes = buf.len() * mem::size_of::<T>();
        let mut kept = self.lock();
        if kept.len() == KEPT {
            let smallest = (0..KEPT).min_by_key(|&i| kept[i].bytes);
            match smallest {
                Some(i) if kept[i].bytes < bytes => {
                    kept.swap_remove(i);
                }
                _ => return,
            }
        }
        kept.push(Kept {
            bytes,
            buf: Box::new(buf),
        });
    }
}

/// `len` elements of `T` in a device's memory while held, from the buffers the device keeps
/// ([`Device::scratch`]). They hold whatever an earlier user left (or zeros): write before
/// reading. Ops take it as a view (`&scratch`, `&mut scratch`) like a [`DeviceBuf`].
pub struct Scratch<'d, T: Elem + Send> {
    pool: &'d ScratchPool,
    buf: Option<DeviceBuf<T>>,
    len: usize,
}

impl Device {
    /// A working buffer of at least `len` elements of `T`, kept by the device for the next
    /// call once dropped (see [`Scratch`]).
    pub fn scratch<T: Elem + Send + bytemuck::Zeroable>(
        &self,
        len: usize,
    ) -> Result<Scratch<'_, T>, BufError> {
        let pool = self.scratch_pool();
        let buf = match pool.take(len) {
            Some(buf) => buf,
            None => {
                pool.allocated.fetch_add(1, Ordering::Relaxed);
                self.alloc(capacity(len))?
            }
        };
        Ok(Scratch {
            pool,
            buf: Some(buf),
            len,
        })
    }

    /// Frees the buffers kept for [`Device::scratch`] (those held stay held, and are kept
    /// again when dropped). A forward pass leaves its activations' buffers kept for the next
    /// one; this gives their memory back.
    pub fn release_scratch(&self) {
        self.scratch_pool().lock().clear();
    }
}

impl<T: Elem + Send> Scratch<'_, T> {
    fn buf(&self) -> &DeviceBuf<T> {
        self.buf
            .as_ref()
            .expect("a scratch buffer is only taken when dropped")
    }

    /// The `len` elements asked for, read-only.
    pub fn view(&self) -> DevSlice<'_, T> {
        self.buf()
            .slice(..self.len)
            .expect("a scratch buffer holds the elements asked for")
    }

    /// The `len` elements asked for, writable.
    pub fn view_mut(&mut self) -> DevSliceMut<'_, T> {
        let len = self.len;
        self.slice_mut(0..len)
            .expect("a scratch buffer holds the elements asked for")
    }

    /// The elements in `range` of the `len` asked for, read-only.
    pub fn slice(&self, range: Range<usize>) -> Result<DevSlice<'_, T>, BufError> {
        self.view().sub(range)
    }

    /// The elements in `range` of the `len` asked for, writable.
    pub fn slice_mut(&mut self, range: Range<usize>) -> Result<DevSliceMut<'_, T>, BufError> {
        if range.end > self.len {
            return Err(BufError::Range {
                elem: T::NAME,
                start: range.start,
                end: range.end,
                len: self.len,
            });
        }
        self.buf
            .as_mut()
            .expect("a scratch buffer is only taken when dropped")
            .slice_mut(range)
    }
}

impl<'a, T: Elem + Send> From<&'a Scratch<'_, T>> for DevSlice<'a, T> {
    fn from(s: &'a Scratch<'_, T>) -> Self {
        s.view()
    }
}

impl<'a, T: Elem + Send> From<&'a mut Scratch<'_, T>> for DevSliceMut<'a, T> {
    fn from(s: &'a mut Scratch<'_, T>) -> Self {
        s.view_mut()
    }
}

impl<T: Elem + Send> Drop for Scratch<'_, T> {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            self.pool.give(buf);
        }
    }
}

#[cfg(test)]
impl Device {
    /// Keeps for the next [`Device::scratch`] calls a buffer of each length in `lens`, every
    /// element `value`: what an earlier user might have left in them.
    pub(crate) fn keep_scratch_holding<T: Elem + Send + bytemuck::Zeroable>(
        &self,
        lens: impl IntoIterator<Item = usize>,
        value: T,
    ) {
        for len in lens {
            let mut buf = self.alloc::<T>(len).unwrap();
            buf.upload(&vec![value; len]).unwrap();
            self.scratch_pool().give(buf);
        }
    }

    /// How many buffers are kept for [`Device::scratch`].
    pub(crate) fn kept_scratch(&self) -> usize {
        self.scratch_pool().lock().len()
    }

    /// How many buffers [`Device::scratch`] has allocated (rather than taken from those kept).
    pub(crate) fn scratch_allocations(&self) -> usize {
        self.scratch_pool().allocated.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Pool;

    fn host() -> Device {
        Device::open(Pool::Host).unwrap()
    }

    fn address<T: Elem + Send>(s: &Scratch<'_, T>) -> *mut u8 {
        s.view().parts().0.ptr
    }

    #[test]
    fn a_dropped_scratch_buffer_serves_the_next_call_of_its_type_and_no_larger_size() {
        let dev = host();
        let first = address(&dev.scratch::<f32>(1024).unwrap());
        let again = dev.scratch::<f32>(600).unwrap();
        assert_eq!(again.view().len(), 600);
        assert_eq!(address(&again), first);
        let other_type = dev.scratch::<u32>(600).unwrap();
        assert_ne!(address(&other_type), first);
        drop(again);
        let larger = dev.scratch::<f32>(1025).unwrap();
        assert_ne!(address(&larger), first);
    }

    #[test]
    fn a_fresh_buffer_has_room_for_calls_up_to_an_eighth_longer() {
        for len in [
            1,
            2,
            3,
            15,
            17,
            1000,
            1025,
            4097,
            5872 * 2048,
            6000 * 2048,
            usize::MAX,
        ] {
            let cap = capacity(len);
            assert!(cap >= len && cap - len <= len / 8, "{len} -> {cap}");
        }
        // A mixture of experts' padded rows, layer after layer: one buffer serves them all.
        let dev = host();
        let first = address(&dev.scratch::<f32>(5872 * 2048).unwrap());
        for rows in [5904, 5952, 5840] {
            assert_eq!(address(&dev.scratch::<f32>(rows * 2048).unwrap()), first);
        }
    }

    #[test]
    fn clones_of_a_device_share_its_scratch_buffers() {
        let dev = host();
        let first = address(&dev.scratch::<f32>(64).unwrap());
        let clone = dev.clone();
        assert_eq!(address(&clone.scratch::<f32>(64).unwrap()), first);
    }

    #[test]
    fn a_kept_buffer_more_than_twice_the_length_asked_for_is_left_for_a_larger_call() {
        let dev = host();
        let first = address(&dev.scratch::<f32>(1024).unwrap());
        let small = dev.scratch::<f32>(511).unwrap();
        assert_ne!(address(&small), first);
        assert_eq!(address(&dev.scratch::<f32>(512).unwrap()), first);
    }

    #[test]
    fn at_most_thirty_two_buffers_are_kept_and_the_largest_stay() {
        let dev = host();
        let held: Vec<_> = (1..=KEPT + 1)
            .map(|i| dev.scratch::<f32>(i * 100).unwrap())
            .collect();
        drop(held);
        assert_eq!(dev.kept_scratch(), KEPT);
        let mut bytes: Vec<usize> = dev.scratch_pool().lock().iter().map(|k| k.bytes).collect();
        bytes.sort_unstable();
        let want: Vec<usize> = (2..=KEPT + 1).map(|i| capacity(i * 100) * 4).collect();
        assert_eq!(bytes, want);
    }

    #[test]
    fn releasing_frees_the_kept_buffers_and_a_held_one_is_kept_when_dropped() {
        let dev = host();
        drop(dev.scratch::<f32>(64).unwrap());
        let held = dev.scratch::<u32>(64).unwrap();
        dev.release_scratch();
        assert_eq!(dev.kept_scratch(), 0);
        drop(held);
        assert_eq!(dev.kept_scratch(), 1);
    }

    #[test]
    fn views_of_a_scratch_buffer_stop_at_the_length_asked_for() {
        let dev = host();
        drop(dev.scratch::<f32>(100).unwrap());
        let mut s = dev.scratch::<f32>(60).unwrap();
        assert_eq!(DevSlice::from(&s).len(), 60);
        assert_eq!(DevSliceMut::from(&mut s).len(), 60);
        assert_eq!(s.slice(10..60).unwrap().len(), 50);
        assert_eq!(s.slice_mut(0..60).unwrap().len(), 60);
        assert!(s.slice(10..61).is_err());
        let err = s.slice_mut(50..61).err().unwrap().to_string();
        assert!(err.contains("50..61") && err.contains("60"), "{err}");
        let (start, end) = (30, 20);
        assert!(s.slice_mut(start..end).is_err());
    }
}
