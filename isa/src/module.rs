//! The module container (`.vgpu` files): reader, writer and validator.
//!
//! A [`Module`] can only be built through [`Module::new`] or
//! [`Module::from_bytes`], both of which validate it completely, so the
//! interpreter only ever sees code that passed every check in this file.

use crate::encode::{decode, encode, InstError};
use crate::inst::*;
use std::collections::HashSet;
use thiserror::Error;

/// The first 8 bytes of every module.
pub const MAGIC: [u8; 8] = *b"VGPUMOD\0";
/// The container version this crate reads and writes.
pub const VERSION: u16 = 1;
/// Size of the file header.
pub const HEADER_SIZE: usize = 32;
/// Size of one section table entry.
pub const SECTION_ENTRY_SIZE: usize = 16;
/// Size of one kernel table entry.
pub const KERNEL_ENTRY_SIZE: usize = 48;
/// Size of one argument table entry.
pub const ARG_ENTRY_SIZE: usize = 16;
/// Section kinds.
pub const SECTION_CODE: u32 = 1;
pub const SECTION_STRINGS: u32 = 2;
pub const SECTION_KERNELS: u32 = 3;
pub const SECTION_ARGS: u32 = 4;

/// Largest code section, in instructions.
pub const MAX_CODE_WORDS: usize = 1 << 20;
/// Largest per-workgroup shared memory.
pub const MAX_SHARED_BYTES: u32 = 64 * 1024;
/// Largest argument buffer.
pub const MAX_ARG_BYTES: u32 = 4096;
/// Most threads in one workgroup.
pub const MAX_WORKGROUP_THREADS: u32 = 1024;
/// Longest kernel or argument name.
pub const MAX_NAME_LEN: usize = 255;

/// What an argument holds (informational for tools; the kernel reads the
/// bytes with `ldarg`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgKind {
    U32 = 1,
    I32 = 2,
    F32 = 3,
    U64 = 4,
    /// A 64-bit GPU virtual address.
    Ptr = 5,
}

impl ArgKind {
    pub const ALL: [ArgKind; 5] = [
        ArgKind::U32,
        ArgKind::I32,
        ArgKind::F32,
        ArgKind::U64,
        ArgKind::Ptr,
    ];
    pub const fn size(self) -> u32 {
        match self {
            ArgKind::U32 | ArgKind::I32 | ArgKind::F32 => 4,
            ArgKind::U64 | ArgKind::Ptr => 8,
        }
    }
    pub const fn name(self) -> &'static str {
        match self {
            ArgKind::U32 => "u32",
            ArgKind::I32 => "i32",
            ArgKind::F32 => "f32",
            ArgKind::U64 => "u64",
            ArgKind::Ptr => "ptr",
        }
    }
    pub fn from_name(s: &str) -> Option<ArgKind> {
        ArgKind::ALL.into_iter().find(|k| k.name() == s)
    }
    fn from_code(c: u32) -> Option<ArgKind> {
        ArgKind::ALL.into_iter().find(|k| *k as u32 == c)
    }
}

/// One kernel argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgInfo {
    pub name: String,
    /// Byte offset in the argument buffer.
    pub offset: u32,
    /// Size in bytes (the kind's size).
    pub size: u32,
    pub kind: ArgKind,
}

/// A kernel: an entry point with its metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kernel {
    pub name: String,
    /// Index of the first instruction in the code section.
    pub entry: u32,
    /// Number of instructions; branches stay inside `[entry, entry + len)`.
    pub len: u32,
    /// Registers per thread (1..=64): every register the code names is below.
    pub regs: u32,
    /// Bytes of shared memory per workgroup.
    pub shared_bytes: u32,
    /// Bytes of the argument buffer the kernel reads.
    pub arg_size: u32,
    pub args: Vec<ArgInfo>,
    /// Suggested workgroup size, `[0, 0, 0]` for none.
    pub wg_hint: [u32; 3],
}

/// A validated module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    generation: u32,
    code: Vec<Instruction>,
    kernels: Vec<Kernel>,
}

/// Why a module was rejected.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum ModuleError {
    #[error("bad magic: not a vgpu module")]
    BadMagic,
    #[error("unsupported container version {0} (this reader knows {VERSION})")]
    UnsupportedVersion(u16),
    #[error("generation {0} does not exist (1 or 2)")]
    BadGeneration(u32),
    #[error("module is generation {module}, the device is generation {device}")]
    GenerationTooNew { module: u32, device: u32 },
    #[error("truncated: {what} needs bytes {start}..{end}, the file has {len}")]
    Truncated {
        what: &'static str,
        start: u64,
        end: u64,
        len: usize,
    },
    #[error("header field {field} must be {expected}, is {found}")]
    BadHeader {
        field: &'static str,
        expected: u64,
        found: u64,
    },
    #[error("section {index} has unknown kind {kind}")]
    UnknownSection { index: usize, kind: u32 },
    #[error("section kind {0} appears twice")]
    DuplicateSection(u32),
    #[error("required section kind {0} is missing")]
    MissingSection(u32),
    #[error("section kind {kind} size {size} is not a multiple of {unit}")]
    SectionSize { kind: u32, size: u32, unit: u32 },
    #[error("code section offset {0:#x} is not 8-byte aligned")]
    MisalignedCode(u32),
    #[error("code section has {0} instructions, the limit is {MAX_CODE_WORDS}")]
    CodeTooLarge(usize),
    #[error("instruction {pc} (word {word:#018x}): {err}")]
    BadInstruction { pc: u32, word: u64, err: InstError },
    #[error("string offset {0} is outside the string section or unterminated")]
    BadString(u32),
    #[error("a name is not an identifier (ASCII letters, digits and `_`, not starting with a digit) or is longer than {MAX_NAME_LEN} bytes")]
    BadName,
    #[error("module has no kernels")]
    NoKernels,
    #[error("kernel name {0:?} appears twice")]
    DuplicateKernel(String),
    #[error("kernel {kernel}: code range {entry}+{len} is outside the code section ({code_len} instructions)")]
    KernelOutsideCode {
        kernel: String,
        entry: u32,
        len: u32,
        code_len: usize,
    },
    #[error("kernel {kernel}: argument entries {first}+{count} are outside the argument table ({table} entries)")]
    ArgsOutsideTable {
        kernel: String,
        first: u32,
        count: u32,
        table: usize,
    },
    #[error("kernel {kernel}: register count {regs} is outside 1..=64")]
    BadRegisterCount { kernel: String, regs: u32 },
    #[error("kernel {kernel}: instruction {pc} uses r{reg}, the kernel declares {regs} registers")]
    RegisterOutOfRange {
        kernel: String,
        pc: u32,
        reg: u32,
        regs: u32,
    },
    #[error(
        "kernel {kernel}: branch at {pc} targets {target}, outside the kernel [{start}, {end})"
    )]
    BadBranchTarget {
        kernel: String,
        pc: u32,
        target: i64,
        start: u32,
        end: u32,
    },
    #[error(
        "kernel {kernel}: the last instruction ({pc}) must be an unpredicated exit, bra or trap"
    )]
    FallsOffEnd { kernel: String, pc: u32 },
    #[error("kernel {kernel}: shared memory {bytes} exceeds {MAX_SHARED_BYTES} bytes")]
    SharedTooLarge { kernel: String, bytes: u32 },
    #[error("kernel {kernel}: argument buffer {bytes} exceeds {MAX_ARG_BYTES} bytes")]
    ArgsTooLarge { kernel: String, bytes: u32 },
    #[error("kernel {kernel}: argument {arg:?} is malformed ({why})")]
    BadArg {
        kernel: String,
        arg: String,
        why: &'static str,
    },
    #[error("kernel {kernel}: ldarg at {pc} reads bytes {offset}..{end}, the argument buffer is {size} bytes")]
    LdargOutOfRange {
        kernel: String,
        pc: u32,
        offset: u32,
        end: u64,
        size: u32,
    },
    #[error("kernel {kernel}: ldarg at {pc} offset {offset} is not 4-byte aligned")]
    LdargMisaligned {
        kernel: String,
        pc: u32,
        offset: u32,
    },
    #[error("kernel {kernel}: workgroup size hint {hint:?} is invalid (all zero, or a product of 1..={MAX_WORKGROUP_THREADS})")]
    BadWorkgroupHint { kernel: String, hint: [u32; 3] },
    #[error(
        "kernel {kernel}: instruction {pc} needs generation {need}, the module is generation {gen}"
    )]
    InstructionGeneration {
        kernel: String,
        pc: u32,
        need: u32,
        gen: u32,
    },
    #[error("instruction {pc}: {err}")]
    Unencodable { pc: u32, err: InstError },
    #[error("module is too large to write")]
    TooLarge,
}

/// The highest register index an operation touches (pairs count both halves).
pub fn max_register(op: &Op) -> Option<u32> {
    fn r(x: Reg) -> u32 {
        x.0 as u32
    }
    fn p(x: Reg) -> u32 {
        x.0 as u32 + 1
    }
    fn s(b: Src, wide: bool) -> Option<u32> {
        match b {
            Src::Reg(x) if wide => Some(p(x)),
            Src::Reg(x) => Some(r(x)),
            Src::Imm(_) => None,
        }
    }
    let m = |v: &[Option<u32>]| v.iter().flatten().copied().max();
    match *op {
        Op::Nop | Op::Exit | Op::Bar | Op::Trap { .. } | Op::Bra { .. } => None,
        Op::Plop { .. } | Op::Vote { .. } => None,
        Op::Mov { d, b } => m(&[Some(r(d)), s(b, false)]),
        Op::S2r { d, .. } => Some(r(d)),
        Op::Ldarg { d, wide, .. } => Some(if wide { p(d) } else { r(d) }),
        Op::Sel { d, a, b, .. } | Op::Bin { d, a, b, .. } | Op::Shfl { d, a, b, .. } => {
            m(&[Some(r(d)), Some(r(a)), s(b, false)])
        }
        Op::Un { d, a, .. } => Some(r(d).max(r(a))),
        Op::Tri { d, a, b, c, .. } => Some(r(d).max(r(a)).max(r(b)).max(r(c))),
        Op::Add64 { d, a, b } => m(&[Some(p(d)), Some(p(a)), s(b, true)]),
        Op::MadWide { d, a, b, c, .. } => Some(p(d).max(r(a)).max(r(b)).max(p(c))),
        Op::Setp { a, b, .. } => m(&[Some(r(a)), s(b, false)]),
        Op::Ld {
            space,
            width,
            d,
            addr,
            ..
        } => {
            let dv = if width == Width::B64 { p(d) } else { r(d) };
            let av = if space == Space::Global {
                p(addr)
            } else {
                r(addr)
            };
            Some(dv.max(av))
        }
        Op::St {
            space,
            width,
            addr,
            v,
            ..
        } => {
            let vv = if width == Width::B64 { p(v) } else { r(v) };
            let av = if space == Space::Global {
                p(addr)
            } else {
                r(addr)
            };
            Some(vv.max(av))
        }
        Op::Atom {
            space,
            d,
            addr,
            b,
            c,
            ..
        } => {
            let av = if space == Space::Global {
                p(addr)
            } else {
                r(addr)
            };
            Some(r(d).max(av).max(r(b)).max(r(c)))
        }
        Op::Ballot { d, .. } => Some(r(d)),
    }
}

/// Whether `s` is an identifier: ASCII letters, digits and `_`, not
/// starting with a digit (what the assembler accepts as a name, so that
/// every loadable module disassembles to text that assembles).
pub(crate) fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(x) if x.is_ascii_alphabetic() || x == '_')
        && c.all(|x| x.is_ascii_alphanumeric() || x == '_')
}

/// The product of three dimensions, or `None` if it does not fit 64 bits.
pub fn checked_product(d: [u32; 3]) -> Option<u64> {
    d.iter().try_fold(1u64, |n, &v| n.checked_mul(u64::from(v)))
}

fn check_name(s: &str) -> Result<(), ModuleError> {
    if !is_ident(s) || s.len() > MAX_NAME_LEN {
        Err(ModuleError::BadName)
    } else {
        Ok(())
    }
}

fn validate_kernel(k: &Kernel, code: &[Instruction], gen: u32) -> Result<(), ModuleError> {
    let kn = || k.name.clone();
    check_name(&k.name)?;
    let end = k.entry as u64 + k.len as u64;
    if k.len == 0 || end > code.len() as u64 {
        return Err(ModuleError::KernelOutsideCode {
            kernel: kn(),
            entry: k.entry,
            len: k.len,
            code_len: code.len(),
        });
    }
    if !(1..=NUM_REGS as u32).contains(&k.regs) {
        return Err(ModuleError::BadRegisterCount {
            kernel: kn(),
            regs: k.regs,
        });
    }
    if k.shared_bytes > MAX_SHARED_BYTES {
        return Err(ModuleError::SharedTooLarge {
            kernel: kn(),
            bytes: k.shared_bytes,
        });
    }
    if k.arg_size > MAX_ARG_BYTES {
        return Err(ModuleError::ArgsTooLarge {
            kernel: kn(),
            bytes: k.arg_size,
        });
    }
    let hint = k.wg_hint;
    // Checked: three u32 factors can exceed 64 bits and wrap into range.
    let product = checked_product(hint);
    if hint != [0, 0, 0]
        && !product.is_some_and(|p| (1..=MAX_WORKGROUP_THREADS as u64).contains(&p))
    {
        return Err(ModuleError::BadWorkgroupHint { kernel: kn(), hint });
    }
    let mut names = HashSet::new();
    let mut ranges: Vec<(u32, u32)> = Vec::new();
    for a in &k.args {
        let bad = |why| ModuleError::BadArg {
            kernel: kn(),
            arg: a.name.clone(),
            why,
        };
        check_name(&a.name)?;
        if !names.insert(a.name.as_str()) {
            return Err(bad("duplicate name"));
        }
        if a.size != a.kind.size() {
            return Err(bad("size does not match kind"));
        }
        if a.offset % a.size != 0 {
            return Err(bad("offset not aligned to its size"));
        }
        if a.offset as u64 + a.size as u64 > k.arg_size as u64 {
            return Err(bad("extends past the argument buffer"));
        }
        ranges.push((a.offset, a.offset + a.size));
    }
    ranges.sort_unstable();
    if ranges.windows(2).any(|w| w[1].0 < w[0].1) {
        return Err(ModuleError::BadArg {
            kernel: kn(),
            arg: String::new(),
            why: "arguments overlap",
        });
    }
    let start = k.entry;
    let end = end as u32;
    for pc in start..end {
        let inst = &code[pc as usize];
        let need = inst.op.min_generation();
        if need > gen {
            return Err(ModuleError::InstructionGeneration {
                kernel: kn(),
                pc,
                need,
                gen,
            });
        }
        if let Some(reg) = max_register(&inst.op) {
            if reg >= k.regs {
                return Err(ModuleError::RegisterOutOfRange {
                    kernel: kn(),
                    pc,
                    reg,
                    regs: k.regs,
                });
            }
        }
        match inst.op {
            Op::Bra { offset } => {
                let target = pc as i64 + offset as i64;
                if target < start as i64 || target >= end as i64 {
                    return Err(ModuleError::BadBranchTarget {
                        kernel: kn(),
                        pc,
                        target,
                        start,
                        end,
                    });
                }
            }
            Op::Ldarg { wide, offset, .. } => {
                let e = offset as u64 + if wide { 8 } else { 4 };
                if offset % 4 != 0 {
                    return Err(ModuleError::LdargMisaligned {
                        kernel: kn(),
                        pc,
                        offset,
                    });
                }
                if e > k.arg_size as u64 {
                    return Err(ModuleError::LdargOutOfRange {
                        kernel: kn(),
                        pc,
                        offset,
                        end: e,
                        size: k.arg_size,
                    });
                }
            }
            _ => {}
        }
    }
    let last = &code[end as usize - 1];
    let terminal = matches!(last.op, Op::Exit | Op::Bra { .. } | Op::Trap { .. });
    if !terminal || last.guard != Guard::ALWAYS {
        return Err(ModuleError::FallsOffEnd {
            kernel: kn(),
            pc: end - 1,
        });
    }
    Ok(())
}

struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn range(&self, what: &'static str, start: u64, len: u64) -> Result<&[u8], ModuleError> {
        let end = start + len;
        if end > self.0.len() as u64 {
            return Err(ModuleError::Truncated {
                what,
                start,
                end,
                len: self.0.len(),
            });
        }
        Ok(&self.0[start as usize..end as usize])
    }
}

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn string_at(strings: &[u8], off: u32) -> Result<String, ModuleError> {
    let tail = strings
        .get(off as usize..)
        .ok_or(ModuleError::BadString(off))?;
    let n = tail
        .iter()
        .position(|&c| c == 0)
        .ok_or(ModuleError::BadString(off))?;
    let s = std::str::from_utf8(&tail[..n]).map_err(|_| ModuleError::BadName)?;
    check_name(s)?;
    Ok(s.to_string())
}

impl Module {
    /// Builds a module, validating every kernel against the code.
    pub fn new(
        generation: u32,
        code: Vec<Instruction>,
        kernels: Vec<Kernel>,
    ) -> Result<Module, ModuleError> {
        if !(1..=2).contains(&generation) {
            return Err(ModuleError::BadGeneration(generation));
        }
        if code.len() > MAX_CODE_WORDS {
            return Err(ModuleError::CodeTooLarge(code.len()));
        }
        for (pc, inst) in code.iter().enumerate() {
            encode(inst).map_err(|err| ModuleError::Unencodable { pc: pc as u32, err })?;
            let need = inst.op.min_generation();
            if need > generation {
                return Err(ModuleError::BadInstruction {
                    pc: pc as u32,
                    word: encode(inst).unwrap_or(0),
                    err: InstError::NotInGeneration {
                        opcode: encode(inst).unwrap_or(0) as u8,
                        need,
                        gen: generation,
                    },
                });
            }
        }
        if kernels.is_empty() {
            return Err(ModuleError::NoKernels);
        }
        let mut names = HashSet::new();
        for k in &kernels {
            if !names.insert(k.name.as_str()) {
                return Err(ModuleError::DuplicateKernel(k.name.clone()));
            }
            validate_kernel(k, &code, generation)?;
        }
        Ok(Module {
            generation,
            code,
            kernels,
        })
    }

    /// The hardware generation the module was built for.
    pub fn generation(&self) -> u32 {
        self.generation
    }
    /// The decoded code section.
    pub fn code(&self) -> &[Instruction] {
        &self.code
    }
    /// The kernels.
    pub fn kernels(&self) -> &[Kernel] {
        &self.kernels
    }
    /// The kernel with this name.
    pub fn kernel(&self, name: &str) -> Option<&Kernel> {
        self.kernels.iter().find(|k| k.name == name)
    }
    /// Index of the kernel with this name.
    pub fn kernel_index(&self, name: &str) -> Option<usize> {
        self.kernels.iter().position(|k| k.name == name)
    }

    /// Reads and validates a module for a device of generation `device_gen`.
    /// This is the loader the device runs before anything executes.
    pub fn load(bytes: &[u8], device_gen: u32) -> Result<Module, ModuleError> {
        let m = Module::from_bytes(bytes)?;
        if m.generation > device_gen {
            return Err(ModuleError::GenerationTooNew {
                module: m.generation,
                device: device_gen,
            });
        }
        Ok(m)
    }

    /// Reads and validates a module.
    pub fn from_bytes(bytes: &[u8]) -> Result<Module, ModuleError> {
        let file = Bytes(bytes);
        let h = file.range("header", 0, HEADER_SIZE as u64)?;
        if h[0..8] != MAGIC {
            return Err(ModuleError::BadMagic);
        }
        let version = le16(h, 8);
        if version != VERSION {
            return Err(ModuleError::UnsupportedVersion(version));
        }
        let generation = le16(h, 10) as u32;
        if !(1..=2).contains(&generation) {
            return Err(ModuleError::BadGeneration(generation));
        }
        let flags = le32(h, 12);
        if flags != 0 {
            return Err(ModuleError::BadHeader {
                field: "flags",
                expected: 0,
                found: flags as u64,
            });
        }
        let file_size = le32(h, 16);
        if file_size as usize != bytes.len() {
            if (file_size as usize) > bytes.len() {
                return Err(ModuleError::Truncated {
                    what: "file",
                    start: 0,
                    end: file_size as u64,
                    len: bytes.len(),
                });
            }
            return Err(ModuleError::BadHeader {
                field: "file_size",
                expected: bytes.len() as u64,
                found: file_size as u64,
            });
        }
        let nsections = le32(h, 20);
        if h[24..32].iter().any(|&b| b != 0) {
            return Err(ModuleError::BadHeader {
                field: "reserved",
                expected: 0,
                found: u64::from_le_bytes([h[24], h[25], h[26], h[27], h[28], h[29], h[30], h[31]]),
            });
        }
        let table = file.range(
            "section table",
            HEADER_SIZE as u64,
            nsections as u64 * SECTION_ENTRY_SIZE as u64,
        )?;
        let mut sections: [Option<&[u8]>; 5] = [None; 5];
        let mut code_off = 0;
        for index in 0..nsections as usize {
            let e = &table[index * SECTION_ENTRY_SIZE..(index + 1) * SECTION_ENTRY_SIZE];
            let kind = le32(e, 0);
            let sflags = le32(e, 4);
            let off = le32(e, 8);
            let size = le32(e, 12);
            if !(SECTION_CODE..=SECTION_ARGS).contains(&kind) {
                return Err(ModuleError::UnknownSection { index, kind });
            }
            if sflags != 0 {
                return Err(ModuleError::BadHeader {
                    field: "section flags",
                    expected: 0,
                    found: sflags as u64,
                });
            }
            let slot = &mut sections[kind as usize];
            if slot.is_some() {
                return Err(ModuleError::DuplicateSection(kind));
            }
            let what = match kind {
                SECTION_CODE => "code section",
                SECTION_STRINGS => "string section",
                SECTION_KERNELS => "kernel table",
                _ => "argument table",
            };
            *slot = Some(file.range(what, off as u64, size as u64)?);
            if kind == SECTION_CODE {
                code_off = off;
            }
        }
        let get = |kind: u32| sections[kind as usize].ok_or(ModuleError::MissingSection(kind));
        let code_bytes = get(SECTION_CODE)?;
        let strings = get(SECTION_STRINGS)?;
        let ktab = get(SECTION_KERNELS)?;
        let atab = sections[SECTION_ARGS as usize].unwrap_or(&[]);
        let unit = |kind, b: &[u8], unit: usize| {
            if !b.len().is_multiple_of(unit) {
                Err(ModuleError::SectionSize {
                    kind,
                    size: b.len() as u32,
                    unit: unit as u32,
                })
            } else {
                Ok(b.len() / unit)
            }
        };
        let nwords = unit(SECTION_CODE, code_bytes, 8)?;
        if code_off % 8 != 0 {
            return Err(ModuleError::MisalignedCode(code_off));
        }
        if nwords > MAX_CODE_WORDS {
            return Err(ModuleError::CodeTooLarge(nwords));
        }
        let nkernels = unit(SECTION_KERNELS, ktab, KERNEL_ENTRY_SIZE)?;
        let nargs = unit(SECTION_ARGS, atab, ARG_ENTRY_SIZE)?;

        let mut code = Vec::with_capacity(nwords);
        for (pc, chunk) in code_bytes.chunks_exact(8).enumerate() {
            let mut w = [0u8; 8];
            w.copy_from_slice(chunk);
            let word = u64::from_le_bytes(w);
            let inst = decode(word, generation).map_err(|err| ModuleError::BadInstruction {
                pc: pc as u32,
                word,
                err,
            })?;
            code.push(inst);
        }

        let mut kernels = Vec::with_capacity(nkernels);
        for i in 0..nkernels {
            let e = &ktab[i * KERNEL_ENTRY_SIZE..(i + 1) * KERNEL_ENTRY_SIZE];
            let f = |n: usize| le32(e, n * 4);
            let name = string_at(strings, f(0))?;
            let (first, count) = (f(6), f(7));
            if first as u64 + count as u64 > nargs as u64 {
                return Err(ModuleError::ArgsOutsideTable {
                    kernel: name,
                    first,
                    count,
                    table: nargs,
                });
            }
            if f(11) != 0 {
                return Err(ModuleError::BadHeader {
                    field: "kernel flags",
                    expected: 0,
                    found: f(11) as u64,
                });
            }
            let mut args = Vec::with_capacity(count as usize);
            for j in first..first + count {
                let a = &atab[j as usize * ARG_ENTRY_SIZE..(j as usize + 1) * ARG_ENTRY_SIZE];
                let aname = string_at(strings, le32(a, 0))?;
                let kind = ArgKind::from_code(le32(a, 12)).ok_or_else(|| ModuleError::BadArg {
                    kernel: name.clone(),
                    arg: aname.clone(),
                    why: "unknown kind",
                })?;
                args.push(ArgInfo {
                    name: aname,
                    offset: le32(a, 4),
                    size: le32(a, 8),
                    kind,
                });
            }
            kernels.push(Kernel {
                name,
                entry: f(1),
                len: f(2),
                regs: f(3),
                shared_bytes: f(4),
                arg_size: f(5),
                args,
                wg_hint: [f(8), f(9), f(10)],
            });
        }
        Module::new(generation, code, kernels)
    }

    /// Serialises the module.
    pub fn to_bytes(&self) -> Result<Vec<u8>, ModuleError> {
        let mut strings: Vec<u8> = Vec::new();
        let mut intern = |s: &str| {
            let off = strings.len() as u32;
            strings.extend_from_slice(s.as_bytes());
            strings.push(0);
            off
        };
        let mut ktab = Vec::new();
        let mut atab = Vec::new();
        let mut nargs = 0u32;
        for k in &self.kernels {
            let name = intern(&k.name);
            let fields = [
                name,
                k.entry,
                k.len,
                k.regs,
                k.shared_bytes,
                k.arg_size,
                nargs,
                k.args.len() as u32,
                k.wg_hint[0],
                k.wg_hint[1],
                k.wg_hint[2],
                0,
            ];
            for v in fields {
                ktab.extend_from_slice(&v.to_le_bytes());
            }
            for a in &k.args {
                let an = intern(&a.name);
                for v in [an, a.offset, a.size, a.kind as u32] {
                    atab.extend_from_slice(&v.to_le_bytes());
                }
                nargs += 1;
            }
        }
        let mut code = Vec::with_capacity(self.code.len() * 8);
        for (pc, inst) in self.code.iter().enumerate() {
            let w = encode(inst).map_err(|err| ModuleError::Unencodable { pc: pc as u32, err })?;
            code.extend_from_slice(&w.to_le_bytes());
        }
        let sections: [(u32, &[u8]); 4] = [
            (SECTION_CODE, &code),
            (SECTION_KERNELS, &ktab),
            (SECTION_ARGS, &atab),
            (SECTION_STRINGS, &strings),
        ];
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(self.generation as u16).to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes());
        out.extend_from_slice(&0u32.to_le_bytes()); // file size, patched below
        out.extend_from_slice(&(sections.len() as u32).to_le_bytes());
        out.extend_from_slice(&[0u8; 8]);
        let mut off = HEADER_SIZE + sections.len() * SECTION_ENTRY_SIZE;
        for (kind, data) in sections {
            let size = u32::try_from(data.len()).map_err(|_| ModuleError::TooLarge)?;
            let o = u32::try_from(off).map_err(|_| ModuleError::TooLarge)?;
            for v in [kind, 0, o, size] {
                out.extend_from_slice(&v.to_le_bytes());
            }
            off += data.len().next_multiple_of(8);
        }
        for (_, data) in sections {
            out.extend_from_slice(data);
            out.resize(out.len().next_multiple_of(8), 0);
        }
        let total = u32::try_from(out.len()).map_err(|_| ModuleError::TooLarge)?;
        out[16..20].copy_from_slice(&total.to_le_bytes());
        Ok(out)
    }
}
