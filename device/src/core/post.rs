//! Posting events: each event is queued in the event unit's FIFO at the
//! current device time, noted in the capture's event log, checked by the
//! driver sanitizer (events the driver leaves undelivered too long) and
//! the transport woken to deliver it. Every block that raises an event
//! posts it here.

use vgpu_hwif::event::Event;

use super::gpu::Gpu;

/// Posts `ev` at the current device time and wakes the transport;
/// returns its sequence number.
pub fn event(gpu: &Gpu, ev: Event) -> u64 {
    let now = gpu.clock.now_ns();
    let (seq, starving) = {
        let mut unit = gpu.events();
        let seq = unit.post(ev, now);
        let starving = gpu
            .sanitizer
            .enabled()
            .then(|| (unit.front().map(|r| r.timestamp_ns), unit.pending()));
        (seq, starving)
    };
    gpu.capture.note_event(&ev.to_record(seq, now));
    if let Some((front, pending)) = starving {
        if let Some(san) = gpu
            .sanitizer
            .events_posted(now, front, pending, &gpu.inject)
        {
            let san_seq = gpu.events().post(san, now);
            gpu.capture.note_event(&san.to_record(san_seq, now));
        }
    }
    gpu.kick_transport();
    seq
}

/// Posts `events` under one hold of the event unit, then wakes the
/// transport once: none reaches the driver's buffers before the last is
/// queued, so a burst longer than the FIFO's free room always loses its
/// newest events (the injected `event-overflow`), however fast the driver
/// returns buffers.
pub fn burst(gpu: &Gpu, events: &[Event]) {
    if events.is_empty() {
        return;
    }
    let now = gpu.clock.now_ns();
    let seqs: Vec<u64> = {
        let mut unit = gpu.events();
        events.iter().map(|&e| unit.post(e, now)).collect()
    };
    // The capture's lock is never taken under the event unit's.
    for (e, seq) in events.iter().zip(seqs) {
        gpu.capture.note_event(&e.to_record(seq, now));
    }
    gpu.kick_transport();
}
