"""Mutants of a lab's reference regions: how good is a lab's grader?

A test suite is as good as the mutants it kills. A mutant is the reference solution with one
small mistake a student could make, at one place of one region:

| operator | what it does |
|---|---|
| `cmp` | a comparison changed: `<` and `<=`, `>` and `>=`, `==` and `!=` swapped (off-by-one in comparisons and bounds) |
| `const` | an integer constant or shift changed by one (`n` to `n+1` and `n-1`) |
| `cmp` (ISA) | a comparison suffix changed: `.lt` and `.le`, `.gt` and `.ge`, `.eq` and `.ne` |
| `arith` | `+` and `-` swapped |
| `delete` | one statement removed (a whole statement, over as many lines as it takes; never a `let` but `let _ = …`, never a log line) |
| `swap` | the two arguments of a call swapped |
| `fix` | an index or an engine fixed to one value (`x[i]` to `x[0]`, `….engine` to `0`) |
| `flag` | one operand of a bitwise or dropped (a flag bit lost) |
| `bool` | `&&` and `||` swapped, `true` and `false` swapped, a `!` dropped |

Each mutant has a stable id (`region:operator:line:n`, the line counted from the region's
BEGIN marker) so that a lab can list the ones proven equivalent (`[[equivalent]]` in
lab.toml, each with its reason) and results can be compared between runs.

A mutant that does not build is *unviable* (the compiler caught it: nothing for the grader to
do); one that loses points is *killed*; one that keeps full marks *survived*. The mutation
score is killed / (killed + survived), equivalent and unviable mutants left out.
"""

import hashlib
import re
from dataclasses import dataclass

# Comparisons (spaced, as rustfmt writes them: `Vec<T>` and `->`/`=>` never match).
CMP_SWAP = {" < ": " <= ", " <= ": " < ", " > ": " >= ", " >= ": " > ", " == ": " != ", " != ": " == "}
ARITH_SWAP = {" + ": " - ", " - ": " + "}
BOOL_SWAP = {" && ": " || ", " || ": " && "}
INT = re.compile(r"(?<![\w.])(0x[0-9a-fA-F_]+|\d[\d_]*)(?:(u8|u16|u32|u64|usize|i32|i64))?(?![\w.])")
CALL2 = re.compile(r"(?P<f>\b[a-z_][\w:]*)\((?P<a>[\w.&*]+(?:\([\w.]*\))?), (?P<b>[\w.&*]+(?:\([\w.]*\))?)\)")
INDEX = re.compile(r"(?<=\w)\[(?P<i>[a-z_][\w.]*(?: as usize)?)\]")
ENGINE = re.compile(r"(?<![\w])(?:[a-z_]\w*\.)*engine\b(?!\s*:[^:])(?! \(| =[^=]|\()")
# The ISA's comparison suffixes (setp.lt.u32 …).
ASM_CMP_SWAP = {"lt": "le", "le": "lt", "gt": "ge", "ge": "gt", "eq": "ne", "ne": "eq"}
ASM_CMP = re.compile(r"\.(lt|le|gt|ge|eq|ne)\b")
# Log lines are not mistakes a grader should catch: never removed.
LOGGING = re.compile(r"^(?:crate::|kernel::)?(?:\w+_ratelimited|dev_(?:err|warn|info|dbg|notice)|pr_\w+|"
                     r"e?println|log::\w+|debug|info|warn|error|trace)!?\s*[!(]")
# A line that opens a block (its statements are mutated one by one, not removed whole).
BLOCK = re.compile(r"^(if|else|while|for|loop|match|unsafe|fn|impl)\b.*\{$|^\{$|.*=> \{$|.*\|\s*\{$")
FLAG_OR = re.compile(r"(?P<a>[\w:.()]+) \| (?P<b>[A-Z][\w:]*|\w+::[A-Z][\w:]*)")


@dataclass
class Mutant:
    """One mutant: the region it changes, the operator, the line within the region (from 1),
    the region's new body and a description."""
    id: str
    region: str
    op: str
    line: int
    what: str
    body: str


def code_spans(line):
    """The parts of a line outside string/char literals and comments: [(start, end)]."""
    spans = []
    i, start, n = 0, 0, len(line)
    while i < n:
        c = line[i]
        if line.startswith("//", i):
            spans.append((start, i))
            return spans
        if c == '"':
            spans.append((start, i))
            j = i + 1
            while j < n and line[j] != '"':
                j += 2 if line[j] == "\\" else 1
            i = j + 1
            start = i
            continue
        i += 1
    spans.append((start, n))
    return spans


def in_code(line, pos, end):
    return any(s <= pos and end <= e for s, e in code_spans(line))


def line_mutations(line, asm=False):
    """(op, start, end, replacement, what) for one line of code."""
    out = []
    stripped = line.strip()
    if not stripped or stripped.startswith(("//", "#", ";")):
        return out
    if asm:
        for m in ASM_CMP.finditer(line):
            if in_code(line, m.start(), m.end()):
                rep = ASM_CMP_SWAP[m[1]]
                out.append(("cmp", m.start(1), m.end(1), rep, f"`.{m[1]}` -> `.{rep}`"))
        for m in INT.finditer(line):
            if not in_code(line, m.start(), m.end()):
                continue
            out += const_changes(line, m)
        return out
    for table, op in ((CMP_SWAP, "cmp"), (ARITH_SWAP, "arith"), (BOOL_SWAP, "bool")):
        for tok, rep in table.items():
            for m in re.finditer(re.escape(tok), line):
                if in_code(line, m.start(), m.end()):
                    out.append((op, m.start(), m.end(), rep, f"`{tok.strip()}` -> `{rep.strip()}`"))
    for m in INT.finditer(line):
        if in_code(line, m.start(), m.end()):
            out += const_changes(line, m)
    for m in re.finditer(r"\b(true|false)\b", line):
        if in_code(line, m.start(), m.end()):
            rep = "false" if m[1] == "true" else "true"
            out.append(("bool", m.start(), m.end(), rep, f"`{m[1]}` -> `{rep}`"))
    for m in re.finditer(r"(?<=[\s(])!(?=[\w(])", line):
        if in_code(line, m.start(), m.end()):
            out.append(("bool", m.start(), m.end(), "", "`!` dropped"))
    for m in CALL2.finditer(line):
        if in_code(line, m.start(), m.end()) and m["a"] != m["b"]:
            s, e = m.start("a"), m.end("b")
            out.append(("swap", s, e, f"{m['b']}, {m['a']}", f"`{m['f']}({m['a']}, {m['b']})` arguments swapped"))
    for m in INDEX.finditer(line):
        if in_code(line, m.start(), m.end()) and m["i"] not in ("0",):
            out.append(("fix", m.start("i"), m.end("i"), "0", f"index `{m['i']}` fixed to 0"))
    for m in ENGINE.finditer(line):
        if in_code(line, m.start(), m.end()):
            out.append(("fix", m.start(), m.end(), "0", f"`{m[0]}` fixed to 0"))
    for m in FLAG_OR.finditer(line):
        if in_code(line, m.start(), m.end()):
            out.append(("flag", m.start(), m.end(), m["a"], f"`| {m['b']}` dropped"))
            out.append(("flag", m.start(), m.end(), m["b"], f"`{m['a']} |` dropped"))
    return out


def const_changes(line, m):
    text, suffix = m[1], m[2] or ""
    try:
        v = int(text.replace("_", ""), 0)
    except ValueError:
        return []
    fmt = (lambda x: hex(x)) if text.lower().startswith("0x") else str
    out = []
    for nv in (v + 1, v - 1):
        if nv < 0:
            continue
        out.append(("const", m.start(), m.end(), fmt(nv) + suffix, f"`{m[0]}` -> `{fmt(nv) + suffix}`"))
    return out


def statements(lines):
    """Whole statements to delete: (first line, last line) index pairs. A statement starts on a
    line that neither opens nor closes a block and is not a `let` (removing one only fails to
    build), and ends at the first `;` where its brackets balance."""
    out = []
    start, depth = None, 0
    prev = "{"  # the region starts inside a block
    for i, line in enumerate(lines):
        code = "".join(line[a:b] for a, b in code_spans(line)).strip()
        if not code:
            continue
        after, prev = prev, code
        if start is None:
            if not after.endswith((";", "{", "}")) or code.startswith("}") or BLOCK.match(code) \
                    or (code.startswith("let ") and not code.startswith("let _ = ")):
                continue
            start, depth = i, 0
        depth += sum(code.count(c) for c in "([{") - sum(code.count(c) for c in ")]}")
        if depth < 0:
            start, depth = None, 0
        elif depth == 0 and code.endswith(";"):
            out.append((start, i))
            start = None
    return out


def region_mutants(name, body, asm=False):
    """Every mutant of one region's reference body (its text between the markers)."""
    lines = body.split("\n")
    seen = {}
    out = []

    def add(op, idx, what, new_lines):
        key = (op, idx)
        seen[key] = seen.get(key, 0) + 1
        mid = f"{name}:{op}:{idx + 1}:{seen[key]}"
        out.append(Mutant(mid, name, op, idx + 1, what, "\n".join(new_lines)))

    for i, line in enumerate(lines):
        for op, s, e, rep, what in line_mutations(line, asm):
            new = lines[:i] + [line[:s] + rep + line[e:]] + lines[i + 1:]
            add(op, i, what, new)
    if asm:
        for i, line in enumerate(lines):
            code = line.split("//")[0].strip()
            if code and not code.endswith(":") and not code.startswith("."):
                add("delete", i, f"`{code}` removed", lines[:i] + lines[i + 1:])
    else:
        for a, b in statements(lines):
            first = lines[a].strip()
            if LOGGING.match(first):
                continue
            add("delete", a, f"`{first[:60]}{'…' if len(first) > 60 or b > a else ''}` removed",
                lines[:a] + lines[b + 1:])
    return out


def lab_mutants(regions, asm_regions=()):
    """Mutants of every region: regions is {name: reference body}."""
    out = []
    for name, body in regions.items():
        out += region_mutants(name, body, asm=name in asm_regions)
    return out


def sample(mutants, k, seed):
    """A reproducible sample of k mutants, spread over the operators."""
    if k >= len(mutants):
        return list(mutants)
    ranked = sorted(mutants, key=lambda m: hashlib.sha256(f"{seed}:{m.id}".encode()).hexdigest())
    by_op = {}
    for m in ranked:
        by_op.setdefault(m.op, []).append(m)
    out = []
    while len(out) < k:
        for op in sorted(by_op):
            if by_op[op] and len(out) < k:
                out.append(by_op[op].pop(0))
    return sorted(out, key=lambda m: m.id)


def signature(fail_text):
    """An explanation with its numbers taken out: two mutants explained the same way have the
    same signature."""
    t = re.sub(r"0x[0-9a-f]+", "#", fail_text)
    t = re.sub(r"\d+(\.\d+)?", "#", t)
    return " ".join(t.split())[:400]


def region_bodies(root, lab, scan):
    """The reference bodies of a lab's regions under root: {name: text between the markers}."""
    found, errors = scan(root)
    if errors:
        raise ValueError("; ".join(errors))
    out = {}
    for r in lab["region"]:
        key = (int(lab["number"]), r["name"])
        if key not in found:
            raise ValueError(f"region {r['name']} is not marked in the code")
        rel, b, e, ind = found[key]
        lines = (root / rel).read_text().splitlines()[b + 1:e]
        # Bodies are stored without the region's indentation (replace_regions adds it back).
        out[r["name"]] = "\n".join(l[len(ind):] if l.startswith(ind) else l.lstrip() for l in lines)
    return out


def asm_regions(lab, root, scan):
    found, _ = scan(root)
    return {r["name"] for r in lab["region"]
            if found.get((int(lab["number"]), r["name"]), ("",))[0].endswith(".s")}


def verdict(result, explain_lines):
    """killed, survived or unviable, and the explanation a student would have read."""
    if result.get("build_failed"):
        return "unviable", ""
    if result["score"] == result["max"]:
        return "survived", ""
    text = "\n".join(f"{t['name']}: {l}" for t in result["tests"] if not t["passed"]
                     for l in explain_lines(t))
    return "killed", text


def summary(rows):
    """Counts and the mutation score of graded mutants."""
    c = {k: sum(1 for r in rows if r["result"] == k) for k in ("killed", "survived", "unviable", "equivalent")}
    graded = c["killed"] + c["survived"]
    c["score"] = round(100.0 * c["killed"] / graded, 1) if graded else None
    killed = [r for r in rows if r["result"] == "killed"]
    c["explanations"] = len({signature(r["explanation"]) for r in killed})
    return c
