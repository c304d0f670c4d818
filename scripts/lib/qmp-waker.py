#!/usr/bin/env python3
"""Wakes a suspended QEMU guest: scripts/vm's helper for system suspend.

Connects to QEMU's QMP socket, and each time the guest suspends to RAM (the
SUSPEND event: `echo mem > /sys/power/state` in the guest, ACPI S3) sends
`system_wakeup` after WAKE_MS milliseconds, as a user pressing a key would.
Writes one line per cycle to LOG ("suspend N: suspended at S s, woken after
W ms") and exits when QEMU closes the socket.

Usage: qmp-waker.py SOCKET WAKE_MS LOG
"""
import json
import os
import socket
import sys
import time


def main():
    path, wake_ms, log_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    sock = None
    for _ in range(600):  # QEMU creates the socket at start: up to 60 s.
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.connect(path)
            break
        except OSError:
            sock.close()
            sock = None
            time.sleep(0.1)
    if sock is None:
        return 1
    f = sock.makefile("rwb", buffering=0)
    start = time.monotonic()

    def send(cmd):
        f.write(json.dumps({"execute": cmd}).encode() + b"\n")

    send("qmp_capabilities")
    n = 0
    with open(log_path, "a", encoding="utf-8") as log:
        for line in f:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if os.environ.get("VGPU_QMP_DEBUG"):
                log.write(f"qmp: {line.decode(errors='replace').strip()}\n")
                log.flush()
            if msg.get("event") != "SUSPEND":
                continue
            n += 1
            at = time.monotonic() - start
            time.sleep(wake_ms / 1000)
            send("system_wakeup")
            log.write(f"suspend {n}: suspended at {at:.1f} s, woken after {wake_ms} ms\n")
            log.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
