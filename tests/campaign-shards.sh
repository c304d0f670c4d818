#!/usr/bin/env bash
# A seeded campaign split in two shards run as parallel processes, merged, gives the results of one run of the
# whole campaign: the same runs, seeds, faults, outcomes, verdicts and devcoredump counts (vgpu-campaign compare),
# and every devcoredump of the merged results is in the merged directory with a replay that reproduces it.
#
#   tests/campaign-shards.sh [CAMPAIGN]     default campaigns/smoke.toml; results in target/campaign/shards/
#
# Then the same two shards through the Kubernetes Indexed Job's entry with stand-ins of its index variables, and
# merges that must be refused (a shard missing, one twice). Five campaign runs (about five times the smoke
# campaign's time: 2-3 minutes under TCG here), so not part of scripts/test; docs/fault-injection.md
# ("Campaigns past one machine").
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
campaign=${1:-campaigns/smoke.toml}
out=$repo/target/campaign/shards
bin=${CARGO_TARGET_DIR:-$repo/target}/release
cd "$repo" || exit 1
"$repo/images/build" all >/dev/null || { echo "campaign-shards: guest build failed"; exit 1; }
cargo build --quiet --release -p vgpu-device -p vgpu-campaign -p vgpu-replay || exit 1
rm -rf "$out" && mkdir -p "$out"

run() {  # run NAME ARGS...: one campaign process (seed 1, as the Kubernetes entry's runs below), its log in $out/NAME.log
    local name=$1; shift
    "$bin/vgpu-campaign" run "$campaign" --seed 1 --no-build --vm reuse --out "$out/$name" "$@" > "$out/$name.log" 2>&1
    echo "$name: $(tail -1 "$out/$name.log")"
}
t0=$(date +%s)
run whole
t1=$(date +%s)
run shard-1 --shard 1/2 & p1=$!
run shard-2 --shard 2/2 & p2=$!
wait $p1 $p2
t2=$(date +%s)
echo "whole: $((t1 - t0)) s; two shards in parallel: $((t2 - t1)) s"
for f in whole shard-1 shard-2; do
    [ -f "$out/$f/results.json" ] || { echo "campaign-shards: FAIL $f wrote no results"; exit 1; }
done
"$bin/vgpu-campaign" merge "$out"/shard-1/results.json "$out"/shard-2/results.json --out "$out/merged" >/dev/null 2>&1 \
    || { echo "campaign-shards: FAIL merge"; exit 1; }
"$bin/vgpu-campaign" compare "$out/whole/results.json" "$out/merged/results.json"; same=$?
# Every dump the merged results name is there, and replays (a dump whose device capture failed — the device was
# lost — holds nothing to replay: vgpu-replay says so, and it is counted apart).
dumps=0 bad=0 nocap=0
while read -r d; do
    [ -n "$d" ] || continue
    dumps=$((dumps + 1))
    [ -f "$out/merged/$d" ] || { echo "campaign-shards: merged dump $d missing"; bad=$((bad + 1)); continue; }
    r=$(cd "$out/merged" && "$bin/vgpu-replay" "$d" 2>&1); rc=$?
    if [ $rc -eq 2 ] && grep -q 'holds no device capture' <<<"$r"; then nocap=$((nocap + 1))
    elif [ $rc -ne 0 ]; then echo "campaign-shards: merged dump $d does not replay: $(tail -1 <<<"$r")"; bad=$((bad + 1)); fi
done < <(grep -o '"runs/[^"]*devcoredump-[0-9]*\.txt"' "$out/merged/results.json" | tr -d '"')
echo "merged: $dumps devcoredump(s), $nocap without a device capture, $bad not replaying"

# The Kubernetes Indexed Job's entry (scripts/campaign-k8s-shard) with stand-ins of the variables Kubernetes sets:
# completion indexes 0 and 1 of 2 are shards 1/2 and 2/2, their merge equals the whole run; a merge without
# shard 2, or with shard 1 twice, is refused and says why.
k8s=$out/k8s
k8s_ok=1
for index in 0 1; do
    JOB_COMPLETION_INDEX=$index VGPU_SHARDS=2 scripts/campaign-k8s-shard "$campaign" 1 "$k8s" > "$out/k8s-$index.log" 2>&1 \
        || { echo "campaign-shards: FAIL k8s index $index: $(tail -1 "$out/k8s-$index.log")"; k8s_ok=0; }
done
if ! grep -q "^campaign-k8s-shard: completion index 1: shard 2/2 of " "$out/k8s-1.log"; then
    echo "campaign-shards: FAIL k8s index 1 did not run shard 2/2"; k8s_ok=0
fi
scripts/campaign-k8s-shard --merge "$k8s" > "$out/k8s-merge.log" 2>&1 || { echo "campaign-shards: FAIL k8s merge"; k8s_ok=0; }
"$bin/vgpu-campaign" compare "$out/whole/results.json" "$k8s/merged/results.json" > "$out/k8s-compare.log" 2>&1 \
    || { echo "campaign-shards: FAIL k8s merged results differ from the whole run"; k8s_ok=0; }
refused() {  # refused WANT INPUTS...: the merge of INPUTS fails, saying WANT
    local msg
    msg=$("$bin/vgpu-campaign" merge "${@:2}" --out "$out/k8s-refused" 2>&1) && { echo "campaign-shards: FAIL merge of ${*:2} accepted"; k8s_ok=0; return; }
    grep -qF "$1" <<<"$msg" || { echo "campaign-shards: FAIL merge said: $msg"; k8s_ok=0; }
}
refused "incomplete shard set: shard 2/2 missing" "$k8s/shard-1/results.json"
refused "incomplete shard set: shard 1/2 twice" "$k8s/shard-1/results.json" "$k8s/shard-1/results.json" "$k8s/shard-2/results.json"
echo "k8s stand-in: indexes 0 and 1 of 2 merged $([ $k8s_ok = 1 ] && echo "as the whole run; missing and twice-merged shards refused" || echo "with failures")"

if [ $same -eq 0 ] && [ $bad -eq 0 ] && [ $k8s_ok = 1 ]; then echo "campaign-shards: ok"; else echo "campaign-shards: FAIL"; exit 1; fi
