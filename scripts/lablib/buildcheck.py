"""`scripts/lab check --build`: the KMD labs' wrong solutions still build."""

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from lablib.common import ORIGIN, LabError, compiler_errors, log, run


def build_variants(labs, env, apply):
    """Builds vgpu.ko (kernel tree `env`: KBUILD, RUST_LIB_SRC) with every wrong solution of the labs that change the KMD in place (no
    VM; `apply(root, n, bodies)` puts lab n's bodies in place under root): a wrong solution is a copy of a region's code, and stops building when the code around
    it changes (a callee's arguments), which only a selftest would find otherwise."""
    errors = []
    variants = [(n, lab, w) for n, lab in sorted(labs.items()) if "kmd" in lab.get("build", ["kmd"])
                for w in lab.get("wrong", [])]
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ignore = shutil.ignore_patterns("*.o", "*.ko", "*.cmd", "*.mod*", "Module.symvers",
                                        "modules.order", "target")
        for i, (n, lab, w) in enumerate(variants):
            for d in ("guest-kmd", "hwif"):
                shutil.rmtree(tmp / d, ignore_errors=True)
                shutil.copytree(ORIGIN / d, tmp / d, ignore=ignore)
            name = f"lab {n} wrong:{w['name']}"
            try:
                apply(tmp, n, dict(w.get("bodies", {})))
            except LabError as e:
                errors.append(f"{name}: {e}")
                continue
            cmd = ["nice", "-n", "5", "make", "-C", env["KBUILD"], f"M={tmp}/guest-kmd",
                   f"RUST_LIB_SRC={env['RUST_LIB_SRC']}", f"-j{os.cpu_count() or 2}", "modules"]
            r = run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            ok = r.returncode == 0 and (tmp / "guest-kmd/vgpu.ko").is_file()
            log(f"build {i + 1}/{len(variants)}: {name}: {'ok' if ok else 'DOES NOT BUILD'} "
                f"({time.time() - t0:.0f} s)")
            if not ok:
                errors.append(f"{name} does not build:\n" + compiler_errors(r.stdout or ""))
    return errors
