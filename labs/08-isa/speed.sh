#!/bin/sh
# The speed test of lab 8: the compute engine's modelled time (its `cycles`
# counter, QUERY_STATS via vgpu-smi --json; docs/isa.md §15) for the
# student's reduction of N values, against the same run's baseline: vecadd
# over the same N (two loads, one store per element). Cycles count issue
# slots, not host time, so the result does not depend on the machine's
# load. Prints both and the ratio; fails above MAX_RATIO_PERCENT.
# Usage: speed.sh N MAX_RATIO_PERCENT
n=${1:-262144}
max=${2:-800}
cycles() { vgpu-smi --json --interval 0 | sed -n 's/.*"name":"compute","utilisation":[^,]*,"counters":{[^}]*"cycles":\([0-9]*\).*/\1/p' | head -1; }
c0=$(cycles); vgpu-samples vecadd "$n" >/dev/null || { echo "speed: vecadd failed"; exit 1; }
c1=$(cycles); vgpu-samples reduce "$n" || { echo "speed: reduce is wrong"; exit 1; }
c2=$(cycles)
[ -n "$c0" ] && [ -n "$c2" ] || { echo "speed: no cycles counter in vgpu-smi --json"; exit 1; }
base=$((c1 - c0)); mine=$((c2 - c1))
[ "$base" -gt 0 ] || { echo "speed: no baseline cycles ($c0 $c1)"; exit 1; }
ratio=$((100 * mine / base))
echo "speed: reduce $n: $mine cycles; vecadd $n: $base cycles; ratio ${ratio}% (target <= ${max}%)"
[ "$ratio" -le "$max" ]
