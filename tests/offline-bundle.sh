#!/usr/bin/env bash
# The offline bundle on a machine that has nothing: a fresh Debian minbase root
# (debootstrap, no compiler, no QEMU, no Rust), the bundle copied in, then with
# the network cut (unshare -n) for everything that follows: vgpu-offline/install,
# images/build, scripts/lab start 0 --solution and scripts/lab grade 0, which
# must score 10/10. Prints the time of every step.
#
#   tests/offline-bundle.sh [ROOT]     # ROOT default target/offline-root (replaced)
#
# Needs root (debootstrap, chroot, mounts) and the Debian mirror for debootstrap
# itself; the bundle is made from this checkout (scripts/lab bundle), so run
# images/build here first. About 40 minutes on 2 cores (the guest kernel and the
# guest programs are built from scratch inside the root). Not part of scripts/test:
# `scripts/test --offline` runs it.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
export PATH="$HOME/.cargo/bin:$PATH"
root=${1:-$repo/target/offline-root}
mirror=${VGPU_DEBIAN_MIRROR:-http://deb.debian.org/debian}
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
log() { printf '[offline-test] %s\n' "$*"; }
[ "$(id -u)" -eq 0 ] || { echo "tests/offline-bundle.sh: needs root (debootstrap, chroot)" >&2; exit 2; }
step_t0=0
step() { step_t0=$(date +%s); log "$*"; }
took() { log "  took $(( $(date +%s) - step_t0 )) s"; }

mounted=()
cleanup() {
    local i
    for (( i=${#mounted[@]}-1; i>=0; i-- )); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
}
trap cleanup EXIT

command -v debootstrap >/dev/null || { log "installing debootstrap"; apt-get install -y -qq debootstrap >/dev/null; }
step "a fresh $codename minbase root in $root (debootstrap)"
rm -rf "$root"
debootstrap --variant=minbase "$codename" "$root" "$mirror" > "$repo/target/offline-debootstrap.log" 2>&1 \
    || { tail -20 "$repo/target/offline-debootstrap.log"; exit 1; }
took
for tool in gcc make qemu-system-x86_64 rustc cargo python3; do
    if chroot "$root" sh -c "command -v $tool" >/dev/null 2>&1; then
        echo "the fresh root already has $tool: not a machine without the packages" >&2; exit 1
    fi
done
log "the root has no gcc, make, QEMU, Rust or python3"

step "the bundle (scripts/lab bundle)"
mkdir -p "$root/root"
scripts/lab bundle "$root/root/vgpu-offline.tar"
took

for m in proc sys dev dev/pts; do
    mkdir -p "$root/$m"
    mount --bind "/$m" "$root/$m"
    mounted+=("$root/$m")
done

# Everything from here runs without a network: a new network namespace has only a
# loopback device, and it is down.
inside() {
    unshare -n chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb \
        PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin /bin/bash -c "$1"
}
inside 'if getent hosts deb.debian.org >/dev/null 2>&1 || ip route 2>/dev/null | grep -q default; then echo "network reachable"; exit 1; fi; exit 0' \
    || { echo "the namespace has a network" >&2; exit 1; }

step "install from the bundle, no network (vgpu-offline/install)"
inside 'set -e; cd /root && tar xf vgpu-offline.tar && rm vgpu-offline.tar && vgpu-offline/install /root/vgpu'
took
inside 'for t in gcc make qemu-system-x86_64 python3 flex bison busybox; do command -v $t >/dev/null || { echo "missing $t"; exit 1; }; done; qemu-system-x86_64 --version | head -1'

step "images/build, no network"
inside 'set -e; cd /root/vgpu && . ./offline-env && images/build all'
took

step "scripts/lab start 0 --solution and grade 0, no network"
out=$(inside 'set -e; cd /root/vgpu && . ./offline-env && scripts/lab start 0 /root/lab0 --solution >/dev/null && cd /root/lab0 && scripts/lab grade 0' 2>&1) || true
took
printf '%s\n' "$out" | tail -15
grep -qE '^ *score +10/10' <<<"$out" || { echo "offline bundle: lab 0 did not score 10/10" >&2; exit 1; }
log "offline bundle: installed, built and graded lab 0 (10/10) with no network"
