//! Check lists, settings and the report path of the sanitizer.

use super::*;
use crate::core::inject::Injector;

#[test]
fn check_lists_parse_ids_families_and_removals() {
    assert_eq!(parse_checks(""), Ok(ALL_CHECKS));
    assert_eq!(parse_checks("all"), Ok(ALL_CHECKS));
    assert_eq!(parse_checks("none"), Ok(0));
    assert_eq!(
        parse_checks("ring"),
        Ok(Check::RingUnpublished.bit() | Check::RingIndex.bit())
    );
    assert_eq!(
        parse_checks("SAN-TLB-STALE,fence-regress"),
        Ok(Check::TlbStale.bit() | Check::FenceRegress.bit())
    );
    assert_eq!(
        parse_checks("-hazard"),
        Ok(ALL_CHECKS & !Check::XengineHazard.bit())
    );
    assert_eq!(
        parse_checks("tlb,-SAN-TLB-INV-ORDER"),
        Ok(Check::TlbStale.bit() | Check::CmdbufUnmapped.bit())
    );
    assert_eq!(
        parse_checks("ring,bogus"),
        Err(SanError::UnknownCheck("bogus".into()))
    );
    assert_eq!(check_ids(Check::Teardown.bit()), vec!["SAN-TEARDOWN"]);
    assert_eq!(parse_checks("pt"), Ok(pt::PT_CHECKS));
    assert_eq!(
        check_ids(pt::PT_CHECKS),
        vec![
            "SAN-PT-INVALID-TABLE",
            "SAN-PT-LEVEL",
            "SAN-PT-ALIGN",
            "SAN-PT-UNOWNED"
        ]
    );
}

#[test]
fn features_follow_the_checks() {
    let s = Sanitizer::new(2);
    assert_eq!(s.features(), 0);
    assert!(s.tlb_san(0).is_none());
    s.set_checks(Check::RingIndex.bit());
    assert_eq!(s.features(), vgpu_hwif::proto::FEATURE_SANITIZER);
    assert!(s.tlb_san(0).is_none(), "no TLB check on");
    s.set_checks(ALL_CHECKS);
    assert_eq!(
        s.features(),
        vgpu_hwif::proto::FEATURE_SANITIZER | vgpu_hwif::proto::FEATURE_SAN_DMA
    );
    assert!(s.tlb_san(1).is_some());
    assert_eq!(s.fetch_delay_ns(), DEFAULT_FETCH_DELAY.as_nanos() as u64);
    s.set_checks(Check::TlbStale.bit());
    assert_eq!(s.fetch_delay_ns(), 0, "no delay without the ring check");
    // The page-table checks ride on the TLBs and need the driver's memory
    // declared.
    s.set_checks(Check::PtLevel.bit());
    assert!(s.tlb_san(0).is_some_and(|t| t.pt_on()));
    assert_eq!(
        s.features(),
        vgpu_hwif::proto::FEATURE_SANITIZER | vgpu_hwif::proto::FEATURE_SAN_DMA
    );
}

#[test]
fn injected_faults_suppress_reports_on_their_context() {
    let s = Sanitizer::new(1);
    s.set_checks(ALL_CHECKS);
    let inj = Injector::new();
    s.context_changed(3, true, 0);
    let r = Report::new(Check::Teardown, 10, "x").on(3, 0);
    assert!(s.emit(r.clone(), &inj).is_some());
    // A fault injected into context 3 after it was created.
    inj.arm(
        crate::core::inject::Spec::parse("control-busy:count=1").unwrap(),
        0,
    );
    let _ = inj.on_command(5, vgpu_hwif::proto::Opcode::Doorbell, 3, 0);
    assert!(
        s.emit(r.clone(), &inj).is_none(),
        "explained by the injection"
    );
    assert_eq!(s.counts().2, 1, "counted as suppressed");
    // Another context is not affected; a new context 3 is clean again.
    assert!(s.emit(r.clone().on(4, 0), &inj).is_some());
    s.context_changed(3, false, 20);
    s.context_changed(3, true, 30);
    assert!(s.emit(r, &inj).is_some());
    assert_eq!(s.counts().1, 3);
}
