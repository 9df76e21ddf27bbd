//! Buffers that stay in a device's memory between launches, so that data produced by one
//! kernel and read by the next never crosses to the host.
//!
//! On a GPU a [`DeviceBuf`] is a device allocation, freed when dropped; kernels use it in
//! place and only what the caller downloads comes back. On the CPU-side devices it is ordinary
//! host memory whose pointer the launch passes (no copies), starting on a 64-byte cache line
//! ([`HOST_ALIGN`]): the allocator's large blocks start 16 bytes past one, which split every
//! 64-byte vector access of a kernel across two lines (the bf16 GEMM's `xᵀ` loads among them:
//! 2 to 6% of its time).

use std::marker::PhantomData;
use std::mem;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use lse_dsl::rt::{Elem, RawBuf};

use super::gpu::GpuDevice;
use super::launch::Place;
use super::pool::{Device, Pool};

/// A device-buffer call that failed.
#[derive(Debug, thiserror::Error)]
pub enum BufError {
    /// An upload or download longer than the buffer.
    #[error("{call}: {got} {elem} elements do not fit a device buffer of {len}")]
    Len {
        call: &'static str,
        elem: &'static str,
        got: usize,
        len: usize,
    },
    /// A view downloaded into a host slice of another length.
    #[error("a view of {len} {elem} elements downloaded into {got} elements")]
    ViewLen {
        elem: &'static str,
        got: usize,
        len: usize,
    },
    /// A view outside the buffer.
    #[error("device buffer view {start}..{end} is outside a buffer of {len} {elem} elements")]
    Range {
        elem: &'static str,
        start: usize,
        end: usize,
        len: usize,
    },
    /// A buffer larger than the address space.
    #[error("a device buffer of {len} {elem} elements is larger than the address space")]
    Size { elem: &'static str, len: usize },
    /// Host memory the allocator refused.
    #[error("could not allocate a buffer of {len} {elem} elements in host memory")]
    HostAlloc { elem: &'static str, len: usize },
    /// A GPU runtime call failed; `message` names the call and the runtime's error text.
    #[error("device buffer on {pool}: {message}")]
    Gpu { pool: Pool, message: String },
}

/// `len` elements of `T` in a device's memory (see the module docs). New buffers are zeroed.
pub struct DeviceBuf<T: Elem> {
    len: usize,
    mem: Mem<T>,
}

/// Bytes a host buffer's first element is aligned to: a cache line and a 512-bit vector.
pub const HOST_ALIGN: usize = 64;

enum Mem<T> {
    /// On the CPU-side devices.
    Host(HostMem<T>),
    /// On a GPU.
    Gpu(GpuMem),
}

/// Host memory: the buffer's elements start at `vec[skip]`, on a [`HOST_ALIGN`] boundary.
struct HostMem<T> {
    vec: Vec<T>,
    skip: usize,
}

impl<T> HostMem<T> {
    /// The elements from the buffer's first on (its `len` and the padding after them).
    fn elems(&self) -> &[T] {
        &self.vec[self.skip..]
    }

    fn elems_mut(&mut self) -> &mut [T] {
        &mut self.vec[self.skip..]
    }
}

/// A GPU allocation, freed when dropped. Holding the device keeps its runtime loaded (and,
/// on CUDA, its context retained) for as long as the memory lives.
struct GpuMem {
    gpu: Arc<GpuDevice>,
    pool: Pool,
    ptr: u64,
}

impl Drop for GpuMem {
    fn drop(&mut self) {
        if let Err(e) = self.gpu.free(self.ptr) {
            // Drop cannot return the error; a failed free leaks device memory but leaves
            // every result intact, so it is reported and the run continues.
            eprintln!("warning: device buffer on {}: {e}", self.pool);
        }
    }
}

impl<T: Elem> std::fmt::Debug for DeviceBuf<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let on = match &self.mem {
            Mem::Host(_) => "host".to_string(),
            Mem::Gpu(g) => g.pool.to_string(),
        };
        write!(f, "DeviceBuf<{}>({} on {on})", T::NAME, self.len)
    }
}

/// Bytes of `len` elements of `T`, if they fit the address space.
fn byte_len<T: Elem>(len: usize) -> Result<usize, BufError> {
    len.checked_mul(mem::size_of::<T>())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or(BufError::Size { elem: T::NAME, len })
}

impl Device {
    /// A zeroed buffer of `len` elements in this device's memory. Host memory comes from the
    /// allocator's zeroed pages, so elements never written cost no memory; its first element
    /// is on a 64-byte boundary (up to that many bytes more are allocated for it).
    pub fn alloc<T: Elem + bytemuck::Zeroable>(
        &self,
        len: usize,
    ) -> Result<DeviceBuf<T>, BufError> {
        let bytes = byte_len::<T>(len)?;
        let mem = match self.gpu_device() {
            None => {
                let size = mem::size_of::<T>().max(1);
                let pad = HOST_ALIGN / size;
                let refused = || BufError::HostAlloc { elem: T::NAME, len };
                let vec: Vec<T> = bytemuck::allocation::try_zeroed_slice_box(
                    len.checked_add(pad).ok_or_else(refused)?,
                )
                .map_err(|_| refused())?
                .into_vec();
                // Every element type (f32, u32, i32, bf16, f16) is aligned to its size, a
                // power of two dividing HOST_ALIGN, so whole elements reach the next boundary.
                let skip = (HOST_ALIGN - vec.as_ptr().addr() % HOST_ALIGN) % HOST_ALIGN / size;
                Mem::Host(HostMem { vec, skip })
            }
            Some(gpu) => {
                let ptr = gpu.alloc(bytes).map_err(|message| BufError::Gpu {
                    pool: self.pool(),
                    message,
                })?;
                Mem::Gpu(GpuMem {
                    gpu: Arc::clone(gpu),
                    pool: self.pool(),
                    ptr,
                })
            }
        };
        Ok(DeviceBuf { len, mem })
    }

    /// A buffer of this device's memory holding a copy of `data`.
    pub fn buffer_from<T: Elem + bytemuck::Zeroable>(
        &self,
        data: &[T],
    ) -> Result<DeviceBuf<T>, BufError> {
        let mut buf = self.alloc(data.len())?;
        buf.upload(data)?;
        Ok(buf)
    }

    /// Copies the elements of `src` (in host memory or this device's) into `out`, of the same
    /// length, after every kernel launched before.
    pub fn download<T: Elem>(&self, src: DevSlice<'_, T>, out: &mut [T]) -> Result<(), BufError> {
        if out.len() != src.raw.len {
            return Err(BufError::ViewLen {
                elem: T::NAME,
                got: out.len(),
                len: src.raw.len,
            });
        }
        match src.place {
            Place::Host => {
                // SAFETY: a host-placed view borrows `len` readable elements of `T` for its
                // lifetime, and `out` is a distinct exclusive borrow of as many.
                let s = unsafe { std::slice::from_raw_parts(src.raw.ptr as *const T, out.len()) };
                out.copy_from_slice(s);
            }
            Place::Gpu { id, pool } => {
                let gpu = self
                    .gpu_device()
                    .filter(|_| self.gpu_id() == Some(id))
                    .ok_or_else(|| BufError::Gpu {
                        pool,
                        message: format!("the view is memory of {pool}, not of {}", self.pool()),
                    })?;
                if !out.is_empty() {
                    // SAFETY: `out` is writable for its byte size, which equals the view's,
                    // and the view lies inside an allocation of this GPU.
                    unsafe {
                        gpu.download(
                            out.as_mut_ptr().cast(),
                            src.raw.ptr as u64,
                            mem::size_of_val(out),
                        )
                    }
                    .map_err(|message| BufError::Gpu { pool, message })?;
                }
            }
        }
        Ok(())
    }
}

impl<T: Elem> DeviceBuf<T> {
    /// The number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check_fits(&self, call: &'static str, got: usize) -> Result<(), BufError> {
        if got <= self.len {
            Ok(())
        } else {
            Err(BufError::Len {
                call,
                elem: T::NAME,
                got,
                len: self.len,
            })
        }
    }

    /// Copies `data` into the first `data.len()` elements.
    pub fn upload(&mut self, data: &[T]) -> Result<(), BufError> {
        self.check_fits("upload", data.len())?;
        match &mut self.mem {
            Mem::Host(h) => h.elems_mut()[..data.len()].copy_from_slice(data),
            Mem::Gpu(g) if !data.is_empty() => {
                // SAFETY: `data` is readable for its byte size, which `check_fits` bounded by
                // the allocation's size.
                unsafe {
                    g.gpu
                        .upload(g.ptr, data.as_ptr().cast(), mem::size_of_val(data))
                }
                .map_err(|message| BufError::Gpu {
                    pool: g.pool,
                    message,
                })?
            }
            Mem::Gpu(_) => {}
        }
        Ok(())
    }

    /// Copies the first `out.len()` elements into `out` (after every kernel launched before).
    pub fn download(&self, out: &mut [T]) -> Result<(), BufError> {
        self.check_fits("download", out.len())?;
        match &self.mem {
            Mem::Host(h) => out.copy_from_slice(&h.elems()[..out.len()]),
            Mem::Gpu(g) if !out.is_empty() => {
                let bytes = mem::size_of_val(out);
                // SAFETY: `out` is writable for its byte size, which `check_fits` bounded by
                // the allocation's size.
                unsafe { g.gpu.download(out.as_mut_ptr().cast(), g.ptr, bytes) }.map_err(
                    |message| BufError::Gpu {
                        pool: g.pool,
                        message,
                    },
                )?
            }
            Mem::Gpu(_) => {}
        }
        Ok(())
    }

    /// The elements as a writable host slice on the CPU-side devices (`None` on a GPU), to
    /// fill a new buffer in place rather than build the data elsewhere and copy it in.
    pub fn host_mut(&mut self) -> Option<&mut [T]> {
        let len = self.len;
        match &mut self.mem {
            Mem::Host(h) => Some(&mut h.elems_mut()[..len]),
            Mem::Gpu(_) => None,
        }
    }

    /// All elements copied to a new host vector (after every kernel launched before).
    pub fn to_vec(&self) -> Result<Vec<T>, BufError> {
        let mut out = vec![T::default(); self.len];
        self.download(&mut out)?;
        Ok(out)
    }

    /// All elements as a read-only kernel argument.
    pub fn view(&self) -> DevSlice<'_, T> {
        let (raw, place) = self.view_within(0, self.len);
        DevSlice {
            raw,
            place,
            _borrow: PhantomData,
        }
    }

    /// All elements as a writable kernel argument.
    pub fn view_mut(&mut self) -> DevSliceMut<'_, T> {
        let len = self.len;
        self.writable_within(0, len)
    }

    /// The elements in `range` as a read-only kernel argument.
    pub fn slice(&self, range: impl RangeBounds<usize>) -> Result<DevSlice<'_, T>, BufError> {
        let (start, end) = self.bounds(range)?;
        let (raw, place) = self.view_within(start, end);
        Ok(DevSlice {
            raw,
            place,
            _borrow: PhantomData,
        })
    }

    /// The elements in `range` as a writable kernel argument.
    pub fn slice_mut(
        &mut self,
        range: impl RangeBounds<usize>,
    ) -> Result<DevSliceMut<'_, T>, BufError> {
        let (start, end) = self.bounds(range)?;
        Ok(self.writable_within(start, end))
    }

    /// Elements `start..end` (with `start <= end <= len`) as a writable kernel argument.
    fn writable_within(&mut self, start: usize, end: usize) -> DevSliceMut<'_, T> {
        let (mut raw, place) = self.view_within(start, end);
        if let Mem::Host(h) = &mut self.mem {
            // Kernels write through this address: derive it from the exclusive borrow.
            raw.ptr = h.elems_mut()[start..end].as_mut_ptr().cast();
        }
        DevSliceMut {
            raw,
            place,
            _borrow: PhantomData,
        }
    }

    /// `range` as `start..end`, which must lie in the buffer.
    fn bounds(&self, range: impl RangeBounds<usize>) -> Result<(usize, usize), BufError> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => self.len,
        };
        if start > end || end > self.len {
            return Err(BufError::Range {
                elem: T::NAME,
                start,
                end,
                len: self.len,
            });
        }
        Ok((start, end))
    }

    /// The address and placement of elements `start..end`, with `start <= end <= len`.
    fn view_within(&self, start: usize, end: usize) -> (RawBuf, Place) {
        let len = end - start;
        match &self.mem {
            Mem::Host(h) => {
                let raw = RawBuf {
                    ptr: h.elems()[start..end].as_ptr() as *mut u8,
                    len,
                };
                (raw, Place::Host)
            }
            Mem::Gpu(g) => {
                // In bounds of the allocation, so no overflow.
                let addr = g.ptr + (start * mem::size_of::<T>()) as u64;
                let raw = RawBuf {
                    ptr: addr as usize as *mut u8,
                    len,
                };
                let place = Place::Gpu {
                    id: Arc::as_ptr(&g.gpu) as usize,
                    pool: g.pool,
                };
                (raw, place)
            }
        }
    }
}

/// Read-only elements of a device buffer, borrowed for `'a` (a kernel argument for a
/// read-only parameter). A host slice converts into one too (`DevSlice::from`), so an op can
/// take either through one type; on a GPU such a view is copied in for each launch.
#[derive(Clone, Copy, Debug)]
pub struct DevSlice<'a, T> {
    raw: RawBuf,
    place: Place,
    _borrow: PhantomData<&'a [T]>,
}

/// Writable elements of a device buffer, borrowed exclusively for `'a` (a kernel argument
/// for a writable parameter). A host slice converts into one too (`DevSliceMut::from`); on a
/// GPU such a view is copied in and back for each launch.
#[derive(Debug)]
pub struct DevSliceMut<'a, T> {
    raw: RawBuf,
    place: Place,
    _borrow: PhantomData<&'a mut [T]>,
}

impl<'a, T: Elem> From<&'a [T]> for DevSlice<'a, T> {
    fn from(data: &'a [T]) -> Self {
        DevSlice {
            raw: RawBuf {
                ptr: data.as_ptr() as *mut u8,
                len: data.len(),
            },
            place: Place::Host,
            _borrow: PhantomData,
        }
    }
}

impl<'a, T: Elem> From<&'a mut [T]> for DevSliceMut<'a, T> {
    fn from(data: &'a mut [T]) -> Self {
        DevSliceMut {
            raw: RawBuf {
                ptr: data.as_mut_ptr().cast(),
                len: data.len(),
            },
            place: Place::Host,
            _borrow: PhantomData,
        }
    }
}

impl<'a, T: Elem> From<&'a Vec<T>> for DevSlice<'a, T> {
    fn from(data: &'a Vec<T>) -> Self {
        data.as_slice().into()
    }
}

impl<'a, T: Elem, const N: usize> From<&'a [T; N]> for DevSlice<'a, T> {
    fn from(data: &'a [T; N]) -> Self {
        data.as_slice().into()
    }
}

impl<'a, T: Elem> From<&'a mut Vec<T>> for DevSliceMut<'a, T> {
    fn from(data: &'a mut Vec<T>) -> Self {
        data.as_mut_slice().into()
    }
}

impl<'a, T: Elem, const N: usize> From<&'a mut [T; N]> for DevSliceMut<'a, T> {
    fn from(data: &'a mut [T; N]) -> Self {
        data.as_mut_slice().into()
    }
}

impl<'a, T: Elem> From<&'a DeviceBuf<T>> for DevSlice<'a, T> {
    fn from(data: &'a DeviceBuf<T>) -> Self {
        data.view()
    }
}

impl<'a, T: Elem> From<&'a mut DeviceBuf<T>> for DevSliceMut<'a, T> {
    fn from(data: &'a mut DeviceBuf<T>) -> Self {
        data.view_mut()
    }
}

impl<'a, T: Elem> DevSlice<'a, T> {
    /// Elements `range` of this view, borrowed for as long as the view.
    pub fn sub(&self, range: std::ops::Range<usize>) -> Result<DevSlice<'a, T>, BufError> {
        let raw = sub_raw::<T>(self.raw, range)?;
        Ok(DevSlice {
            raw,
            place: self.place,
            _borrow: PhantomData,
        })
    }
}

impl<T: Elem> DevSliceMut<'_, T> {
    /// Elements `range` of this view as a writable view, borrowing this one.
    pub fn sub_mut(
        &mut self,
        range: std::ops::Range<usize>,
    ) -> Result<DevSliceMut<'_, T>, BufError> {
        let raw = sub_raw::<T>(self.raw, range)?;
        Ok(DevSliceMut {
            raw,
            place: self.place,
            _borrow: PhantomData,
        })
    }

    /// The same elements as a read-only view, borrowing this one.
    pub fn reborrow(&self) -> DevSlice<'_, T> {
        DevSlice {
            raw: self.raw,
            place: self.place,
            _borrow: PhantomData,
        }
    }

    /// The same elements as a writable view, borrowing this one (to pass it to an op and
    /// keep it).
    pub fn reborrow_mut(&mut self) -> DevSliceMut<'_, T> {
        DevSliceMut {
            raw: self.raw,
            place: self.place,
            _borrow: PhantomData,
        }
    }
}

/// Elements `range` of the `T` elements at `raw` (host or device address alike).
fn sub_raw<T: Elem>(raw: RawBuf, range: std::ops::Range<usize>) -> Result<RawBuf, BufError> {
    if range.start > range.end || range.end > raw.len {
        return Err(BufError::Range {
            elem: T::NAME,
            start: range.start,
            end: range.end,
            len: raw.len,
        });
    }
    Ok(RawBuf {
        // In bounds of the view, so the offset stays inside the allocation.
        ptr: raw.ptr.wrapping_add(range.start * mem::size_of::<T>()),
        len: range.end - range.start,
    })
}

impl<T: Elem> lse_dsl::rt::In<T> for DevSlice<'_, T> {
    fn len(&self) -> usize {
        self.raw.len
    }
}

impl<T: Elem> lse_dsl::rt::Out<T> for DevSliceMut<'_, T> {
    fn len(&self) -> usize {
        self.raw.len
    }
}

#[cfg(test)]
impl<T> DevSlice<'_, T> {
    /// A view of any address and placement, for tests of the launch checks.
    pub(super) fn from_parts(raw: RawBuf, place: Place) -> Self {
        DevSlice {
            raw,
            place,
            _borrow: PhantomData,
        }
    }
}

/// The accessors both slice kinds share.
macro_rules! slice_accessors {
    ($slice:ident) => {
        impl<T> $slice<'_, T> {
            /// The number of elements.
            pub fn len(&self) -> usize {
                self.raw.len
            }

            /// Whether there are no elements.
            pub fn is_empty(&self) -> bool {
                self.raw.len == 0
            }

            /// The raw buffer and where it lives, for a launch.
            pub(super) fn parts(&self) -> (RawBuf, Place) {
                (self.raw, self.place)
            }
        }
    };
}

slice_accessors!(DevSlice);
slice_accessors!(DevSliceMut);

#[cfg(test)]
mod tests {
    use half::bf16;
    use lse_kernels::lse_pick::lse_pick;

    use super::*;
    use crate::device::{cpu_side_devices, test_values as values};

    #[test]
    fn uploads_and_downloads_round_trip_on_cpu_side_devices() {
        for dev in cpu_side_devices() {
            let mut buf = dev.alloc::<f32>(5).unwrap();
            assert_eq!(buf.len(), 5);
            let mut out = vec![7.0f32; 5];
            buf.download(&mut out).unwrap();
            assert_eq!(out, [0.0; 5], "new buffers are zeroed");
            buf.upload(&[1.5, -2.0, 3.25]).unwrap();
            buf.download(&mut out).unwrap();
            assert_eq!(out, [1.5, -2.0, 3.25, 0.0, 0.0]);
            let mut head = [0.0f32; 2];
            buf.download(&mut head).unwrap();
            assert_eq!(head, [1.5, -2.0]);

            let words: Vec<bf16> = [0.5f32, -1.0, 8.0].map(bf16::from_f32).to_vec();
            let mut b = dev.alloc::<bf16>(3).unwrap();
            b.upload(&words).unwrap();
            let mut back = vec![bf16::ZERO; 3];
            b.download(&mut back).unwrap();
            assert_eq!(back, words);

            let empty = dev.alloc::<u32>(0).unwrap();
            assert!(empty.is_empty());
            empty.download(&mut []).unwrap();
        }
    }

    #[test]
    fn host_buffers_start_on_a_cache_line_and_slices_keep_their_offsets() {
        let dev = Device::open(Pool::Host).unwrap();
        let start = |raw: RawBuf| raw.ptr as usize;
        for len in [0, 1, 3, 1000, 100_000] {
            let f = dev.alloc::<f32>(len).unwrap();
            assert_eq!(start(f.view().parts().0) % HOST_ALIGN, 0, "f32 x {len}");
            let mut h = dev.alloc::<bf16>(len).unwrap();
            assert_eq!(
                start(h.view_mut().parts().0) % HOST_ALIGN,
                0,
                "bf16 x {len}"
            );
            if len > 3 {
                let at = start(h.slice(3..).unwrap().parts().0);
                assert_eq!(at, start(h.view().parts().0) + 6);
            }
        }
        let mut b = dev.alloc::<u32>(17).unwrap();
        assert_eq!(
            b.to_vec().unwrap(),
            vec![0; 17],
            "the padding is not the buffer"
        );
        b.upload(&(0..17).collect::<Vec<u32>>()).unwrap();
        let mut tail = [0u32; 17];
        b.download(&mut tail).unwrap();
        assert_eq!(tail[16], 16);
    }

    #[test]
    fn oversized_transfers_and_views_are_errors() {
        let dev = Device::open(Pool::Host).unwrap();
        let mut buf = dev.alloc::<f32>(4).unwrap();
        let e = buf.upload(&[0.0; 5]).unwrap_err().to_string();
        assert_eq!(e, "upload: 5 f32 elements do not fit a device buffer of 4");
        let e = buf.download(&mut [0.0; 6]).unwrap_err().to_string();
        assert_eq!(
            e,
            "download: 6 f32 elements do not fit a device buffer of 4"
        );
        let e = buf.slice(2..5).unwrap_err().to_string();
        assert_eq!(
            e,
            "device buffer view 2..5 is outside a buffer of 4 f32 elements"
        );
        assert!(buf.slice_mut(3..=4).is_err());
        assert_eq!(buf.slice(1..3).unwrap().len(), 2);
        assert_eq!(buf.slice(..).unwrap().len(), 4);
        assert!(buf.slice(4..).unwrap().is_empty());
        let e = dev.alloc::<f32>(usize::MAX / 2).unwrap_err().to_string();
        assert!(e.contains("larger than the address space"), "{e}");
    }

    #[test]
    fn views_download_their_own_elements_and_refuse_bad_ranges_and_lengths() {
        let dev = Device::open(Pool::Host).unwrap();
        let buf = dev.buffer_from(&[1.0f32, 2.0, 3.0, 4.0, 5.0]).unwrap();
        let view = buf.slice(1..5).unwrap();
        let mid = view.sub(1..3).unwrap();
        let mut out = [0.0f32; 2];
        dev.download(mid, &mut out).unwrap();
        assert_eq!(out, [3.0, 4.0]);
        let (start, end) = (3, 2);
        assert!(view.sub(start..end).is_err() && view.sub(2..5).is_err());
        let e = dev.download(view, &mut out).unwrap_err().to_string();
        assert_eq!(e, "a view of 4 f32 elements downloaded into 2 elements");
        assert_eq!(buf.to_vec().unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0]);
    }

    #[test]
    fn host_memory_the_allocator_refuses_is_an_error() {
        let dev = Device::open(Pool::Cpu).unwrap();
        // 2^60 bytes: within the address-space check, beyond any machine's memory.
        let e = dev.alloc::<f32>(1 << 58).unwrap_err().to_string();
        assert_eq!(
            e,
            "could not allocate a buffer of 288230376151711744 f32 elements in host memory"
        );
    }

    /// `lse_pick` with its logits in a device buffer (at an offset, through a view), its ids
    /// a host slice, its stats a device buffer and its picked logits a host slice must give
    /// the bits of the launch on host slices alone.
    #[test]
    fn a_launch_mixing_host_slices_and_device_buffers_matches_the_slice_launch() {
        let (rows, vocab, n_ids) = (3usize, 300usize, 2usize);
        let logits = values(rows * vocab, 5, 12.0);
        let ids: Vec<u32> = (0..rows * n_ids).map(|i| (i * 97 % vocab) as u32).collect();
        for dev in cpu_side_devices() {
            let mut want_stats = vec![0.0f32; rows * 2];
            let mut want_picked = vec![0.0f32; rows * n_ids];
            let args = lse_pick::Args {
                logits: &logits,
                ids: &ids,
                stats: &mut want_stats,
                picked: &mut want_picked,
                vocab: vocab as u32,
                n_ids: n_ids as u32,
            };
            dev.launch([rows as u32, 1, 1], args).unwrap();

            let offset = 7;
            let mut dev_logits = dev.alloc::<f32>(offset + logits.len() + 5).unwrap();
            let mut padded = vec![f32::NAN; offset];
            padded.extend(&logits);
            dev_logits.upload(&padded).unwrap();
            let mut dev_stats = dev.alloc::<f32>(rows * 2).unwrap();
            let mut picked = vec![0.0f32; rows * n_ids];
            let args = lse_pick::Args {
                logits: dev_logits.slice(offset..offset + logits.len()).unwrap(),
                ids: &ids,
                stats: dev_stats.slice_mut(..).unwrap(),
                picked: &mut picked,
                vocab: vocab as u32,
                n_ids: n_ids as u32,
            };
            dev.launch([rows as u32, 1, 1], args).unwrap();
            let mut stats = vec![0.0f32; rows * 2];
            dev_stats.download(&mut stats).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&stats), bits(&want_stats), "stats on {}", dev.arch());
            assert_eq!(
                bits(&picked),
                bits(&want_picked),
                "picked on {}",
                dev.arch()
            );
            assert!(want_stats.iter().all(|x| x.is_finite()));
        }
    }
}
