//! The probe guest: a few hundred bytes of x86 machine code that walk the
//! path a kernel's early boot takes through the instructions a
//! paravirtualised or incomplete KVM gets wrong.
//!
//! It starts in real mode (as firmware does), loads a flat GDT, enters
//! 32-bit protected mode, runs `CPUID`, and — when the CPUID it was given
//! has XSAVE — sets `CR4.OSXSAVE` (with `OSFXSR`/`OSXMMEXCPT`), `XSETBV`
//! with the x87/SSE/AVX bits CPUID leaf 0xD offers, puts a marker in
//! `xmm0`, `XSAVE`s, clears `xmm0`, `XRSTOR`s and checks the marker came
//! back. After each step it writes a progress code to port 0x80 (the POST
//! code port), so the host knows how far it got when something fails; the
//! last code says the result. There is no IDT: any exception becomes a
//! triple fault (`KVM_EXIT_SHUTDOWN`).

/// Guest-physical size of the probe's memory (one slot at 0).
pub const MEM_SIZE: usize = 0x10000;
/// Where the code is loaded and the vCPU starts (CS = 0, IP = this).
pub const CODE_ADDR: u64 = 0x1000;
/// The GDT: null, flat 32-bit code (selector 0x08), flat data (0x10).
pub const GDT_ADDR: u64 = 0x0500;
/// The 6-byte GDT descriptor `lgdt` reads.
pub const GDT_DESC_ADDR: u64 = 0x0520;
/// The XSAVE area (64-byte aligned; x87+SSE+AVX need 832 bytes).
pub const XSAVE_ADDR: u32 = 0x4000;
/// Top of the stack (nothing is pushed; set as a kernel would).
pub const STACK_TOP: u32 = 0x8000;
/// The port progress codes are written to.
pub const PROGRESS_PORT: u16 = 0x80;

// The layout holds together: GDT, descriptor, code, XSAVE area (64-byte
// aligned), stack, all inside the memory.
const _: () = {
    assert!(GDT_ADDR + 24 <= GDT_DESC_ADDR);
    assert!(GDT_DESC_ADDR + 6 <= CODE_ADDR);
    assert!(XSAVE_ADDR & 63 == 0);
    assert!(XSAVE_ADDR + 0x1000 <= STACK_TOP);
    assert!((STACK_TOP as usize) <= MEM_SIZE);
};

/// Marker put in `xmm0` before `XSAVE` and expected back after `XRSTOR`.
pub const MARKER: u32 = 0x1234_5678;

/// The probe guest's program, one variant for the timeout path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// The XSAVE walk described above.
    Xsave,
    /// Real mode, progress codes 1 and [`code::SPINNING`], then a jump to
    /// itself forever: no exit ever comes, so only the host's timeout ends
    /// the run.
    Spin,
}

/// Progress codes, in the order the guest writes them.
pub mod code {
    /// Running in real mode.
    pub const REAL_MODE: u8 = 0x01;
    /// Running in 32-bit protected mode.
    pub const PROTECTED: u8 = 0x02;
    /// `CPUID` leaf 1 returned.
    pub const CPUID: u8 = 0x03;
    /// `CR4.OSXSAVE` (and `OSFXSR`) set.
    pub const OSXSAVE: u8 = 0x04;
    /// `XSETBV` done.
    pub const XSETBV: u8 = 0x05;
    /// `XSAVE` done.
    pub const XSAVE: u8 = 0x06;
    /// `XRSTOR` done.
    pub const XRSTOR: u8 = 0x07;
    /// Finished: the state came back through XSAVE/XRSTOR.
    pub const DONE: u8 = 0x10;
    /// Finished: CPUID has no XSAVE, so nothing was saved.
    pub const DONE_NO_XSAVE: u8 = 0x11;
    /// Finished: `xmm0` after `XRSTOR` is not what was saved.
    pub const RESTORE_MISMATCH: u8 = 0x12;
    /// The spin program is about to loop forever.
    pub const SPINNING: u8 = 0x20;
}

/// A tiny assembler: bytes plus forward `rel32` jumps patched at the end.
struct Asm {
    base: u64,
    port: u8,
    bytes: Vec<u8>,
    /// (offset of the rel32 field, label index)
    fixups: Vec<(usize, usize)>,
    labels: Vec<Option<usize>>,
}

impl Asm {
    fn new(base: u64, port: u8) -> Self {
        Asm {
            base,
            port,
            bytes: Vec::new(),
            fixups: Vec::new(),
            labels: Vec::new(),
        }
    }

    fn b(&mut self, bytes: &[u8]) -> &mut Self {
        self.bytes.extend_from_slice(bytes);
        self
    }

    fn d(&mut self, v: u32) -> &mut Self {
        self.b(&v.to_le_bytes())
    }

    fn label(&mut self) -> usize {
        self.labels.push(None);
        self.labels.len() - 1
    }

    fn bind(&mut self, l: usize) {
        self.labels[l] = Some(self.bytes.len());
    }

    /// Address of the next byte.
    fn here(&self) -> u64 {
        self.base + self.bytes.len() as u64
    }

    /// `jcc rel32` (`0F cc`) to `l`.
    fn jcc(&mut self, cc: u8, l: usize) -> &mut Self {
        self.b(&[0x0f, cc]);
        self.fixups.push((self.bytes.len(), l));
        self.d(0)
    }

    /// `mov al, c; out port, al`.
    fn progress(&mut self, c: u8) -> &mut Self {
        let port = self.port;
        self.b(&[0xb0, c, 0xe6, port])
    }

    /// `hlt` then a jump back to it, should anything wake the vCPU.
    fn halt(&mut self) -> &mut Self {
        self.b(&[0xf4, 0xeb, 0xfd])
    }

    fn finish(mut self) -> Vec<u8> {
        for (at, l) in std::mem::take(&mut self.fixups) {
            let target = self.labels[l].expect("every label is bound") as i64;
            let rel = i32::try_from(target - (at as i64 + 4)).expect("the program is small");
            self.bytes[at..at + 4].copy_from_slice(&rel.to_le_bytes());
        }
        self.bytes
    }
}

/// The GDT bytes (at [`GDT_ADDR`]) and its descriptor (at
/// [`GDT_DESC_ADDR`]).
pub fn gdt() -> ([u8; 24], [u8; 6]) {
    let mut g = [0u8; 24];
    // Flat 4 GiB, granularity 4 KiB, 32-bit: code (0x9a) and data (0x92).
    g[8..16].copy_from_slice(&[0xff, 0xff, 0, 0, 0, 0x9a, 0xcf, 0]);
    g[16..24].copy_from_slice(&[0xff, 0xff, 0, 0, 0, 0x92, 0xcf, 0]);
    let mut d = [0u8; 6];
    d[0..2].copy_from_slice(&(g.len() as u16 - 1).to_le_bytes());
    d[2..6].copy_from_slice(&(GDT_ADDR as u32).to_le_bytes());
    (g, d)
}

/// The machine code of `p`, to be loaded at [`CODE_ADDR`].
pub fn program(p: Program) -> Vec<u8> {
    program_for_port(p, PROGRESS_PORT as u8)
}

/// The same program writing its progress codes to another port (QEMU's
/// `debugcon` at 0xe9, say, to run it outside KVM).
pub fn program_for_port(p: Program, port: u8) -> Vec<u8> {
    let mut a = Asm::new(CODE_ADDR, port);
    // ---- 16-bit real mode
    a.progress(code::REAL_MODE);
    if p == Program::Spin {
        a.progress(code::SPINNING);
        a.b(&[0xeb, 0xfe]); // jmp $
        return a.finish();
    }
    a.b(&[0xfa]); // cli
    let desc = GDT_DESC_ADDR as u16;
    a.b(&[0x0f, 0x01, 0x16]).b(&desc.to_le_bytes()); // lgdt [desc]
    a.b(&[0x0f, 0x20, 0xc0]); // mov eax, cr0
    a.b(&[0x0c, 0x01]); // or al, 1 (CR0.PE)
    a.b(&[0x0f, 0x22, 0xc0]); // mov cr0, eax
                              // jmp far 0x08:pm (66 EA offset32 selector16); pm follows at once.
    let pm = a.here() + 8;
    a.b(&[0x66, 0xea]).d(pm as u32).b(&[0x08, 0x00]);
    debug_assert_eq!(a.here(), pm);
    // ---- 32-bit protected mode
    a.b(&[0x66, 0xb8, 0x10, 0x00]); // mov ax, 0x10
    a.b(&[0x8e, 0xd8, 0x8e, 0xc0, 0x8e, 0xd0]); // mov ds, ax; mov es, ax; mov ss, ax
    a.b(&[0xbc]).d(STACK_TOP); // mov esp, STACK_TOP
    a.progress(code::PROTECTED);
    a.b(&[0xb8]).d(1); // mov eax, 1
    a.b(&[0x31, 0xc9]); // xor ecx, ecx
    a.b(&[0x0f, 0xa2]); // cpuid
    a.b(&[0x89, 0xcb]); // mov ebx, ecx
    a.progress(code::CPUID);
    let no_xsave = a.label();
    let mismatch = a.label();
    a.b(&[0xf7, 0xc3]).d(1 << 26); // test ebx, CPUID.1:ECX.XSAVE
    a.jcc(0x84, no_xsave); // jz no_xsave
    a.b(&[0x0f, 0x20, 0xe0]); // mov eax, cr4
    a.b(&[0x0d]).d((1 << 18) | (1 << 10) | (1 << 9)); // or eax, OSXSAVE|OSXMMEXCPT|OSFXSR
    a.b(&[0x0f, 0x22, 0xe0]); // mov cr4, eax
    a.progress(code::OSXSAVE);
    a.b(&[0xb8]).d(0xd); // mov eax, 0xd
    a.b(&[0x31, 0xc9]); // xor ecx, ecx
    a.b(&[0x0f, 0xa2]); // cpuid: EAX = the XCR0 bits the CPU supports
    a.b(&[0x83, 0xe0, 0x07]); // and eax, x87|SSE|AVX
    a.b(&[0x83, 0xc8, 0x03]); // or eax, x87|SSE
    a.b(&[0x89, 0xc6]); // mov esi, eax
    a.b(&[0x31, 0xd2, 0x31, 0xc9]); // xor edx, edx; xor ecx, ecx
    a.b(&[0x0f, 0x01, 0xd1]); // xsetbv
    a.progress(code::XSETBV);
    a.b(&[0xb8]).d(MARKER); // mov eax, MARKER
    a.b(&[0x66, 0x0f, 0x6e, 0xc0]); // movd xmm0, eax
    a.b(&[0x89, 0xf0, 0x31, 0xd2]); // mov eax, esi; xor edx, edx
    a.b(&[0x0f, 0xae, 0x25]).d(XSAVE_ADDR); // xsave [XSAVE_ADDR]
    a.progress(code::XSAVE);
    a.b(&[0x66, 0x0f, 0xef, 0xc0]); // pxor xmm0, xmm0
    a.b(&[0x89, 0xf0, 0x31, 0xd2]); // mov eax, esi; xor edx, edx
    a.b(&[0x0f, 0xae, 0x2d]).d(XSAVE_ADDR); // xrstor [XSAVE_ADDR]
    a.progress(code::XRSTOR);
    a.b(&[0x66, 0x0f, 0x7e, 0xc0]); // movd eax, xmm0
    a.b(&[0x3d]).d(MARKER); // cmp eax, MARKER
    a.jcc(0x85, mismatch); // jne mismatch
    a.progress(code::DONE).halt();
    a.bind(no_xsave);
    a.progress(code::DONE_NO_XSAVE).halt();
    a.bind(mismatch);
    a.progress(code::RESTORE_MISMATCH).halt();
    a.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
        hay.windows(needle.len()).position(|w| w == needle)
    }

    #[test]
    fn the_program_lies_between_the_gdt_and_the_xsave_area() {
        let p = program(Program::Xsave);
        assert!(CODE_ADDR as usize + p.len() < XSAVE_ADDR as usize);
    }

    #[test]
    fn the_far_jump_lands_on_the_first_protected_mode_instruction() {
        let p = program(Program::Xsave);
        let at = find(&p, &[0x66, 0xea]).unwrap();
        let target = u32::from_le_bytes(p[at + 2..at + 6].try_into().unwrap()) as usize;
        assert_eq!(&p[at + 6..at + 8], &[0x08, 0x00], "code selector");
        let off = target - CODE_ADDR as usize;
        assert_eq!(&p[off..off + 4], &[0x66, 0xb8, 0x10, 0x00], "mov ax, 0x10");
    }

    #[test]
    fn conditional_jumps_reach_their_result_codes() {
        let p = program(Program::Xsave);
        let land = |cc: u8| {
            let at = find(&p, &[0x0f, cc]).unwrap();
            let rel = i32::from_le_bytes(p[at + 2..at + 6].try_into().unwrap());
            let to = (at as i64 + 6 + rel as i64) as usize;
            p[to..to + 4].to_vec()
        };
        assert_eq!(land(0x84), vec![0xb0, code::DONE_NO_XSAVE, 0xe6, 0x80]);
        assert_eq!(land(0x85), vec![0xb0, code::RESTORE_MISMATCH, 0xe6, 0x80]);
    }

    #[test]
    fn progress_codes_come_in_order_and_the_program_ends_halted() {
        let p = program(Program::Xsave);
        let mut last = 0;
        for c in [
            code::REAL_MODE,
            code::PROTECTED,
            code::CPUID,
            code::OSXSAVE,
            code::XSETBV,
            code::XSAVE,
            code::XRSTOR,
            code::DONE,
        ] {
            let at = find(&p, &[0xb0, c, 0xe6, 0x80]).unwrap();
            assert!(at >= last, "code {c:#x} out of order");
            last = at;
        }
        assert_eq!(&p[p.len() - 3..], &[0xf4, 0xeb, 0xfd]);
        assert_eq!(
            program(Program::Spin),
            vec![
                0xb0,
                code::REAL_MODE,
                0xe6,
                0x80,
                0xb0,
                code::SPINNING,
                0xe6,
                0x80,
                0xeb,
                0xfe
            ]
        );
    }

    #[test]
    fn the_gdt_has_flat_code_and_data() {
        let (g, d) = gdt();
        assert_eq!(&g[..8], &[0; 8]);
        assert_eq!(g[13], 0x9a);
        assert_eq!(g[21], 0x92);
        assert_eq!(u16::from_le_bytes([d[0], d[1]]), 23);
        assert_eq!(u32::from_le_bytes(d[2..6].try_into().unwrap()), 0x500);
    }
}
