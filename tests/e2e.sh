#!/usr/bin/env bash
# End-to-end tests: boot the guest with the vgpu device (scripts/vm) and check
# what the guest driver stack does against the real device process.
#
#   tests/e2e.sh            all cases (builds the guest first)
#   tests/e2e.sh identify   only cases whose name contains "identify"
#   tests/e2e.sh kmd- reload   cases whose name contains either word
#   tests/e2e.sh vm-qemu    the launcher against stand-in QEMUs (no boot, seconds)
#   tests/e2e.sh --debug-kernel kmd-
#                           the cases on the debug kernel (images/build --debug:
#                           KASAN, lockdep, kmemleak, UBSAN, debug objects), 1 GiB
#                           guests; after each case a kmemleak scan, and the case
#                           fails on any splat or leak report
#
# Environment:
#   VGPU_FUZZ_SECONDS               kmd-ioctl-fuzz's time (default 45)
#   VGPU_FUZZ_SEED                  its seed (default: from the clock; the case prints it for a replay)
#   VGPU_E2E_DEVICE_ARGS="ARG ..."  extra vgpu-device arguments for every case
#   VGPU_E2E_SANITIZE=1             every case runs with the device's driver sanitizer on
#                                   (--sanitize, docs/sanitizer.md) and fails if the device
#                                   reported a finding other than the ones the case provokes on
#                                   purpose (its allow list below)
#
# Prints one line per case and a closing "e2e: N passed, N failed".
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
debug_kernel=0
if [ "${1:-}" = --debug-kernel ]; then debug_kernel=1; shift; fi
filters=("$@")
vm=("$repo/scripts/vm" --no-build --timeout "${VGPU_E2E_TIMEOUT:-300}")
sanitize=${VGPU_E2E_SANITIZE:-0}
[ "$sanitize" = 1 ] && vm+=(--device-arg --sanitize)
for a in ${VGPU_E2E_DEVICE_ARGS:-}; do vm+=(--device-arg "$a"); done
# Sanitizer findings a case provokes on purpose (VGPU_E2E_SANITIZE=1): "CASE-PREFIX:SAN-ID ...".
# Each is the test program's own deliberate misuse, not the driver's.
# Deliberate hangs (a SEM_WAIT on a value nothing writes, to test hang recovery) are reported at
# once as SAN-WAIT-UNSATISFIABLE: that is the check working.
san_allowed="kmd-submit:SAN-WAIT-UNSATISFIABLE kmd-hang:SAN-WAIT-UNSATISFIABLE umd-api:SAN-WAIT-UNSATISFIABLE kmd-drm-sync:SAN-WAIT-UNSATISFIABLE ${VGPU_E2E_SAN_ALLOWED:-}"
# The cases below that run with the sanitizer anyway (not twice on the device's command line).
case_san=(--device-arg --sanitize)
[ "$sanitize" = 1 ] && case_san=()
passed=0
failed=0
qemu_aborts=0
logdir=$repo/target/e2e
build=("$repo/images/build")
if [ $debug_kernel -eq 1 ]; then
    # The debug guest: its own image; KASAN's shadow and kmemleak's
    # bookkeeping need more memory; everything runs slower.
    logdir=$repo/target/e2e-debug
    build=("$repo/images/build" --debug)
    export VGPU_OUT_DIR=$repo/target/guest-debug
    # no5lvl: with 5-level paging (QEMU's -cpu max has LA57) the clang
    # KASAN kernel sometimes reports a wild-memory-access in
    # do_raw_spin_lock from swapper/0 in interrupt context at ~0.006 s of
    # boot, before any module (an address of the 5-level direct map,
    # 0xff11...); 4-level paging is the configuration KASAN is most tested
    # with (docs/testing.md).
    vm=("$repo/scripts/vm" --no-build --timeout "${VGPU_E2E_TIMEOUT:-900}" --mem 1G --kernel-arg no5lvl)
fi
rm -rf "$logdir" && mkdir -p "$logdir"

"${build[@]}" all || { echo "e2e: guest build failed"; echo "e2e: 0 passed, 1 failed"; exit 1; }
cargo build --quiet --release --manifest-path "$repo/Cargo.toml" -p vgpu-device -p vgpu-kvm-probe || exit 1

# On the debug kernel every guest command is followed by this check:
# vgpu-debug-check (images/debug-check, in the debug image): a kmemleak scan,
# then "debug-check splats N leaks M" and what was found. The command's
# status is kept. A program in the image, not a script appended to the
# command: the command travels on the kernel command line, which holds 2 KiB.
# The splat patterns are that program's. debug_check RE: the check for RE.
splat_re=$(sed -n "s/^splat_re='\\(.*\\)'$/\\1/p" "$repo/images/debug-check")
splat_re_failnth=$(sed -n "s/^splat_re_failnth='\\(.*\\)'$/\\1/p" "$repo/images/debug-check")
[ -n "$splat_re" ] && [ -n "$splat_re_failnth" ] || { echo "e2e: no splat patterns in images/debug-check"; exit 1; }
debug_check() {
    if [ "$1" = "$splat_re_failnth" ]; then printf '%s' 'vgpu-debug-check --failnth'; else printf '%s' 'vgpu-debug-check'; fi
}
# The pattern of the next run_vm's check (run_vm resets it).
case_splat_re=$splat_re

# attempt NAME COMMAND...: runs a case's launcher COMMAND (scripts/vm or scripts/vms, with --keep-logs
# $logdir/NAME), its output in $case_out, its status in $case_rc, its messages in $logdir/NAME.stderr.
# QEMU itself aborting on one of its own assertions is QEMU's failure, not the case's: the case runs
# once more, its line says so with the assertion's place, the first attempt's messages and output are
# kept (NAME.qemu-abort.*), and the summary counts the retries; a second abort is the case's result.
# scripts/vms prefixes each VM's messages with "vmN: ". (Seen under TCG, docs/testing.md "QEMU's own
# assertions under TCG": QEMU 10.0's msix_table_mmio_write and iotlb_to_section assertions, in
# firmware or early boot, and once during the second function reset of kmd-flr.)
attempt() {
    local name=$1; shift
    case_out=$("$@" 2>"$logdir/$name.stderr")
    case_rc=$?
    # QEMU's messages: scripts/vm's on its stderr, scripts/vms's in its output, each line "vmN: ...".
    local qemu_msgs
    qemu_msgs=$(cat "$logdir/$name.stderr"; grep -E '^vm[0-9]+: ' <<<"$case_out")
    if [ $case_rc -eq 123 ] \
        && grep -qE '^(vm[0-9]+: )?vm: QEMU failed while the guest was running \(exit status 134\)' <<<"$qemu_msgs" \
        && grep -qE '^(vm[0-9]+: )?qemu-system-[^:]*: .*Assertion .* failed' <<<"$qemu_msgs"; then
        mv "$logdir/$name.stderr" "$logdir/$name.qemu-abort.stderr"
        printf '%s\n' "$case_out" > "$logdir/$name.qemu-abort.out"
        local when="before the guest's command started"
        # scripts/vms's own lines (the command line, QEMU's messages, the statuses) are not the command's.
        local out_lines
        out_lines=$(grep -vE '^vm[0-9]+: (vm: |qemu-system-|exit status |VGPU-)|^host: ' <<<"$case_out" | grep -c .)
        [ "$out_lines" -eq 0 ] || when="while the guest's command ran ($out_lines lines of output)"
        echo "     $name: QEMU aborted $when ($(grep -m1 -oE 'qemu-system-[^:]*: [^:]*:[0-9]+: [a-z_]+' <<<"$qemu_msgs")); running the case again"
        qemu_aborts=$((qemu_aborts + 1))
        rm -rf "${logdir:?}/$name.qemu-abort"
        [ ! -d "$logdir/$name" ] || mv "$logdir/$name" "$logdir/$name.qemu-abort"
        case_out=$("$@" 2>"$logdir/$name.stderr")
        case_rc=$?
        # A check that failed before the abort is not hidden by a retry that passes.
        local failed
        failed=$(grep -E '^(vm[0-9]+: )?FAIL' "$logdir/$name.qemu-abort.out" | sed 's/$/ (first attempt, before QEMU aborted)/')
        [ -z "$failed" ] || case_out=$(printf '%s\n%s' "$failed" "$case_out")
    fi
}

# run_vm NAME VM_ARGS... run GUEST_CMD: the case's output in $case_out
case_out=""
run_vm() {
    local name=$1; shift
    local t0 t1
    local args=("$@")
    if [ $debug_kernel -eq 1 ] && [ ${#args[@]} -ge 2 ] && [ "${args[-2]}" = run ] && [[ "$name" != debug-checkers ]]; then
        args[-1]="( ${args[-1]}
); __rc=\$?; $(debug_check "$case_splat_re"); exit \$__rc"
    fi
    case_splat_re=$splat_re
    t0=$(date +%s.%N)
    attempt "$name" "${vm[@]}" --keep-logs "$logdir/$name" "${args[@]}"
    t1=$(date +%s.%N)
    case_secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
    printf '%s\n' "$case_out" > "$logdir/$name.out"
}

run_vms() {  # run_vms NAME VMS_ARGS...: scripts/vms with the case's logs and retry, like run_vm
    local name=$1; shift
    local t0 t1
    t0=$(date +%s.%N)
    attempt "$name" "$repo/scripts/vms" --no-build --timeout "${VGPU_E2E_TIMEOUT:-300}" --keep-logs "$logdir/$name" "$@"
    t1=$(date +%s.%N)
    case_secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
    printf '%s\n' "$case_out" > "$logdir/$name.out"
}

# The device's sanitizer reports of case NAME (lines "sanitizer: SAN-..." of its device log), minus
# the ones it is allowed to provoke.
san_findings() {
    local name=$1 log=$logdir/$1/device.log ids
    [ -f "$log" ] || return 0
    ids=$(grep -o 'sanitizer: SAN-[A-Z-]*' "$log" | sed 's/^sanitizer: //' | sort | uniq -c | awk '{print $2"x"$1}')
    for a in $san_allowed; do
        case "$name" in "${a%%:*}"*) ids=$(grep -v "^${a#*:}x" <<<"$ids") ;; esac
    done
    printf '%s' "$ids" | tr '\n' ' '
}

result() {
    local name=$1 ok=$2 why=${3:-}
    if [ "$ok" = 1 ] && [ "$sanitize" = 1 ]; then
        local f; f=$(san_findings "$name")
        if [ -n "${f// /}" ]; then ok=0; why="sanitizer findings: $f"; fi
    fi
    # The debug kernel's verdict on a case that passed its own checks.
    if [ "$ok" = 1 ] && [ $debug_kernel -eq 1 ] && [[ "$name" != vm-qemu* ]] && [[ "$name" != debug-checkers ]]; then
        if ! want "^debug-check splats 0 leaks 0$"; then
            ok=0; why="debug kernel: $(grep -m1 '^debug-check' <<<"$case_out" || echo 'no debug check')"
        fi
    fi
    if [ "$ok" = 1 ]; then
        passed=$((passed + 1)); printf 'ok   %-28s %5ss\n' "$name" "$case_secs"
    else
        failed=$((failed + 1)); printf 'FAIL %-28s %5ss  %s\n' "$name" "$case_secs" "$why"
        sed 's/^/     | /' "$logdir/$name.out" | tail -30
        sed 's/^/     ! /' "$logdir/$name.stderr" | tail -15
    fi
}

want() { grep -qE -- "$1" <<<"$case_out"; }

selected() {
    [ ${#filters[@]} -eq 0 ] && return 0
    local f
    for f in "${filters[@]}"; do [[ "$1" == *"$f"* ]] && return 0; done
    return 1
}

# --- The launcher against QEMUs that cannot run the VM (stand-in qemu-system-x86_64 scripts first in PATH; no
#     boot, a second each): a QEMU that fails at start is reported once with its exit status (123, no "guest ended");
#     a QEMU 7.2 is refused before boot under TCG (127, one line: version, reason, fix) and started under KVM.
stub_qemu() {  # stub_qemu DIR VERSION: a qemu-system-x86_64 that reports VERSION, logs its arguments, fails at start
    mkdir -p "$1"
    cat > "$1/qemu-system-x86_64" <<STUB
#!/bin/sh
if [ "\$1" = --version ]; then echo "QEMU emulator version $2 (stand-in)"; exit 0; fi
echo "\$*" >> "$1/started"
echo "qemu-system-x86_64: -device vhost-user-gpu-pci,chardev=vgpu,edid=off: vhost initialization failed: requires kvm" >&2
exit 1
STUB
    chmod +x "$1/qemu-system-x86_64"
}
stub_run() {  # stub_run NAME STUB_DIR VM_ARGS...: run_vm with the stand-in first in PATH
    local name=$1 dir=$2; shift 2
    PATH="$dir:$PATH" run_vm "$name" "$@"
    case_err=$(cat "$logdir/$name.stderr")
}
name=vm-qemu-fails-at-start
if selected "$name"; then
    stub_qemu "$logdir/stub-fails" 10.0.2
    stub_run "$name" "$logdir/stub-fails" --accel tcg run true
    errs=$(grep -c 'vhost initialization failed: requires kvm' <<<"$case_err")
    if [ $case_rc -ne 123 ]; then result "$name" 0 "exit status $case_rc, expected 123"
    elif [ ! -f "$logdir/stub-fails/started" ]; then result "$name" 0 "the stand-in QEMU was not started"
    elif [ "$errs" != 1 ]; then result "$name" 0 "QEMU's error printed $errs times, expected once"
    elif ! grep -qx 'vm: QEMU failed to start (exit status 1)' <<<"$case_err"; then result "$name" 0 "no 'QEMU failed to start (exit status 1)'"
    elif grep -q 'guest ended' <<<"$case_err"; then result "$name" 0 "says the guest ended"
    else result "$name" 1; fi
fi
name=vm-qemu-abort-retried
if selected "$name"; then
    # A QEMU that aborts on its own assertion after printing firmware lines (the guest's command never
    # started): the case is run once more, with a line saying why; a second abort is the case's result.
    mkdir -p "$logdir/stub-abort"
    cat > "$logdir/stub-abort/qemu-system-x86_64" <<STUB
#!/bin/sh
if [ "\$1" = --version ]; then echo "QEMU emulator version 10.0.2 (stand-in)"; exit 0; fi
echo started >> "$logdir/stub-abort/started"
echo "SeaBIOS (stand-in)"; echo "Booting from ROM..."
echo "qemu-system-x86_64: hw/pci/msix.c:228: msix_table_mmio_write: Assertion \\\`addr + size <= 0' failed." >&2
kill -ABRT \$\$
STUB
    chmod +x "$logdir/stub-abort/qemu-system-x86_64"
    aborts_before=$qemu_aborts
    PATH="$logdir/stub-abort:$PATH" run_vm "$name" --accel tcg run true > "$logdir/$name.retry"
    retry_line=$(cat "$logdir/$name.retry")
    starts=$(wc -l < "$logdir/stub-abort/started" 2>/dev/null || echo 0)
    if [ "$starts" != 2 ]; then result "$name" 0 "QEMU started $starts times, expected 2 (one retry)"
    elif ! grep -q "^     $name: QEMU aborted before the guest's command started (qemu-system-x86_64: hw/pci/msix.c:228: msix_table_mmio_write); running the case again$" <<<"$retry_line"; then
        result "$name" 0 "no line naming the abort and the retry"
    elif [ "$case_rc" != 123 ]; then result "$name" 0 "exit status $case_rc after the second abort, expected 123"
    elif [ ! -f "$logdir/$name.qemu-abort.stderr" ]; then result "$name" 0 "the first attempt's messages were not kept"
    else result "$name" 1; fi
    qemu_aborts=$aborts_before
fi
name=vm-qemu-abort-mid-run
if selected "$name"; then
    # A QEMU that aborts while the guest's command runs, after the command printed a FAIL line; the
    # retry passes: the retry's line says when QEMU aborted, and the first attempt's FAIL line is in
    # the case's output, so a retry never hides a check that failed.
    mkdir -p "$logdir/stub-abort-mid"
    cat > "$logdir/stub-abort-mid/qemu-system-x86_64" <<STUB
#!/bin/sh
if [ "\$1" = --version ]; then echo "QEMU emulator version 10.0.2 (stand-in)"; exit 0; fi
echo started >> "$logdir/stub-abort-mid/started"
echo "VGPU-OUTPUT-BEGIN"
if [ "\$(wc -l < "$logdir/stub-abort-mid/started")" = 1 ]; then
    echo "FAIL flr: a second function reset: EIO"
    echo "qemu-system-x86_64: hw/pci/msix.c:228: msix_table_mmio_write: Assertion \\\`addr + size <= 0' failed." >&2
    kill -ABRT \$\$
fi
echo "ok flr: a second function reset"
echo "VGPU-EXIT-STATUS: 0"
STUB
    chmod +x "$logdir/stub-abort-mid/qemu-system-x86_64"
    aborts_before=$qemu_aborts
    PATH="$logdir/stub-abort-mid:$PATH" run_vm "$name" --accel tcg run true > "$logdir/$name.retry"
    retry_line=$(cat "$logdir/$name.retry")
    starts=$(wc -l < "$logdir/stub-abort-mid/started" 2>/dev/null || echo 0)
    if [ "$starts" != 2 ]; then result "$name" 0 "QEMU started $starts times, expected 2 (one retry)"
    elif ! grep -q "^     $name: QEMU aborted while the guest's command ran (1 lines of output) (qemu-system-x86_64: hw/pci/msix.c:228: msix_table_mmio_write); running the case again$" <<<"$retry_line"; then
        result "$name" 0 "no line naming the abort, when, and the retry: $retry_line"
    elif ! want "^FAIL flr: a second function reset: EIO \(first attempt, before QEMU aborted\)$"; then
        result "$name" 0 "the first attempt's FAIL line is not in the case's output"
    elif ! want "^ok flr: a second function reset$"; then result "$name" 0 "no output from the retry"
    else result "$name" 1; fi
    qemu_aborts=$aborts_before
fi
name=vms-qemu-abort-retried
if selected "$name"; then
    # scripts/vms with one VM's QEMU aborting on its own assertion (its messages prefixed "vm1: "): the
    # two VMs run once more, with the line naming the assertion, and the retry's result is the case's.
    mkdir -p "$logdir/stub-abort-vms"
    cat > "$logdir/stub-abort-vms/qemu-system-x86_64" <<STUB
#!/bin/sh
if [ "\$1" = --version ]; then echo "QEMU emulator version 10.0.2 (stand-in)"; exit 0; fi
echo started >> "$logdir/stub-abort-vms/started"
echo "VGPU-OUTPUT-BEGIN"
if [ "\$(wc -l < "$logdir/stub-abort-vms/started")" = 1 ]; then
    echo "qemu-system-x86_64: system/physmem.c:2678: iotlb_to_section: Assertion \\\`section_index < d->map.sections_nb' failed." >&2
    kill -ABRT \$\$
fi
echo "ok stand-in"
echo "VGPU-EXIT-STATUS: 0"
STUB
    chmod +x "$logdir/stub-abort-vms/qemu-system-x86_64"
    aborts_before=$qemu_aborts
    PATH="$logdir/stub-abort-vms:$PATH" run_vms "$name" --vm-arg --accel --vm-arg tcg run true true > "$logdir/$name.retry"
    retry_line=$(cat "$logdir/$name.retry")
    starts=$(wc -l < "$logdir/stub-abort-vms/started" 2>/dev/null || echo 0)
    if [ "$starts" != 4 ]; then result "$name" 0 "QEMU started $starts times, expected 4 (two VMs, run twice)"
    elif ! grep -q "^     $name: QEMU aborted .*(qemu-system-x86_64: system/physmem.c:2678: iotlb_to_section); running the case again$" <<<"$retry_line"; then
        result "$name" 0 "no line naming the abort and the retry: $retry_line"
    elif [ "$case_rc" != 0 ]; then result "$name" 0 "exit status $case_rc after the retry, expected 0"
    elif ! want "^vm1: ok stand-in$"; then result "$name" 0 "no output from VM 1's retry"
    elif [ ! -f "$logdir/$name.qemu-abort.stderr" ]; then result "$name" 0 "the first attempt's messages were not kept"
    else result "$name" 1; fi
    qemu_aborts=$aborts_before
fi
name=vm-qemu-7.2-tcg-refused
if selected "$name"; then
    stub_qemu "$logdir/stub-72-tcg" 7.2.22
    stub_run "$name" "$logdir/stub-72-tcg" --accel tcg run true
    if [ $case_rc -ne 127 ]; then result "$name" 0 "exit status $case_rc, expected 127"
    elif [ -f "$logdir/stub-72-tcg/started" ]; then result "$name" 0 "QEMU 7.2 was started under TCG"
    elif [ "$(wc -l <<<"$case_err")" != 1 ]; then result "$name" 0 "more than one line on stderr"
    elif ! grep -qE "^vm: QEMU 7\.2\.22 cannot run vgpu under TCG: QEMU before 8\.0 refuses vhost-user devices without KVM .*run scripts/setup-host" <<<"$case_err"; then
        result "$name" 0 "the refusal does not name the version, the reason and the fix"
    else result "$name" 1; fi
fi
name=vm-qemu-7.2-kvm-allowed
if selected "$name"; then
    stub_qemu "$logdir/stub-72-kvm" 7.2.22
    stub_run "$name" "$logdir/stub-72-kvm" --accel kvm run true
    if ! grep -q -- '-accel kvm' "$logdir/stub-72-kvm/started" 2>/dev/null; then result "$name" 0 "QEMU 7.2 was not started under KVM"
    elif grep -q 'cannot run vgpu' <<<"$case_err"; then result "$name" 0 "refused under KVM"
    elif [ $case_rc -ne 123 ]; then result "$name" 0 "exit status $case_rc, expected 123 (the stand-in fails)"
    else result "$name" 1; fi
fi
name=vm-qemu-loglevel
if selected "$name"; then
    # The console log level reaches the kernel command line: --loglevel
    # over VGPU_LOGLEVEL over the default 1.
    stub_qemu "$logdir/stub-loglevel" 10.0.2
    stub_run "$name" "$logdir/stub-loglevel" --accel tcg --loglevel 7 run true
    first=$(cat "$logdir/stub-loglevel/started" 2>/dev/null); rm -f "$logdir/stub-loglevel/started"
    VGPU_LOGLEVEL=4 stub_run "$name" "$logdir/stub-loglevel" --accel tcg run true
    env_line=$(cat "$logdir/stub-loglevel/started" 2>/dev/null); rm -f "$logdir/stub-loglevel/started"
    stub_run "$name" "$logdir/stub-loglevel" --accel tcg run true
    default=$(cat "$logdir/stub-loglevel/started" 2>/dev/null)
    PATH="$logdir/stub-loglevel:$PATH" "${vm[@]}" --loglevel 9 cmdline 2>"$logdir/$name.bad"; bad_rc=$?
    if ! grep -q ' loglevel=7 ' <<<"$first" || grep -q 'loglevel=1' <<<"$first"; then result "$name" 0 "--loglevel 7 not on the command line"
    elif ! grep -q ' loglevel=4 ' <<<"$env_line"; then result "$name" 0 "VGPU_LOGLEVEL=4 not on the command line"
    elif ! grep -q ' loglevel=1 ' <<<"$default"; then result "$name" 0 "the default is not loglevel=1"
    elif [ $bad_rc -ne 127 ]; then result "$name" 0 "--loglevel 9 accepted (exit status $bad_rc)"
    else result "$name" 1; fi
fi

# --- IDENTIFY data comes from the device process: --gen changes it.
for g in 1 2; do
    name=identify-gen$g
    selected "$name" || continue
    run_vm "$name" --gen "$g" run vgpu-smi --ping 3
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif ! want "^  generation +$g\$"; then result "$name" 0 "generation $g not shown"
    elif ! want "hwif layout .*\(match\)"; then result "$name" 0 "hwif fingerprints differ"
    elif ! want "ping 2: event seq [0-9]+ latency"; then result "$name" 0 "ping round trip missing"
    else result "$name" 1; fi
done

# --- Debug kernel only (tests/e2e.sh --debug-kernel debug-): first, the checkers fire. The module's planted bugs
#     (debugfs selftest_bug: use-after-free, out-of-bounds read, free of an armed hrtimer, a leak, a lock-order
#     inversion; lockdep turns itself off after its report, so it goes last) and the kernel's test_ubsan.ko must
#     each produce its report, and each report must be counted by the same check every other case passes
#     (splat pattern, kmemleak scan): a clean run means something only if these fire.
name=debug-checkers
if [ $debug_kernel -eq 1 ] && selected "$name"; then
    run_vm "$name" --gen 2 --kernel-arg kasan_multi_shot run 'd=$(ls -d /sys/kernel/debug/vgpu/*/ | head -1); splats() { dmesg | grep -v "Kernel command line\|vgpurun=\|vgpukmd=\|DMA-API: preallocated\|DMA-API: debugging enabled" | grep -cE "'"$splat_re"'"; }; plant() { b=$(splats); if [ "$1" = ubsan ]; then insmod /lib/modules/test_ubsan.ko 2>/dev/null; else echo $1 > ${d}selftest_bug; fi; a=$(splats); if dmesg | grep -qE "$2" && [ "$a" -gt "$b" ]; then echo "checker $1 reported ($b -> $a splats)"; else echo "checker $1 SILENT ($b -> $a splats)"; fi; }; plant lockdep "possible circular locking dependency"; plant uaf "BUG: KASAN: [a-z-]*use-after-free"; plant oob "BUG: KASAN: slab-out-of-bounds"; plant odebug "ODEBUG: free active"; plant ubsan "UBSAN: "; sh -c "echo leak > ${d}selftest_bug"; sleep 6; for i in 1 2 3; do echo scan > /sys/kernel/debug/kmemleak; n=$(grep -c "unreferenced object" /sys/kernel/debug/kmemleak); [ "$n" -gt 0 ] && break; sleep 2; done; if [ "$n" -gt 0 ] && grep -q "size 512" /sys/kernel/debug/kmemleak && grep -q selftest /sys/kernel/debug/kmemleak; then echo "checker leak reported ($n objects)"; else echo "checker leak SILENT ($n objects)"; fi; echo "planted done"'
    n_rep=$(grep -c "^checker [a-z]* reported" <<<"$case_out")
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif ! want "^planted done$"; then result "$name" 0 "the planted bugs did not all run"
    elif want "^checker [a-z]* SILENT"; then result "$name" 0 "$(grep -m1 "SILENT" <<<"$case_out")"
    elif [ "$n_rep" != 6 ]; then result "$name" 0 "$n_rep of 6 checkers reported"
    else result "$name" 1; fi
fi

# --- The C uAPI header in a static C program: all params, EINVAL paths, PING.
name=uapi-c-program
if selected "$name"; then
    run_vm "$name" --gen 2 run c-uapi_check
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^generation 2$"; then result "$name" 0 "generation not 2"
    else result "$name" 1; fi
fi

# --- The layout the KMD was compiled with (debugfs) is the userspace one.
name=kmd-layout-matches
if selected "$name"; then
    run_vm "$name" run 'cat /sys/kernel/debug/vgpu/*/layout'
    expected=$(cat "$repo/hwif/layout.txt")
    # (On the debug kernel the output ends with its checks' lines.)
    layout=$(grep -v '^debug-\(check\|splat\|leak\)' <<<"$case_out")
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif [ "$layout" != "$expected" ]; then result "$name" 0 "kernel layout table differs from hwif/layout.txt"
    else result "$name" 1; fi
fi

# --- KMD ioctls: BOs, mmap, VM bind/unbind and the page tables (walked via debugfs), host mappings
#     (HOST_MAP: the device copies into and out of process memory; unmapped ranges fault; pins go at
#     close), bad arguments, leaks.
for g in 1 2; do
    name=kmd-ioctls-gen$g
    selected "$name" || continue
    run_vm "$name" --gen "$g" run 'vgpu-kmd-test gem vm hostmap leaks; dmesg | grep -v "Kernel command line\|vgpurun=" | grep -cE "WARNING:|BUG:|Oops|Call Trace:|UBSAN|refcount_t:" | sed "s/^/dmesg-problems /"'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    elif ! want "^dmesg-problems 0$"; then result "$name" 0 "warnings in dmesg"
    else result "$name" 1; fi
done

# --- Contexts, SUBMIT (copy, fill), fences, WAIT, input-fence ordering, backpressure, faults (aborted and
#     demand-paged), hangs (SEM_WAIT never satisfied) -> reset ladder -> guilty/innocent -> ban, destroy, close
#     with work in flight, QUERY_STATS (bad arguments, memory and counters following the work, engine_error),
#     DRM fdinfo (client ids, engine time of the file's own work kept past its context, memory in both regions),
#     concurrent submitters on two files, a VA rebound after the GPU read it (every page reads the new BO) and
#     a range unbound and closed (the next copy faults), the unbind under an allocation failure at every N
#     (fail-nth: a success leaves no stale translation); then every object count back to zero. (Event FIFO
#     overflows under fence bursts are expected and covered by the fence-value fallback; a sequence going
#     backwards is not.)
for g in 1 2; do
    name=kmd-submit-gen$g
    selected "$name" || continue
    # 3 s per job: long enough that the backpressure checks, which hold a
    # blocked job while they fill the queue, finish before the hang check;
    # 15 s on the debug kernel, whose 2,048 SUBMITs take longer than 3 s.
    jt=3000; [ $debug_kernel -eq 1 ] && jt=15000
    run_vm "$name" --gen "$g" --kmd-args "job_timeout_ms=$jt" run 'vgpu-kmd-test submit stats fdinfo export concurrent remap remap-compute unmapped unbind-nomem leaks; grep -E "^(contexts|bos|mappings|pt_pool_used) " /sys/kernel/debug/vgpu/*/objects; dmesg | grep -v "Kernel command line\|vgpurun=\|vgpukmd=\|DMA-API: preallocated\|DMA-API: debugging enabled" | grep -E "WARNING:|BUG:|Oops|Call Trace:|UBSAN|refcount_t:|event sequence went" | sed "s/^/dmesg-problem: /"; echo dmesg-checked'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    elif ! want "^ok unbind-nomem: after every successful unbind the range faults, nothing read$"; then result "$name" 0 "no unbind-nomem verdict"
    elif ! want "^ok fdinfo: 48 MiB of fills count on drm-engine-copy, none on compute$"; then result "$name" 0 "no fdinfo engine time"
    elif want "^(contexts|bos|mappings|pt_pool_used) [1-9]"; then result "$name" 0 "objects left after close"
    elif ! want "^dmesg-checked$" || want "^dmesg-problem:"; then result "$name" 0 "warnings in dmesg"
    else result "$name" 1; fi
done

# --- A hang in flight (256 GiB of FILLs): the engine reset alone recovers; hang dump captured. An innocent
#     job cut off by another context's reset written again and completed (a copy, a dispatch, a user-mode
#     queue's work); a hang on the compute engine resets that engine and releases a job waiting on it; user-mode
#     queues on a reset engine resumed, a hung one errored; the watchdog; a busy ring is not hung.
name=kmd-hang-inflight
if selected "$name"; then
    run_vm "$name" --gen 2 --kmd-args "job_timeout_ms=1000 pt_pool_kib=16384" run 'vgpu-kmd-test inflight inflight-innocent inflight-compute inflight-uq watchdog progress reset-compute reset-uq; grep -c "^hang ctx" /sys/kernel/debug/vgpu/*/hang_dump | sed "s/^/hang-dumps /"'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    elif ! want "^hang-dumps 1$"; then result "$name" 0 "no hang dump"
    else result "$name" 1; fi
fi

# --- User-mode queues: UQ_CREATE's checks, work published through the doorbell block with no ioctl, the
#     device's sleep and UQ_KICK, WAIT, a fault and an unbound doorbell block (DOORBELL_FAULT); a hung queue
#     reset and suspended, an innocent one restarted by a device reset; nothing left behind.
name=kmd-uq
if selected "$name"; then
    run_vm "$name" --gen 2 --kmd-args "job_timeout_ms=1000" run 'vgpu-kmd-test uq uq-hang; grep -E "^(contexts|bos|mappings|pt_pool_used) " /sys/kernel/debug/vgpu/*/objects; dmesg | grep -v "Kernel command line\|vgpurun=\|vgpukmd=\|DMA-API: preallocated\|DMA-API: debugging enabled" | grep -E "WARNING:|BUG:|Oops|Call Trace:|UBSAN|refcount_t:" | sed "s/^/dmesg-problem: /"; echo dmesg-checked'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    elif want "^(contexts|bos|mappings|pt_pool_used) [1-9]"; then result "$name" 0 "objects left after close"
    elif ! want "^dmesg-checked$" || want "^dmesg-problem:"; then result "$name" 0 "warnings in dmesg"
    else result "$name" 1; fi
fi

# --- Fence interrupts that go wrong (injected by the device): a dropped interrupt is reported while the ring
#     lives on and never blocks a waiter; duplicate and early events are not believed twice; a doorbell the
#     device refuses is rung again; a fence never written is reported when a later one's event jumps over it.
name=kmd-fence-events
if selected "$name"; then
    run_vm "$name" --gen 1 --device-arg --inject --device-arg "fence-event-drop:after=1,count=1" \
        --device-arg --inject --device-arg "event-duplicate:after=1,count=1" \
        --device-arg --inject --device-arg "event-spurious:after=3,count=1" \
        --device-arg --inject --device-arg "control-busy:packet=DOORBELL,after=4,count=1" \
        --device-arg --inject --device-arg "fence-never:after=5,count=1" run 'vgpu-kmd-test events'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    else result "$name" 1; fi
fi

# --- The ladder's second rung: the engine reset of a hang refused (injected), the device reset recovers,
#     counted and logged; the guilty context and another run again.
name=kmd-reset-device
if selected "$name"; then
    run_vm "$name" --gen 2 --kmd-args "job_timeout_ms=1000" \
        --device-arg --inject --device-arg "reset-fail:attempts=1" run 'vgpu-kmd-test reset-device'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    else result "$name" 1; fi
fi

# --- An uncorrectable error in a VRAM page: the job reading it fails, its object is quarantined and keeps the
#     page; after a rebind the page (from the device's table) is out of the VRAM allocator, all the rest usable.
name=vram-ecc
if selected "$name"; then
    run_vm "$name" --gen 2 --device-arg --vram=64M --device-arg --visible-vram=16M \
        --device-arg --inject --device-arg "ecc:engine=copy,packet=COPY,after=2" run 'vgpu-kmd-test vram-ecc'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    else result "$name" 1; fi
fi

# --- PCI function-level reset through the PCI core (the GPU behind a PCIe root port): the job in flight runs
#     again (innocent), new work runs, one reset of kind "function"; the driver says how long it took. Under the
#     device's sanitizer, which forgets the driver's memory declarations at the reset: none may be missing after
#     it (the waiting job is the case's own SAN-WAIT-UNSATISFIABLE: the CPU writes its value).
name=kmd-flr
if selected "$name"; then
    run_vm "$name" --gen 2 "${case_san[@]}" run 'vgpu-kmd-test flr; dmesg | grep -c "function reset: device back in" | sed "s/^/back /"'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    elif ! want "^back 2$"; then result "$name" 0 "the driver did not log two function resets"
    else san_allowed_saved=$san_allowed; san_allowed="kmd-flr:SAN-WAIT-UNSATISFIABLE $san_allowed"
         sanitize_saved=$sanitize; sanitize=1; result "$name" 1; sanitize=$sanitize_saved; san_allowed=$san_allowed_saved; fi
fi

# --- The bottom of the reset ladder: a hang whose engine reset and device reset both fail (injected) wedges
#     the device: EIO everywhere, a WEDGED=rebind uevent on the DRM nodes; unbind + bind brings it back.
name=kmd-wedged
if selected "$name"; then
    run_vm "$name" --gen 2 --kmd-args "job_timeout_ms=1000" \
        --device-arg --inject --device-arg "hang:engine=copy,packet=COPY,count=1" \
        --device-arg --inject --device-arg "reset-fail:attempts=2" \
        run 'printf "#!/bin/sh\nenv > /tmp/uevent.\$\$\n" > /tmp/ue; chmod +x /tmp/ue; echo /tmp/ue > /proc/sys/kernel/hotplug; vgpu-kmd-test wedged; d=$(basename $(readlink /sys/class/drm/renderD128/device)); echo $d > /sys/bus/pci/drivers/vgpu/unbind; echo $d > /sys/bus/pci/drivers/vgpu/bind; vgpu-samples copy && echo rebind-ok'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    elif ! want "^rebind-ok$"; then result "$name" 0 "not serving after rebind"
    else result "$name" 1; fi
fi

# --- Device loss: the device process dies under a job (an injected crash at the first FILL). The driver
#     declares the device lost within a bounded time (consecutive command timeouts; the heartbeat keeps
#     asking when nothing else does), fails the job, fails every later call at once, says so in CTX_QUERY,
#     QUERY_STATS, dmesg and a WEDGED uevent; the library reports "device lost". scripts/vm then exits
#     128+70: the device process died (status 70, the injector's crash).
name=kmd-device-lost
if selected "$name"; then
    run_vm "$name" --gen 2 --kmd-args "cmd_timeout_ms=500 job_timeout_ms=2000" \
        --device-arg --inject --device-arg "crash:packet=FILL" \
        run 'printf "#!/bin/sh\nenv > /tmp/uevent.\$\$\n" > /tmp/ue; chmod +x /tmp/ue; echo /tmp/ue > /proc/sys/kernel/hotplug; vgpu-kmd-test lost; dmesg | grep -v "Kernel command line\|vgpurun=" | grep -cE "WARNING:|BUG:|Oops|Call Trace:|UBSAN|refcount_t:" | sed "s/^/dmesg-problems /"'
    if [ $case_rc -ne 198 ]; then result "$name" 0 "exit status $case_rc (expected 198: the device process died with 70)"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    elif ! want "^dmesg-problems 0$"; then result "$name" 0 "warnings in dmesg"
    else result "$name" 1; fi
fi

# --- Device memory discovery: the KMD reads the device's VRAM layout (MEMORY_LAYOUT: the CPU-visible part, the
#     usable part, the firmware's carve-out) and finds the aperture (ivshmem-plain function 1 on the GPU's slot,
#     BAR 2 the size of the visible part); vgpu-smi shows it. A device without VRAM (--vram 0) is an integrated
#     GPU: no layout, no aperture function on the slot. The CPU writes 8 MiB through the aperture and reads them back.
name=vram-discovery
if selected "$name"; then
    run_vm "$name" --gen 2 --device-arg --vram=256M --device-arg --visible-vram=64M run 'cat /sys/kernel/debug/vgpu/*/vram; vgpu-smi | grep "^  vram"; vgpu-smi --json --interval 0 | grep -o "\"vram_bytes\":[0-9]*,\"vram_visible_bytes\":[0-9]*"; vgpu-umd-bench --aperture --mib 8; echo "aperture-rc $?"'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif ! want "^vram: size 0x10000000 visible 0x4000000 usable 0xfe00000 reset_policy GARBAGE$"; then result "$name" 0 "no VRAM layout in debugfs"
    elif ! want "^range 0: 0x0\.\.0x4000000 usable cpu-visible$" || ! want "^range 2: 0xfe00000\.\.0x10000000 reserved$"; then result "$name" 0 "wrong ranges"
    elif ! want "^aperture: function 00\.1 bar 2 at 0x[0-9a-f]+ size 0x4000000$"; then result "$name" 0 "aperture not found"
    elif ! want "^  vram +256 MiB, 64 MiB CPU-visible$"; then result "$name" 0 "vgpu-smi does not show VRAM"
    elif ! want '"vram_bytes":268435456,"vram_visible_bytes":67108864'; then result "$name" 0 "vgpu-smi --json does not show VRAM"
    elif ! want "^bench: 8 MiB through the VRAM aperture: CPU write" || ! want "^aperture-rc 0$"; then result "$name" 0 "CPU access through the aperture failed"
    else
        run_vm "$name-none" --gen 1 --device-arg --vram=0 run 'cat /sys/kernel/debug/vgpu/*/vram; vgpu-smi | grep "^  vram"; ls /sys/bus/pci/devices/ | grep -c "^0000:01:00\.1$" | sed "s/^/aperture-functions /"'
        if [ $case_rc -ne 0 ]; then result "$name" 0 "--vram 0: exit status $case_rc"
        elif ! want "^vram: none$" || ! want "^  vram +none \(integrated\)$"; then result "$name" 0 "--vram 0: VRAM reported"
        elif ! want "^aperture-functions 0$"; then result "$name" 0 "--vram 0: an aperture function on the slot"
        else result "$name" 1; fi
    fi
fi

# --- VRAM across a device reset, seen by the CPU through the aperture: 4 MiB written, a device reset (debugfs
#     reset_device), read back. --vram-on-reset garbage (the default): the bytes are gone, the written pages
#     hold garbage (not zeroes) and the KMD logs the loss; zero: all zeroes; keep: all kept, nothing logged.
name=vram-reset
if selected "$name"; then
    ok=1 why=""
    for policy in garbage zero keep; do
        run_vm "$name-$policy" --gen 2 --device-arg "--vram-on-reset=$policy" run 'vgpu-umd-bench --aperture-fill 7 --mib 4 && for f in /sys/kernel/debug/vgpu/*/reset_device; do echo 1 > $f; done && vgpu-umd-bench --aperture-verify 7 --mib 4; dmesg | grep -c "device reset: VRAM contents lost" | sed "s/^/lost-logged /"'
        case "$policy" in
            garbage) want "^aperture: lost, [0-9]+ of 4194304 bytes differ, [0-9]+ zero$" && ! want "differ, 4194304 zero$" && want "^lost-logged 1$" ;;
            zero) want "^aperture: lost, [0-9]+ of 4194304 bytes differ, 4194304 zero$" && want "^lost-logged 1$" ;;
            keep) want "^aperture: kept$" && want "^lost-logged 0$" ;;
        esac || { ok=0; why="--vram-on-reset $policy: $(grep -m1 "^aperture" <<<"$case_out" || echo "no verdict (exit $case_rc)")"; break; }
    done
    cp "$logdir/$name-$policy.out" "$logdir/$name.out"; cp "$logdir/$name-$policy.stderr" "$logdir/$name.stderr"
    result "$name" "$ok" "$why"
fi

# --- VRAM placements (GEM_CREATE): the ioctl-level checks of vgpu-kmd-test vram (errors of every placement the
#     device cannot satisfy, a visible VRAM BO mapped twice through the aperture, an invisible one refused, PRIME
#     export refused, visible VRAM filled with pinned CPU-access BOs to ENOSPC and the fallback to system memory,
#     twice VRAM's size in VRAM-only BOs (older ones evicted), debugfs vram_mm's accounting; kmd-test vram-victims:
#     a CPU-access BO evicts only BOs with visible bytes, the least recently placed first; victims-nomem: the same
#     under an allocation failure at every N (fail-nth), a success took the right victims; move-nomem: with the
#     objects bound, each still reads its words through the GPU after every run), on a device with VRAM
#     and on one without; with file_gem_limit_mib=64, evicted BOs count against it (kmd-test vram-charge: ENOSPC
#     once no more may be evicted); a move whose TLB invalidation the device refuses (injected) is abandoned, the
#     object intact where it was (kmd-test vram-move-refused).
name=vram-placement
if selected "$name"; then
    run_vm "$name" --gen 1 --device-arg --vram=128M --device-arg --visible-vram=32M run 'vgpu-kmd-test vram vram-victims; head -1 /sys/kernel/debug/vgpu/*/vram_mm; vgpu-kmd-test victims-nomem move-nomem; dmesg | grep -v "Kernel command line\|vgpurun=" | grep -cE "WARNING:|BUG:|Oops|Call Trace:|UBSAN|refcount_t:" | sed "s/^/dmesg-problems /"'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^ok victims-nomem: every eviction took the two least recently placed objects$" || ! want "^ok move-nomem: every object reads its words through the GPU after each run$"; then result "$name" 0 "no victims-nomem or move-nomem verdict"
    elif ! want "^ok vram: visible VRAM full, CPU-access objects not evicted" || ! want "^ok vram: older objects evicted$" || ! want "^ok vram: one aperture mapping sees the other's writes" || ! want "^ok vram: the CPU sees the GPU's new words$"; then result "$name" 0 "VRAM checks missing"
    elif ! want "^vram_mm: usable 0x7e00000 free 0x7e00000 used 0x0 visible_used 0x0 allocs [1-9][0-9]* failed [1-9][0-9]* evictions [1-9][0-9]* .* moves_failed 0 losses 0 retired 0$"; then result "$name" 0 "vram_mm not back to empty, no refusal or eviction counted, or a failed move"
    elif ! want "^dmesg-problems 0$"; then result "$name" 0 "warnings in dmesg"
    else
        run_vm "$name-charge" --gen 2 --device-arg --vram=128M --device-arg --visible-vram=32M --kmd-args "file_gem_limit_mib=64" run 'vgpu-kmd-test vram-charge'
        if [ $case_rc -ne 0 ] || want "^FAIL" || ! want "^ok vram-charge: then refused$"; then
            result "$name" 0 "evicted BOs not charged to the GEM limits: $(grep -m1 "^FAIL" <<<"$case_out")"
        else
            run_vm "$name-none" --gen 2 --device-arg --vram=0 run 'vgpu-kmd-test vram'
            if [ $case_rc -ne 0 ] || want "^FAIL"; then result "$name" 0 "--vram 0: a check failed"
            elif ! want "^ok vram: VRAM only, device without VRAM"; then result "$name" 0 "--vram 0: ENXIO not checked"
            else
                run_vm "$name-refused" --gen 2 --mem 1G --device-arg --vram=64M --device-arg --visible-vram=16M \
                    --device-arg --inject --device-arg "control-busy:packet=TLB_INVALIDATE,count=1" run 'vgpu-kmd-test vram-move-refused'
                if [ $case_rc -ne 0 ] || want "^FAIL" || ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then
                    result "$name" 0 "a move whose invalidation was refused: $(grep -m1 "^FAIL" <<<"$case_out")"
                else result "$name" 1; fi
            fi
        fi
    fi
fi

# --- VRAM lost in a device reset: a file's object in VRAM, filled by its GPU job, then a device reset (debugfs
#     reset_device). With --vram-on-reset garbage, that file's context reports VGPU_CTX_RESET_VRAM_LOST and takes no
#     more jobs (EIO), the object cannot be bound again (EIO), another file's context works on; with keep, nothing
#     is lost. A CPU mapping of a VRAM object the CPU cannot see moves it to system memory (kmd-test vram checks the
#     GPU's bytes through it).
name=vram-lost
if selected "$name"; then
    ok=1 why=""
    for policy in garbage keep; do
        run_vm "$name-$policy" --gen 2 --device-arg "--vram-on-reset=$policy" run 'vgpu-kmd-test vram-lost; dmesg | grep -c "device reset: VRAM contents lost" | sed "s/^/lost-logged /"; dmesg | grep -v "Kernel command line\|vgpurun=" | grep -cE "WARNING:|BUG:|Oops|Call Trace:|UBSAN|refcount_t:" | sed "s/^/dmesg-problems /"'
        if [ $case_rc -ne 0 ]; then ok=0 why="$policy: exit status $case_rc"
        elif want "^FAIL"; then ok=0 why="$policy: $(grep -m1 "^FAIL" <<<"$case_out")"
        elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then ok=0 why="$policy: no summary"
        elif [ $policy = garbage ] && { ! want "^ok vram-lost: its context reports VRAM lost$" || ! want "^lost-logged 1$"; }; then ok=0 why="garbage: VRAM loss not reported"
        elif [ $policy = keep ] && { ! want "^ok vram-lost: kept, the context works on$" || ! want "^lost-logged 0$"; }; then ok=0 why="keep: a loss reported"
        elif ! want "^dmesg-problems 0$"; then ok=0 why="$policy: warnings in dmesg"
        fi
        [ $ok -eq 1 ] || break
    done
    result "$name" $ok "$why"
fi

# --- VRAM oversubscribed: three processes at once each allocate 200 % of a 64 MiB VRAM in 4 MiB buffers, two
#     VRAM-only (the KMD evicts older buffers, any process's, to system memory on the copy engine, holding their
#     owner's jobs back while they move), one VRAM-preferred (what VRAM does not hold goes to system memory); each
#     fills and copies every buffer on the copy engine and checks every byte, then moves 1 MiB through the aperture
#     both ways (CPU writes read by the GPU, GPU writes read by the CPU); meanwhile vgpu-smi --json shows a process's
#     VRAM. Both generations.
name=vram-oversubscribe
if selected "$name"; then
    ok=1 why=""
    for g in 1 2; do
        run_vm "$name-gen$g" --gen "$g" --mem 1G --device-arg --vram=64M --device-arg --visible-vram=16M run 'for i in 1 2 3; do s=vram; [ $i = 3 ] && s=vram-preferred; (vgpu-samples $s 200 > /tmp/vram.$i 2>&1; echo "rc $?" >> /tmp/vram.$i) & done; (for k in 1 2 3 4 5 6 7 8 9 10 11 12; do vgpu-smi --json --interval 0 | grep -o "\"vram_bytes\":[1-9][0-9]*" | head -1; sleep 0.3; done > /tmp/smi) & wait; head -1 /tmp/smi | sed "s/^/smi-/"; cat /tmp/vram.1 /tmp/vram.2 /tmp/vram.3; head -1 /sys/kernel/debug/vgpu/*/vram_mm; dmesg | grep -v "Kernel command line\|vgpurun=" | grep -cE "WARNING:|BUG:|Oops|Call Trace:|UBSAN|refcount_t:" | sed "s/^/dmesg-problems /"'
        if [ $case_rc -ne 0 ]; then ok=0 why="gen $g: exit status $case_rc"
        elif want "^FAIL"; then ok=0 why="gen $g: $(grep -m1 "^FAIL" <<<"$case_out")"
        elif [ "$(grep -c "^vram: every byte of 128 MiB verified$" <<<"$case_out")" -ne 3 ]; then ok=0 why="gen $g: not every process verified its bytes"
        elif [ "$(grep -c "^vram: 1024 KiB through the aperture both ways verified$" <<<"$case_out")" -ne 3 ]; then ok=0 why="gen $g: aperture round trip missing"
        elif [ "$(grep -c "^rc 0$" <<<"$case_out")" -ne 3 ]; then ok=0 why="gen $g: a process failed"
        elif ! want "^vram_mm: .* used 0x0 .* failed [1-9][0-9]* evictions [1-9][0-9]* .* moves_failed 0 losses 0 retired 0$"; then ok=0 why="gen $g: no eviction, a failed move, or VRAM not given back: $(grep "^vram_mm" <<<"$case_out")"
        elif ! want "^dmesg-problems 0$"; then ok=0 why="gen $g: warnings in dmesg"
        elif ! want '^smi-"vram_bytes":[1-9]'; then ok=0 why="gen $g: vgpu-smi never showed a process's VRAM"
        fi
        [ $ok -eq 1 ] || break
    done
    result "$name" $ok "$why"
fi

# --- GEM memory limits: a file stops at its limit (ENOSPC), all files at the device's (ENOMEM), refusals
#     counted in QUERY_STATS; freeing makes room. Dumb buffers on the primary node count the same (3 more
#     refusals).
name=kmd-limits
if selected "$name"; then
    run_vm "$name" --gen 2 --kmd-args "gem_limit_mib=64 file_gem_limit_mib=32" run 'vgpu-kmd-test limits; vgpu-smi | grep "^memory"'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    elif ! want "^memory .*limit 64.0 MiB, per file 32.0 MiB, refused 6"; then result "$name" 0 "vgpu-smi does not show the limits"
    else result "$name" 1; fi
fi

# --- ECC page retirement: two COPYs read poisoned pages; each page is retired (its object quarantined,
#     never bound again, no new object gets it), the device records it; at ras_max_pages=2 the device is
#     bad. The unbind keeps both pages out of the kernel's allocator (a reference never dropped), so the
#     objects of a driver loaded again never meet them: it reads the device's table, and four copies run.
name=kmd-ras
if selected "$name"; then
    run_vm "$name" --gen 2 --kmd-args "ras_max_pages=2" \
        --device-arg --inject --device-arg "ecc:engine=copy,packet=COPY,count=2" \
        run 'vgpu-kmd-test ras; for d in /sys/class/devcoredump/devcd*/data; do [ -e "$d" ] && echo 1 > "$d"; done; n=1; until rmmod vgpu 2>/dev/null; do [ $n -ge 5 ] && break; n=$((n+1)); sleep 1; done; echo "rmmod-tries $n"; insmod /lib/modules/vgpu.ko ras_max_pages=4 && dmesg | grep -c "2 pages were retired earlier" | sed "s/^/reloaded-retired /"; head -1 /sys/kernel/debug/vgpu/*/ras; dmesg | grep -o "[0-9]* retired pages kept out of use after unbind ([0-9]* could not be)"; n=0; while [ $n -lt 4 ] && vgpu-samples copy; do n=$((n+1)); done; [ $n -eq 4 ] && echo serves-after-reload; dmesg | grep -v "Kernel command line\|vgpurun=" | grep -cE "WARNING:|BUG:|Oops|Call Trace:|UBSAN|refcount_t:" | sed "s/^/dmesg-problems /"'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    elif ! want "^reloaded-retired 1$"; then result "$name" 0 "the reloaded driver did not read the device's table"
    elif ! want "^retired_pages 2 "; then result "$name" 0 "retired pages not kept across the reload"
    elif ! want "^2 retired pages kept out of use after unbind \(0 could not be\)$"; then result "$name" 0 "the retired pages were not kept out of the allocator at unbind"
    elif ! want "^serves-after-reload$"; then result "$name" 0 "not serving after the reload"
    elif ! want "^dmesg-problems 0$"; then result "$name" 0 "warnings in dmesg"
    else result "$name" 1; fi
fi

# --- Devcoredumps: an injected hang, an aborted page fault and a malformed packet each publish one
#     (/sys/class/devcoredump/devcdN/data), printed by the guest and copied out here; vgpu-dump decodes each and
#     names the failing packet, vgpu-replay runs it again on the host-side model to the same error record (or a
#     hang on the same packet). Then coredump=0: the same hang publishes nothing. The hang-to-recovered times with
#     and without the capture, the dump sizes and the capture times are printed (info lines, debugfs coredumps).
name=kmd-coredump
if selected "$name"; then
    cargo build --quiet --release --manifest-path "$repo/Cargo.toml" -p vgpu-replay -p vgpu-umd --bin vgpu-replay --bin vgpu-dump || exit 1
    run_vm "$name" --gen 2 --kmd-args "job_timeout_ms=1000" \
        --device-arg --inject --device-arg "hang:engine=copy,packet=COPY,count=2" \
        run 'vgpu-kmd-test coredump; rmmod vgpu && insmod /lib/modules/vgpu.ko job_timeout_ms=1000 coredump=0 && vgpu-kmd-test coredump-off; dmesg | grep -v "Kernel command line\|vgpurun=" | grep -cE "WARNING:|BUG:|Oops|Call Trace:|UBSAN|refcount_t:" | sed "s/^/dmesg-problems /"'
    cd_dir=$logdir/$name.dumps; mkdir -p "$cd_dir"
    why=""
    for k in hang:COPY fault:FILL bad-packet:?; do
        kind=${k%%:*} pkt=${k#*:}
        sed -n "/^=== devcoredump $kind begin ===\$/,/^=== devcoredump $kind end ===\$/p" <<<"$case_out" | sed '1d;$d' > "$cd_dir/$kind.txt"
        "$repo/target/release/vgpu-dump" "$cd_dir/$kind.txt" > "$cd_dir/$kind.decoded" 2>&1 || { why="vgpu-dump failed on the $kind dump"; break; }
        "$repo/target/release/vgpu-replay" "$cd_dir/$kind.txt" > "$cd_dir/$kind.replay" 2>&1; rrc=$?
        printf '     %s: %s bytes; %s; %s\n' "$kind" "$(wc -c < "$cd_dir/$kind.txt")" \
            "$(grep -m1 '^failing packet:' "$cd_dir/$kind.decoded")" "$(grep -m1 '^result:' "$cd_dir/$kind.replay")"
        if ! grep -q "^failing packet: $pkt at 0x" "$cd_dir/$kind.decoded"; then why="vgpu-dump does not name $pkt as the $kind dump's failing packet"; break; fi
        if [ $rrc -ne 0 ] || ! grep -q '^result: reproduced' "$cd_dir/$kind.replay"; then why="vgpu-replay did not reproduce the $kind (status $rrc)"; break; fi
    done
    grep -E '^info coredump|^dump [0-9]+ ' <<<"$case_out" | sed 's/^/     /'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif [ "$(grep -c '^kmd-test: [0-9]* passed, 0 failed$' <<<"$case_out")" != 2 ]; then result "$name" 0 "no summaries"
    elif [ -n "$why" ]; then result "$name" 0 "$why"
    elif ! want "^dmesg-problems 0$"; then result "$name" 0 "warnings in dmesg"
    else result "$name" 1; fi
fi

# --- Unbind with a waiter asleep on a job that never ends; rebind; then rmmod with a file open is refused.
name=kmd-unbind-under-load
if selected "$name"; then
    run_vm "$name" --gen 1 run 'vgpu-kmd-test unbind; sleep 600 < $(ls /dev/dri/renderD* | head -1) & sleep 1; rmmod vgpu 2>/dev/null && echo rmmod-allowed; kill %1; wait; rmmod vgpu && echo rmmod-after-close; dmesg | grep -v "Kernel command line\|vgpurun=" | grep -cE "WARNING:|BUG:|Oops|Call Trace:|UBSAN|refcount_t:" | sed "s/^/dmesg-problems /"'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    elif want "^rmmod-allowed$"; then result "$name" 0 "rmmod succeeded with a file open"
    elif ! want "^rmmod-after-close$"; then result "$name" 0 "rmmod failed after close"
    elif ! want "^dmesg-problems 0$"; then result "$name" 0 "warnings in dmesg"
    else result "$name" 1; fi
fi

# --- The ioctl fuzzer (vgpu-ioctl-fuzz, seeded: the seed is printed for a replay): every ioctl with valid,
#     stale and random handles, sizes and VAs at the edges, bad pointers against guard pages, real submissions of
#     random packets, waits, concurrent close, fork. Afterwards every object count is back where it was, the driver
#     still serves (a UMD copy, the GEM checks) and dmesg is clean.
name=kmd-ioctl-fuzz
if selected "$name"; then
    seed=${VGPU_FUZZ_SEED:-$(date +%s)}
    secs=${VGPU_FUZZ_SECONDS:-20}
    run_vm "$name" --gen 2 --kmd-args "job_timeout_ms=1000 gem_limit_mib=128" run 'for r in $(vgpu-ioctl-fuzz --list-replays | cut -d" " -f1); do vgpu-ioctl-fuzz --replay $r | grep "^replay "; done; cat /sys/kernel/debug/vgpu/*/objects > /tmp/before; vgpu-ioctl-fuzz --seconds '"$secs"' --seed '"$seed"' > /tmp/fuzz.out 2>&1; echo "fuzz-rc $?"; grep -E "^(ioctl-fuzz: ([0-9]+ calls|seed|FAIL|ok|the driver|replay)|UNEXPECTED|FAIL)" /tmp/fuzz.out | head -20; grep -q "^ioctl-fuzz: ok" /tmp/fuzz.out || tail -40 /tmp/fuzz.out; sleep 1; cat /sys/kernel/debug/vgpu/*/objects > /tmp/after; if cmp -s /tmp/before /tmp/after; then echo objects-back; else echo objects-differ; diff /tmp/before /tmp/after; fi; vgpu-samples copy; vgpu-kmd-test gem; dmesg | grep -v "Kernel command line\|vgpurun=\|vgpukmd=\|DMA-API: preallocated\|DMA-API: debugging enabled" | grep -cE "WARNING:|BUG:|Oops|Call Trace:|UBSAN|refcount_t:" | sed "s/^/dmesg-problems /"'
    calls=$(sed -n 's/^ioctl-fuzz: \([0-9]*\) calls in.*/\1/p' <<<"$case_out")
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc (seed $seed)"
    elif ! want "^replay [a-z-]+: ok$" || want "^replay [a-z-]+: FAIL$"; then result "$name" 0 "a regression replay failed"
    elif ! want "^fuzz-rc 0$"; then result "$name" 0 "the fuzzer failed (seed $seed: VGPU_FUZZ_SEED=$seed tests/e2e.sh $name)"
    elif [ -z "$calls" ] || [ "$calls" -lt 1000 ]; then result "$name" 0 "too few calls (${calls:-none})"
    elif ! want "^objects-back$"; then result "$name" 0 "object counts not back after the fuzzer (seed $seed)"
    elif ! want "^copy: ok"; then result "$name" 0 "a normal workload fails after fuzzing (seed $seed)"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "GEM checks fail after fuzzing (seed $seed)"
    elif ! want "^dmesg-problems 0$"; then result "$name" 0 "warnings in dmesg (seed $seed)"
    else echo "     $name: seed $seed, $calls calls"; result "$name" 1; fi
fi

# --- Debug kernel only: allocation-failure sweeps (vgpu-ioctl-fuzz fail-nth): every N of /proc/thread-self/fail-nth
#     (failslab, fail_page_alloc, fail_usercopy) for each ioctl, open and close, sysfs probe and remove, and module
#     load (finit_module: init and probe), until the call runs without an injected failure; no splat, objects back
#     and no kmemleak report after each. VGPU_FAILNTH_ARGS narrows it (e.g. "--ops submit,wait").
name=debug-fail-nth
if [ $debug_kernel -eq 1 ] && selected "$name"; then
    fargs=${VGPU_FAILNTH_ARGS:---probe --module /lib/modules/vgpu.ko}
    case_splat_re=$splat_re_failnth
    # The whole sweep took 1,342 s (probe, module load, every ioctl): far past the debug cases' 900 s.
    run_vm "$name" --gen 2 --timeout "${VGPU_FAILNTH_TIMEOUT:-2700}" --kmd-args "job_timeout_ms=2000" run 'vgpu-ioctl-fuzz fail-nth '"$fargs"' > /tmp/fnth.out 2>&1; echo "fnth-rc $?"; grep -E "^(fail-nth|FAIL)" /tmp/fnth.out | head -80; vgpu-samples copy'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "$(grep -m1 "^FAIL" <<<"$case_out")"
    elif ! want "^fnth-rc 0$"; then result "$name" 0 "the sweep failed"
    elif ! want "^fail-nth: [0-9]+ cases in [0-9]+ s, 0 splats, 0 object leaks, 0 kmemleak reports, 0 other failures$"; then result "$name" 0 "no clean summary"
    elif ! want "^copy: ok"; then result "$name" 0 "a normal workload fails after the sweeps"
    else grep -E "^fail-nth" <<<"$case_out" | sed 's/^/     /'; result "$name" 1; fi
fi

# --- rmmod/insmod 10 times: the device comes back each time, dmesg stays clean.
name=reload-10x
if selected "$name"; then
    run_vm "$name" run 'for i in 1 2 3 4 5 6 7 8 9 10; do rmmod vgpu || exit 10; insmod /lib/modules/vgpu.ko || exit 11; vgpu-smi >/dev/null || exit 12; done; echo reloads-done; dmesg | grep -v "Kernel command line" | grep -cE "WARNING:|BUG:|Oops|Call Trace:|UBSAN|refcount_t:" | sed "s/^/dmesg-problems /"; dmesg | grep -cE "vgpu [0-9a-f:.]+: vgpu gen [12], protocol" | sed "s/^/probes /"'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif ! want "^reloads-done$"; then result "$name" 0 "reload loop did not finish"
    elif ! want "^dmesg-problems 0$"; then result "$name" 0 "warnings in dmesg"
    elif ! want "^probes 11$"; then result "$name" 0 "expected 11 probes"
    else result "$name" 1; fi
fi

# --- A DRM driver like the upstream ones: sync objects (binary, timeline: waits, out-of-order points,
#     wait-for-submit, transfers, sync_files, jobs signalling and waiting), the job queue (another file's
#     fence, 1,000 jobs on a small ring with no EAGAIN, a dependency that never signals cancelled at
#     teardown), VM_BIND_OPS on GPUVM (partial unbind, remap, split maps, a 2 MiB page cut, an unmap ordered
#     after a job; what the device reads checked at every page), PRIME between files and processes with
#     implicit sync and a foreign dma-buf refused; debugfs objects back to zero (given 10 s: on the debug
#     kernel the last 8 BO references were once still held when the program had exited), dmesg clean.
for g in 1 2; do
    name=kmd-drm-sync-gen$g
    selected "$name" || continue
    run_vm "$name" --gen "$g" --kmd-args "job_timeout_ms=20000" run 'vgpu-kmd-test syncobj queue vmbind prime; n=0; while grep -qE "^(contexts|bos|mappings) [1-9]" /sys/kernel/debug/vgpu/*/objects && [ $n -lt 20 ]; do n=$((n+1)); sleep 0.5; done; grep -E "^(contexts|bos|mappings) " /sys/kernel/debug/vgpu/*/objects; grep -c "^ctx " /sys/kernel/debug/vgpu/*/queues | sed "s/^/queues-left /"; dmesg | grep -v "Kernel command line\|vgpurun=\|vgpukmd=\|DMA-API: preallocated\|DMA-API: debugging enabled" | grep -E "WARNING:|BUG:|Oops|Call Trace:|UBSAN|refcount_t:|GPUVA tree|list should be empty" | sed "s/^/dmesg-problem: /"; echo dmesg-checked'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    elif want "^(contexts|bos|mappings) [1-9]"; then result "$name" 0 "objects left after close"
    elif ! want "^queues-left 0$"; then result "$name" 0 "queues left after close"
    elif ! want "^dmesg-checked$" || want "^dmesg-problem:"; then result "$name" 0 "warnings in dmesg"
    else result "$name" 1; fi
done

# --- A job's out-syncobj after an injected hang: the watchdog's engine reset fails the job, and the
#     syncobj's fence (and a timeline point) carries -EIO for its waiters.
name=kmd-syncobj-hang
if selected "$name"; then
    run_vm "$name" --gen 2 --kmd-args "job_timeout_ms=1000" \
        --device-arg --inject --device-arg "hang:engine=copy,packet=COPY,count=1" run 'vgpu-kmd-test syncobj-hang'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    else result "$name" 1; fi
fi

# --- The C API's cross-process sharing: a producer and a consumer process share a buffer and a timeline
#     (fds taken with pidfd_getfd); every round the consumer reads the producer's data by CPU and by GPU.
name=umd-share
if selected "$name"; then
    run_vm "$name" --gen 2 run 'c-share 4; echo "share-rc $?"'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif ! want "^share-rc 0$"; then result "$name" 0 "c-share failed"
    elif [ "$(grep -c "^share: consumer round [0-9]: cpu ok gpu ok$" <<<"$case_out")" != 4 ]; then result "$name" 0 "a round did not check out"
    elif ! want "^share: consumer: the producer's event signalled$"; then result "$name" 0 "the exported event"
    elif ! want "^share: producer: timeline at 8$"; then result "$name" 0 "timeline not at 8"
    else result "$name" 1; fi
fi

# --- The UMD API end to end: memory and pools (no reuse before the fence), copies, memsets, batching, events and
#     cross-stream semaphore waits, invalid arguments and use after destroy, threads and streams, sticky loss on a
#     page fault and on a hang, launches. Generation 2 runs it again with the streams on user-mode queues
#     (VGPU_SUBMIT=user: batches published through doorbell blocks, no SUBMIT).
for g in 1 2; do
    name=umd-api-gen$g
    selected "$name" || continue
    cmd='vgpu-umd-test'; runs=1
    [ "$g" = 2 ] && { cmd='vgpu-umd-test; echo "== user-mode queues"; VGPU_SUBMIT=user vgpu-umd-test'; runs=2; }
    run_vm "$name" --gen "$g" --kmd-args "job_timeout_ms=1000" run "$cmd"
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif [ "$(grep -cE "^umd-test: [0-9]+ passed, 0 failed$" <<<"$case_out")" != "$runs" ]; then result "$name" 0 "no summary"
    else result "$name" 1; fi
done

# --- The UMD's C API (vgpu.h, libvgpu_umd.a) in static C programs: every call, stale handles, cross-stream waits.
name=umd-capi
if selected "$name"; then
    run_vm "$name" --gen 2 run c-capi_test
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^capi-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    else result "$name" 1; fi
fi

# --- Compute through the UMD: the six sample kernels in Rust and in C, vgpu-run, each verified.
for g in 1 2; do
    name=umd-compute-gen$g
    selected "$name" || continue
    run_vm "$name" --gen "$g" run 'for s in vecadd saxpy reduce matmul histogram scan; do vgpu-samples $s || echo "FAIL $s"; done; c-saxpy 5000 || echo "FAIL c-saxpy"; c-compute || echo "FAIL c-compute"; vgpu-run sample:saxpy saxpy --grid 1 u32:4 f32:2 buf:16:f32=1 buf:16:f32=10 --show 4'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a sample failed"
    elif [ "$(grep -cE '^(vecadd|saxpy|reduce|matmul|histogram|scan): ok' <<<"$case_out")" != 12 ]; then result "$name" 0 "not every sample verified"
    elif ! want "^saxpy: ok, 5000 elements verified$"; then result "$name" 0 "C saxpy not verified"
    elif ! want "^arg 3 \(16 bytes, f32\): 12 12 12 12$"; then result "$name" 0 "vgpu-run result wrong"
    else result "$name" 1; fi
done

# --- Record mode: the device records a UMD session (vgpu-device --record: commands, doorbells, the guest memory the
#     engines read, events); vgpu-replay --record runs it again on the host without the VM and must reach the same
#     replies and the same event records. The record's size and the replay's summary are printed.
name=record-replay
if selected "$name"; then
    cargo build --quiet --release --manifest-path "$repo/Cargo.toml" -p vgpu-replay --bin vgpu-replay || exit 1
    rec=$logdir/$name.vgrec
    run_vm "$name" --gen 2 --device-arg --record --device-arg "$rec" \
        run 't0=$(cut -d" " -f1 /proc/uptime); for s in copy vecadd saxpy; do vgpu-samples $s || echo "FAIL $s"; done; echo "workload-s $t0 $(cut -d" " -f1 /proc/uptime)" | awk "{printf \"workload-ms %d\\n\", (\$3 - \$2) * 1000}"'
    "$repo/target/release/vgpu-replay" --record "$rec" > "$logdir/$name.replay" 2>&1; rrc=$?
    printf '     record: %s bytes; %s; %s; %s\n' "$(wc -c < "$rec" 2>/dev/null || echo 0)" \
        "$(grep -m1 '^workload-ms' <<<"$case_out")" "$(grep -m1 '^replayed' "$logdir/$name.replay")" \
        "$(grep -m1 '^events:' "$logdir/$name.replay")"
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a sample failed"
    elif [ "$(grep -cE '^(copy|vecadd|saxpy): ok' <<<"$case_out")" != 3 ]; then result "$name" 0 "not every sample verified"
    elif [ ! -s "$rec" ]; then result "$name" 0 "no record written"
    elif [ $rrc -ne 0 ] || ! grep -q '^result: reproduced' "$logdir/$name.replay"; then
        result "$name" 0 "the replay did not reproduce the session (status $rrc): $(grep -m1 -E '^(divergence|vgpu-replay)' "$logdir/$name.replay")"
    else result "$name" 1; fi
fi

# --- One timeline (scripts/timeline): the device's packet trace, the KMD's trace (debugfs trace_ctl/trace) and the UMD's
#     spans (VGPU_TRACE) of a known workload — vgpu-samples copy (one copy job) and vecadd (copies and a dispatch) —
#     merged on the guest's clock. Every layer is present; every job written to a ring has its whole chain (UMD submit,
#     KMD submit, ring write, doorbell, the device receiving it, its first packet, its FENCE, the FENCE event, the KMD
#     receiving it, the fence signalled) and it is in causal order on the one clock, whose bounds are consistent; the
#     file passes vgpu-timeline's strict format check, and, when node and npm are at hand, Chrome DevTools' trace engine
#     parses it into the same slices (the package is installed into the cache on first use).
name=timeline
if selected "$name"; then
    cargo build --quiet --release --manifest-path "$repo/Cargo.toml" -p vgpu-timeline || exit 1
    t0=$(date +%s.%N)
    tl=$logdir/$name/timeline.json
    tl_args=()
    [ "$sanitize" = 1 ] && tl_args+=(--vm-arg --device-arg --vm-arg --sanitize)
    for a in ${VGPU_E2E_DEVICE_ARGS:-}; do tl_args+=(--vm-arg --device-arg --vm-arg "$a"); done
    case_out=$("$repo/scripts/timeline" --no-build --out "$tl" --keep "$logdir/$name" "${tl_args[@]}" \
        'vgpu-samples copy; vgpu-samples vecadd' 2>"$logdir/$name.stderr"); case_rc=$?
    # Where result() looks for the device's sanitizer reports.
    ln -sf vm/device.log "$logdir/$name/device.log"
    "$repo/target/release/vgpu-timeline" check "$tl" > "$logdir/$name.check" 2>&1; crc=$?
    case_secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}')
    printf '%s\n' "$case_out" > "$logdir/$name.out"
    jobs_line=$(grep -m1 '^jobs: ' <<<"$case_out")
    read -r written complete ordered < <(sed -E 's/^jobs: ([0-9]+) written to rings, ([0-9]+) with the whole chain.*, ([0-9]+) of them ordered.*/\1 \2 \3/' <<<"${jobs_line:-jobs: 0 written to rings, 0 with the whole chain, 0 of them ordered}")
    slices_of() { sed -nE "s/^process [0-9]+ '$1[^']*': [0-9]+ tracks, ([0-9]+) slices$/\\1/p" "$logdir/$name.check" | head -1; }
    umd_slices=$(slices_of 'UMD vgpu-samples'); kmd_slices=$(slices_of 'vgpu.ko'); dev_slices=$(slices_of 'vgpu device')
    total_slices=$(sed -nE 's/^check: [0-9]+ events, ([0-9]+) slices, .*/\1/p' "$logdir/$name.check")
    # Chrome DevTools' trace engine, an independent parser, when it can be had.
    devtools="not run (no node or npm)"; dtrc=0
    if command -v node >/dev/null && command -v npm >/dev/null; then
        nm=${VGPU_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vgpu}/node-trace-engine
        if [ -d "$nm/node_modules/@paulirish/trace_engine" ] || npm install --silent --no-audit --no-fund --prefix "$nm" @paulirish/trace_engine@0.0.65 >"$logdir/$name.npm" 2>&1; then
            NODE_PATH=$nm/node_modules node "$repo/scripts/lib/devtools-trace-check.mjs" "$tl" > "$logdir/$name.devtools" 2>&1; dtrc=$?
            devtools=$(tail -1 "$logdir/$name.devtools")
        else
            devtools="not run (npm install failed: $(tail -1 "$logdir/$name.npm"))"
        fi
    fi
    dt_entries=$(sed -nE 's/^devtools: .* ([0-9]+) entries$/\1/p' <<<"$devtools")
    grep -E '^(clock|jobs|example):' <<<"$case_out" | sed 's/^/     /'
    printf '     %s\n     %s\n' "$(tail -1 "$logdir/$name.check")" "$devtools"
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif [ "$(grep -cE '^(copy|vecadd): ok' <<<"$case_out")" != 2 ]; then result "$name" 0 "the workload did not verify"
    elif [ $crc -ne 0 ]; then result "$name" 0 "the format check failed: $(grep -m1 '^error' "$logdir/$name.check")"
    elif [ "${umd_slices:-0}" -eq 0 ] || [ "${kmd_slices:-0}" -eq 0 ] || [ "${dev_slices:-0}" -eq 0 ]; then
        result "$name" 0 "a layer is missing (UMD ${umd_slices:-0}, KMD ${kmd_slices:-0}, device ${dev_slices:-0} slices)"
    elif ! grep -q '^clock: .*; consistent, ' <<<"$case_out"; then result "$name" 0 "the clock bounds are inconsistent"
    elif [ "$written" -lt 4 ] || [ "$complete" != "$written" ] || [ "$ordered" != "$written" ]; then
        result "$name" 0 "jobs: $written written, $complete complete, $ordered ordered ($(grep -m1 '^misordered' <<<"$case_out"))"
    elif [ $dtrc -ne 0 ]; then result "$name" 0 "DevTools' trace engine failed: $(tail -2 "$logdir/$name.devtools" | head -1)"
    elif [ -n "$dt_entries" ] && [ "$dt_entries" != "$total_slices" ]; then
        result "$name" 0 "DevTools built $dt_entries entries for $total_slices slices"
    else result "$name" 1; fi
fi

# --- UMD samples: copies verified; a command-buffer dump decoded; the failure modes an application sees;
#     vgpu-smi's state view.
name=umd-failure-modes
if selected "$name"; then
    run_vm "$name" --gen 2 --kmd-args "job_timeout_ms=1000" run 'VGPU_DUMP=/tmp/d vgpu-samples copy 300000 && vgpu-dump /tmp/d; vgpu-samples fault; echo "fault-rc $?"; vgpu-samples hang; echo "hang-rc $?"; vgpu-samples device-lost; echo "lost-rc $?"; c-fault; echo "c-fault-rc $?"; c-hang; echo "c-hang-rc $?"; c-device_lost; echo "c-lost-rc $?"; vgpu-smi --status | grep -c "^  " | sed "s/^/smi-lines /"'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif ! want "^copy: ok, 300000 values verified$"; then result "$name" 0 "copy not verified"
    elif ! want "^  0x[0-9a-f]+: COPY src=0x[0-9a-f]+ dst=0x[0-9a-f]+ size=300000$"; then result "$name" 0 "dump lacks the COPY"
    elif ! want "FENCE va=0x[0-9a-f]+ seqno=[0-9]+ NO_EVENT"; then result "$name" 0 "dump lacks the timeline FENCE"
    elif ! want "^fault: the application sees: .*GPU page fault, write at 0x"; then result "$name" 0 "fault not reported"
    elif ! want "^fault-rc 0$"; then result "$name" 0 "fault sample failed"
    elif ! want "^hang: the application sees: .*GPU hang"; then result "$name" 0 "hang not reported"
    elif ! want "^hang-rc 0$"; then result "$name" 0 "hang sample failed"
    elif ! want "^device-lost: the application sees: .*device lost: removed"; then result "$name" 0 "device loss not reported"
    elif ! want "^device-lost: rebound; a new context works: true$"; then result "$name" 0 "no recovery after rebind"
    elif ! want "^fault: vgpu_context_status: reason 1, kmd context [0-9]+, write at 0x"; then result "$name" 0 "C fault not reported"
    elif ! want "^c-fault-rc 0$"; then result "$name" 0 "C fault sample failed"
    elif ! want "^hang: vgpu_context_status: reason 2, kmd context [0-9]+, hangs [1-9]"; then result "$name" 0 "C hang not reported"
    elif ! want "^c-hang-rc 0$"; then result "$name" 0 "C hang sample failed"
    elif ! want "^device-lost: vgpu_context_status: reason 7"; then result "$name" 0 "C device loss not reported"
    elif ! want "^c-lost-rc 0$"; then result "$name" 0 "C device-lost sample failed"
    elif ! want "^smi-lines [1-9][0-9]+$"; then result "$name" 0 "vgpu-smi --status shows nothing"
    else result "$name" 1; fi
fi

# --- vgpu-smi as a status tool: while a workload keeps the compute engine busy (a kernel that spins until the
#     hang check resets it), the compute engine's utilisation is non-zero and the workload's context is listed
#     with its pid; memory and recovery lines present; --json and --watch work.
name=smi-status
if selected "$name"; then
    run_vm "$name" --gen 2 --kmd-args "job_timeout_ms=4000" run 'vgpu-samples hang > /tmp/hang.out 2>&1 & echo "workload-pid $!"; sleep 1; vgpu-smi --interval 1000; echo "smi-rc $?"; vgpu-smi --json --interval 300 | head -c 200000 > /tmp/smi.json; grep -c "\"contexts\":\[{" /tmp/smi.json | sed "s/^/json-contexts /"; wait; vgpu-smi --watch 0.2 --count 2 --interval 0 | grep -c "^engines" | sed "s/^/watch-views /"'
    pid=$(sed -n 's/^workload-pid \([0-9]*\)$/\1/p' <<<"$case_out")
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif ! want "^smi-rc 0$"; then result "$name" 0 "vgpu-smi failed"
    elif ! want "^  compute +([1-9][0-9]*\.[0-9]|0\.[1-9])%"; then result "$name" 0 "compute utilisation not above 0"
    elif [ -z "$pid" ] || ! want "^ +[0-9]+ +$pid +vgpu-samples +normal +copy\+compute +ok "; then result "$name" 0 "workload context (pid $pid) not listed"
    elif ! want "^memory +gem [0-9.]+ [KMG]iB in [1-9][0-9]* objects \(limit [0-9.]+ [KMG]iB, per file [0-9.]+ [KMG]iB, refused 0\), page tables"; then result "$name" 0 "memory line missing"
    elif ! want "^recovery +faults [0-9]+ +hangs [0-9]+ +engine resets [0-9]+ +device resets [0-9]+ +retired pages [0-9]+ +wedged no +lost no$"; then result "$name" 0 "recovery line missing"
    elif ! want "^json-contexts 1$"; then result "$name" 0 "--json lacks the contexts"
    elif ! want "^watch-views 2$"; then result "$name" 0 "--watch did not refresh"
    else result "$name" 1; fi
fi

# --- The device's driver sanitizer (always on for these cases, CI included): bugs planted in the KMD through
#     debugfs (doorbell before the packet write, a fence written backwards, VM_UNBIND without TLB_INVALIDATE, a doorbell inside a packet)
#     each get their report in dmesg, debugfs and SAN_REPORT; a mixed clean workload on both engines gets none.
name=kmd-sanitizer
if selected "$name"; then
    run_vm "$name" --gen 2 "${case_san[@]}" --device-arg --sanitize-fetch-delay-us=20000 \
        run 'vgpu-kmd-test sanitizer; grep -cE "^SAN-[A-Z-]+ [0-9]+$" /sys/kernel/debug/vgpu/*/sanitizer | sed "s/^/checks-listed /"; dmesg | grep "sanitizer: SAN-" | head -3'
    reports=$(grep -c 'sanitizer: SAN-' "$logdir/$name/device.log" 2>/dev/null)
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    elif ! want "^checks-listed 16$"; then result "$name" 0 "debugfs sanitizer does not list every check"
    elif ! want "sanitizer: SAN-RING-UNPUBLISHED #[0-9]+ context [1-9][0-9]* \(slot [0-9]+\) copy ring\+0x[0-9a-f]+ packet 0x[0-9a-f]+ \[INDIRECT "; then
        result "$name" 0 "dmesg does not name the report's context (userspace id), ring offset and decoded packet"
    elif ! grep -q 'sanitizer: SAN-RING-UNPUBLISHED' "$logdir/$name/device.log"; then result "$name" 0 "the device logged no SAN-RING-UNPUBLISHED"
    elif ! grep -q 'sanitizer: SAN-RING-INDEX' "$logdir/$name/device.log"; then result "$name" 0 "the device logged no SAN-RING-INDEX"
    elif [ "${reports:-0}" -lt 4 ]; then result "$name" 0 "the device logged $reports reports, expected the 4 planted"
    else san_allowed_saved=$san_allowed; san_allowed="kmd-sanitizer:SAN-RING-UNPUBLISHED kmd-sanitizer:SAN-RING-INDEX kmd-sanitizer:SAN-FENCE-REGRESS kmd-sanitizer:SAN-TLB-STALE kmd-sanitizer:SAN-DMA-UNOWNED $san_allowed"
         sanitize_saved=$sanitize; sanitize=1; result "$name" 1; sanitize=$sanitize_saved; san_allowed=$san_allowed_saved; fi
fi
name=sanitize-clean
if selected "$name"; then
    run_vm "$name" --gen 2 "${case_san[@]}" run 'vgpu-samples copy 300000 && vgpu-samples vecadd && vgpu-samples saxpy && vgpu-samples reduce && vgpu-kmd-test gem vm export && echo workload-ok; grep "^reports" /sys/kernel/debug/vgpu/*/sanitizer'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif ! want "^workload-ok$"; then result "$name" 0 "the workload failed"
    elif ! want "^reports 0 "; then result "$name" 0 "the KMD received sanitizer reports"
    else sanitize_saved=$sanitize; sanitize=1; result "$name" 1; sanitize=$sanitize_saved; fi
fi

# --- Device memory under the device's sanitizer: placements, aperture mappings, an mmap that moves a BO, VRAM
#     filled and oversubscribed (evictions holding the owner's jobs back, copying on the driver's copy context,
#     mapping the BO again) from three processes: no report (every page declared while the GPU can reach it, the
#     owner's TLBs invalidated before the pages move and before they are freed).
name=vram-sanitize
if selected "$name"; then
    run_vm "$name" --gen 2 --mem 1G --device-arg --vram=64M --device-arg --visible-vram=16M "${case_san[@]}" run 'vgpu-kmd-test vram | tail -1; for i in 1 2 3; do vgpu-samples vram 200 > /tmp/v.$i 2>&1 & done; wait; cat /tmp/v.1 /tmp/v.2 /tmp/v.3 | grep -c "^vram: every byte of 128 MiB verified$" | sed "s/^/verified /"; head -1 /sys/kernel/debug/vgpu/*/vram_mm; grep "^reports" /sys/kernel/debug/vgpu/*/sanitizer'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$" || ! want "^verified 3$"; then result "$name" 0 "the workload failed"
    elif ! want "^vram_mm: .* evictions [1-9]"; then result "$name" 0 "nothing was evicted"
    elif ! want "^reports 0 "; then result "$name" 0 "the KMD received sanitizer reports: $(grep "^reports" <<<"$case_out")"
    else sanitize_saved=$sanitize; sanitize=1; result "$name" 1; sanitize=$sanitize_saved; fi
fi

# --- Evicted objects moved back to VRAM (guest-kmd/restore.rs), under the device's sanitizer: an object evicted by a
#     larger allocation stays out while VRAM is full, moves back at its file's next SUBMIT once the allocation is
#     gone (read by that job, intact), its guest memory given back; an object the CPU mapped stays out; no report.
name=vram-restore
if selected "$name"; then
    run_vm "$name" --gen 2 --mem 1G --device-arg --vram=64M --device-arg --visible-vram=16M "${case_san[@]}" run 'vgpu-kmd-test vram-restore; grep "^reports" /sys/kernel/debug/vgpu/*/sanitizer'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    elif ! want "^reports 0 "; then result "$name" 0 "the KMD received sanitizer reports"
    else sanitize_saved=$sanitize; sanitize=1; result "$name" 1; sanitize=$sanitize_saved; fi
fi

# --- The sanitizer naming a moved object: an eviction planted without clearing the mappings or invalidating the
#     owner's TLBs (debugfs sanitizer_plant move-no-invalidate); the owner's next job reaches the old VRAM and the
#     report names the object (the id vram_mm lists), its generation before and after the move and where it is now.
name=vram-san-moved
if selected "$name"; then
    run_vm "$name" --gen 2 --mem 1G --device-arg --vram=64M --device-arg --visible-vram=16M "${case_san[@]}" run 'vgpu-kmd-test vram-san-moved'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: 15 passed, 0 failed$"; then result "$name" 0 "no summary"
    elif ! grep -q "sanitizer: SAN-DMA-UNOWNED .*that page was object [0-9]*'s (generation 0) until the object moved" "$logdir/$name/device.log"; then
        result "$name" 0 "the device log does not name the moved object"
    else san_allowed_saved=$san_allowed; san_allowed="vram-san-moved:SAN-TLB-STALE vram-san-moved:SAN-DMA-UNOWNED $san_allowed"
         sanitize_saved=$sanitize; sanitize=1; result "$name" 1; sanitize=$sanitize_saved; san_allowed=$san_allowed_saved; fi
fi

# --- Faults inside the driver (guest-kmd/inject.rs, debugfs vgpu_fail/): each point fails this process's call
#     with its documented errno or fallback, logged; the call succeeds again once quiet; the device is never reset;
#     objects, mappings, page tables and contexts back to their counts.
name=kmd-inject
if selected "$name"; then
    run_vm "$name" --gen 2 --mem 1G --device-arg --vram=64M --device-arg --visible-vram=16M run 'vgpu-kmd-test inject; dmesg | grep -c "name [a-z_]*, interval" | sed "s/^/injected /"'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    elif ! want "^injected (8|9|[1-9][0-9])$"; then result "$name" 0 "fewer failures logged than injected"
    else result "$name" 1; fi
fi

# --- Firmware boot (docs/hardware.md section 15, guest-kmd/transport/firmware.rs): each generation's device powers
#     on in its boot state and the driver loads /lib/firmware/vgpu/gen<N>.fw: the probe line names the running
#     image's version, debugfs firmware shows it running with its boot times and the firmware log, work runs.
for g in 1 2; do
    name=fw-boot-gen$g
    if selected "$name"; then
        want_version=$([ $g = 1 ] && echo 1.3.0 || echo 2.1.0)
        run_vm "$name" --gen $g run 'dmesg | grep -o "vgpu gen [12], protocol [0-9.]*, firmware [0-9.]*" | head -1; cat /sys/kernel/debug/vgpu/*/firmware; vgpu-samples copy >/dev/null && echo copy-ok; vgpu-smi | grep -i "^  firmware"'
        if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
        elif ! want "^vgpu gen $g, protocol 0.2, firmware $want_version$"; then result "$name" 0 "the probe line does not name firmware $want_version"
        elif ! want "^image: vgpu/gen$g.fw \([0-9]+ bytes\)$"; then result "$name" 0 "debugfs firmware does not name the image"
        elif ! want "^state: running error 0"; then result "$name" 0 "debugfs firmware: not running"
        elif ! want "^boot: device [1-9][0-9]* us, driver load to running [0-9]+ us; boots 1 failures 0$"; then result "$name" 0 "no boot times"
        elif ! want "firmware $want_version running \(generation $g\)"; then result "$name" 0 "the firmware log does not show the boot"
        elif ! want "^copy-ok$"; then result "$name" 0 "no work ran"
        elif ! want "^  firmware +$want_version"; then result "$name" 0 "vgpu-smi does not show the firmware"
        else result "$name" 1; fi
    fi
done

# --- Images the device or the driver refuses (vgpu-fw install --bad: /lib/firmware/vgpu/test/): loaded one by one
#     with vgpu.ko's firmware= parameter, each is refused with the device's boot error (or the driver's size or
#     version check) in one dmesg line; the module stays loaded, the device unbound (no render node); names outside
#     /lib/firmware are refused before the loader sees them; the alternative image boots (without user-mode queues);
#     the default image works again; no splat.
name=fw-refused
if selected "$name"; then
    run_vm "$name" --gen 2 run 'rmmod vgpu || exit 10; try() { dmesg -c >/dev/null; insmod /lib/modules/vgpu.ko firmware=$1 || echo "insmod-failed $1"; lsmod | grep -q "^vgpu " && l=loaded || l=gone; [ -e /dev/dri/renderD128 ] && b=bound || b=unbound; echo "image $1 $l $b: $(dmesg | grep -o "vgpu [0-9a-f:.]*: firmware: .*" | grep -v "firmware: failed to load" | sed "s/^vgpu [0-9a-f:.]*: //" | head -1)"; if [ $b = bound ]; then vgpu-smi | grep -E "^  (firmware|features)"; fi; rmmod vgpu || exit 11; }; for f in /lib/firmware/vgpu/test/gen2-*.fw; do try ${f#/lib/firmware/}; done; try /lib/firmware/vgpu/gen2.fw; try ../../etc/passwd; try vgpu/missing.fw; insmod /lib/modules/vgpu.ko && vgpu-samples copy >/dev/null && echo default-works; dmesg | grep -v "Kernel command line\|vgpurun=" | grep -cE "WARNING:|BUG:|Oops|Call Trace:|UBSAN|refcount_t:" | sed "s/^/dmesg-problems /"'
    refused=(
        "truncated:image truncated (boot error 1)"
        "bad-magic:not a vgpu firmware image (bad magic) (boot error 2)"
        "bad-format:unknown image format (boot error 3)"
        "bad-checksum:checksum mismatch (boot error 4)"
        "bad-section:malformed section table (boot error 5)"
        "unknown-section:required section of an unknown kind (boot error 6)"
        "wrong-generation:image not built for this GPU generation (boot error 7)"
        "version-mismatch:image does not serve this driver's interface version (boot error 8)"
    )
    missing=""
    for r in "${refused[@]}"; do
        n=${r%%:*}; text=${r#*:}
        grep -qF "image vgpu/test/gen2-$n.fw loaded unbound: firmware: vgpu/test/gen2-$n.fw refused by the device: $text" <<<"$case_out" || missing+=" $n"
    done
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif [ -n "$missing" ]; then result "$name" 0 "not refused with their error:$missing"
    elif ! want "^image vgpu/test/gen2-too-large.fw loaded unbound: firmware: vgpu/test/gen2-too-large.fw is 65537 bytes"; then result "$name" 0 "the oversized image was not refused by size"
    elif ! want "^image vgpu/test/gen2-next-major.fw loaded unbound: firmware: vgpu/test/gen2-next-major.fw is version 3.0.0; this driver runs generation 2 with 2.0"; then result "$name" 0 "the next major version was not refused"
    elif ! want "^image vgpu/test/gen2-alt.fw loaded bound: "; then result "$name" 0 "the alternative image did not boot"
    elif ! want "^  firmware +2.1.1"; then result "$name" 0 "vgpu-smi does not show the alternative image's version"
    elif ! want "^image /lib/firmware/vgpu/gen2.fw loaded unbound: firmware: image name .* refused"; then result "$name" 0 "an absolute name was not refused"
    elif ! want "^image ../../etc/passwd loaded unbound: firmware: image name .* refused"; then result "$name" 0 "a name with .. was not refused"
    elif ! want "^image vgpu/missing.fw loaded unbound: firmware: vgpu/missing.fw not loaded from /lib/firmware \(error -2\)"; then result "$name" 0 "a missing image was not reported"
    elif want "^insmod-failed"; then result "$name" 0 "insmod failed: the module must stay loaded"
    elif ! want "^default-works$"; then result "$name" 0 "the default image did not work afterwards"
    elif ! want "^dmesg-problems 0$"; then result "$name" 0 "warnings in dmesg"
    else result "$name" 1; fi
fi

# --- A firmware crash during a workload (device fault fw-crash at its second COPY): the FIRMWARE_CRASH event, the
#     driver resets the device, boots the firmware again and writes the unfinished jobs again; the copy completes
#     and every byte is checked; debugfs counts the failure. And a silent firmware hang (fw-hang): the heartbeats
#     stop, the driver's periodic check notices within a few periods and recovers the same way. Generation 2, and
#     the crash on generation 1 too (fw-crash-recovered-gen1).
for variant in "crash 2" "hang 2" "crash 1"; do
    read -r kind gen <<<"$variant"
    name=fw-$kind-recovered
    [ "$gen" = 2 ] || name=fw-$kind-recovered-gen$gen
    if selected "$name"; then
        run_vm "$name" --gen "$gen" --kmd-args "job_timeout_ms=1000" --device-arg "--inject=fw-$kind:engine=copy,packet=COPY,after=2" run 'vgpu-samples copy 16777216; echo "workload-status $?"; dmesg | grep -o "firmware [a-z]*: .*\|firmware heartbeat missed: .*\|firmware recovered.*"; grep -o "firmware_failures [0-9]*" /sys/kernel/debug/vgpu/*/contexts; grep -c "^state: running" /sys/kernel/debug/vgpu/*/firmware | sed "s/^/running /"; vgpu-samples copy >/dev/null && echo serves-after'
        if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
        elif ! want "^copy: ok, 16777216 values verified$"; then result "$name" 0 "the workload's result was not verified"
        elif ! want "^workload-status 0$"; then result "$name" 0 "the workload failed"
        elif [ $kind = crash ] && ! want "^firmware crashed: exception \(code 1\) running context slot [0-9]+ engine 0; resetting the device$"; then result "$name" 0 "no crash line in dmesg"
        elif [ $kind = hang ] && ! want "^firmware heartbeat missed: none for [0-9]+ ms; resetting the device$"; then result "$name" 0 "no missed-heartbeat line in dmesg"
        elif ! want "^firmware recovered: device reset, firmware booted again$"; then result "$name" 0 "no recovery line in dmesg"
        elif ! want "^firmware_failures 1$"; then result "$name" 0 "debugfs does not count one firmware failure"
        elif ! want "^serves-after$"; then result "$name" 0 "the device does not serve afterwards"
        elif ! grep -q "inject: .* class=fw-$kind " "$logdir/$name/device.log"; then result "$name" 0 "the device log shows no injection"
        else result "$name" 1; fi
    fi
done

# --- A firmware that keeps crashing (fw-crash at every COPY): recovered twice, the third crash within a minute wedges
#     the device (dmesg says it gives up, WEDGED uevent); the workload gets an error, never a wrong result.
name=fw-crash-wedged
if selected "$name"; then
    run_vm "$name" --gen 2 --kmd-args "job_timeout_ms=1000" --device-arg "--inject=fw-crash:engine=copy,packet=COPY,count=0" run 'vgpu-samples copy 1048576; echo "workload-status $?"; dmesg | grep -o "firmware crashed again.*\|firmware recovered.*\|device wedged.*"; grep -o "^wedged [01]" /sys/kernel/debug/vgpu/*/contexts | head -1'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "values verified"; then result "$name" 0 "a copy completed on a firmware that crashes at every copy"
    elif want "^workload-status 0$"; then result "$name" 0 "the workload did not fail"
    elif [ "$(grep -c "^firmware recovered" <<<"$case_out")" != 2 ]; then result "$name" 0 "not recovered exactly twice before giving up"
    elif ! want "^firmware crashed again \(exception\): third firmware failure within a minute: giving up$"; then result "$name" 0 "no give-up line"
    elif ! want "^device wedged: recovery failed"; then result "$name" 0 "not wedged"
    elif ! want "^wedged 1$"; then result "$name" 0 "debugfs does not say wedged"
    else result "$name" 1; fi
fi

# --- A hung job with another context's job queued behind it on the same engine (the short form of scripts/soak
#     hangs): the device hangs every FILL; 20 rounds, each a new context's FILL beside an innocent context's COPY and
#     SEM_SIGNAL. Both rings are past the timeout when the check runs: the one the engine executes (CONTEXT_QUERY's
#     RUNNING) is guilty, the waiting one is not reset, and its job runs after the reset; one engine reset per hang.
name=hang-queued-innocent
if selected "$name"; then
    run_vm "$name" --gen 2 --kmd-args "job_timeout_ms=250" --device-arg --inject --device-arg "hang:engine=copy,packet=FILL,count=0" run 'VGPU_SOAK_ENGINE=copy VGPU_SOAK_HANGS=20 vgpu-kmd-test hang-soak; dmesg | grep -v "Kernel command line\|vgpurun=" | grep -cE "WARNING:|BUG:|Oops|Call Trace:|UBSAN|refcount_t:" | sed "s/^/dmesg-problems /"'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: 4 passed, 0 failed$"; then result "$name" 0 "no summary"
    elif ! want "^soak-hangs: engine copy: 20 injected, 20 detected \(EIO\), 20 guilty with one hang, 20 innocent jobs intact, 0 silent, wedged 0, engine resets 20, device resets 0"; then result "$name" 0 "wrong tally"
    elif ! want "^dmesg-problems 0$"; then result "$name" 0 "warnings in dmesg"
    else result "$name" 1; fi
fi

# --- Runtime power management (guest-kmd/gpu/power.rs): with autosuspend_ms=100 a context that pauses past the delay
#     finds the device suspended (POWER_SET D3HOT) and its next SUBMIT resumes it (D0, the firmware booted again, the
#     contexts created again): 50 pauses, every round's copy through a VRAM object checked; the counters in debugfs
#     power; a device woken by a new process too; no splat.
name=pm-autosuspend
if selected "$name"; then
    run_vm "$name" --gen 2 --kmd-args "job_timeout_ms=1000 autosuspend_ms=100" --device-arg --log-level=info run 'vgpu-kmd-test pm-pause; sleep 1; cat /sys/kernel/debug/vgpu/*/power; dmesg | grep -i "firmware\|reset\|wedged\|runtime" | tail -5; vgpu-samples copy >/dev/null && echo new-process-ok; dmesg | grep -v "Kernel command line\|vgpurun=" | grep -cE "WARNING:|BUG:|Oops|Call Trace:|UBSAN|refcount_t:" | sed "s/^/dmesg-problems /"'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    elif ! want "^state suspended autosuspend_ms 100 suspends (5[1-9]|[6-9][0-9]) "; then result "$name" 0 "the device is not suspended after the test, or fewer than 51 suspensions"
    elif ! want "^new-process-ok$"; then result "$name" 0 "a new process did not wake the device"
    elif ! want "^dmesg-problems 0$"; then result "$name" 0 "warnings in dmesg"
    elif ! grep -q "power: D3hot -> D0 (VRAM KEPT)" "$logdir/$name/device.log"; then result "$name" 0 "the device log shows no resume"
    else result "$name" 1; fi
fi

# --- Runtime suspension with VRAM off (guest-kmd/d3cold.rs): vram_d3cold_threshold_mib=8 makes the same 50 pauses
#     D3cold (VRAM powered off and scribbled by the device): every VRAM object is saved to its system pages before
#     and copied back at the resume, the kept object read back after every pause; a CPU-mapped VRAM object and VRAM
#     objects over the threshold keep the device in D3hot (counted as fallbacks), and it goes to D3cold again once
#     they are gone; no object lost, no splat.
name=pm-d3cold
if selected "$name"; then
    run_vm "$name" --gen 2 --kmd-args "job_timeout_ms=1000 autosuspend_ms=100 vram_d3cold_threshold_mib=8" --device-arg --log-level=info run 'vgpu-kmd-test pm-pause; sleep 1; cat /sys/kernel/debug/vgpu/*/power; dmesg | grep -ciE "VRAM contents lost.*: [1-9][0-9]* objects|restored, [1-9][0-9]* lost" | sed "s/^/vram-lost-lines /"; dmesg | grep -v "Kernel command line\|vgpurun=" | grep -cE "WARNING:|BUG:|Oops|Call Trace:|UBSAN|refcount_t:" | sed "s/^/dmesg-problems /"'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    elif ! want "^state suspended .* level D3cold d3cold_threshold_mib 8 d3cold_suspends (5[1-9]|[6-9][0-9]) d3hot_fallbacks [2-9] "; then result "$name" 0 "not in D3cold after the test, or fewer than 51 D3cold suspensions or 2 fallbacks"
    elif ! want "^vram-lost-lines 0$"; then result "$name" 0 "VRAM objects lost"
    elif ! want "^dmesg-problems 0$"; then result "$name" 0 "warnings in dmesg"
    elif ! grep -q "power: D3cold -> D0 (VRAM GARBAGE)" "$logdir/$name/device.log"; then result "$name" 0 "the device log shows no return from D3cold"
    else result "$name" 1; fi
fi

# --- System suspend to RAM (guest-kmd/sleep.rs): `echo mem > /sys/power/state` in the guest, QEMU woken by
#     scripts/vm through QMP. 20 cycles on each generation: a context, its VM_BINDs, an object in VRAM and a
#     CPU-visible one through the aperture keep their bytes (saved to system memory before, copied back after),
#     a copy queued behind a fence that signals after the resume runs then; one device reset of kind sleep per
#     cycle; a job waiting for the CPU refuses the suspend (EBUSY) until it finishes; the launcher counts the
#     suspensions; no splat. One vCPU: under TCG, QEMU 10.0 sometimes fails to start the second vCPU again after
#     an S3 resume (the guest logs "CPU1 failed to report alive state" after 10 s and goes on with one CPU and a
#     slower clocksource), which makes the cycles' times meaningless (docs/uapi.md, "Power management").
for gen in 1 2; do
    name=suspend-gen$gen
    if selected "$name"; then
        run_vm "$name" --gen $gen --smp 1 run 'vgpu-kmd-test suspend; dmesg | grep -E "system (suspend|resume):" | tail -2; dmesg | grep -v "Kernel command line\|vgpurun=" | grep -cE "WARNING:|BUG:|Oops|Call Trace:|UBSAN|refcount_t:" | sed "s/^/dmesg-problems /"'
        if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
        elif want "^FAIL"; then result "$name" 0 "a check failed"
        elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
        elif ! want "vgpu .*system resume: device back in [0-9]+ ms, [0-9]+ VRAM objects restored, 0 lost"; then result "$name" 0 "no resume line in dmesg"
        elif ! want "^dmesg-problems 0$"; then result "$name" 0 "warnings in dmesg"
        elif ! grep -qE "^vm: the guest suspended to RAM 21 times" "$logdir/$name.stderr"; then result "$name" 0 "the launcher did not wake 21 suspensions"
        else grep -h "^info suspend" "$logdir/$name.out" | sed 's/^/     /'; result "$name" 1; fi
    fi
done

# --- One GPU, several VMs (docs/hardware.md section 17): scripts/vms starts one device cut into two virtual
#     functions and a VM on each. Both compute with verified results and see their partition; one VM hangs its
#     compute engine three times (the KMD's hang check resets the engine in that VF only) while the other keeps
#     completing jobs, counted; a VM that powers off in the middle of its copies leaves the other serving; a
#     VM suspends to RAM 20 times beside one that computes.
for gen in 1 2; do
    name=vf-two-vms-gen$gen
    selected "$name" || continue
    smi='vgpu-smi | grep partition; '
    run_vms "$name" --gen "$gen" --vf contexts=16,weight=1 --vf contexts=48,weight=3 run \
        "${smi}vgpu-samples matmul && vgpu-samples saxpy && vgpu-samples copy 4194304" \
        "${smi}vgpu-samples matmul && vgpu-samples saxpy && vgpu-samples copy 4194304"
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "FAIL|mismatch|wrong"; then result "$name" 0 "a result was wrong"
    elif ! want "^vm1: +partition +virtual function 1: 16 contexts"; then result "$name" 0 "VM 1 does not see its partition"
    elif ! want "^vm2: +partition +virtual function 2: 48 contexts"; then result "$name" 0 "VM 2 does not see its partition"
    elif ! want "^host: +1 +16 .* yes|^host: +1 +16 .* no"; then result "$name" 0 "the host's view lacks VF 1"
    else grep -E "^host: +vf [12]:" "$logdir/$name.out" | sed 's/^/     /'; result "$name" 1; fi
done
name=vf-hang-neighbour
if selected "$name"; then
    # VM 2 counts the saxpy runs it completes (each verified) for 40 s; VM 1 hangs three times meanwhile.
    loop='end=$(($(date +%s) + 40)); n=0; while [ $(date +%s) -lt $end ]; do vgpu-samples saxpy >/dev/null || { echo "FAIL saxpy run $n"; exit 1; }; n=$((n + 1)); done; echo "neighbour saxpy runs $n"'
    run_vms "$name" --vm-arg --kmd-args --vm-arg job_timeout_ms=1000 run \
        'sleep 5; for i in 1 2 3; do vgpu-samples hang 2>&1 | head -1; done' \
        "$loop"
    runs=$(sed -n 's/^vm2: neighbour saxpy runs \([0-9]*\)$/\1/p' "$logdir/$name.out")
    # The host's view: VF 2's longest wait for an engine (ms), which the spinning VF 1 bounds to its slices.
    wait2=$(awk '$1 == "host:" && $2 == 2 && $3 ~ /^[0-9]+$/ { sub(/ms$/, "", $12); print int($12) }' "$logdir/$name.out")
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^vm2: FAIL"; then result "$name" 0 "the neighbour's work failed"
    elif [ "$(grep -c '^vm1: hang: the application sees' "$logdir/$name.out")" != 3 ]; then result "$name" 0 "VM 1 did not see its three hangs end"
    elif [ -z "$runs" ] || [ "$runs" -lt 5 ]; then result "$name" 0 "the neighbour completed ${runs:-no} runs"
    elif [ -z "$wait2" ] || [ "$wait2" -gt 200 ]; then result "$name" 0 "the neighbour waited ${wait2:-?} ms for an engine"
    else echo "     the neighbour completed $runs verified saxpy runs in 40 s while VM 1 hung 3 times; its longest wait for an engine ${wait2} ms"; result "$name" 1; fi
fi
name=vf-vm-vanishes
if selected "$name"; then
    # VM 1 copies without a pause and powers off at once (sysrq o) two seconds in, copies in flight; VM 2
    # copies before, during and after.
    run_vms "$name" run \
        '(while true; do vgpu-samples copy 16777216 >/dev/null; done) & sleep 2; echo o > /proc/sysrq-trigger; sleep 30' \
        'for i in $(seq 30); do vgpu-samples copy 1048576 >/dev/null || { echo "FAIL copy $i"; exit 1; }; done; echo "neighbour copies 30"'
    if ! want "^vm2: exit status 0$"; then result "$name" 0 "VM 2 did not finish cleanly"
    elif ! want "^vm2: neighbour copies 30$"; then result "$name" 0 "VM 2's copies did not all complete"
    elif want "^vm1: exit status 0$"; then result "$name" 0 "VM 1 did not vanish"
    elif ! awk '$1 == "host:" && $2 == 1 && $7 == "no" && $10 > 0 { ok = 1 } END { exit !ok }' "$logdir/$name.out"; then result "$name" 0 "the host does not show VF 1's copies and VF 1 free again"
    elif ! grep -q "virtual function 1: its VM left" "$logdir/$name/device.log"; then result "$name" 0 "the device log does not show VF 1's VM leaving"
    else result "$name" 1; fi
fi

name=vf-suspend
if selected "$name"; then
    # VM 1 suspends to RAM 20 times (vgpu-kmd-test suspend: VRAM saved and restored, queued work kept; its
    # virtual function adopts the host's firmware again at each resume) while VM 2 computes for 30 s,
    # each saxpy verified. One vCPU per VM: under TCG a second vCPU sometimes does not come back from S3
    # (docs/uapi.md).
    loop='n=0; end=$(($(date +%s) + 30)); while [ $(date +%s) -lt $end ]; do vgpu-samples saxpy >/dev/null || { echo "FAIL saxpy run $n"; exit 1; }; n=$((n + 1)); done; echo "neighbour saxpy runs $n"'
    run_vms "$name" --vm-arg --smp --vm-arg 1 run \
        'vgpu-kmd-test suspend; dmesg | grep -E "system resume:" | tail -1; dmesg | grep -v "Kernel command line\|vgpurun=" | grep -cE "WARNING:|BUG:|Oops|Call Trace:|UBSAN|refcount_t:" | sed "s/^/dmesg-problems /"' \
        "$loop"
    runs=$(sed -n 's/^vm2: neighbour saxpy runs \([0-9]*\)$/\1/p' "$logdir/$name.out")
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^vm[12]: FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^vm1: kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary from VM 1"
    elif ! want "^vm1: .*system resume: device back in [0-9]+ ms, [0-9]+ VRAM objects restored, 0 lost"; then result "$name" 0 "no resume line in VM 1's dmesg"
    elif ! want "^vm1: dmesg-problems 0$"; then result "$name" 0 "warnings in VM 1's dmesg"
    elif ! want "^vm1: vm: the guest suspended to RAM 21 times"; then result "$name" 0 "the launcher did not wake 21 suspensions"
    elif [ -z "$runs" ] || [ "$runs" -lt 5 ]; then result "$name" 0 "the neighbour completed ${runs:-no} runs"
    elif ! awk '$1 == "host:" && $2 == 2 && $8 == 0 && $9 == 0 { ok = 1 } END { exit !ok }' "$logdir/$name.out"; then result "$name" 0 "VF 2 saw resets or faults"
    else
        echo "     $(grep -h "^vm1: info suspend" "$logdir/$name.out" | sed 's/^vm1: //'); the neighbour completed $runs verified saxpy runs meanwhile"
        result "$name" 1
    fi
fi

# --- IGT GPU Tools (tests/igt, docs/igt.md): every test of tests/igt/tests.txt, the dma-buf KUnit suites and
#     gputop beside a compute workload, on card0 and the render node as each test opens them; every result
#     compared with tests/igt/expectations.txt (a difference fails the case). The long run (repeats, the
#     sanitizer on) is tests/igt/run --long.
for gen in 1 2; do
    name=igt-gen$gen
    selected "$name" || continue
    run_vm "$name" --igt --gen "$gen" --timeout 1200 run 'vgpu-igt-run'
    igt_report=$("$repo/tests/igt/check" --label "gen$gen" "$logdir/$name.out"); igt_rc=$?
    printf '%s\n' "$igt_report" > "$logdir/$name.check"
    grep -E "binaries, |flaked" <<<"$igt_report" | sed 's/^/     /'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif [ $igt_rc -ne 0 ]; then result "$name" 0 "$(grep -m1 "DIFFERENCE\|no results" <<<"$igt_report" | sed 's/^igt: //')"
    else result "$name" 1; fi
done

[ $qemu_aborts -eq 0 ] || echo "e2e: QEMU aborted on its own assertion in $qemu_aborts case(s); each was run again (logs: $logdir/*.qemu-abort.*)"
echo "e2e: $passed passed, $failed failed"
[ $failed -eq 0 ]
