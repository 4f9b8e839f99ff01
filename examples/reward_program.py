#!/usr/bin/env python3
"""A GRPO reward program for xg-finetune --reward-cmd: a verifier that reads one JSON line per
sampled completion and answers one number per line, as long as its input stays open.

Each line is the data row's fields with "completion" set, e.g.
  {"prompt": "What is 17 * 23?", "answers": ["391"], "completion": "17 * 23 = 391"}
This one gives 1.0 when the completion's last number equals one of the answers, 0.2 when it
has a number but the wrong one, 0.0 otherwise (the shape of a math verifier). Anything may be
computed here (run unit tests, call a judge); xg-finetune waits up to --reward-timeout
seconds for each answer and stops the run, naming the row, on a crash or a non-number.

  xg-finetune --objective grpo --base BASE --data rows.jsonl --out runs/grpo \\
              --reward-cmd "python3 examples/reward_program.py"
"""
import json
import re
import sys

NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def score(row):
    found = NUMBER.findall(row.get("completion", "").replace(",", ""))
    if not found:
        return 0.0
    answers = [a.replace(",", "").strip() for a in row.get("answers", [])]
    return 1.0 if any(float(found[-1]) == float(a) for a in answers if NUMBER.fullmatch(a)) else 0.2


for line in sys.stdin:
    print(score(json.loads(line)), flush=True)  # one answer per line, flushed: xg-finetune waits for it
