//! Checked kernel launches on the CPU-side devices.

use std::marker::PhantomData;

use half::{bf16, f16};
use lse_dsl::rt::{KernelDef, ParamKind, RawBuf};
use rayon::prelude::*;

use super::gpu::gpu_args;
use super::pool::{Device, Pool};

/// One kernel argument, in parameter order.
#[derive(Debug)]
pub enum Arg<'a> {
    /// A read-only buffer.
    Buf {
        raw: RawBuf,
        elem: &'static str,
        _borrow: PhantomData<&'a [u8]>,
    },
    /// A writable buffer.
    BufMut {
        raw: RawBuf,
        elem: &'static str,
        _borrow: PhantomData<&'a mut [u8]>,
    },
    U32(u32),
    I32(i32),
    F32(f32),
}

/// Element types a kernel buffer may hold.
pub trait Elem: Copy {
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
    /// A read-only buffer argument.
    pub fn buf<T: Elem>(data: &'a [T]) -> Arg<'a> {
        let raw = RawBuf {
            ptr: data.as_ptr() as *mut u8,
            len: data.len(),
        };
        Arg::Buf {
            raw,
            elem: T::NAME,
            _borrow: PhantomData,
        }
    }

    /// A writable buffer argument.
    pub fn buf_mut<T: Elem>(data: &'a mut [T]) -> Arg<'a> {
        let raw = RawBuf {
            ptr: data.as_mut_ptr() as *mut u8,
            len: data.len(),
        };
        Arg::BufMut {
            raw,
            elem: T::NAME,
            _borrow: PhantomData,
        }
    }

    fn describe(&self) -> String {
        match self {
            Arg::Buf { elem, .. } => format!("&[{elem}]"),
            Arg::BufMut { elem, .. } => format!("&mut [{elem}]"),
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

/// Checks `args` against the kernel's signature and splits them into the ABI's buffer and
/// scalar lists.
fn marshal(kernel: &KernelDef, args: &[Arg<'_>]) -> Result<(Vec<RawBuf>, Vec<u64>), LaunchError> {
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
            (
                ParamKind::Buffer {
                    elem,
                    writable: false,
                },
                Arg::Buf { raw, elem: e, .. },
            )
            | (
                ParamKind::Buffer {
                    elem,
                    writable: false,
                },
                Arg::BufMut { raw, elem: e, .. },
            )
            | (
                ParamKind::Buffer {
                    elem,
                    writable: true,
                },
                Arg::BufMut { raw, elem: e, .. },
            ) if elem == *e => {
                bufs.push(*raw);
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
    /// workgroups over all cores; on a GPU copying buffers to device memory, launching `grid`
    /// workgroups of `workgroup_size` work-items and copying writable buffers back (buffers
    /// are not yet kept resident on the GPU between launches).
    ///
    /// The caller guarantees the kernel's own contract (index ranges implied by the shapes it
    /// passes); the typed wrappers in [`crate::ops`] check those before launching.
    pub fn launch(
        &self,
        kernel: &KernelDef,
        grid: [u32; 3],
        args: &[Arg<'_>],
    ) -> Result<(), LaunchError> {
        let (bufs, scalars) = marshal(kernel, args)?;
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
                let args = gpu_args(kernel, &bufs, &scalars);
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
