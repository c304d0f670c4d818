"""The grader checked on a made-up guest log (run by `scripts/lab check`)."""

import re

from .explain import explain, fail_lines, failure_lines, kernel_events, step_hints
from .guest import judge, parse_guest


def grader_selfcheck():
    """The grader's parsing and judging on a made-up guest log: what must pass passes, what must
    fail fails, and a sanitizer report lands on the test that was running."""
    errs = []
    tests = [{"name": "a", "points": 1, "cmd": "x", "expect": ["^done$"]},
             {"name": "b", "points": 1, "cmd": "y", "san": ["SAN-RING-UNPUBLISHED"]},
             {"name": "c", "points": 1, "cmd": "z", "expect_count": ["^p [0-9]+$", 2]},
             {"name": "d", "points": 1, "cmd": "w"}]
    rep = ("SAN-RING-UNPUBLISHED #2 context 1 (slot 0) copy ring+0xa0 packet "
           "0xfffff00010a0 [INDIRECT va=0x1010400 size=32]: ring words changed; EXECUTE va 0xfffff00010a0 pa 0x0; "
           "hint: write every packet word, then a write barrier")
    old = "SAN-RING-UNPUBLISHED #1 context 1 (slot 0) copy ring+0x0 packet 0xfffff0001000: earlier"
    # Report #1 came during test a (which does not judge it); #2 during b, and the driver's
    # dmesg line of #2 was rate-limited away: the kept-report listings alone must place it.
    log_ = "\n".join([
        "LAB-BEGIN a", "LAB-OUT a: done", f"LAB-SAN a: {old}", "LAB-END a 0 1",
        f"LAB-SANPRE b: {old}", "LAB-BEGIN b", "LAB-OUT b: ok", f"LAB-SAN b: {old}", f"LAB-SAN b: {rep}",
        "LAB-END b 0 2",
        f"LAB-SANPRE c: {old}", f"LAB-SANPRE c: {rep}", "LAB-BEGIN c", "LAB-OUT c: p 1",
        "LAB-OUT c: FAIL vm: walk: level 2 entry 3 has no valid bit",
        f"LAB-SAN c: {old}", f"LAB-SAN c: {rep}", "LAB-END c 0 2",
        "LAB-DMESG-BEGIN",
        "lab: begin a", f"vgpu 0000:00:01.0: sanitizer: {old}", "lab: end a", "lab: begin b",
        "lab: end b", "lab: begin c",
        "vgpu 0000:00:01.0: GPU fault: context 1 (slot 0) engine 0 va 0x601000 access READ reason "
        "NOT_PRESENT level 2 at packet 0xfffff0001000 (ring+0x0): job aborted, context errored",
        "lab: end c", "LAB-DMESG-END"])
    res, _ = parse_guest(log_, tests)
    got = {t["name"]: judge(t, res[t["name"]])[0] for t in tests}
    want = {"a": True, "b": False, "c": False, "d": False}
    if got != want:
        errs.append(f"grader self-check: verdicts {got}, want {want}")
    if [x.split()[1] for x in res["b"]["reports"]] != ["#2"] or res["c"]["reports"] \
            or [x.split()[1] for x in res["a"]["reports"]] != ["#1"]:
        errs.append("grader self-check: reports not attributed to the test they came in "
                    f"(a {res['a']['reports']}, b {res['b']['reports']}, c {res['c']['reports']})")
    lab = {"region": [{"name": "ensure", "step": 1, "hint": "link each new table with a valid entry"},
                      {"name": "lookup", "step": 2, "todo": "the table at level target. More."}]}
    own, _ = fail_lines(res["c"]["out"])
    t_c = {"why": judge(tests[2], res["c"])[1], "fail_lines": own, "explanations": [explain(old)],
           "kernel": kernel_events(res["c"]["dmesg"]),
           "where": step_hints(lab, {"steps": [1, 2]}, {"ensure": "guest-kmd/pagetable.rs:200"}),
           "output": res["c"]["out"]}
    lines = failure_lines(t_c)
    want_lines = [
        "the test program says:", "  FAIL vm: walk: level 2 entry 3 has no valid bit",
        "the grader found:", "  1 lines match /^p [0-9]+$/, expected 2",
        "the device's sanitizer reported the driver during this test:",
        "  SAN-RING-UNPUBLISHED, packet 0xfffff0001000",
        "    report: " + old,
        "the driver logged during this test:",
        "  GPU fault: READ of va 0x601000 on engine 0 (copy), context 1: NOT_PRESENT at level 2 (entry 0 of "
        "the level-2 table covering it), packet 0xfffff0001000, ring+0x0; job aborted, context errored",
        "where to look:",
        "  step 1, ensure (guest-kmd/pagetable.rs:200): link each new table with a valid entry",
        "  step 2, lookup: the table at level target."]
    if lines != want_lines:
        errs.append("grader self-check: failure lines\n  " + "\n  ".join(lines))
    if any(re.search(r"(:|,) (-|,|$)", l) for l in lines):
        errs.append(f"grader self-check: a line with an empty field in {lines}")
    e = explain(res["b"]["reports"][0]) if res["b"]["reports"] else {}
    if (e.get("id"), e.get("packet"), e.get("va")) != (
            "SAN-RING-UNPUBLISHED", "0xfffff00010a0 [INDIRECT va=0x1010400 size=32]", "0xfffff00010a0") \
            or not (e.get("hint") or "").startswith("write every packet word"):
        errs.append(f"grader self-check: explanation {e}")
    return errs
