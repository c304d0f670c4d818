//! The record reader on files that are cut short or garbage.

use super::*;
use vgpu_device::core::record::{kind, ENTRY_HEADER, MAGIC, NO_ENGINE, VERSION};
use vgpu_hwif::proto::Command;

fn entry(out: &mut Vec<u8>, k: u16, engine: u16, payload: &[u8]) {
    out.extend(k.to_le_bytes());
    out.extend(engine.to_le_bytes());
    out.extend((payload.len() as u32).to_le_bytes());
    out.extend([0u8; 16]);
    out.extend(payload);
}

fn command(out: &mut Vec<u8>, c: Command, status: u32) {
    let mut buf = [0u8; 256];
    let n = c.encode(1, &mut buf).unwrap();
    let mut p = vec![0u8; 20];
    p.extend(&buf[..n]);
    entry(out, kind::COMMAND, NO_ENGINE, &p);
    let mut r = status.to_le_bytes().to_vec();
    r.extend([0u8; 12]);
    entry(out, kind::REPLY, NO_ENGINE, &r);
}

/// A small record: a context, a ring, a doorbell, a packet, two walks.
fn sample() -> Vec<u8> {
    sample_with(&[0x40])
}

/// [`sample`] with these doorbells.
fn sample_with(bells: &[u32]) -> Vec<u8> {
    let mut f = MAGIC.to_vec();
    f.extend(VERSION.to_le_bytes());
    f.extend(0u32.to_le_bytes());
    entry(&mut f, kind::CONFIG, NO_ENGINE, b"generation=2\n");
    let mut map = 0u64.to_le_bytes().to_vec();
    map.extend((8u64 << 20).to_le_bytes());
    entry(&mut f, kind::MEMORY_MAP, NO_ENGINE, &map);
    command(
        &mut f,
        Command::ContextCreate {
            ctx_id: 1,
            priority: 1,
            flags: 0,
            pt_root: 0x10_0000,
        },
        0,
    );
    for &wptr in bells {
        command(
            &mut f,
            Command::Doorbell {
                ctx_id: 1,
                engine: 0,
                wptr,
            },
            0,
        );
    }
    let mut p = 1u32.to_le_bytes().to_vec();
    p.extend(0u32.to_le_bytes());
    p.extend(0x1_0000_0000u64.to_le_bytes());
    p.extend(0u32.to_le_bytes());
    entry(&mut f, kind::PACKET, 0, &p);
    for (level, bits) in [(3u32, 0x10_1001u64), (2, 0)] {
        let mut w = 1u32.to_le_bytes().to_vec();
        w.extend(level.to_le_bytes());
        w.extend(0x1_0000_0000u64.to_le_bytes());
        w.extend(0x10_0000u64.to_le_bytes());
        w.extend(4u32.to_le_bytes());
        w.extend(0u32.to_le_bytes());
        w.extend(bits.to_le_bytes());
        entry(&mut f, kind::WALK, 0, &w);
    }
    f
}

#[test]
fn a_record_against_itself_is_equal() {
    let f = sample();
    let c = compare(&f, &f, 3).unwrap();
    assert!(c.equal(), "{:?}", c.difference);
    assert_eq!(c.reference.commands, 2);
    assert_eq!(c.reference.packets, 1);
    assert_eq!(c.reference.ptes, 2);
}

#[test]
fn truncated_and_garbage_records_never_panic() {
    let f = sample();
    // Every prefix: a record up to there (or not a record at all).
    for n in 0..f.len() {
        let cut = &f[..n];
        match compare(cut, &f, 3) {
            Ok(c) => {
                assert!(n >= 16);
                assert!(c.reference.commands <= 2);
                // Cut inside an entry: said so, the entries before kept.
                if c.reference.truncated.is_none() {
                    assert!(c.reference.packets + c.reference.ptes <= 3);
                }
            }
            Err(CompareError::Format(..)) => assert!(n < 16),
            Err(e) => panic!("{e}"),
        }
    }
    // Garbage after the header, and lengths that point past the end or
    // wrap.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for round in 0..2000 {
        let mut g = f.clone();
        for _ in 0..1 + round % 8 {
            vgpu_hwif::rng::xorshift64(&mut seed);
            let at = 16 + (seed as usize) % (g.len() - 16);
            g[at] = (seed >> 32) as u8;
        }
        let _ = compare(&g, &f, 3);
        let _ = compare(&f, &g, 3);
    }
    let mut huge = f[..16].to_vec();
    entry(&mut huge, kind::PACKET, 0, &[]);
    let len_at = 16 + 4;
    huge[len_at..len_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    let c = compare(&huge, &f, 3).unwrap();
    assert_eq!(c.reference.truncated, Some(16));
    assert_eq!(ENTRY_HEADER, 24);
    assert!(matches!(
        compare(b"not a record at all", &f, 3),
        Err(CompareError::Format(..))
    ));
}

#[test]
fn doorbells_rung_together_or_apart_are_the_same() {
    let apart = sample_with(&[0x20, 0x40]);
    let together = sample_with(&[0x40]);
    assert!(compare(&apart, &together, 3).unwrap().equal());
    // Rung again at the same pointer: nothing new.
    let again = sample_with(&[0x40, 0x40]);
    assert!(compare(&again, &together, 3).unwrap().equal());
    // A last doorbell that differs is named.
    let short = sample_with(&[0x20]);
    let c = compare(&apart, &short, 3).unwrap();
    let d = c.difference.unwrap();
    assert!(
        d.message
            .contains("your driver sent nothing more to ctx 1's copy ring after DOORBELL ctx 1 engine copy wptr 0x20; the reference sent DOORBELL ctx 1 engine copy wptr 0x40"),
        "{}",
        d.message
    );
}

#[test]
fn host_mapping_window_addresses_compare_by_page_offset() {
    use super::trace::host_window_text_for_tests as norm;
    let a = norm("COPY src=0xe0000 dst=0xfffff1137010 size=300000", 2);
    let b = norm("COPY src=0xe0000 dst=0xfffff1119010 size=300000", 2);
    assert_eq!(a, b);
    assert_eq!(a, "COPY src=0xe0000 dst=host-map+0x10 size=300000");
    // The KMD's rings below the window and user VAs are kept.
    assert_eq!(
        norm("FENCE va=0xfffff0005000", 2),
        "FENCE va=0xfffff0005000"
    );
}
