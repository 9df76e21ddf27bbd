//! The one error type of the crate: which kernel, which target, which stage, and what LLVM
//! (or the linker, or the file system) said.

use std::fmt;
use std::path::PathBuf;

/// A step of the compile pipeline, named in error messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Lowering the LOOM IR to LLVM IR text.
    Emit,
    /// Parsing the LLVM IR text.
    Parse,
    /// `Module::verify`.
    Verify,
    /// Creating the target machine.
    Target,
    /// The `default<O3>` pass pipeline.
    Passes,
    /// Emitting assembly or the object file.
    EmitObject,
    /// `ld.lld -shared` (AMDGPU) or the archiver (host).
    Link,
    /// Reading the linked code object back.
    Inspect,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Emit => "emit",
            Stage::Parse => "parse",
            Stage::Verify => "verify",
            Stage::Target => "target machine",
            Stage::Passes => "passes",
            Stage::EmitObject => "emit object",
            Stage::Link => "link",
            Stage::Inspect => "inspect",
        })
    }
}

/// Why compiling a kernel (or writing the build outputs) failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CodegenError {
    /// A pipeline stage failed for one kernel on one target (an AMDGPU arch or a host cpu).
    Compile {
        /// The kernel's Rust function name.
        kernel: String,
        /// The AMDGPU arch or host cpu.
        target: String,
        stage: Stage,
        /// What LLVM, the linker or the emitter said.
        message: String,
    },
    /// Writing a build output failed.
    Io { path: PathBuf, message: String },
    /// Two kernels share a Rust function name, so their symbols would collide.
    DuplicateKernel { fn_name: String },
}

impl CodegenError {
    pub(crate) fn compile(
        kernel: &str,
        target: &str,
        stage: Stage,
        message: impl Into<String>,
    ) -> Self {
        CodegenError::Compile {
            kernel: kernel.to_string(),
            target: target.to_string(),
            stage,
            message: message.into(),
        }
    }

    pub(crate) fn io(path: &std::path::Path, e: impl fmt::Display) -> Self {
        CodegenError::Io {
            path: path.to_path_buf(),
            message: e.to_string(),
        }
    }
}

impl fmt::Display for CodegenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodegenError::Compile {
                kernel,
                target,
                stage,
                message,
            } => {
                write!(
                    f,
                    "kernel `{kernel}` for {target}: {stage} failed: {message}"
                )
            }
            CodegenError::Io { path, message } => {
                write!(f, "writing {}: {message}", path.display())
            }
            CodegenError::DuplicateKernel { fn_name } => write!(
                f,
                "two kernels are named `{fn_name}`; kernel function names must be unique"
            ),
        }
    }
}

impl std::error::Error for CodegenError {}
