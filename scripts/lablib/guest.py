"""The script a grade runs in the guest, and what its output says: each test's output, exit
status, sanitizer reports and kernel lines, and the verdict."""

import re


def guest_script(lab, tests, seed):
    q = lambda s: "'" + s.replace("'", "'\\''") + "'"
    sh = ["#!/bin/sh", f"export LAB_SEED={seed}", "cd /lab",
          "san() { cat /sys/kernel/debug/vgpu/*/sanitizer 2>/dev/null | sed -n 's/^reports \\([0-9]*\\).*/\\1/p'; }",
          # The driver's kept reports (debugfs, not rate-limited as its dmesg lines are): a
          # test's reports are those listed after it and not before it.
          "reports() { cat /sys/kernel/debug/vgpu/*/sanitizer 2>/dev/null | grep '^SAN-' | sed \"s/^/$1 /\"; }"]
    for t in tests:
        name = t["name"]
        sh += [
            f"reports 'LAB-SANPRE {name}:'",
            f"echo 'LAB-BEGIN {name}'",
            f"echo 'lab: begin {name}' > /dev/kmsg",
            f"timeout {int(t.get('timeout', 60))} sh -c {q(t['cmd'])} > /tmp/out 2>&1; rc=$?",
            f"sed 's/^/LAB-OUT {name}: /' /tmp/out | head -n 2000",
            # Reports arrive with an event and a SAN_REPORT fetch: let them land.
            f"sleep {t.get('settle', 0.5)}",
            f"echo 'lab: end {name}' > /dev/kmsg",
            f"reports 'LAB-SAN {name}:'",
            f"echo \"LAB-END {name} $rc $(san)\"",
        ]
    sh += ["echo LAB-DMESG-BEGIN",
           "dmesg | grep -E 'lab: (begin|end) |sanitizer: SAN-|vgpu' | sed 's/^\\[[^]]*\\] //'",
           "echo LAB-DMESG-END"]
    return "\n".join(sh) + "\n"


def parse_guest(text, tests):
    res = {t["name"]: {"rc": None, "out": [], "san_total": None, "reports": [], "dmesg": []} for t in tests}
    dmesg = []
    in_dmesg = False
    for line in text.splitlines():
        if line.startswith("LAB-DMESG-BEGIN"):
            in_dmesg = True
            continue
        if line.startswith("LAB-DMESG-END"):
            in_dmesg = False
            continue
        if in_dmesg:
            dmesg.append(line)
            continue
        m = re.match(r"^LAB-OUT (\S+): (.*)$", line)
        if m and m[1] in res:
            res[m[1]]["out"].append(m[2])
            continue
        m = re.match(r"^LAB-END (\S+) (\d+) ?(\d*)", line)
        if m and m[1] in res:
            res[m[1]]["rc"] = int(m[2])
            res[m[1]]["san_total"] = int(m[3]) if m[3] else None
    # Reports by their number ("SAN-… #N"): a test's are those the driver kept after it and
    # not before it (one that lands after its test's settle time goes to the next test).
    before = {name: set() for name in res}
    for line in text.splitlines():
        m = re.match(r"^LAB-SAN(PRE)? (\S+): ((SAN-[A-Z0-9-]+ #\d+).*)$", line)
        if not m or m[2] not in res:
            continue
        if m[1]:
            before[m[2]].add(m[4])
        elif m[4] not in before[m[2]]:
            res[m[2]]["reports"].append(m[3])
    # The driver's kernel lines between a test's begin and end markers are that test's.
    cur = None
    for line in dmesg:
        m = re.search(r"lab: (begin|end) (\S+)", line)
        if m:
            cur = m[2] if m[1] == "begin" and m[2] in res else None
            continue
        if cur:
            res[cur]["dmesg"].append(line)
    return res, dmesg


def judge(t, r):
    """(passed, why) for one test's result."""
    why = []
    if r["rc"] is None:
        return False, ["the test did not finish (the guest died or timed out before it)"]
    if r["rc"] == 143 or r["rc"] == 124:
        why.append(f"timed out after {t.get('timeout', 60)} s")
    elif r["rc"] != int(t.get("rc", 0)):
        why.append(f"exit status {r['rc']} (expected {t.get('rc', 0)})")
    out = "\n".join(r["out"])
    for pat in t.get("expect", []) if isinstance(t.get("expect"), list) else [t.get("expect")] if t.get("expect") else []:
        if not re.search(pat, out, re.M):
            why.append(f"output has no line matching /{pat}/")
    m = t.get("expect_count")
    if m:
        pat, n = m[0], int(m[1])
        got = len(re.findall(pat, out, re.M))
        if got != n:
            why.append(f"{got} lines match /{pat}/, expected {n}")
    san = t.get("san", [])
    bad = [x for x in r["reports"] if san == "all" or x.split()[0] in san]
    if bad:
        ids = sorted({x.split()[0] for x in bad})
        why.append(f"the device's sanitizer reported {', '.join(ids)} (this test allows none of them)")
    return not why, why


