//! Why a kernel has no native code (it then runs on the interpreter).

use super::MAX_KERNEL_LEN;
use thiserror::Error;

/// Why the JIT did not compile a kernel, or a shape of it.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CompileError {
    /// The kernel is longer than the JIT compiles.
    #[error("{0} instructions (the JIT compiles at most {MAX_KERNEL_LEN})")]
    TooLong(u32),
    /// The kernel's range is not inside the module's code.
    #[error("kernel outside the code")]
    OutsideCode,
    /// A block start has no native block (a code generator bug).
    #[error("no block head")]
    NoBlockHead,
    /// Cranelift refused a setting.
    #[error("cranelift setting {name}: {reason}")]
    Setting {
        /// The setting.
        name: &'static str,
        /// Cranelift's message.
        reason: String,
    },
    /// Cranelift does not support the host.
    #[error("host ISA: {0}")]
    HostIsa(String),
    /// Cranelift could not declare the kernel's function.
    #[error("declare: {0}")]
    Declare(String),
    /// Cranelift could not compile the kernel's function.
    #[error("compile: {0}")]
    Compile(String),
    /// Cranelift could not finalize the code.
    #[error("finalize: {0}")]
    Finalize(String),
    /// The code generator panicked.
    #[error("the code generator failed")]
    Panicked,
    /// Asked for a kernel index the module does not have.
    #[error("no such kernel")]
    NoSuchKernel,
}
