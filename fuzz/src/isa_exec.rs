//! `isa_exec`: the interpreter on random programs, with a bounded number
//! of steps.
//!
//! Input: byte 0 the generation (bit 0) and the workgroup's shape (bits
//! 1..: x in 1..=64, then y in 1..=4), byte 1 the kernel's shared memory
//! in 64-byte units, bytes 2..66 the argument buffer, then 8-byte
//! instruction words (a word that does not decode ends the code; an
//! `exit` is appended). The kernel is validated as the loader validates
//! any module (a module it refuses is not run), then two workgroups run
//! on sparse memory (two writable pages, one read-only page) for at most
//! 20 000 warp instructions each; a program that completed runs again as
//! a grid on two compute units together. Whatever the program does, the
//! interpreter must end with an outcome or a fault and never panic.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use vgpu_isa::exec::{Limits, Outcome, WorkgroupExec};
use vgpu_isa::inst::{Instruction, Op};
use vgpu_isa::mem::SparseMemory;
use vgpu_isa::{decode, run_grid, Kernel, Launch, Module};

const BUDGET: u64 = 20_000;
const ARGS: usize = 64;

pub fn run(data: &[u8]) {
    let [cfg, shared, rest @ ..] = data else {
        return;
    };
    if rest.len() < ARGS {
        return;
    }
    let (args, code) = rest.split_at(ARGS);
    let generation = 1 + u32::from(cfg & 1);
    let wg = [1 + u32::from(cfg >> 1 & 0x3f), 1 + u32::from(cfg >> 7), 1];
    let mut insts: Vec<Instruction> = code
        .chunks_exact(8)
        .map_while(|c| {
            decode(
                u64::from_le_bytes(c.try_into().expect("8 bytes")),
                generation,
            )
            .ok()
        })
        .take(4096)
        .collect();
    insts.push(Instruction::new(Op::Exit));
    let kernel = Kernel {
        name: "k".to_owned(),
        entry: 0,
        len: insts.len() as u32,
        regs: 64,
        shared_bytes: u32::from(*shared) * 64,
        arg_size: ARGS as u32,
        args: Vec::new(),
        wg_hint: [0; 3],
    };
    let Ok(module) = Module::new(generation, insts, vec![kernel]) else {
        return;
    };
    let Ok(launch) = Launch::by_index(&module, 0, [2, 1, 1], wg, args.to_vec(), 0) else {
        return;
    };
    let mut mem = SparseMemory::new();
    mem.map(0x1_0000, 0x2_0000, true);
    mem.map(0x3_0000, 0x1_0000, false);
    let mut completed = true;
    for id in [[0, 0, 0], [1, 0, 0]] {
        let Ok(mut e) = WorkgroupExec::new(&module, &launch, id) else {
            return;
        };
        let r = e.run(
            &mem,
            Limits {
                budget: BUDGET,
                cancel: None,
            },
        );
        completed &= r == Ok(Outcome::Completed);
    }
    if !completed {
        return;
    }
    // The program ended within its budget on its own: run the grid again
    // on two compute units sharing the memory (which the first runs
    // changed, so the program may now loop: a watchdog cancels it).
    let cancel = AtomicBool::new(false);
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let watchdog = s.spawn(|| {
            let t0 = Instant::now();
            while !done.load(Ordering::Relaxed) {
                if t0.elapsed() > Duration::from_millis(5) {
                    cancel.store(true, Ordering::Relaxed);
                    break;
                }
                std::thread::sleep(Duration::from_micros(100));
            }
        });
        let _ = run_grid(&module, &launch, &mem, 2, Some(&cancel));
        done.store(true, Ordering::Relaxed);
        // Joined, not left to the scope: a joined thread has exited, so
        // LeakSanitizer does not find its handle in flight.
        watchdog.join().expect("the watchdog does not panic");
    });
}
