"""What every part of scripts/lab shares: the checkout it runs from, its error, its log."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

ORIGIN = Path(__file__).resolve().parent.parent.parent


class LabError(Exception):
    pass


def log(msg):
    print(f"[lab] {msg}", file=sys.stderr, flush=True)


def source_files(root):
    """The checkout's files: git's list, or (a checkout without git, e.g. from an offline bundle)
    every file but the build outputs and the vendored crates."""
    r = subprocess.run(["git", "-C", str(root), "ls-files", "-co", "--exclude-standard"],
                       capture_output=True, text=True)
    if r.returncode == 0 and r.stdout.strip():
        return r.stdout.split("\n")
    skip = ("target/", "vendor/", ".git/")
    return [str(p.relative_to(root)) for p in root.rglob("*")
            if p.is_file() and not str(p.relative_to(root)).startswith(skip)]


def copy_tree(dst):
    files = source_files(ORIGIN)
    for rel in files:
        if not rel or rel.startswith("target/"):
            continue
        s = ORIGIN / rel
        if not s.is_file():
            continue
        d = dst / rel
        d.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(s, d)


def run(cmd, **kw):
    return subprocess.run(cmd, **kw)


def compiler_errors(text, kind="error"):
    lines = text.splitlines()
    out = []
    for i, l in enumerate(lines):
        if re.match(rf"^({kind})(\[|:)", l):
            out += lines[i:i + 12]
    return "\n".join(out[:80]) if out else ("\n".join(lines[-30:]) if kind == "error" else "")
