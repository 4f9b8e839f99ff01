#!/usr/bin/env python3
"""A GRPO reward program for the README's part-of-speech walk-through (xg-finetune --reward-cmd):
one JSON line per sampled completion in, one number per line out, while its input stays open.

Each line is the data row's fields with "completion" set, e.g.
  {"prompt": "What part of speech is \\"cerebrally\\"?", "answers": ["adverb"], "completion": "adverb"}
It gives 1.0 when the completion's first line is the right part of speech, 0.1 when it is
another part of speech (the answer's form, the wrong class), 0.0 for anything else: an exact
verifier and a format reward in one program, the shape of what a user plugs in.

  xg-finetune --objective grpo --base runs/sft/merged --data build/data/pos_grpo_train.jsonl \\
              --out runs/grpo_cmd --reward-cmd "python3 examples/pos_reward.py"
"""
import json
import sys

PARTS = {"noun", "verb", "adjective", "adverb"}


def score(row):
    first = row.get("completion", "").split("\n", 1)[0].strip()
    if first in [a.strip() for a in row.get("answers", [])]:
        return 1.0
    return 0.1 if first in PARTS else 0.0


for line in sys.stdin:
    print(score(json.loads(line)), flush=True)
