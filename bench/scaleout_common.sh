# What the scale-out benchmarks share, sourced with B, OUT and STEPS set: a fresh $OUT, the text
# they train on, and in FLAGS xg-train's flags for a model of bench's gpt2s shape.
ROOT=$( [ "$(id -u)" = 0 ] && echo --allow-run-as-root || true)
rm -rf "$OUT" && mkdir -p "$OUT"
# Any text will do for timing: 2 MB of numbered lines.
for i in $(seq 1 40000); do echo "line $i: the quick brown fox jumps over the lazy dog, again and again."; done >"$OUT/train.txt"
# gpt2s's shape (d 768, 12 layers, 12 heads) with the byte vocabulary; 4 windows of 128 per step.
FLAGS="--data $OUT/train.txt --d-model 768 --layers 12 --heads 12 --seq-len 128 --steps $STEPS --warmup 0"
FLAGS+=" --eval-every 0 --checkpoint-every 0 --sample-tokens 0 --log-every 1 --seed 1"
