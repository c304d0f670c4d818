//! The typed form of a vgpu instruction.
//!
//! Every instruction word of a module decodes to exactly one [`Instruction`]
//! and every `Instruction` whose fields are in range encodes to exactly one
//! word (see `docs/isa.md`, "Binary encoding").

use std::fmt;

/// Number of general-purpose 32-bit registers per thread.
pub const NUM_REGS: usize = 64;
/// Number of predicate registers per thread (`p0`..`p6` plus the constant `pt`).
pub const NUM_PREDS: usize = 8;
/// Lanes per warp.
pub const WARP_SIZE: usize = 32;

/// A 32-bit register `r0`..`r63`; as a 64-bit pair (`d0`, `d2`, ..`d62`) it
/// names `rN` (low half) and `rN+1` (high half).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reg(pub u8);

/// A predicate register `p0`..`p6`, or `pt` (index 7), which always reads true
/// and ignores writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pred(pub u8);

impl Pred {
    /// The constant-true predicate.
    pub const TRUE: Pred = Pred(7);
}

/// The second source operand of most instructions: a register or a 32-bit
/// immediate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Src {
    Reg(Reg),
    Imm(u32),
}

/// Instruction predication: the instruction acts only in lanes where `pred`
/// (or its negation) is true.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Guard {
    pub pred: Pred,
    pub neg: bool,
}

impl Guard {
    /// `@pt`: every active lane.
    pub const ALWAYS: Guard = Guard {
        pred: Pred::TRUE,
        neg: false,
    };
}

/// One decoded instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Instruction {
    pub guard: Guard,
    pub op: Op,
}

impl Instruction {
    /// An unpredicated instruction.
    pub const fn new(op: Op) -> Self {
        Instruction {
            guard: Guard::ALWAYS,
            op,
        }
    }
}

macro_rules! op_table {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $v:ident = ($code:expr, $mn:expr)),* $(,)? }) => {
        $(#[$m])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name { $($(#[$vm])* $v),* }
        impl $name {
            /// Every member, in opcode order.
            pub const ALL: &'static [$name] = &[$($name::$v),*];
            /// The opcode byte.
            pub const fn opcode(self) -> u8 { match self { $($name::$v => $code),* } }
            /// The assembler mnemonic.
            pub const fn mnemonic(self) -> &'static str { match self { $($name::$v => $mn),* } }
            /// The member with this opcode.
            pub fn from_opcode(op: u8) -> Option<Self> {
                match op { $($code => Some($name::$v),)* _ => None }
            }
            /// The member with this mnemonic.
            pub fn from_mnemonic(m: &str) -> Option<Self> {
                match m { $($mn => Some($name::$v),)* _ => None }
            }
        }
    };
}

op_table! {
    /// Two-source ALU operations `d = a OP b`.
    BinOp {
        Add = (0x10, "add"),
        Sub = (0x11, "sub"),
        Mul = (0x12, "mul"),
        MulHiU = (0x13, "mulhi.u32"),
        MulHiS = (0x14, "mulhi.s32"),
        DivU = (0x15, "div.u32"),
        DivS = (0x16, "div.s32"),
        RemU = (0x17, "rem.u32"),
        RemS = (0x18, "rem.s32"),
        MinU = (0x19, "min.u32"),
        MinS = (0x1a, "min.s32"),
        MaxU = (0x1b, "max.u32"),
        MaxS = (0x1c, "max.s32"),
        And = (0x1d, "and"),
        Or = (0x1e, "or"),
        Xor = (0x1f, "xor"),
        Shl = (0x20, "shl"),
        ShrU = (0x21, "shr.u32"),
        ShrS = (0x22, "shr.s32"),
        FAdd = (0x28, "fadd"),
        FSub = (0x29, "fsub"),
        FMul = (0x2a, "fmul"),
        FDiv = (0x2b, "fdiv"),
        FMin = (0x2c, "fmin"),
        FMax = (0x2d, "fmax"),
    }
}

impl BinOp {
    /// Whether the operands are fp32 (immediates are written as floats).
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            BinOp::FAdd | BinOp::FSub | BinOp::FMul | BinOp::FDiv | BinOp::FMin | BinOp::FMax
        )
    }
}

op_table! {
    /// One-source operations `d = OP a`.
    UnOp {
        Not = (0x30, "not"),
        Popc = (0x31, "popc"),
        Clz = (0x32, "clz"),
        FAbs = (0x33, "fabs"),
        FNeg = (0x34, "fneg"),
        Rcp = (0x35, "rcp"),
        Sqrt = (0x36, "sqrt"),
        Rsqrt = (0x37, "rsqrt"),
        Exp2 = (0x38, "exp2"),
        Log2 = (0x39, "log2"),
        CvtF32S32 = (0x3a, "cvt.f32.s32"),
        CvtF32U32 = (0x3b, "cvt.f32.u32"),
        CvtS32F32 = (0x3c, "cvt.s32.f32"),
        CvtU32F32 = (0x3d, "cvt.u32.f32"),
    }
}

op_table! {
    /// Three-register operations `d = a * b + c`.
    TriOp {
        /// Integer multiply-add, low 32 bits.
        Mad = (0x40, "mad"),
        /// fp32 fused multiply-add, one rounding.
        FFma = (0x41, "ffma"),
    }
}

op_table! {
    /// Warp shuffles (generation 2 only).
    ShflMode {
        Idx = (0x60, "shfl.idx"),
        Up = (0x61, "shfl.up"),
        Down = (0x62, "shfl.down"),
        Bfly = (0x63, "shfl.bfly"),
    }
}

op_table! {
    /// Warp votes into a predicate (generation 2 only).
    VoteMode {
        Any = (0x64, "vote.any"),
        All = (0x65, "vote.all"),
    }
}

/// Comparison of `setp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cmp {
    Eq = 0,
    Ne = 1,
    Lt = 2,
    Le = 3,
    Gt = 4,
    Ge = 5,
}

impl Cmp {
    pub const ALL: [Cmp; 6] = [Cmp::Eq, Cmp::Ne, Cmp::Lt, Cmp::Le, Cmp::Gt, Cmp::Ge];
    pub const fn name(self) -> &'static str {
        match self {
            Cmp::Eq => "eq",
            Cmp::Ne => "ne",
            Cmp::Lt => "lt",
            Cmp::Le => "le",
            Cmp::Gt => "gt",
            Cmp::Ge => "ge",
        }
    }
}

/// Operand type of `setp`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpType {
    U32 = 0,
    S32 = 1,
    F32 = 2,
}

impl CmpType {
    pub const ALL: [CmpType; 3] = [CmpType::U32, CmpType::S32, CmpType::F32];
    pub const fn name(self) -> &'static str {
        match self {
            CmpType::U32 => "u32",
            CmpType::S32 => "s32",
            CmpType::F32 => "f32",
        }
    }
}

/// Predicate logic of `pand`/`por`/`pxor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PredOp {
    And,
    Or,
    Xor,
}

impl PredOp {
    pub const ALL: [PredOp; 3] = [PredOp::And, PredOp::Or, PredOp::Xor];
    pub const fn opcode(self) -> u8 {
        match self {
            PredOp::And => 0x49,
            PredOp::Or => 0x4a,
            PredOp::Xor => 0x4b,
        }
    }
    pub const fn mnemonic(self) -> &'static str {
        match self {
            PredOp::And => "pand",
            PredOp::Or => "por",
            PredOp::Xor => "pxor",
        }
    }
}

/// Access width (and, for loads, extension) of a memory instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Width {
    U8 = 0,
    S8 = 1,
    U16 = 2,
    S16 = 3,
    B32 = 4,
    B64 = 5,
}

impl Width {
    pub const ALL: [Width; 6] = [
        Width::U8,
        Width::S8,
        Width::U16,
        Width::S16,
        Width::B32,
        Width::B64,
    ];
    /// Bytes accessed.
    pub const fn bytes(self) -> u32 {
        match self {
            Width::U8 | Width::S8 => 1,
            Width::U16 | Width::S16 => 2,
            Width::B32 => 4,
            Width::B64 => 8,
        }
    }
    /// Suffix in load mnemonics (`ld.u8`).
    pub const fn load_name(self) -> &'static str {
        match self {
            Width::U8 => "u8",
            Width::S8 => "s8",
            Width::U16 => "u16",
            Width::S16 => "s16",
            Width::B32 => "32",
            Width::B64 => "64",
        }
    }
    /// Whether stores may use this width (stores do not extend).
    pub const fn valid_for_store(self) -> bool {
        !matches!(self, Width::S8 | Width::S16)
    }
    /// Suffix in store mnemonics (`st.8`).
    pub const fn store_name(self) -> &'static str {
        match self {
            Width::U8 | Width::S8 => "8",
            Width::U16 | Width::S16 => "16",
            Width::B32 => "32",
            Width::B64 => "64",
        }
    }
}

/// The memory an access goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Space {
    /// GPU virtual memory, 64-bit addresses in a register pair.
    Global,
    /// The workgroup's shared memory, 32-bit byte offsets in a register.
    Shared,
}

/// Read-modify-write operation of `atom`/`atoms` (32-bit).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomOp {
    Add = 0,
    MinU = 1,
    MinS = 2,
    MaxU = 3,
    MaxS = 4,
    Exch = 5,
    Cas = 6,
    And = 7,
    Or = 8,
    Xor = 9,
}

impl AtomOp {
    pub const ALL: [AtomOp; 10] = [
        AtomOp::Add,
        AtomOp::MinU,
        AtomOp::MinS,
        AtomOp::MaxU,
        AtomOp::MaxS,
        AtomOp::Exch,
        AtomOp::Cas,
        AtomOp::And,
        AtomOp::Or,
        AtomOp::Xor,
    ];
    pub const fn name(self) -> &'static str {
        match self {
            AtomOp::Add => "add",
            AtomOp::MinU => "min.u32",
            AtomOp::MinS => "min.s32",
            AtomOp::MaxU => "max.u32",
            AtomOp::MaxS => "max.s32",
            AtomOp::Exch => "exch",
            AtomOp::Cas => "cas",
            AtomOp::And => "and",
            AtomOp::Or => "or",
            AtomOp::Xor => "xor",
        }
    }
    /// The new memory value, given the old one, the operand `b` and (for
    /// `cas`) the replacement `c`.
    #[inline]
    pub fn apply(self, old: u32, b: u32, c: u32) -> u32 {
        match self {
            AtomOp::Add => old.wrapping_add(b),
            AtomOp::MinU => old.min(b),
            AtomOp::MinS => (old as i32).min(b as i32) as u32,
            AtomOp::MaxU => old.max(b),
            AtomOp::MaxS => (old as i32).max(b as i32) as u32,
            AtomOp::Exch => b,
            AtomOp::Cas => {
                if old == b {
                    c
                } else {
                    old
                }
            }
            AtomOp::And => old & b,
            AtomOp::Or => old | b,
            AtomOp::Xor => old ^ b,
        }
    }

    /// Performs the operation atomically on `w` (acquire-release) and
    /// returns the old value: the one place both the host-side test memory
    /// and the device's guest memory implement 32-bit atomics.
    #[inline]
    pub fn apply_atomic(self, w: &std::sync::atomic::AtomicU32, b: u32, c: u32) -> u32 {
        use std::sync::atomic::Ordering;
        let o = Ordering::AcqRel;
        match self {
            AtomOp::Add => w.fetch_add(b, o),
            AtomOp::MinU => w.fetch_min(b, o),
            AtomOp::MaxU => w.fetch_max(b, o),
            AtomOp::Exch => w.swap(b, o),
            AtomOp::And => w.fetch_and(b, o),
            AtomOp::Or => w.fetch_or(b, o),
            AtomOp::Xor => w.fetch_xor(b, o),
            AtomOp::Cas => match w.compare_exchange(b, c, o, Ordering::Acquire) {
                Ok(v) | Err(v) => v,
            },
            AtomOp::MinS | AtomOp::MaxS => {
                match w.fetch_update(o, Ordering::Acquire, |old| Some(self.apply(old, b, c))) {
                    Ok(v) | Err(v) => v,
                }
            }
        }
    }
}

/// Special registers read with `s2r`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Special {
    TidX = 0,
    TidY = 1,
    TidZ = 2,
    NtidX = 3,
    NtidY = 4,
    NtidZ = 5,
    WgidX = 6,
    WgidY = 7,
    WgidZ = 8,
    NwgX = 9,
    NwgY = 10,
    NwgZ = 11,
    GidX = 12,
    GidY = 13,
    GidZ = 14,
    LaneId = 15,
    WarpId = 16,
    NWarps = 17,
    Clock = 18,
    ClockHi = 19,
}

impl Special {
    pub const ALL: [Special; 20] = [
        Special::TidX,
        Special::TidY,
        Special::TidZ,
        Special::NtidX,
        Special::NtidY,
        Special::NtidZ,
        Special::WgidX,
        Special::WgidY,
        Special::WgidZ,
        Special::NwgX,
        Special::NwgY,
        Special::NwgZ,
        Special::GidX,
        Special::GidY,
        Special::GidZ,
        Special::LaneId,
        Special::WarpId,
        Special::NWarps,
        Special::Clock,
        Special::ClockHi,
    ];
    pub const fn name(self) -> &'static str {
        match self {
            Special::TidX => "%tid.x",
            Special::TidY => "%tid.y",
            Special::TidZ => "%tid.z",
            Special::NtidX => "%ntid.x",
            Special::NtidY => "%ntid.y",
            Special::NtidZ => "%ntid.z",
            Special::WgidX => "%wgid.x",
            Special::WgidY => "%wgid.y",
            Special::WgidZ => "%wgid.z",
            Special::NwgX => "%nwg.x",
            Special::NwgY => "%nwg.y",
            Special::NwgZ => "%nwg.z",
            Special::GidX => "%gid.x",
            Special::GidY => "%gid.y",
            Special::GidZ => "%gid.z",
            Special::LaneId => "%laneid",
            Special::WarpId => "%warpid",
            Special::NWarps => "%nwarps",
            Special::Clock => "%clock",
            Special::ClockHi => "%clockhi",
        }
    }
    pub fn from_index(i: u32) -> Option<Special> {
        Special::ALL.get(i as usize).copied()
    }
}

/// The operation of an instruction with its operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// No operation.
    Nop,
    /// The active lanes finish.
    Exit,
    /// Workgroup barrier.
    Bar,
    /// Stop the workgroup with a trap outcome carrying `code`.
    Trap { code: u32 },
    /// Branch to `pc + offset` (in instructions).
    Bra { offset: i32 },
    /// `d = b`.
    Mov { d: Reg, b: Src },
    /// `d = special register`.
    S2r { d: Reg, sr: Special },
    /// `d = args[offset]` (32 bits, or 64 bits into the pair `d` if `wide`).
    Ldarg { d: Reg, wide: bool, offset: u32 },
    /// `d = p ? a : b` (with `!p` if `neg`).
    Sel {
        d: Reg,
        a: Reg,
        b: Src,
        p: Pred,
        neg: bool,
    },
    /// `d = a OP b`.
    Bin { op: BinOp, d: Reg, a: Reg, b: Src },
    /// `d = OP a`.
    Un { op: UnOp, d: Reg, a: Reg },
    /// `d = a * b + c`.
    Tri {
        op: TriOp,
        d: Reg,
        a: Reg,
        b: Reg,
        c: Reg,
    },
    /// 64-bit add: pair `d` = pair `a` + (pair `b` | sign-extended immediate).
    Add64 { d: Reg, a: Reg, b: Src },
    /// Widening multiply-add: pair `d` = `a` * `b` (32×32→64) + pair `c`.
    MadWide {
        signed: bool,
        d: Reg,
        a: Reg,
        b: Reg,
        c: Reg,
    },
    /// `p = a CMP b`.
    Setp {
        cmp: Cmp,
        ty: CmpType,
        p: Pred,
        a: Reg,
        b: Src,
    },
    /// `p = (a ^ na) OP (b ^ nb)`.
    Plop {
        op: PredOp,
        p: Pred,
        a: Pred,
        na: bool,
        b: Pred,
        nb: bool,
    },
    /// Load `d` from `[addr + offset]`.
    Ld {
        space: Space,
        width: Width,
        d: Reg,
        addr: Reg,
        offset: i32,
    },
    /// Store `v` to `[addr + offset]`.
    St {
        space: Space,
        width: Width,
        addr: Reg,
        offset: i32,
        v: Reg,
    },
    /// 32-bit atomic: `d = old; mem = op(old, b, c)`; `c` is used by `cas`
    /// only and is `r0` otherwise.
    Atom {
        space: Space,
        op: AtomOp,
        d: Reg,
        addr: Reg,
        offset: i32,
        b: Reg,
        c: Reg,
    },
    /// Warp shuffle (generation 2).
    Shfl {
        mode: ShflMode,
        d: Reg,
        a: Reg,
        b: Src,
    },
    /// Warp vote into a predicate (generation 2).
    Vote {
        mode: VoteMode,
        p: Pred,
        src: Pred,
        neg: bool,
    },
    /// Warp ballot into a register (generation 2).
    Ballot { d: Reg, src: Pred, neg: bool },
}

impl Op {
    /// The first hardware generation that has this instruction.
    pub fn min_generation(&self) -> u32 {
        match self {
            Op::Shfl { .. } | Op::Vote { .. } | Op::Ballot { .. } => 2,
            _ => 1,
        }
    }
}

impl fmt::Display for Reg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "r{}", self.0)
    }
}

impl fmt::Display for Pred {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 7 {
            f.write_str("pt")
        } else {
            write!(f, "p{}", self.0)
        }
    }
}
