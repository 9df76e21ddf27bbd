//! Working buffers an op needs only while it runs (a GEMM's transposed activations), kept by
//! the device between calls: a fresh allocation cost every call its page faults, or a
//! `memset` of recycled heap memory.

use std::any::Any;
use std::mem;
use std::sync::{Arc, Mutex, PoisonError};

use lse_dsl::rt::Elem;

use super::buffer::{BufError, DevSlice, DevSliceMut, DeviceBuf};
use super::pool::Device;

/// Buffers kept for reuse, at most this many (a call holds one at a time).
const KEPT: usize = 4;

/// A kept buffer (a `DeviceBuf<T>` for some `T`) and its size in bytes.
struct Kept {
    bytes: usize,
    buf: Box<dyn Any + Send>,
}

/// The buffers a device and its clones keep for [`Device::scratch`].
#[derive(Clone, Default)]
pub(super) struct ScratchPool(Arc<Mutex<Vec<Kept>>>);

impl std::fmt::Debug for ScratchPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ScratchPool({} kept)", self.lock().len())
    }
}

impl ScratchPool {
    /// The kept buffers. A panic while the lock was held cannot leave the list inconsistent
    /// (each change is one push or remove), so a poisoned lock is taken as it is.
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Kept>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The smallest kept buffer of `T` with at least `len` elements, if any.
    fn take<T: Elem>(&self, len: usize) -> Option<DeviceBuf<T>> {
        let mut kept = self.lock();
        let (i, _) = kept
            .iter()
            .enumerate()
            .filter_map(|(i, k)| k.buf.downcast_ref::<DeviceBuf<T>>().map(|b| (i, b.len())))
            .filter(|&(_, n)| n >= len)
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

/// `len` elements of `T` in a device's memory for the length of one op, from the buffers the
/// device keeps ([`Device::scratch`]). They hold whatever an earlier op left (or zeros):
/// write before reading.
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
            None => self.alloc(len)?,
        };
        Ok(Scratch {
            pool,
            buf: Some(buf),
            len,
        })
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
        self.buf
            .as_mut()
            .expect("a scratch buffer is only taken when dropped")
            .slice_mut(..len)
            .expect("a scratch buffer holds the elements asked for")
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
        let first = address(&dev.scratch::<f32>(1000).unwrap());
        let again = dev.scratch::<f32>(600).unwrap();
        assert_eq!(again.view().len(), 600);
        assert_eq!(address(&again), first);
        let other_type = dev.scratch::<u32>(600).unwrap();
        assert_ne!(address(&other_type), first);
        drop(again);
        let larger = dev.scratch::<f32>(1001).unwrap();
        assert_ne!(address(&larger), first);
    }

    #[test]
    fn clones_of_a_device_share_its_scratch_buffers() {
        let dev = host();
        let first = address(&dev.scratch::<f32>(64).unwrap());
        let clone = dev.clone();
        assert_eq!(address(&clone.scratch::<f32>(64).unwrap()), first);
    }

    #[test]
    fn at_most_four_buffers_are_kept_and_the_largest_stay() {
        let dev = host();
        let held: Vec<_> = (1..=5)
            .map(|i| dev.scratch::<f32>(i * 100).unwrap())
            .collect();
        drop(held);
        assert_eq!(dev.scratch_pool().lock().len(), KEPT);
        let mut bytes: Vec<usize> = dev.scratch_pool().lock().iter().map(|k| k.bytes).collect();
        bytes.sort_unstable();
        assert_eq!(bytes, [800, 1200, 1600, 2000]);
    }
}
