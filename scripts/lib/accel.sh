# shellcheck shell=bash
# The accelerator and QEMU checks shared by scripts/vm and scripts/setup-host
# (sourced; the caller sets repo, cache, target and defines say).
#
# QEMU before 8.0 refuses vhost-user devices unless it runs under KVM with
# ioeventfds: backends/vhost-user.c failed with "vhost initialization failed:
# requires kvm". The check was removed by "backends/vhost-user: remove the
# ioeventfd check", merged for 8.0 (March 2023) and not backported to 7.2.x.
qemu_tcg_min=8.0

# The version of qemu-system-x86_64 in PATH ("7.2.22"), empty if unknown.
qemu_version() {
    qemu-system-x86_64 --version 2>/dev/null \
        | sed -n '1s/^QEMU emulator version \([0-9][0-9.]*\).*/\1/p'
}

# version_lt A B: A is an older version than B.
version_lt() {
    [ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -1)" = "$1" ]
}

# KVM only when it can run a guest: /dev/kvm may exist and still be unable
# to run a normal guest kernel (a paravirtualised KVM stops it with an
# emulation failure). vgpu-kvm-probe answers in milliseconds; the answer is
# cached in $cache per host kernel, KVM module and probe source.
#
# kvm_tool_probe BUILD: 0 usable, 1 not usable (kvm_reason says why), 2 no
# answer (the tool could not be built or run). BUILD=1 rebuilds the tool on
# a cache miss; without a tool it is always built.
kvm_reason=""
kvm_tool_probe() {
    local build=$1 key stamp tool out rc
    kvm_reason=""
    key=$( (uname -srv; ls -d /sys/module/kvm* 2>/dev/null; cat "$repo"/kvm-probe/src/*.rs 2>/dev/null) \
        | sha256sum | cut -c1-16)
    stamp=$cache/kvm-probe-$key
    if [ -f "$stamp" ]; then
        kvm_reason=$(sed -n 's/^fail //p' "$stamp")
        [ "$(head -c 2 "$stamp")" = ok ] && return 0
        [ -n "$kvm_reason" ] && return 1
    fi
    tool=$target/release/vgpu-kvm-probe
    if [ "$build" -eq 1 ] || [ ! -x "$tool" ]; then
        if ! cargo build --quiet --release --manifest-path "$repo/Cargo.toml" -p vgpu-kvm-probe \
                >/dev/null 2>&1; then
            say "vgpu-kvm-probe could not be built (cargo build -p vgpu-kvm-probe shows why)"
            return 2
        fi
    fi
    [ -x "$tool" ] || return 2
    rc=0
    out=$("$tool" 2>/dev/null) || rc=$?
    out=${out% (*ms)}  # the answer without the probe's time
    mkdir -p "$cache"
    case "$rc:$out" in
        "0:KVM usable: "*) echo "ok ${out#KVM usable: }" > "$stamp"; return 0 ;;
        "1:KVM not usable: "*)
            kvm_reason=${out#KVM not usable: }
            echo "fail $kvm_reason" > "$stamp"; return 1 ;;
    esac
    return 2
}
