#!/bin/sh
# The speed test of lab 8: the compute engine's busy time (the device's
# counter, QUERY_STATS via vgpu-smi --json) for the student's reduction of N
# values, against the same run's baseline: vecadd over the same N (two loads,
# one store per element). Prints both and the ratio; fails above MAX_RATIO.
# Usage: speed.sh N MAX_RATIO_PERCENT
n=${1:-262144}
max=${2:-150}
busy() { vgpu-smi --json --interval 0 | sed -n 's/.*"name":"compute","utilisation":[^,]*,"counters":{"busy_ns":\([0-9]*\).*/\1/p' | head -1; }
b0=$(busy); vgpu-samples vecadd "$n" >/dev/null || { echo "speed: vecadd failed"; exit 1; }
b1=$(busy); vgpu-samples reduce "$n" || { echo "speed: reduce is wrong"; exit 1; }
b2=$(busy)
base=$((b1 - b0)); mine=$((b2 - b1))
[ "$base" -gt 0 ] || { echo "speed: no baseline busy time ($b0 $b1)"; exit 1; }
ratio=$((100 * mine / base))
echo "speed: reduce $n: compute busy $((mine / 1000)) us; vecadd $n: $((base / 1000)) us; ratio ${ratio}% (target <= ${max}%)"
[ "$ratio" -le "$max" ]
