"""`scripts/lab bundle`: everything a grade needs, for a machine without a network."""

import os
import re
import shutil
import tempfile
from pathlib import Path

from .common import ORIGIN, LabError, copy_tree, log, run


def bundle_debs(b):
    """The Debian packages scripts/setup-host installs, with everything they depend on
    (the recursive closure: a fresh machine has none of it), and the apt lists and sources
    they came from, so that the offline install lets apt resolve them as a repository
    (vgpu-offline/install) instead of dpkg -i guessing an order and a version."""
    pkgs = re.findall(r"host_pkgs=\(([^)]*)\)", (ORIGIN / "scripts/setup-host").read_text())
    names = pkgs[0].split() if pkgs else []
    # The base system too (priorities required and important, what a minimal Debian has):
    # a newer version of a dependency can break an older base package, which apt then
    # upgrades from the bundle.
    avail = run(["apt-cache", "dumpavail"], capture_output=True, text=True).stdout
    base = sorted(set(re.findall(r"^Package: (\S+)\n(?:[^\n]+\n)*?Priority: (?:required|important)$",
                                 avail, re.M)))
    wanted = names + ["qemu-system-x86"] + base
    dep = run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests",
               "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances"] + wanted,
              capture_output=True, text=True)
    if dep.returncode != 0:
        raise LabError("apt-cache depends failed: " + dep.stderr[-500:])
    # Top-level lines are the closure's packages; <name> lines are virtual.
    closure = sorted({l.strip() for l in dep.stdout.splitlines()
                      if l and not l[0].isspace() and not l.startswith("<")})
    log(f"downloading {len(closure)} Debian packages (the host packages and their dependencies)")
    r = run(["apt-get", "download", "-qq"] + closure, cwd=b / "debs", capture_output=True, text=True)
    if r.returncode != 0:
        raise LabError("apt-get download failed: " + r.stderr.strip()[-800:])
    apt = b / "apt"
    (apt / "lists").mkdir(parents=True)
    (apt / "sources.list.d").mkdir()
    for f in Path("/var/lib/apt/lists").iterdir():
        if f.is_file() and (f.name.endswith("InRelease") or f.name.endswith("Release")
                            or "_Packages" in f.name):
            shutil.copy2(f, apt / "lists" / f.name)
    src = Path("/etc/apt/sources.list")
    (apt / "sources.list").write_text(src.read_text() if src.is_file() else "")
    for f in Path("/etc/apt/sources.list.d").glob("*"):
        if f.suffix in (".list", ".sources"):
            shutil.copy2(f, apt / "sources.list.d" / f.name)
    # The exact versions bundled (those installed here where the lists still have them:
    # QEMU and some of its dependencies from backports; else the newest the lists have),
    # pinned for apt, so that the offline install resolves the host packages as here.
    (apt / "packages").write_text(" ".join(names + ["qemu-system-x86"]) + "\n")
    pinned = []
    for deb in sorted((b / "debs").glob("*.deb")):
        f = run(["dpkg-deb", "-f", str(deb), "Package", "Version"], capture_output=True, text=True)
        fields = dict(l.split(": ", 1) for l in f.stdout.splitlines() if ": " in l)
        if "Package" in fields and "Version" in fields:
            pinned.append(f"{fields['Package']}={fields['Version']}")
    if not any(p.startswith("qemu-system-x86=") for p in pinned):
        raise LabError("no QEMU among the bundled packages: run scripts/setup-host first")
    (apt / "preferences").write_text("".join(
        f"Package: {p.split('=', 1)[0]}\nPin: version {p.split('=', 1)[1]}\nPin-Priority: 990\n\n"
        for p in pinned))


def cmd_bundle(a):
    """An offline bundle: the source, vendored crates, the Debian packages of
    scripts/setup-host, the kernel and rust-src sources (as images/build cached them)."""
    dst = Path(a.file).resolve()
    with tempfile.TemporaryDirectory(prefix="vgpu-bundle-") as tmp:
        b = Path(tmp) / "vgpu-offline"
        (b / "src").mkdir(parents=True)
        log("copying the source")
        copy_tree(b / "src")
        log("vendoring crates (cargo vendor)")
        vend = run(["cargo", "vendor", "--quiet", "--manifest-path", str(b / "src/Cargo.toml"),
                    str(b / "vendor")], capture_output=True, text=True)
        if vend.returncode != 0:
            raise LabError("cargo vendor failed: " + vend.stderr[-2000:])
        (b / "cargo-config.toml").write_text(
            '[source.crates-io]\nreplace-with = "vendored-sources"\n\n'
            '[source.vendored-sources]\ndirectory = "VENDOR"\n')
        cache = Path(os.environ.get("VGPU_CACHE_DIR", Path.home() / ".cache/vgpu"))
        (b / "debs").mkdir()
        if not a.no_debs:
            bundle_debs(b)
        log(f"{len(list((b / 'debs').glob('*.deb')))} Debian packages")
        (b / "cache").mkdir()
        # images/build's private apt state: its lists and the linux-source-7.2 and rust-src
        # packages at the pinned versions (unpacked offline by images/build).
        if (cache / "apt").is_dir():
            run(["cp", "-a", str(cache / "apt"), str(b / "cache/apt")], check=True)
        (b / "rust").mkdir()
        ver = run(["rustc", "--version"], capture_output=True, text=True).stdout.split()[1]
        sysroot = Path(run(["rustc", "--print", "sysroot"], capture_output=True, text=True).stdout.strip())
        (b / "rust/version").write_text(ver + "\n")
        if not a.no_toolchain:
            log(f"the Rust toolchain {ver} ({sysroot})")
            run(["tar", "-C", str(sysroot.resolve().parent), "-cf", str(b / "rust/toolchain.tar"),
                 sysroot.resolve().name], check=True)
        bg = shutil.which("bindgen")
        if bg:
            shutil.copy2(bg, b / "rust/bindgen")
        shutil.copy2(ORIGIN / "labs/offline-install", b / "install")
        log(f"writing {dst}")
        run(["tar", "-C", tmp, "-cf", str(dst), "vgpu-offline"], check=True)
    print(f"bundle: {dst} ({dst.stat().st_size >> 20} MiB); install: tar xf {dst.name} && vgpu-offline/install DIR")
    return 0
