#!/usr/bin/env bash
# ZeRO stages 1 and 2 against plain data parallelism on this machine: per-rank peak RSS and step
# time of xg-train on a model of bench's gpt2s shape, one process, 2 ranks, and 2 ranks with
# --zero 1 and --zero 2.
# Usage: bash bench/zero_scaleout.sh [BUILD_DIR]   (STEPS=8 by default; the first 2 are not timed)
set -euo pipefail
B=${1:-build}
OUT=${OUT:-$B/zero_scaleout}
STEPS=${STEPS:-8}
source "$(dirname "$0")/scaleout_common.sh"
# One rank's peak RSS into $OUT/<run>.rss.<rank> (kB), via /usr/bin/time.
run() {
  local name=$1 ranks=$2; shift 2
  local timed="/usr/bin/time -f %M -o $OUT/$name.rss.\${OMPI_COMM_WORLD_RANK:-0} $B/bin/xg-train $FLAGS --out $OUT/$name $*"
  if [ "$ranks" = 1 ]; then
    OMP_NUM_THREADS=2 sh -c "$timed" >"$OUT/$name.out"
  else
    mpiexec $ROOT -np "$ranks" sh -c "$timed" >"$OUT/$name.out"
  fi
}
run one 1 --batch 4
run two 2 --batch 2
run two_zero 2 --batch 2 --zero 1
run two_zero2 2 --batch 2 --zero 2
# The median step time over steps 3.. (4 x 128 tokens a step, from log.jsonl's tokens/s).
printf '| layout | peak RSS per rank (MB) | ms/step (median of steps 3-%s) | optimizer state per rank (MB) | gradients per rank at the step (MB) |\n|---|---|---|---|---|\n' "$STEPS"
for name in one two two_zero two_zero2; do
  python3 - "$OUT" "$name" <<'PY'
import glob, json, statistics, sys
out, name = sys.argv[1], sys.argv[2]
rss = [int(open(f).read().split()[-1]) / 1024 for f in sorted(glob.glob(f"{out}/{name}.rss.*"))]
recs = [json.loads(l) for l in open(f"{out}/{name}/log.jsonl")]
ms = statistics.median(4 * 128 / r["tokens_per_s"] * 1000 for r in recs if r["kind"] == "train" and r["step"] > 2)
state = [r for r in recs if r["kind"] == "optimizer_state"]
params = json.load(open(f"{out}/{name}/summary.json"))["parameters"]
def per_rank(suffix, whole):  # the optimizer_state record's rank<r><suffix>, or `whole` on every rank
    return [state[0][f"rank{r}{suffix}"] / 1e6 for r in range(len(rss))] if state else [whole / 1e6] * len(rss)
label = {"one": "1 process x 2 threads, --batch 4", "two": "mpirun -np 2, --batch 2",
         "two_zero": "mpirun -np 2, --batch 2 --zero 1", "two_zero2": "mpirun -np 2, --batch 2 --zero 2"}[name]
cols = [rss, per_rank("_bytes", 8 * params), per_rank("_grad_bytes", 4 * params)]
print(f"| {label} | {' / '.join(f'{x:,.0f}' for x in cols[0])} | {ms:,.0f} | "
      f"{' / '.join(f'{x:,.1f}' for x in cols[1])} | {' / '.join(f'{x:,.1f}' for x in cols[2])} |")
PY
done
