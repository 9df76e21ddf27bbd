//! Checked kernel launches on the CPU-side devices.

use std::marker::PhantomData;

use half::{bf16, f16};
use lse_dsl::rt::{KernelDef, ParamKind, RawBuf};
use rayon::prelude::*;

use super::buffer::{DevSlice, DevSliceMut};
use super::gpu::gpu_args;
use super::pool::{Device, Pool};

/// One kernel argument, in parameter order.
#[derive(Debug)]
pub enum Arg<'a> {
    /// A buffer: a host slice ([`Arg::buf`], [`Arg::buf_mut`]) or device memory
    /// ([`Arg::dev`], [`Arg::dev_mut`]).
    Buf(BufArg<'a>),
    U32(u32),
    I32(i32),
    F32(f32),
}

/// A buffer argument: where its elements are, how many, of which type, and whether the kernel
/// may write them. Built only by the [`Arg`] constructors, which borrow the memory for `'a`.
#[derive(Debug)]
pub struct BufArg<'a> {
    raw: RawBuf,
    elem: &'static str,
    writable: bool,
    place: Place,
    _borrow: PhantomData<&'a mut [u8]>,
}

/// Which memory a buffer argument's address points into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Place {
    /// Host memory: a slice, or a device buffer of a CPU-side device.
    Host,
    /// Memory of the opened GPU `id` (its `GpuDevice`'s address), opened as `pool`.
    Gpu { id: usize, pool: Pool },
}

/// Element types a kernel buffer may hold.
pub trait Elem: Copy + Default {
    /// The LOOM name of the type.
    const NAME: &'static str;
}

impl Elem for f32 {
    const NAME: &'static str = "f32";
}
impl Elem for u32 {
    const NAME: &'static str = "u32";
}
impl Elem for i32 {
    const NAME: &'static str = "i32";
}
impl Elem for bf16 {
    const NAME: &'static str = "bf16";
}
impl Elem for f16 {
    const NAME: &'static str = "f16";
}

impl<'a> Arg<'a> {
    /// A read-only host buffer argument (copied to the device for the launch on a GPU).
    pub fn buf<T: Elem>(data: &'a [T]) -> Arg<'a> {
        let raw = RawBuf {
            ptr: data.as_ptr() as *mut u8,
            len: data.len(),
        };
        Arg::buffer::<T>(raw, false, Place::Host)
    }

    /// A writable host buffer argument (copied to the device and back on a GPU).
    pub fn buf_mut<T: Elem>(data: &'a mut [T]) -> Arg<'a> {
        let raw = RawBuf {
            ptr: data.as_mut_ptr() as *mut u8,
            len: data.len(),
        };
        Arg::buffer::<T>(raw, true, Place::Host)
    }

    /// A read-only device buffer argument: the kernel reads it where it is, nothing is copied.
    pub fn dev<T: Elem>(data: DevSlice<'a, T>) -> Arg<'a> {
        let (raw, place) = data.parts();
        Arg::buffer::<T>(raw, false, place)
    }

    /// A writable device buffer argument: the kernel writes it where it is, nothing is copied.
    pub fn dev_mut<T: Elem>(data: DevSliceMut<'a, T>) -> Arg<'a> {
        let (raw, place) = data.parts();
        Arg::buffer::<T>(raw, true, place)
    }

    fn buffer<T: Elem>(raw: RawBuf, writable: bool, place: Place) -> Arg<'a> {
        Arg::Buf(BufArg {
            raw,
            elem: T::NAME,
            writable,
            place,
            _borrow: PhantomData,
        })
    }

    /// The element count of a buffer argument; `None` for a scalar.
    pub fn buf_len(&self) -> Option<usize> {
        match self {
            Arg::Buf(b) => Some(b.raw.len),
            _ => None,
        }
    }

    fn describe(&self) -> String {
        match self {
            Arg::Buf(b) if b.writable => format!("&mut [{}]", b.elem),
            Arg::Buf(b) => format!("&[{}]", b.elem),
            Arg::U32(_) => "u32".into(),
            Arg::I32(_) => "i32".into(),
            Arg::F32(_) => "f32".into(),
        }
    }
}

/// A launch whose arguments do not fit the kernel, or a device without the kernel.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error("{kernel}: expected {expected} arguments, got {got}")]
    Arity {
        kernel: &'static str,
        expected: usize,
        got: usize,
    },
    #[error("{kernel}: argument {index} ({name}) must be {expected}, got {got}")]
    ArgType {
        kernel: &'static str,
        index: usize,
        name: &'static str,
        expected: String,
        got: String,
    },
    #[error("{kernel}: the grid {grid:?} has more than 2^32 - 1 workgroups")]
    Grid {
        kernel: &'static str,
        grid: [u32; 3],
    },
    #[error(
        "{kernel}: argument {index} ({name}) is memory allocated through another device \
         handle ({owner}); a launch on {device} only takes buffers allocated through its own \
         Device or its clones"
    )]
    Placement {
        kernel: &'static str,
        index: usize,
        name: &'static str,
        owner: Pool,
        device: String,
    },
    #[error("{kernel}: no code for device {device}")]
    NoKernel {
        kernel: &'static str,
        device: String,
    },
    /// A GPU runtime call failed; `message` names the call and the runtime's error text.
    #[error("{kernel} on {device}: {message}")]
    Gpu {
        kernel: &'static str,
        device: String,
        message: String,
    },
}

fn expected_arg(kind: ParamKind) -> String {
    match kind {
        ParamKind::Buffer {
            elem,
            writable: true,
        } => format!("&mut [{elem}]"),
        ParamKind::Buffer {
            elem,
            writable: false,
        } => format!("&[{elem}]"),
        ParamKind::Scalar { ty } => ty.to_string(),
    }
}

/// A marshalled buffer: its address and where that address points.
pub(super) type PlacedBuf = (RawBuf, Place);

/// Checks `args` against the kernel's signature and `dev` (device memory must be `dev`'s own)
/// and splits them into the ABI's buffer and scalar lists.
fn marshal(
    dev: &Device,
    kernel: &KernelDef,
    args: &[Arg<'_>],
) -> Result<(Vec<PlacedBuf>, Vec<u64>), LaunchError> {
    if args.len() != kernel.params.len() {
        return Err(LaunchError::Arity {
            kernel: kernel.id,
            expected: kernel.params.len(),
            got: args.len(),
        });
    }
    let mut bufs = Vec::new();
    let mut scalars = Vec::new();
    for (index, (param, arg)) in kernel.params.iter().zip(args).enumerate() {
        let fits = match (param.kind, arg) {
            (ParamKind::Buffer { elem, writable }, Arg::Buf(b))
                if elem == b.elem && (b.writable || !writable) =>
            {
                if let Place::Gpu { id, pool } = b.place {
                    if dev.gpu_id() != Some(id) {
                        return Err(LaunchError::Placement {
                            kernel: kernel.id,
                            index,
                            name: param.name,
                            owner: pool,
                            device: dev.pool().to_string(),
                        });
                    }
                }
                bufs.push((b.raw, b.place));
                true
            }
            (ParamKind::Scalar { ty: "u32" }, Arg::U32(v)) => {
                scalars.push(u64::from(*v));
                true
            }
            (ParamKind::Scalar { ty: "i32" }, Arg::I32(v)) => {
                scalars.push(u64::from(*v as u32));
                true
            }
            (ParamKind::Scalar { ty: "f32" }, Arg::F32(v)) => {
                scalars.push(u64::from(v.to_bits()));
                true
            }
            _ => false,
        };
        if !fits {
            return Err(LaunchError::ArgType {
                kernel: kernel.id,
                index,
                name: param.name,
                expected: expected_arg(param.kind),
                got: arg.describe(),
            });
        }
    }
    Ok((bufs, scalars))
}

impl Device {
    /// Runs `kernel` over `grid` workgroups with `args`: on the CPU-side devices spreading
    /// workgroups over all cores; on a GPU launching `grid` workgroups of `workgroup_size`
    /// work-items. Device buffers ([`Arg::dev`], [`Arg::dev_mut`]) are used where they are; on
    /// a GPU, host slices are copied to device memory for the launch and writable ones copied
    /// back. One launch may mix both kinds on every device.
    ///
    /// The caller guarantees the kernel's own contract (index ranges implied by the shapes it
    /// passes); the typed wrappers in [`crate::ops`] check those before launching.
    pub fn launch(
        &self,
        kernel: &KernelDef,
        grid: [u32; 3],
        args: &[Arg<'_>],
    ) -> Result<(), LaunchError> {
        let (placed, scalars) = marshal(self, kernel, args)?;
        let total = u64::from(grid[0]) * u64::from(grid[1]) * u64::from(grid[2]);
        let total = u32::try_from(total).map_err(|_| LaunchError::Grid {
            kernel: kernel.id,
            grid,
        })?;
        if total == 0 {
            return Ok(());
        }
        let threads = rayon::current_num_threads() as u32;
        let chunk = total.div_ceil(threads * 8).max(1);
        let ranges = (0..total.div_ceil(chunk)).map(|i| (i * chunk, ((i + 1) * chunk).min(total)));
        // On the CPU-side devices every buffer is host memory (`marshal` refused GPU memory).
        let bufs: Vec<RawBuf> = placed.iter().map(|(raw, _)| *raw).collect();
        match self.pool() {
            Pool::Cpu => {
                let entry = kernel.cpu;
                ranges
                    .collect::<Vec<_>>()
                    .into_par_iter()
                    .for_each(|(b, e)| entry(&bufs, &scalars, grid, b, e));
            }
            Pool::Host => {
                let entry = self
                    .host_entry(kernel)
                    .ok_or_else(|| LaunchError::NoKernel {
                        kernel: kernel.id,
                        device: self.arch(),
                    })?;
                ranges
                    .collect::<Vec<_>>()
                    .into_par_iter()
                    .for_each(|(b, e)| {
                        // SAFETY: `marshal` matched every argument to the kernel's parameter list,
                        // and the buffers outlive this call (they are borrowed by `args`).
                        unsafe { entry(bufs.as_ptr(), scalars.as_ptr(), grid.as_ptr(), b, e) }
                    });
            }
            Pool::Hip(_) | Pool::Cuda(_) => {
                let gpu = self.gpu_device().ok_or_else(|| LaunchError::NoKernel {
                    kernel: kernel.id,
                    device: self.arch(),
                })?;
                if !gpu.has_kernel(kernel) {
                    return Err(LaunchError::NoKernel {
                        kernel: kernel.id,
                        device: self.arch(),
                    });
                }
                let args = gpu_args(kernel, &placed, &scalars);
                gpu.launch(kernel, grid, &args)
                    .map_err(|message| LaunchError::Gpu {
                        kernel: kernel.id,
                        device: self.arch(),
                        message,
                    })?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use lse_kernels::topk_pairs::topk_pairs::KERNEL as TOPK;

    use super::*;

    /// GPU memory (an address of some opened GPU) is refused by a device that is not that
    /// GPU, naming the argument and the device that owns it.
    #[test]
    fn gpu_memory_is_refused_by_other_devices() {
        let dev = Device::open(Pool::Cpu).unwrap();
        let gpu_logits = Arg::buffer::<f32>(
            RawBuf {
                ptr: 0x7000_0000_0000usize as *mut u8,
                len: 8,
            },
            false,
            Place::Gpu {
                id: 1,
                pool: Pool::Cuda(0),
            },
        );
        let (mut ids, mut logits) = (vec![0u32; 2], vec![0.0f32; 2]);
        let err = dev
            .launch(
                &TOPK,
                [1, 1, 1],
                &[
                    gpu_logits,
                    Arg::buf_mut(&mut ids),
                    Arg::buf_mut(&mut logits),
                    Arg::U32(8),
                    Arg::U32(2),
                ],
            )
            .unwrap_err();
        assert!(
            matches!(err, LaunchError::Placement { index: 0, .. }),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(msg.contains("argument 0 (logits)"), "{msg}");
        assert!(
            msg.contains("(cuda:0)") && msg.contains("a launch on cpu"),
            "{msg}"
        );
    }

    /// A read-only device view cannot stand in for a writable parameter.
    #[test]
    fn read_only_device_buffers_are_not_writable_arguments() {
        let dev = Device::open(Pool::Host).unwrap();
        let logits = vec![1.0f32; 8];
        let ids_buf = dev.alloc::<u32>(2).unwrap();
        let mut out = vec![0.0f32; 2];
        let err = dev
            .launch(
                &TOPK,
                [1, 1, 1],
                &[
                    Arg::buf(&logits),
                    Arg::dev(ids_buf.slice(..).unwrap()),
                    Arg::buf_mut(&mut out),
                    Arg::U32(8),
                    Arg::U32(2),
                ],
            )
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("argument 1 (out_ids) must be &mut [u32], got &[u32]"),
            "{err}"
        );
    }
}
