#!/usr/bin/env bash
# End-to-end tests: boot the guest with the vgpu device (scripts/vm) and check
# what the guest driver stack does against the real device process.
#
#   tests/e2e.sh            all cases (builds the guest first)
#   tests/e2e.sh identify   only cases whose name contains "identify"
#   tests/e2e.sh vm-qemu    the launcher against stand-in QEMUs (no boot, seconds)
#
# Prints one line per case and a closing "e2e: N passed, N failed".
set -uo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
filter=${1:-}
vm=("$repo/scripts/vm" --no-build --timeout "${VGPU_E2E_TIMEOUT:-300}")
passed=0
failed=0
logdir=$repo/target/e2e
rm -rf "$logdir" && mkdir -p "$logdir"

"$repo/images/build" all || { echo "e2e: guest build failed"; echo "e2e: 0 passed, 1 failed"; exit 1; }
cargo build --quiet --release --manifest-path "$repo/Cargo.toml" -p vgpu-device -p vgpu-kvm-probe || exit 1

# run_case NAME EXPECTED_STATUS VM_ARGS... -- GUEST_CMD ; then CHECKS on $out
case_out=""
run_vm() {
    local name=$1; shift
    local t0 t1
    t0=$(date +%s.%N)
    case_out=$("${vm[@]}" --keep-logs "$logdir/$name" "$@" 2>"$logdir/$name.stderr")
    case_rc=$?
    t1=$(date +%s.%N)
    case_secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
    printf '%s\n' "$case_out" > "$logdir/$name.out"
}

result() {
    local name=$1 ok=$2 why=${3:-}
    if [ "$ok" = 1 ]; then
        passed=$((passed + 1)); printf 'ok   %-28s %5ss\n' "$name" "$case_secs"
    else
        failed=$((failed + 1)); printf 'FAIL %-28s %5ss  %s\n' "$name" "$case_secs" "$why"
        sed 's/^/     | /' "$logdir/$name.out" | tail -30
        sed 's/^/     ! /' "$logdir/$name.stderr" | tail -15
    fi
}

want() { grep -qE -- "$1" <<<"$case_out"; }

selected() { [ -z "$filter" ] || [[ "$1" == *"$filter"* ]]; }

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
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif [ "$case_out" != "$expected" ]; then result "$name" 0 "kernel layout table differs from hwif/layout.txt"
    else result "$name" 1; fi
fi

# --- KMD ioctls: BOs, mmap, VM bind/unbind and the page tables (walked via debugfs), bad arguments, leaks.
for g in 1 2; do
    name=kmd-ioctls-gen$g
    selected "$name" || continue
    run_vm "$name" --gen "$g" run 'vgpu-kmd-test gem vm leaks; dmesg | grep -v "Kernel command line\|vgpurun=" | grep -cE "WARNING:|BUG:|Oops|Call Trace:|UBSAN|refcount_t:" | sed "s/^/dmesg-problems /"'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    elif ! want "^dmesg-problems 0$"; then result "$name" 0 "warnings in dmesg"
    else result "$name" 1; fi
done

# --- Contexts, SUBMIT (copy, fill), fences, WAIT, input-fence ordering, backpressure, faults (aborted and
#     demand-paged), hangs (SEM_WAIT never satisfied) -> reset ladder -> guilty/innocent -> ban, destroy, close
#     with work in flight, QUERY_STATS (bad arguments, memory and counters following the work, engine_error),
#     concurrent submitters on two files; then every object count back to zero. (Event FIFO
#     overflows under fence bursts are expected and covered by the fence-value fallback; a sequence going
#     backwards is not.)
for g in 1 2; do
    name=kmd-submit-gen$g
    selected "$name" || continue
    # 3 s per job: long enough that the backpressure checks, which hold a
    # blocked job while they fill the queue, finish before the hang check.
    run_vm "$name" --gen "$g" --kmd-args "job_timeout_ms=3000" run 'vgpu-kmd-test submit stats export concurrent leaks; grep -E "^(contexts|bos|mappings|pt_pool_used) " /sys/kernel/debug/vgpu/*/objects; dmesg | grep -v "Kernel command line\|vgpurun=\|vgpukmd=" | grep -E "WARNING:|BUG:|Oops|Call Trace:|UBSAN|refcount_t:|event sequence went" | sed "s/^/dmesg-problem: /"; echo dmesg-checked'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    elif want "^(contexts|bos|mappings|pt_pool_used) [1-9]"; then result "$name" 0 "objects left after close"
    elif ! want "^dmesg-checked$" || want "^dmesg-problem:"; then result "$name" 0 "warnings in dmesg"
    else result "$name" 1; fi
done

# --- A hang in flight (256 GiB of FILLs): the engine reset alone recovers; hang dump captured.
name=kmd-hang-inflight
if selected "$name"; then
    run_vm "$name" --gen 2 --kmd-args "job_timeout_ms=1000 pt_pool_kib=16384" run 'vgpu-kmd-test inflight watchdog; grep -c "^hang ctx" /sys/kernel/debug/vgpu/*/hang_dump | sed "s/^/hang-dumps /"'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^kmd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
    elif ! want "^hang-dumps 1$"; then result "$name" 0 "no hang dump"
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

# --- The UMD API end to end: memory and pools (no reuse before the fence), copies, memsets, batching, events and
#     cross-stream semaphore waits, invalid arguments and use after destroy, threads and streams, sticky loss on a
#     page fault and on a hang, launches.
for g in 1 2; do
    name=umd-api-gen$g
    selected "$name" || continue
    run_vm "$name" --gen "$g" --kmd-args "job_timeout_ms=1000" run 'vgpu-umd-test'
    if [ $case_rc -ne 0 ]; then result "$name" 0 "exit status $case_rc"
    elif want "^FAIL"; then result "$name" 0 "a check failed"
    elif ! want "^umd-test: [0-9]+ passed, 0 failed$"; then result "$name" 0 "no summary"
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
    elif ! want "^arg 3 \(16 bytes\): 0x41400000 0x41400000 0x41400000 0x41400000$"; then result "$name" 0 "vgpu-run result wrong"
    else result "$name" 1; fi
done

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
    elif ! want "^memory +gem [0-9.]+ [KMG]iB in [1-9][0-9]* objects, page tables"; then result "$name" 0 "memory line missing"
    elif ! want "^recovery +faults [0-9]+ +hangs [0-9]+ +engine resets"; then result "$name" 0 "recovery line missing"
    elif ! want "^json-contexts 1$"; then result "$name" 0 "--json lacks the contexts"
    elif ! want "^watch-views 2$"; then result "$name" 0 "--watch did not refresh"
    else result "$name" 1; fi
fi

echo "e2e: $passed passed, $failed failed"
[ $failed -eq 0 ]
