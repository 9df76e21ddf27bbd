//! Checked kernel launches on the CPU-side devices.

use std::marker::PhantomData;

use lse_dsl::rt::{Elem, KernelDef, Launch, ParamKind, RawBuf, ShapeError};
use rayon::prelude::*;

use super::buffer::{DevSlice, DevSliceMut};
use super::gpu::gpu_args;
use super::pool::{Device, Pool};

/// One kernel argument in the runtime's form: what each field of a kernel's generated `Args`
/// (`lse_dsl::rt::Launch`) converts into for [`Device::launch`]. Only those conversions
/// build it, so every launch goes through a typed launcher.
#[derive(Debug)]
pub struct Arg<'a>(Kind<'a>);

#[derive(Debug)]
enum Kind<'a> {
    Buf(BufArg<'a>),
    U32(u32),
    I32(i32),
    F32(f32),
}

/// A buffer argument: where its elements are, how many, of which type, and whether the kernel
/// may write them, borrowed for `'a`.
#[derive(Debug)]
struct BufArg<'a> {
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

impl Arg<'_> {
    fn buffer<T: Elem>(raw: RawBuf, writable: bool, place: Place) -> Self {
        Arg(Kind::Buf(BufArg {
            raw,
            elem: T::NAME,
            writable,
            place,
            _borrow: PhantomData,
        }))
    }

    fn describe(&self) -> String {
        match &self.0 {
            Kind::Buf(b) if b.writable => format!("&mut [{}]", b.elem),
            Kind::Buf(b) => format!("&[{}]", b.elem),
            Kind::U32(_) => "u32".into(),
            Kind::I32(_) => "i32".into(),
            Kind::F32(_) => "f32".into(),
        }
    }
}

/// A read-only device view: the kernel reads it where it is, nothing is copied (a host-placed
/// view is copied to a GPU for the launch, like a host slice).
impl<'a, T: Elem> From<DevSlice<'a, T>> for Arg<'a> {
    fn from(data: DevSlice<'a, T>) -> Self {
        let (raw, place) = data.parts();
        Arg::buffer::<T>(raw, false, place)
    }
}

/// A writable device view: the kernel writes it where it is, nothing is copied (a host-placed
/// view is copied to a GPU and back, like a host slice).
impl<'a, T: Elem> From<DevSliceMut<'a, T>> for Arg<'a> {
    fn from(data: DevSliceMut<'a, T>) -> Self {
        let (raw, place) = data.parts();
        Arg::buffer::<T>(raw, true, place)
    }
}

/// A read-only host buffer (copied to the device for the launch on a GPU).
impl<'a, T: Elem> From<&'a [T]> for Arg<'a> {
    fn from(data: &'a [T]) -> Self {
        DevSlice::from(data).into()
    }
}

/// A read-only host buffer (copied to the device for the launch on a GPU).
impl<'a, T: Elem> From<&'a Vec<T>> for Arg<'a> {
    fn from(data: &'a Vec<T>) -> Self {
        data.as_slice().into()
    }
}

/// A read-only host buffer (copied to the device for the launch on a GPU).
impl<'a, T: Elem, const N: usize> From<&'a [T; N]> for Arg<'a> {
    fn from(data: &'a [T; N]) -> Self {
        data.as_slice().into()
    }
}

/// A writable host buffer (copied to the device and back on a GPU).
impl<'a, T: Elem> From<&'a mut [T]> for Arg<'a> {
    fn from(data: &'a mut [T]) -> Self {
        DevSliceMut::from(data).into()
    }
}

/// A writable host buffer (copied to the device and back on a GPU).
impl<'a, T: Elem> From<&'a mut Vec<T>> for Arg<'a> {
    fn from(data: &'a mut Vec<T>) -> Self {
        data.as_mut_slice().into()
    }
}

/// A writable host buffer (copied to the device and back on a GPU).
impl<'a, T: Elem, const N: usize> From<&'a mut [T; N]> for Arg<'a> {
    fn from(data: &'a mut [T; N]) -> Self {
        data.as_mut_slice().into()
    }
}

impl From<u32> for Arg<'_> {
    fn from(v: u32) -> Self {
        Arg(Kind::U32(v))
    }
}

impl From<i32> for Arg<'_> {
    fn from(v: i32) -> Self {
        Arg(Kind::I32(v))
    }
}

impl From<f32> for Arg<'_> {
    fn from(v: f32) -> Self {
        Arg(Kind::F32(v))
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
    /// A buffer shorter than its parameter's declared length (`x: &[f32; rows * d]`), or a
    /// declared length without a value for the launch's scalars; `error` names the
    /// parameter, the declared length, its value and the buffer's length.
    #[error("{kernel}: {error}")]
    Length {
        kernel: &'static str,
        #[source]
        error: ShapeError,
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
/// and splits them into the ABI's buffer and scalar lists. The typed launchers only build
/// lists that fit the signature; this check keeps the unsafe entry calls below independent of
/// that, and is where placement is checked.
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
        let fits = match (param.kind, &arg.0) {
            (ParamKind::Buffer { elem, writable }, Kind::Buf(b))
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
            (ParamKind::Scalar { ty: "u32" }, Kind::U32(v)) => {
                scalars.push(u64::from(*v));
                true
            }
            (ParamKind::Scalar { ty: "i32" }, Kind::I32(v)) => {
                scalars.push(u64::from(*v as u32));
                true
            }
            (ParamKind::Scalar { ty: "f32" }, Kind::F32(v)) => {
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

/// `kernel`'s scalar arguments as `marshal` packed them, `name=value` in parameter order.
fn scalar_arguments(kernel: &KernelDef, scalars: &[u64]) -> String {
    let params = kernel.params.iter().filter_map(|p| match p.kind {
        ParamKind::Scalar { ty } => Some((p.name, ty)),
        ParamKind::Buffer { .. } => None,
    });
    let named: Vec<String> = params
        .zip(scalars)
        .map(|((name, ty), &bits)| match ty {
            "i32" => format!("{name}={}", bits as u32 as i32),
            "f32" => format!("{name}={}", f32::from_bits(bits as u32)),
            _ => format!("{name}={bits}"),
        })
        .collect();
    named.join(" ")
}

impl Device {
    /// Runs a kernel over `grid` workgroups with `args`, its generated `Args` (one field per
    /// parameter, types checked by rustc): on the CPU-side devices spreading workgroups over
    /// all cores; on a GPU launching `grid` workgroups of `workgroup_size` work-items. A
    /// buffer field takes a host slice or vector (`&[T]`, `&Vec<T>`, `&[T; N]` read-only;
    /// `&mut [T]`, `&mut Vec<T>`, `&mut [T; N]` writable) or a device view ([`DevSlice`],
    /// [`DevSliceMut`]). Device views are used where they are; on a GPU, host slices are
    /// copied to device memory for the launch and writable ones copied back. One launch may
    /// mix both kinds on every device.
    ///
    /// ```
    /// use lse_kernels::topk_pairs::topk_pairs;
    /// use lse_runtime::device::{Device, Pool};
    ///
    /// let dev = Device::open(Pool::Cpu).unwrap();
    /// let logits = [0.5f32, 2.0, -1.0, 3.0];
    /// let (mut ids, mut top) = ([0u32; 2], [0.0f32; 2]);
    /// let args = topk_pairs::Args {
    ///     logits: &logits,
    ///     out_ids: &mut ids,
    ///     out_vals: &mut top,
    ///     vocab: 4,
    ///     k: 2,
    /// };
    /// dev.launch([1, 1, 1], args).unwrap();
    /// assert_eq!(ids, [3, 1]);
    /// ```
    ///
    /// A read-only device view cannot stand in for a writable parameter:
    ///
    /// ```compile_fail,E0277
    /// use lse_kernels::topk_pairs::topk_pairs;
    /// use lse_runtime::device::{Device, Pool};
    ///
    /// let dev = Device::open(Pool::Cpu).unwrap();
    /// let logits = [0.5f32, 2.0, -1.0, 3.0];
    /// let ids = dev.alloc::<u32>(2).unwrap();
    /// let mut top = [0.0f32; 2];
    /// let args = topk_pairs::Args {
    ///     logits: &logits,
    ///     out_ids: ids.slice(..).unwrap(),
    ///     out_vals: &mut top,
    ///     vocab: 4,
    ///     k: 2,
    /// };
    /// ```
    ///
    /// Before anything runs, every buffer whose parameter declares a minimum length
    /// (`x: &[f32; rows * d]`, `LOOM.md`) is checked against that length evaluated from the
    /// launch's scalars ([`LaunchError::Length`]). Types aside, the arguments are checked
    /// again here against the kernel's parameter list and `self` (device memory must be this
    /// device's own). The caller guarantees the rest of the kernel's contract (the grid, and
    /// the lengths a kernel does not declare); the typed wrappers in [`crate::ops`] check
    /// those before launching.
    pub fn launch<'a>(
        &self,
        grid: [u32; 3],
        args: impl Launch<Arg<'a>>,
    ) -> Result<(), LaunchError> {
        let kernel = args.kernel();
        args.check_lengths(grid)
            .map_err(|error| LaunchError::Length {
                kernel: kernel.id,
                error,
            })?;
        let args = args.into_args();
        let (placed, scalars) = marshal(self, kernel, &args)?;
        let total = u64::from(grid[0]) * u64::from(grid[1]) * u64::from(grid[2]);
        let total = u32::try_from(total).map_err(|_| LaunchError::Grid {
            kernel: kernel.id,
            grid,
        })?;
        if total == 0 {
            return Ok(());
        }
        let started = self.kernel_times_table().on().then(std::time::Instant::now);
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
        if let Some(t0) = started {
            let ms = self
                .last_gpu_kernel_ms()
                .map_or_else(|| t0.elapsed().as_secs_f64() * 1e3, f64::from);
            let named = scalar_arguments(kernel, &scalars);
            self.kernel_times_table().add(kernel.id, named, ms);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use lse_dsl::rt::ShapeProblem;
    use lse_kernels::gemm::gemm_xwt_exact_f32;
    use lse_kernels::lm_head::lm_head_matvec_f32;
    use lse_kernels::topk_pairs::topk_pairs::{self, KERNEL as TOPK};

    use super::*;

    /// A buffer shorter than its parameter's declared length (`w: &[W; vocab * dim]`) is
    /// refused on the CPU-side devices before the kernel runs (the output keeps its values),
    /// naming the kernel, the parameter, the declared length, its value and the buffer's
    /// length. Device views are checked like host slices.
    #[test]
    fn a_buffer_shorter_than_the_grid_needs_is_refused_before_the_kernel_runs() {
        for pool in [Pool::Cpu, Pool::Host] {
            let dev = Device::open(pool).unwrap();
            // Three rows of 4 logits hold what a grid of 3 workgroups reads, not 4.
            let logits = vec![0.5f32; 12];
            let (mut ids, mut top) = (vec![7u32; 8], vec![-1.0f32; 8]);
            let args = topk_pairs::Args {
                logits: &logits,
                out_ids: &mut ids,
                out_vals: &mut top,
                vocab: 4,
                k: 2,
            };
            let err = dev.launch([4, 1, 1], args).unwrap_err().to_string();
            assert_eq!(
                err,
                "topk_pairs.v1: buffer `logits` holds 12 elements, fewer than its declared \
                 length `num_groups() * vocab` = 16 (num_groups() = 4, vocab = 4)"
            );
            assert!(ids.iter().all(|&i| i == 7), "{pool}: the kernel ran");
        }
    }

    #[test]
    fn a_buffer_shorter_than_its_declared_length_is_refused_before_the_kernel_runs() {
        for pool in [Pool::Cpu, Pool::Host] {
            let dev = Device::open(pool).unwrap();
            let hidden = vec![1.0f32; 3];
            let w = vec![1.0f32; 14];
            let mut out = vec![-7.0f32; 5];
            let args = lm_head_matvec_f32::Args {
                hidden: &hidden,
                w: &w,
                out: &mut out,
                vocab: 5,
                dim: 3,
            };
            let err = dev.launch([1, 1, 1], args).unwrap_err();
            let LaunchError::Length { kernel, error } = &err else {
                panic!("{pool}: {err:?}");
            };
            assert_eq!(*kernel, "lm_head.matvec_f32.v1");
            assert_eq!(
                (error.param, error.declared, error.len),
                ("w", "vocab * dim", 14)
            );
            assert_eq!(error.problem, ShapeProblem::TooShort { need: 15 });
            assert_eq!(
                err.to_string(),
                "lm_head.matvec_f32.v1: buffer `w` holds 14 elements, fewer than its declared \
                 length `vocab * dim` = 15 (vocab = 5, dim = 3)"
            );
            assert!(out.iter().all(|&v| v == -7.0), "{pool}: the kernel ran");

            // `xt`: one block of 64 columns of `xᵀ` per K row.
            let (xt, w) = (vec![1.0f32; 3 * 64], vec![1.0f32; 6]);
            let mut y = dev.alloc::<f32>(3).unwrap();
            let args = gemm_xwt_exact_f32::Args {
                xt: &xt,
                w: &w,
                y: y.slice_mut(..).unwrap(),
                m: 2,
                n: 2,
                k: 3,
                accumulate: 0,
            };
            let err = dev.launch([1, 1, 1], args).unwrap_err().to_string();
            assert!(
                err.contains(
                    "buffer `y` holds 3 elements, fewer than its declared length `m * n` = 4"
                ),
                "{pool}: {err}"
            );
        }
    }

    /// GPU memory (an address of some opened GPU) is refused by a device that is not that
    /// GPU, naming the argument and the device that owns it.
    #[test]
    fn gpu_memory_is_refused_by_other_devices() {
        let dev = Device::open(Pool::Cpu).unwrap();
        let gpu_logits = DevSlice::<f32>::from_parts(
            RawBuf {
                ptr: 0x7000_0000_0000usize as *mut u8,
                len: 8,
            },
            Place::Gpu {
                id: 1,
                pool: Pool::Cuda(0),
            },
        );
        let (mut ids, mut logits) = (vec![0u32; 2], vec![0.0f32; 2]);
        let args = topk_pairs::Args {
            logits: gpu_logits,
            out_ids: &mut ids,
            out_vals: &mut logits,
            vocab: 8,
            k: 2,
        };
        let err = dev.launch([1, 1, 1], args).unwrap_err();
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

    /// The typed launchers cannot build an argument list that does not fit the kernel, but
    /// the run-time check behind them still refuses one, naming the argument: a read-only
    /// buffer for a writable parameter, a missing argument.
    #[test]
    fn marshal_refuses_arguments_that_do_not_fit_the_kernel() {
        let dev = Device::open(Pool::Host).unwrap();
        let logits = vec![1.0f32; 8];
        let ids = vec![0u32; 2];
        let mut out = vec![0.0f32; 2];
        let args: Vec<Arg<'_>> = vec![
            logits.as_slice().into(),
            ids.as_slice().into(),
            out.as_mut_slice().into(),
            8u32.into(),
            2u32.into(),
        ];
        let err = marshal(&dev, &TOPK, &args).unwrap_err().to_string();
        assert!(
            err.contains("argument 1 (out_ids) must be &mut [u32], got &[u32]"),
            "{err}"
        );
        let err = marshal(&dev, &TOPK, &args[..4]).unwrap_err().to_string();
        assert!(err.contains("expected 5 arguments, got 4"), "{err}");
    }
}
