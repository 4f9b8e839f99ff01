#!/usr/bin/env bash
# LoRA SFT on 1 process and on 2 ranks: per-rank peak RSS, step time and the wait for the
# gradient sums, with xg-finetune on a base of bench's gpt2s shape (made by a 1-step xg-train).
# Usage: bash bench/lora_scaleout.sh [BUILD_DIR]   (STEPS=10 by default; the first 2 are not timed)
set -euo pipefail
B=${1:-build}
OUT=${OUT:-$B/lora_scaleout}
STEPS=${STEPS:-10}
source "$(dirname "$0")/scaleout_common.sh"
# The base: gpt2s's shape after one step (its weights do not matter for timing).
$B/bin/xg-train ${FLAGS/--steps $STEPS/--steps 1} --out "$OUT/base" >"$OUT/base.out" 2>&1
# 4,000 SFT rows of about 120 bytes, prompt and response.
python3 - "$OUT/sft.jsonl" <<'PY'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(4000):
        f.write(json.dumps({"prompt": f"Line {i}: what comes after the quick brown fox?",
                            "response": f"It jumps over the lazy dog, {i % 7 + 1} times, and again."}) + "\n")
PY
SFT="--base $OUT/base --data $OUT/sft.jsonl --steps $STEPS --warmup 0 --max-len 128 --eval-every 0"
SFT+=" --checkpoint-every 0 --log-every 1 --seed 1"
run() {
  local name=$1 ranks=$2; shift 2
  local timed="/usr/bin/time -f '%e %M' -o $OUT/$name.rss.\${OMPI_COMM_WORLD_RANK:-0} $B/bin/xg-finetune $SFT --out $OUT/$name $*"
  if [ "$ranks" = 1 ]; then
    OMP_NUM_THREADS=2 sh -c "$timed" >"$OUT/$name.out" 2>&1
  else
    OMP_NUM_THREADS=1 mpiexec $ROOT -np "$ranks" sh -c "$timed" >"$OUT/$name.out" 2>&1
  fi
}
run one 1 --batch 8
run two 2 --batch 4 --overlap-grad-sum 0
run two_overlap 2 --batch 4
printf '| layout | peak RSS per rank (MB) | wall s per rank, loading and %s steps | wait for the sums after backward, ms (median of steps 3-%s) |\n|---|---|---|---|\n' "$STEPS" "$STEPS"
for name in one two two_overlap; do
  python3 - "$OUT" "$name" <<'PY'
import glob, json, statistics, sys
out, name = sys.argv[1], sys.argv[2]
timed = [open(f).read().split()[-2:] for f in sorted(glob.glob(f"{out}/{name}.rss.*"))]
rss = [int(t[1]) / 1024 for t in timed]
wall = [float(t[0]) for t in timed]
recs = [json.loads(l) for l in open(f"{out}/{name}/log.jsonl")]
train = [r for r in recs if r.get("kind") == "train" and r["step"] > 2]
wait = [r["comm_wait_s"] * 1000 for r in train if "comm_wait_s" in r]
label = {"one": "1 process x 2 threads, --batch 8", "two": "mpirun -np 2, --batch 4, --overlap-grad-sum 0",
         "two_overlap": "mpirun -np 2, --batch 4"}[name]
w = f"{statistics.median(wait):,.1f}" if wait else "-"
print(f"| {label} | {' / '.join(f'{x:,.0f}' for x in rss)} | {' / '.join(f'{x:.1f}' for x in wall)} | {w} |")
PY
done
