"""Why a lab test failed, in the order a student needs it.

For each failed test the grader prints, in this order:

1. the test program's own failure lines (`FAIL name: why`, a sample's `FAIL …`): the
   program knows what it checked and says it best;
2. what the grader itself found (exit status, expected lines missing, a timeout);
3. every report of the device's sanitizer that arrived during the test, whatever its id
   (the test's `san` list decides the verdict, not what is shown);
4. every GPU fault and engine error the driver logged during the test, with the VA, the
   level and the entry of the page-table walk that failed;
5. where to look: the TODO step(s) the test exercises (`steps` in lab.toml) with the
   region's hint and its place in the code.

No line is printed with an empty field: a report without a packet prints no packet.
"""

import re

PAGE_SHIFT = 12
ENGINES = {"0": "copy", "1": "compute"}

# A test program's own failure lines: `FAIL name: why` (vgpu-kmd-test, vgpu-umd-test,
# vgpu-samples), assembler and loader errors, a Rust panic.
FAIL_LINE = re.compile(r"^(FAIL\b|error(\[\w+\])?:|thread '.*' panicked)")


def fail_lines(out, limit=12):
    """The test program's failure lines, in order (at most `limit`)."""
    lines = [l for l in out if FAIL_LINE.search(l)]
    return lines[:limit], max(0, len(lines) - limit)


def level_index(va, level):
    """The entry of `va` in the table of `level` (3 = root): hwif's `level_index`."""
    return (va >> (PAGE_SHIFT + 9 * level)) & 0x1FF


GPU_FAULT = re.compile(
    r"GPU fault: context (?P<ctx>\d+) \(slot (?P<slot>\d+)\) engine (?P<engine>\d+) va (?P<va>0x[0-9a-f]+) "
    r"access (?P<access>\S+) reason (?P<reason>\S+) level (?P<level>\d+) at packet (?P<packet>0x[0-9a-f]+)"
    r"(?: \((?P<where>[^)]*)\))?: (?P<outcome>.*)$")
ENGINE_STOP = re.compile(
    r"engine (?P<engine>\d+) stopped (?:context (?P<ctx>\d+) \(slot \d+\)|unknown context slot (?P<slot>\d+)): "
    r"(?P<name>\S+) \(engine error (?P<code>\d+)\) at packet (?P<packet>0x[0-9a-f]+) \[(?P<header>[^\]]*)\]")
HANG = re.compile(r"hang: context (?P<ctx>\d+) \(slot \d+\) engine (?P<engine>\d+) .*$")
RESET = re.compile(r"(engine reset did not recover .*|device reset.*|wedged.*)$")


def engine_name(e):
    return f"engine {e} ({ENGINES[e]})" if e in ENGINES else f"engine {e}"


def kernel_events(dmesg):
    """The GPU faults, engine errors, hangs and resets the driver logged, in words."""
    out = []
    for line in dmesg:
        m = GPU_FAULT.search(line)
        if m:
            va, level = int(m["va"], 16), int(m["level"])
            where = f", {m['where']}" if m["where"] else ""
            out.append(
                f"GPU fault: {m['access']} of va {m['va']} on {engine_name(m['engine'])}, context "
                f"{m['ctx']}: {m['reason']} at level {level} (entry {level_index(va, level)} of the "
                f"level-{level} table covering it), packet {m['packet']}{where}; {m['outcome']}")
            continue
        m = ENGINE_STOP.search(line)
        if m:
            who = f"context {m['ctx']}" if m["ctx"] else f"unknown context slot {m['slot']}"
            out.append(f"engine error: {engine_name(m['engine'])} stopped {who}: {m['name']} "
                       f"(code {m['code']}) at packet {m['packet']} [{m['header']}]")
            continue
        m = HANG.search(line)
        if m:
            out.append(f"hang: context {m['ctx']} on {engine_name(m['engine'])} (the driver's watchdog)")
            continue
        m = RESET.search(line)
        if m and "vgpu" in line:
            out.append(m[1])
    return out


def explain(report):
    """A sanitizer line split into id, packet, VA and hint (None where the report has none)."""
    sid = report.split()[0]
    pkt = re.search(r"packet (0x[0-9a-f]+)(?: \[([^\]]*)\])?", report)
    va = re.search(r"(?:at va|va) (0x[0-9a-f]+)", report)
    level = re.search(r"level (\d+)", report)
    hint = re.search(r"hint: (.*)$", report)
    return {
        "id": sid,
        "packet": (pkt[1] + (f" [{pkt[2]}]" if pkt[2] else "")) if pkt else None,
        "va": va[1] if va else None,
        "level": int(level[1]) if level else None,
        "hint": hint[1] if hint else None,
        "report": report,
    }


def report_lines(e):
    """The printed lines of one explained report: only the fields it has."""
    head = [e["id"]]
    if e.get("va"):
        head.append(f"va {e['va']}")
    if e.get("level") is not None:
        head.append(f"level {e['level']}")
    if e.get("packet"):
        head.append(f"packet {e['packet']}")
    lines = [", ".join(head)]
    body = re.sub(r"; hint: .*$", "", e["report"]).strip()
    if body:
        lines.append(f"  report: {body[:600]}")
    if e.get("hint"):
        lines.append(f"  hint: {e['hint']}")
    return lines


def step_hints(lab, test, places):
    """Where to look for a failed test: each TODO step it exercises, its hint and its place.
    places: {region name: "file:line"}."""
    steps = test.get("steps")
    if steps is None:
        return []
    out = []
    for r in lab.get("region", []):
        if r.get("step") not in steps:
            continue
        hint = r.get("hint") or first_sentence(r.get("todo", ""))
        where = places.get(r["name"])
        loc = f" ({where})" if where else ""
        out.append(f"step {r.get('step')}, {r['name']}{loc}: {hint}" if hint
                   else f"step {r.get('step')}, {r['name']}{loc}")
    return out


def first_sentence(text):
    t = " ".join(text.split())
    m = re.match(r"(.+?[.:;])(\s|$)", t)
    return (m[1] if m else t)[:240]


def failure_lines(t):
    """Every line printed under `FAIL name:` for one judged test (a dict of grade_dir's result)."""
    lines = []
    own = t.get("fail_lines") or []
    if own:
        lines.append("the test program says:")
        lines += [f"  {l}" for l in own]
        if t.get("more_fail_lines"):
            lines.append(f"  ... and {t['more_fail_lines']} more FAIL lines (guest.log in the logs)")
    grader = [l for w in t.get("why", []) for l in str(w).splitlines() if l.strip()]
    if grader:
        lines.append("the grader found:" if own else "the grader found:")
        lines += [f"  {l}" for l in grader]
    if t.get("explanations"):
        lines.append("the device's sanitizer reported the driver during this test:")
        for e in t["explanations"]:
            lines += [f"  {l}" for l in report_lines(e)]
        if t.get("more_reports"):
            lines.append(f"  ... and {t['more_reports']} more reports (sanitizer.jsonl in the logs)")
    if t.get("kernel"):
        lines.append("the driver logged during this test:")
        lines += [f"  {l}" for l in t["kernel"]]
    if not own and not t.get("explanations") and t.get("output"):
        lines.append("the test's last output lines:")
        lines += [f"  {l}" for l in t["output"][-6:]]
    if t.get("where"):
        lines.append("where to look:")
        lines += [f"  {l}" for l in t["where"]]
    return lines
