#!/usr/bin/env bash
# Gradient sums overlapped with backward against sums after it: how long a step waits for the
# sums once its backward is done (rank 0's comm_wait_s in log.jsonl), and the step time, of
# xg-train on a model of bench's gpt2s shape on 2 ranks of 1 thread, the two layouts alternated,
# and each rank's peak RSS.
# Usage: bash bench/overlap_scaleout.sh [BUILD_DIR]   (STEPS=8, ROUNDS=2; the first 2 steps not timed)
set -euo pipefail
B=${1:-build}
OUT=${OUT:-$B/overlap_scaleout}
STEPS=${STEPS:-8}
ROUNDS=${ROUNDS:-2}
RANKS=${RANKS:-2}
source "$(dirname "$0")/scaleout_common.sh"
FLAGS+=" --batch $((4 / RANKS))"
for round in $(seq 1 "$ROUNDS"); do
  for overlap in 0 1; do
    # Each rank's peak RSS into $OUT/o<overlap>_r<round>.rss.<rank> (kB), via /usr/bin/time.
    name=o${overlap}_r$round
    OMP_NUM_THREADS=1 mpiexec $ROOT -np "$RANKS" sh -c "/usr/bin/time -f %M -o $OUT/$name.rss.\${OMPI_COMM_WORLD_RANK} \
      $B/bin/xg-train $FLAGS --out $OUT/$name --overlap-grad-sum $overlap ${EXTRA:-}" >"$OUT/$name.out"
  done
done
printf '| --overlap-grad-sum | wait for the sums after backward, ms: median (min-max) of steps 3-%s | ms/step: median (min-max) | peak RSS per rank, MB (max over runs) |\n|---|---|---|---|\n' "$STEPS"
for overlap in 0 1; do
  python3 - "$OUT" "$overlap" "$ROUNDS" <<'PY'
import glob, json, statistics, sys
out, overlap, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
waits, steps = [], []
for r in range(1, rounds + 1):
    for line in open(f"{out}/o{overlap}_r{r}/log.jsonl"):
        rec = json.loads(line)
        if rec["kind"] == "train" and rec["step"] > 2:
            waits.append(rec["comm_wait_s"] * 1000)
            steps.append(4 * 128 / rec["tokens_per_s"] * 1000)
rss = {}
for f in glob.glob(f"{out}/o{overlap}_r*.rss.*"):
    rank = int(f.rsplit(".", 1)[1])
    rss[rank] = max(rss.get(rank, 0), int(open(f).read().split()[-1]) / 1024)
peaks = " / ".join(f"{rss[r]:,.0f}" for r in sorted(rss))
print(f"| {overlap} | {statistics.median(waits):,.0f} ({min(waits):,.0f}-{max(waits):,.0f}) | {statistics.median(steps):,.0f} ({min(steps):,.0f}-{max(steps):,.0f}) | {peaks} |")
PY
done
