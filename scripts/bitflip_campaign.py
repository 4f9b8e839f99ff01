#!/usr/bin/env python3
"""Flips single bits in the files xgrad writes and counts what each reader does with them.

Trains a small model with xg-train (4 steps, a checkpoint at step 2), then for FLIPS random bits
(half in a file's safetensors header, half in its tensor data; seeded) of
  - model.safetensors, read by xg-generate (greedy, 4 tokens), and
  - checkpoint.safetensors, read by xg-train --resume (to step 6),
and prints, per file and part: refused with a one-line error, accepted with the same result as
the intact file (a flip the format cannot tell from a valid file, e.g. in JSON whitespace), and
accepted with another result (damage that went unnoticed). Standard library only.
Usage: python3 scripts/bitflip_campaign.py [--build build] [--flips 100] [--seed 1]"""
import argparse
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, errors="replace")
    return p.returncode, p.stdout, p.stderr


def header_size(path):
    with open(path, "rb") as f:
        return 8 + struct.unpack("<Q", f.read(8))[0]


examples = {}  # (part, kind) -> the first message of a refusal that is not one line


def campaign(name, path, reader, flips, rng):
    good = open(path, "rb").read()
    want = reader()
    assert want[0] == 0, f"{name}: the intact file fails: {want[2]}"
    head = header_size(path)
    counts = {}
    for i in range(flips):
        part = "header" if i % 2 == 0 else "data"
        lo, hi = (0, head) if part == "header" else (head, len(good))
        at = rng.randrange(lo, hi)
        bad = bytearray(good)
        bad[at] ^= 1 << rng.randrange(8)
        open(path, "wb").write(bad)
        status, out, err = reader()
        if status != 0:
            kind = "refused, one line" if err.count("\n") == 1 else "refused, not one line"
            if status < 0:
                kind = f"crashed (signal {-status})"
        else:
            kind = "accepted, same result" if (out, status) == (want[1], want[0]) else "accepted, another result"
        counts[(part, kind)] = counts.get((part, kind), 0) + 1
        if kind == "refused, not one line" and (part, kind) not in examples:
            examples[(part, kind)] = err.strip()[:400]
    open(path, "wb").write(good)
    return counts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--flips", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    bin_dir = os.path.join(a.build, "bin")
    rng = random.Random(a.seed)
    tmp = tempfile.mkdtemp(prefix="xgrad-bitflips-")
    try:
        text = os.path.join(tmp, "train.txt")
        with open(text, "w") as f:
            f.write(open(os.path.join(os.path.dirname(__file__), "..", "README.md")).read()[:20000])
        out = os.path.join(tmp, "o")
        flags = [os.path.join(bin_dir, "xg-train"), "--data", text, "--out", out, "--d-model", "32", "--layers", "2",
                 "--heads", "2", "--seq-len", "32", "--batch", "4", "--warmup", "1", "--checkpoint-every", "2",
                 "--sample-tokens", "0", "--threads", "1"]
        status, _, err = run(flags + ["--steps", "4"])
        assert status == 0, err
        shutil.copytree(out, out + ".intact")

        def generate():  # reads out/model.safetensors (and config.json)
            return run([os.path.join(bin_dir, "xg-generate"), "--base", out, "--prompt", "The", "--temperature", "0",
                        "--max-new-tokens", "4", "--ids", "--threads", "1"])

        def resume():
            # The run folder as the training left it, with the checkpoint under test; the result
            # compared is the final model's bytes.
            ckpt = os.path.join(out, "checkpoint.safetensors")
            under_test = open(ckpt, "rb").read()
            shutil.rmtree(out)
            shutil.copytree(out + ".intact", out)
            open(ckpt, "wb").write(under_test)
            status, stdout, err = run(flags + ["--steps", "6", "--allow-change", "steps", "--resume"])
            model = os.path.join(out, "model.safetensors")
            return status, (open(model, "rb").read() if status == 0 else b""), err

        results = {
            "model.safetensors (xg-generate)": campaign("model", os.path.join(out, "model.safetensors"), generate, a.flips, rng),
            "checkpoint.safetensors (xg-train --resume)":
                campaign("checkpoint", os.path.join(out, "checkpoint.safetensors"), resume, a.flips, rng),
        }
        for name, counts in results.items():
            print(name)
            for (part, kind), n in sorted(counts.items()):
                print(f"  {part:6s}  {kind:28s} {n}")
        for (part, kind), msg in examples.items():
            print(f"example ({part}, {kind}): {msg}")
        bad = sum(n for c in results.values() for (_, k), n in c.items() if k.startswith(("accepted, another", "crashed")))
        print(f"unnoticed damage or crashes: {bad}")
        return 1 if bad else 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
