//! The one clock: device time mapped onto the guest's `CLOCK_MONOTONIC`.
//!
//! The model is linear, `device = slope * guest + offset`. The slope comes
//! from a least-squares fit of the KMD's `TIME_QUERY` samples (each device
//! reading taken at the midpoint of its round trip) when they span long
//! enough for the round trips to blur it by less than [`MAX_SLOPE_ERROR`]
//! (a span of at least the longest round trip / `MAX_SLOPE_ERROR`: 30 s
//! for 300 us round trips); else it is 1 (both clocks count host
//! nanoseconds; a short trace gains nothing from a slope its samples
//! cannot resolve) — unless the bounds below contradict slope 1 (a guest
//! under TCG calibrates its TSC against emulated timers, and its clock can
//! run hundreds of ppm off): then the slope within 1 ± [`MAX_DRIFT`] that
//! leaves the widest feasible offset interval. The offset is then chosen
//! within the interval that every causal pair allows:
//!
//! * a `TIME_QUERY`: the device read its clock between the guest's send and
//!   the reply's arrival;
//! * an event record: raised on the device (its timestamp) before the
//!   KMD's interrupt thread received it;
//! * a doorbell: posted by the KMD before the device received it (the
//!   device trace's `DOORBELL` with the same context, engine and write
//!   pointer);
//! * a control command: the device received it after the KMD sent it and
//!   answered before the reply arrived.
//!
//! Each bounds the offset from one side; the middle of the feasible
//! interval is taken and half its width is the correlation's uncertainty.
//! When the bounds contradict each other (the linear model does not hold,
//! or the inputs do not belong together) the least-squares offset is taken
//! and the contradiction reported.

/// Why no clock could be built.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ClockError {
    /// The KMD trace has no `TIME_QUERY` sample.
    #[error("the KMD trace has no clock-sync sample (TIME_QUERY): write 'sync' to debugfs trace_ctl before reading the trace")]
    NoSamples,
}

/// The largest error of a fitted slope from the round trips alone: 10 ppm.
pub const MAX_SLOPE_ERROR: f64 = 1e-5;

/// One bound on the offset: `offset >= v` (lower) or `offset <= v`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bound {
    /// The value.
    pub v: f64,
    /// Lower (true) or upper.
    pub lower: bool,
}

/// A causal pair: something on the guest at `guest_ns` and on the device at
/// `device_ns`, the device one after (`device_after`) or before it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pair {
    /// Guest ns.
    pub guest_ns: u64,
    /// Device ns.
    pub device_ns: u64,
    /// Whether the device's moment follows the guest's.
    pub device_after: bool,
}

/// The mapping and how well it is known.
#[derive(Clone, Debug, PartialEq)]
pub struct Clock {
    /// Device ns per guest ns.
    pub slope: f64,
    /// Device ns at guest time 0.
    pub offset: f64,
    /// Half the width of the feasible offset interval (ns), if feasible.
    pub uncertainty_ns: Option<f64>,
    /// How far the bounds contradict each other (ns), if they do.
    pub conflict_ns: Option<f64>,
    /// The least-squares offset of the `TIME_QUERY` samples alone.
    pub fit_offset: f64,
    /// `TIME_QUERY` samples used.
    pub samples: usize,
    /// Smallest and largest round trip of the samples (ns).
    pub rtt_ns: (u64, u64),
    /// Bounds from event records and doorbells used.
    pub pairs: usize,
}

impl Clock {
    /// Builds the mapping from `syncs` (t0, t1, device ns) and the causal
    /// `pairs`.
    ///
    /// # Errors
    ///
    /// [`ClockError::NoSamples`].
    pub fn fit(syncs: &[(u64, u64, u64)], pairs: &[Pair]) -> Result<Clock, ClockError> {
        if syncs.is_empty() {
            return Err(ClockError::NoSamples);
        }
        let pts: Vec<(f64, f64)> = syncs
            .iter()
            .map(|&(t0, t1, d)| ((t0 as f64 + t1 as f64) / 2.0, d as f64))
            .collect();
        let n = pts.len() as f64;
        let mg = pts.iter().map(|p| p.0).sum::<f64>() / n;
        let md = pts.iter().map(|p| p.1).sum::<f64>() / n;
        let sgg: f64 = pts.iter().map(|p| (p.0 - mg) * (p.0 - mg)).sum();
        let sgd: f64 = pts.iter().map(|p| (p.0 - mg) * (p.1 - md)).sum();
        let span = pts.iter().map(|p| p.0).fold(f64::MIN, f64::max)
            - pts.iter().map(|p| p.0).fold(f64::MAX, f64::min);
        let max_rtt = syncs
            .iter()
            .map(|&(t0, t1, _)| t1.saturating_sub(t0))
            .max()
            .unwrap_or(0);
        let fitted = span > 0.0 && max_rtt as f64 / span <= MAX_SLOPE_ERROR && sgg > 0.0;
        let slope = if fitted { sgd / sgg } else { 1.0 };
        let fit_offset = md - slope * mg;
        let (mut lo, mut hi) = interval(syncs, pairs, slope);
        let mut slope = slope;
        if lo > hi && !fitted {
            // Slope 1 contradicts the bounds: the guest's clock runs at a
            // slightly different rate (a guest under TCG calibrates its TSC
            // against emulated timers). Take the slope within
            // `MAX_DRIFT` that leaves the widest feasible offset interval.
            let s = widest_slope(syncs, pairs);
            let (l, h) = interval(syncs, pairs, s);
            if l <= h {
                (slope, lo, hi) = (s, l, h);
            }
        }
        let rtts = syncs.iter().map(|&(t0, t1, _)| t1.saturating_sub(t0));
        let rtt_ns = (rtts.clone().min().unwrap_or(0), rtts.max().unwrap_or(0));
        let (offset, uncertainty_ns, conflict_ns) = if lo <= hi {
            ((lo + hi) / 2.0, Some((hi - lo) / 2.0), None)
        } else {
            (fit_offset, None, Some(lo - hi))
        };
        Ok(Clock {
            slope,
            offset,
            uncertainty_ns,
            conflict_ns,
            fit_offset,
            samples: syncs.len(),
            rtt_ns,
            pairs: pairs.len(),
        })
    }

    /// Guest ns of device time `device_ns`.
    pub fn to_guest(&self, device_ns: u64) -> f64 {
        (device_ns as f64 - self.offset) / self.slope
    }
}

/// How far from 1 a slope found from the causal bounds may go: 1000 ppm.
pub const MAX_DRIFT: f64 = 1e-3;

/// Every bound on the offset at `slope`: the feasible interval `(lo, hi)`
/// (empty when `lo > hi`).
fn interval(syncs: &[(u64, u64, u64)], pairs: &[Pair], slope: f64) -> (f64, f64) {
    let mut bounds = Vec::with_capacity(2 * syncs.len() + pairs.len());
    for &(t0, t1, d) in syncs {
        bounds.push(Bound {
            v: d as f64 - slope * t1 as f64,
            lower: true,
        });
        bounds.push(Bound {
            v: d as f64 - slope * t0 as f64,
            lower: false,
        });
    }
    for p in pairs {
        // device_after: guest <= (device - offset) / slope, so
        // offset <= device - slope * guest; else offset >= that.
        bounds.push(Bound {
            v: p.device_ns as f64 - slope * p.guest_ns as f64,
            lower: !p.device_after,
        });
    }
    let lo = bounds
        .iter()
        .filter(|b| b.lower)
        .map(|b| b.v)
        .fold(f64::MIN, f64::max);
    let hi = bounds
        .iter()
        .filter(|b| !b.lower)
        .map(|b| b.v)
        .fold(f64::MAX, f64::min);
    (lo, hi)
}

/// The slope within `1 ± MAX_DRIFT` whose feasible offset interval is the
/// widest. The width (the smallest upper bound minus the largest lower
/// one, each linear in the slope) is concave in the slope, so a ternary
/// search finds its maximum.
fn widest_slope(syncs: &[(u64, u64, u64)], pairs: &[Pair]) -> f64 {
    let width = |s: f64| {
        let (lo, hi) = interval(syncs, pairs, s);
        hi - lo
    };
    let (mut a, mut b) = (1.0 - MAX_DRIFT, 1.0 + MAX_DRIFT);
    for _ in 0..200 {
        let m1 = a + (b - a) / 3.0;
        let m2 = b - (b - a) / 3.0;
        if width(m1) < width(m2) {
            a = m1;
        } else {
            b = m2;
        }
    }
    (a + b) / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_lies_within_every_bound() {
        // Device = guest + 1000 exactly; round trips of 100 ns centred on
        // the reading, so the samples alone allow 950..=1050.
        let syncs = [
            (0, 100, 1050),
            (1_000_000_000, 1_000_000_100, 1_000_001_050),
        ];
        let c = Clock::fit(&syncs, &[]).unwrap();
        assert!((c.slope - 1.0).abs() < 1e-12);
        assert!((c.offset - 1000.0).abs() < 1e-6, "{c:?}");
        assert_eq!(c.uncertainty_ns, Some(50.0));
        // An event raised at device 2_000_000_000 arrived at guest
        // 1_999_999_020: offset >= 980. A doorbell posted at guest 500
        // arrived at device 1510: offset <= 1010.
        let pairs = [
            Pair {
                guest_ns: 1_999_999_020,
                device_ns: 2_000_000_000,
                device_after: false,
            },
            Pair {
                guest_ns: 500,
                device_ns: 1510,
                device_after: true,
            },
        ];
        let c = Clock::fit(&syncs, &pairs).unwrap();
        assert!((c.offset - 995.0).abs() < 1e-6, "{c:?}");
        assert_eq!(c.uncertainty_ns, Some(15.0));
        assert!((c.to_guest(2_000_000_000) - 1_999_999_005.0).abs() < 1e-3);
    }

    #[test]
    fn a_slope_needs_a_long_enough_span_and_contradictions_are_reported() {
        // Guest runs 0.1 % slow against the device over 10 s, round trips
        // of 10 ns: resolved.
        let s = |g: u64, rtt: u64| (g, g + rtt, ((g + rtt / 2) as f64 * 1.001) as u64);
        let c = Clock::fit(
            &[s(0, 10), s(5_000_000_000, 10), s(10_000_000_000, 10)],
            &[],
        )
        .unwrap();
        assert!((c.slope - 1.001).abs() < 1e-9, "{c:?}");
        // Round trips of 200 us over 10 s could blur a fit by 20 ppm: no
        // least-squares slope, but slope 1 contradicts the round trips
        // themselves, so the slope is the one that leaves them the widest
        // interval, within the 20 ppm they allow.
        let c = Clock::fit(&[s(0, 200_000), s(10_000_000_000, 200_000)], &[]).unwrap();
        assert!((c.slope - 1.001).abs() < 2e-5, "{c:?}");
        assert_eq!(c.conflict_ns, None);
        let short = Clock::fit(&[s(0, 10), s(1_000, 10)], &[]).unwrap();
        assert_eq!(short.slope, 1.0);
        // An event "received" long before it was raised: impossible.
        let bad = Pair {
            guest_ns: 0,
            device_ns: 1_000_000,
            device_after: false,
        };
        let c = Clock::fit(&[(0, 100, 50)], &[bad]).unwrap();
        assert_eq!(c.uncertainty_ns, None);
        assert!(c.conflict_ns.unwrap() > 0.0);
        assert_eq!(c.offset, c.fit_offset);
        assert_eq!(Clock::fit(&[], &[]), Err(ClockError::NoSamples));
    }

    #[test]
    fn a_drifting_guest_clock_gets_the_slope_its_bounds_allow() {
        // The guest's clock runs 200 ppm slow: device = 1.0002 * guest +
        // 5000. Two round trips at the start (too short a span to fit a
        // slope), then doorbells and events over 5 s, each 20 us from its
        // cause: with slope 1 the late ones contradict the early ones by
        // about 1 ms.
        let dev = |g: f64| (g * 1.0002 + 5000.0) as u64;
        let syncs = [(1_000, 1_040, dev(1_020.0)), (2_000, 2_040, dev(2_020.0))];
        let mut pairs = Vec::new();
        for i in 1..=50u64 {
            let g = i * 100_000_000;
            pairs.push(Pair {
                guest_ns: g,
                device_ns: dev(g as f64 + 20_000.0),
                device_after: true,
            });
            pairs.push(Pair {
                guest_ns: g + 50_000,
                device_ns: dev((g + 30_000) as f64),
                device_after: false,
            });
        }
        let c = Clock::fit(&syncs, &pairs).unwrap();
        assert_eq!(c.conflict_ns, None, "{c:?}");
        assert!((c.slope - 1.0002).abs() < 5e-6, "{c:?}");
        let g = 4_000_000_000.0;
        assert!((c.to_guest(dev(g)) - g).abs() < 25_000.0, "{c:?}");
    }
}
