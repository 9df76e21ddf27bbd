//! Tuning of the C library's allocator, which serves the host device's buffers.
//!
//! glibc's `malloc` returns freed memory to the system by default (it trims the top of the
//! heap and maps blocks above a threshold it moves as blocks are freed), so each forward pass
//! of a perplexity run received its activation buffers as fresh pages and faulted every one
//! in again: about 24,000 page faults a window at ctx 512 on the 0.8B shapes. Keeping freed
//! memory for reuse removes them without raising the peak resident size (the run's
//! high-water mark is the same; memory freed is only not handed back before the process
//! ends).

/// Blocks from this size up are mapped on their own and unmapped when freed (glibc's largest
/// setting on 64-bit systems: the logits of a head block, about 127 MB, are held for the run).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MAP_FROM_BYTES: libc::c_int = 32 << 20;

/// Keeps freed heap memory in the process for the next allocations (see the module doc).
/// Where the C library is not glibc, the allocator is left as it is.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallopt` only sets the allocator's parameters, called before any thread
        // that allocates is started. Its result says whether the value was taken; when one is
        // refused the allocator keeps its default, which is correct, only slower.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MAP_FROM_BYTES);
            libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX);
        }
    }
}
