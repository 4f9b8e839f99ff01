#!/usr/bin/env python3
"""Runs the executables with the bad inputs a careful tester tries (malformed and absurd flags,
files and configs; NaN models; changed resumes; shared and protected output folders; stale
temporaries; a full disk; run folders copied elsewhere; limits of a small machine) and counts how
each attempt ends. "Refused cleanly" means: a non-zero
exit, exactly one line on stderr, within 60 s, and (where the attempt names a fresh --out)
nothing written there. Standard library only; prints one line per attempt and the totals, and
exits 1 if any attempt did not end as expected.
Usage: python3 scripts/attack_battery.py [--build build]"""
import argparse
import hashlib
import json
import math
import os
import resource
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

ap = argparse.ArgumentParser()
ap.add_argument("--build", default="build")
A = ap.parse_args()
BIN = os.path.abspath(os.path.join(A.build, "bin"))
T = tempfile.mkdtemp(prefix="xgrad-attacks-")
results = []  # (kind, what, ok, detail)


def limited(address_space=None, file_size=None):
    """A preexec_fn for run(): a process of `address_space` bytes (a small machine), or whose files
    may not grow past `file_size` bytes (a full disk; SIGXFSZ ignored, so writes fail with EFBIG)."""
    def apply():
        if address_space:
            resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        if file_size:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
    return apply


def run(args, timeout=60, preexec=None):
    t0 = time.time()
    try:
        p = subprocess.run([os.path.join(BIN, args[0])] + [str(a) for a in args[1:]], capture_output=True, text=True,
                           errors="replace", timeout=timeout, preexec_fn=preexec)
        return p.returncode, p.stdout, p.stderr, time.time() - t0
    except subprocess.TimeoutExpired:
        return None, "", "timeout", timeout


def empty_or_absent(path):
    return not os.path.exists(path) or not os.listdir(path)


def refused(kind, what, args, out=None, needle=None, preexec=None):
    status, _, err, _ = run(args, preexec=preexec)
    lines = [l for l in err.split("\n") if l.strip()]
    ok = status not in (0, None) and status > 0 and len(lines) == 1 and (out is None or empty_or_absent(out))
    if needle is not None:
        ok = ok and needle in err
    results.append((kind, what, ok, f"exit {status}: {lines[0] if lines else '(no message)'}"[:160] if lines or status is not None else "timeout"))


def check(kind, what, ok, detail):
    results.append((kind, what, bool(ok), detail[:160]))


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def sha(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def jsonl(path, rows):
    write(path, "".join(json.dumps(r) + "\n" for r in rows))


def safetensors(path, tensors):  # {name: (shape, [floats])}, F32, no metadata (as PyTorch writes it)
    header, data = {}, b""
    for name, (shape, values) in tensors.items():
        raw = struct.pack(f"<{len(values)}f", *values)
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


# ---- inputs ------------------------------------------------------------------------------
readme = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "README.md")).read()
text = os.path.join(T, "train.txt"); write(text, readme[:30000])
short = os.path.join(T, "short.txt"); write(short, "tiny")
MODEL = {"--d-model": 32, "--layers": 2, "--heads": 2, "--seq-len": 32, "--batch": 4, "--sample-tokens": 0,
         "--max-seq-len": 64, "--threads": 1, "--steps": 4, "--warmup": 1}


def flags(defaults, extra):
    """defaults (a dict) with the flags in extra (flag, value, ... or a bare switch) replacing them."""
    d, i, extra = dict(defaults), 0, list(extra)
    while i < len(extra):
        if i + 1 < len(extra) and not str(extra[i + 1]).startswith("--"):
            d[extra[i]] = extra[i + 1]; i += 2
        else:
            d[extra[i]] = None; i += 1
    out = []
    for k, v in d.items():
        out += [k] if v is None else [k, v]
    return out


model_flags = flags(MODEL, [])
base = os.path.join(T, "base")
status, _, err, _ = run(["xg-train", "--data", text, "--out", base] + model_flags)
assert status == 0, err
sft = os.path.join(T, "sft.jsonl"); jsonl(sft, [{"prompt": f"Is {w} a word?", "response": "yes"} for w in ["cat", "dog", "sun"]])
dpo = os.path.join(T, "dpo.jsonl"); jsonl(dpo, [{"prompt": "p", "chosen": "yes", "rejected": "no"}] * 3)
grpo = os.path.join(T, "grpo.jsonl"); jsonl(grpo, [{"prompt": "Say yes.", "answers": ["yes"]}] * 3)
long_sft = os.path.join(T, "long_sft.jsonl"); jsonl(long_sft, [{"prompt": "x" * 200, "response": "y"}])
long_grpo = os.path.join(T, "long_grpo.jsonl"); jsonl(long_grpo, [{"prompt": "x" * 200, "answers": ["y"]}])
fresh = lambda name: os.path.join(T, "out-" + name)
train = lambda *extra: ["xg-train", "--data", text] + flags(MODEL, extra)
finetune = lambda data, *extra: ["xg-finetune", "--base", base, "--data", data] + flags({"--steps": 2, "--warmup": 0, "--threads": 1}, extra)

# ---- bad input found late ------------------------------------------------------------------
K = "bad input found before work"
refused(K, "--eval-data shorter than one window", train("--eval-data", short, "--out", fresh("a1")), fresh("a1"))
refused(K, "--data shorter than one window", ["xg-train", "--data", short, "--out", fresh("a2")] + model_flags, fresh("a2"))
refused(K, "an SFT row longer than the model's positions", finetune(long_sft, "--out", fresh("a3")), fresh("a3"), ":1:")
refused(K, "a GRPO prompt longer than the model's positions", finetune(long_grpo, "--objective", "grpo", "--out", fresh("a4")), fresh("a4"), ":1:")
refused(K, "a folder as --data", ["xg-train", "--data", T, "--out", fresh("a5")] + model_flags, fresh("a5"))

# ---- absurd values -------------------------------------------------------------------------
K = "absurd values"
for flag, value in [("--seq-len", 100000000), ("--max-seq-len", 100000000), ("--batch", 100000000), ("--layers", 100000),
                    ("--d-model", 10000000), ("--steps", -1), ("--lr", "nan"), ("--clip", "-1")]:
    refused(K, f"xg-train {flag} {value}", train("--out", fresh("b" + flag), flag, value), fresh("b" + flag))
for flag, value in [("--group-size", 100000), ("--epochs", "1e30"), ("--epochs", "inf"), ("--label-smoothing", "nan"),
                    ("--label-smoothing", 2), ("--max-new-tokens", 0), ("--lora-r", 0), ("--beta", "-1")]:
    objective = "grpo" if flag in ("--group-size", "--max-new-tokens") else "dpo"
    if flag == "--lora-r":
        objective = "sft"
    data = {"grpo": grpo, "dpo": dpo, "sft": sft}[objective]
    refused(K, f"xg-finetune --objective {objective} {flag} {value}",
            finetune(data, "--objective", objective, "--out", fresh("c" + flag + str(value)), flag, value), fresh("c" + flag + str(value)))
for flag, value in [("--samples", 1000000000), ("--temperature", "1e-320"), ("--top-p", 0), ("--max-new-tokens", 0)]:
    refused(K, f"xg-generate {flag} {value}", ["xg-generate", "--base", base, flag, value])
for field, value in [("n_layers", 1000000000), ("max_seq_len", 200000000), ("vocab_size", -3)]:
    bad = os.path.join(T, "cfg-" + field); shutil.copytree(base, bad)
    cfg = json.load(open(os.path.join(bad, "config.json")))
    (cfg["block"] if field == "max_seq_len" else cfg)[field] = value
    json.dump(cfg, open(os.path.join(bad, "config.json"), "w"))
    refused(K, f"config.json {field} {value}", ["xg-generate", "--base", bad, "--prompt", "a"], needle=field)

# ---- config fields silently defaulted ------------------------------------------------------
K = "config fields defaulted"
for field in ["n_heads", "rope_layout", "norm"]:
    bad = os.path.join(T, "nocfg-" + field); shutil.copytree(base, bad)
    cfg = json.load(open(os.path.join(bad, "config.json")))
    owner = cfg["block"]["attention"] if field == "n_heads" else cfg["block"]
    assert field in owner, field
    owner.pop(field)
    json.dump(cfg, open(os.path.join(bad, "config.json"), "w"))
    refused(K, f"config.json without block.{field}", ["xg-generate", "--base", bad, "--prompt", "a"], needle=field)

# ---- NaN written as success ----------------------------------------------------------------
K = "non-finite values"
out = fresh("d1")
status, _, err, _ = run(train("--out", out, "--steps", 40, "--lr", 60, "--clip", 0, "--on-nan", "skip"))
check(K, "--lr 60 --clip 0 --on-nan skip: fails, no model written", status not in (0, None) and not os.path.exists(os.path.join(out, "model.safetensors")),
      f"exit {status}: {err.strip().splitlines()[-1] if err.strip() else ''}")
nan_base = os.path.join(T, "nan-base"); shutil.copytree(base, nan_base)
names = json.loads(open(os.path.join(base, "model.safetensors"), "rb").read()[8:8 + struct.unpack("<Q", open(os.path.join(base, "model.safetensors"), "rb").read(8))[0]])
tensors = {}
raw = open(os.path.join(base, "model.safetensors"), "rb").read()
hl = struct.unpack("<Q", raw[:8])[0]
for name, info in names.items():
    if name == "__metadata__":
        continue
    a, b = info["data_offsets"]
    vals = list(struct.unpack(f"<{(b - a) // 4}f", raw[8 + hl + a:8 + hl + b]))
    if name.endswith("output.weight") or name == "output.weight":
        vals[0] = math.nan
    tensors[name] = (info["shape"], vals)
safetensors(os.path.join(nan_base, "model.safetensors"), tensors)
refused(K, "a NaN in the base weights (file without checksums)", ["xg-generate", "--base", nan_base, "--prompt", "a", "--max-new-tokens", 4])
ad = fresh("d2")
status, _, err, _ = run(finetune(sft, "--out", ad))
assert status == 0, err
cfg = json.load(open(os.path.join(ad, "adapter_config.json")))
for what, change in [("lora_alpha 1e308", lambda c: c.update(lora_alpha=1e308)), ("lora_alpha NaN", lambda c: c.update(lora_alpha="nan"))]:
    bad = os.path.join(T, "adapter-" + what.replace(" ", "_")); shutil.copytree(ad, bad)
    c = dict(cfg); change(c); json.dump(c, open(os.path.join(bad, "adapter_config.json"), "w"))
    refused(K, f"adapter_config.json {what}", ["xg-generate", "--base", base, "--adapter", bad, "--prompt", "a", "--max-new-tokens", 4])

# ---- resume accepts other settings ---------------------------------------------------------
K = "resume with other settings"
run_out = fresh("e")
status, _, err, _ = run(train("--out", run_out, "--checkpoint-every", 2))
assert status == 0, err
args_sha = sha(os.path.join(run_out, "args.json"))
for flag, value in [("--lr", 0.5), ("--batch", 8), ("--seq-len", 16), ("--d-model", 64)]:
    refused(K, f"--resume with {flag} {value}", train("--out", run_out, "--resume", flag, value), needle=flag.lstrip("-"))
check(K, "a refused resume leaves args.json as it was", sha(os.path.join(run_out, "args.json")) == args_sha, "args.json unchanged")
orig = open(text).read(); write(text, orig.replace("a", "b", 50))
refused(K, "--resume after the data file changed", train("--out", run_out, "--resume"), needle="data")
write(text, orig)

# ---- output folders ------------------------------------------------------------------------
K = "output folders"
refused(K, "an existing non-empty --out without --resume", train("--out", run_out))
refused(K, "xg-finetune --out equal to --base", finetune(sft, "--out", base))
refused(K, "xg-finetune --out inside --base", finetune(sft, "--out", os.path.join(base, "sub")))
live_out = fresh("f")
live = subprocess.Popen([os.path.join(BIN, "xg-train"), "--data", text, "--out", live_out] +
                        [str(a) for a in flags(MODEL, ["--steps", 100000])], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(100):
    if os.path.exists(os.path.join(live_out, "args.json")):
        break
    time.sleep(0.1)
refused(K, "a second run on a live run's --out (--overwrite)", train("--out", live_out, "--overwrite"))
refused(K, "a --resume beside a live run", train("--out", live_out, "--resume"))
live.kill(); live.wait()

# ---- leftovers and partial files -----------------------------------------------------------
K = "leftovers and partial files"
stale = os.path.join(run_out, "model.safetensors.tmp.999999")
write(stale, "partial")
status, _, err, _ = run(train("--out", run_out, "--resume", "--steps", 6, "--allow-change", "steps"))
check(K, "a dead process's .tmp.<pid> is removed by the next run", status == 0 and not os.path.exists(stale), f"exit {status}")
full = fresh("g"); os.makedirs(full); os.symlink("/dev/full", os.path.join(full, "log.jsonl"))
status, _, err, _ = run(train("--out", full, "--resume", "--log-every", 1, "--steps", 10))
check(K, "a full disk (log.jsonl on /dev/full) stops the run naming the file",
      status not in (0, None) and "log.jsonl" in err and not os.path.exists(os.path.join(full, "model.safetensors")), err.strip()[:160])

# ---- run folders that move, stale temporaries, sizes against the process's memory, full disks
K = "round three (moved runs, stale temporaries, size flags, full disk)"
copy = fresh("h"); shutil.copytree(run_out, copy)
moved = os.path.join(T, "moved.txt"); shutil.copy(text, moved)
moved_train = lambda *extra: ["xg-train", "--data", moved] + flags(MODEL, extra)
status, out, err, _ = run(moved_train("--out", copy, "--resume", "--steps", 8, "--allow-change", "steps"))
check(K, "a copied run folder with moved data resumes", status == 0 and "resume step" in out, f"exit {status}: {err.strip()[:120]}")
refused(K, "a copied run folder resumed with another --seed names --seed", moved_train("--out", copy, "--resume", "--steps", 8, "--seed", 7), needle="--seed")
zombie = os.fork()
if zombie == 0:
    os._exit(0)
time.sleep(0.1)
stale = os.path.join(run_out, f"checkpoint.safetensors.tmp.{zombie}")
write(stale, "partial")
status, _, err, _ = run(train("--out", run_out, "--resume", "--steps", 8, "--allow-change", "steps"))
check(K, "a kill -9ed writer not yet reaped (a zombie): its .tmp.<pid> is removed", status == 0 and not os.path.exists(stale), f"exit {status}")
os.waitpid(zombie, 0)
small = limited(address_space=4 * 10**9)
refused(K, "xg-finetune --group-size 10000 in a 4 GB address space", finetune(grpo, "--objective", "grpo", "--group-size", 10000,
        "--max-new-tokens", 8, "--out", fresh("i1")), fresh("i1"), needle="--group-size", preexec=small)
refused(K, "xg-generate --samples 1000000 in a 4 GB address space", ["xg-generate", "--base", base, "--samples", 1000000],
        needle="--samples", preexec=small)
fills = fresh("j"); shutil.copytree(run_out, fills)
limit = os.path.getsize(os.path.join(fills, "log.jsonl")) + 4000
status, _, err, _ = run(train("--out", fills, "--resume", "--steps", 2000, "--allow-change", "steps", "--checkpoint-every", 0),
                        preexec=limited(file_size=limit))
log = open(os.path.join(fills, "log.jsonl")).read()
whole = log.endswith("\n") and all(json.loads(line) is not None for line in log.splitlines())
check(K, "a disk that fills mid-run: the run stops naming log.jsonl, every log line whole",
      status not in (0, None) and "log.jsonl" in err and whole, err.strip()[:160])

# ---- TRL's dataset formats, chat template files and variables, rewards, --prompts ---------------
K = "dataset formats, chat templates, rewards, --prompts"
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "chat_templates")
qwen = os.path.join(FIXTURES, "qwen2_5.jinja")
turn = lambda role, content: {"role": role, "content": content}  # noqa: E731
good_row = {"messages": [turn("user", "Is cat a word?"), turn("assistant", "yes")]}
for what, bad in [("roles out of order (the assistant first)", [turn("assistant", "yes"), turn("user", "Is cat a word?")]),
                  ("two user messages in a row", [turn("user", "a"), turn("user", "b"), turn("assistant", "c")]),
                  ("a message without content", [turn("user", "Is cat a word?"), {"role": "assistant"}]),
                  ("content that is not a string", [turn("user", "Is cat a word?"), turn("assistant", 5)]),
                  ("an unknown role", [turn("user", "Is cat a word?"), turn("robot", "yes")])]:
    path = os.path.join(T, "msgs-" + what.split()[0] + str(len(results)) + ".jsonl")
    jsonl(path, [good_row, {"messages": bad}])
    o = fresh("k" + str(len(results)))
    refused(K, f"a messages row with {what} (line 2)", finetune(path, "--chat-template", qwen, "--out", o), o, ":2:")
huge = os.path.join(T, "huge-turn.jsonl")
jsonl(huge, [{"messages": [turn("user", "Is cat a word?"), turn("assistant", "y" * (50 << 20))]}])
refused(K, "a 50 MB assistant turn", finetune(huge, "--chat-template", qwen, "--out", fresh("k-huge")), fresh("k-huge"), ":1:")
msgs = os.path.join(T, "msgs.jsonl"); jsonl(msgs, [good_row] * 3)
refused(K, "--template-var the template never reads", finetune(msgs, "--chat-template", qwen, "--template-var",
        "enable_thinking=false", "--out", fresh("k-var")), fresh("k-var"), "enable_thinking")
for what, source in [("a macro that calls itself", "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
                     ("a range of 10^9", "{% for i in range(1000000000) %}{{ i }}{% endfor %}"),
                     ("three nested loops of 10^5 (10^15 iterations)",
                      "{% for i in range(100000) %}{% for j in range(100000) %}{% for k in range(100000) %}"
                      "{{ k }}{% endfor %}{% endfor %}{% endfor %}"),
                     ("output doubled 64 times", "{% set ns = namespace(s='x') %}{% for i in range(64) %}"
                                                 "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}")]:
    path = os.path.join(T, "tmpl" + str(len(results)) + ".jinja"); write(path, source)
    o = fresh("k" + str(len(results)))
    t0 = time.time()
    refused(K, f"a chat template file with {what}", finetune(msgs, "--chat-template", path, "--out", o), o)
    results[-1] = results[-1][:3] + (results[-1][3] + f" ({time.time() - t0:.1f} s)",)
refused(K, "an unknown --reward name", finetune(grpo, "--objective", "grpo", "--reward", "exactt", "--out", fresh("k-rw")),
        fresh("k-rw"), "exactt")
refused(K, "a --reward weight that is not finite", finetune(grpo, "--objective", "grpo", "--reward", "exact:nan",
        "--out", fresh("k-rw2")), fresh("k-rw2"), "--reward")
prompts = os.path.join(T, "prompts.jsonl"); write(prompts, '{"prompt": "a"}\n{"prompt": 5}\n')
refused(K, "a --prompts line whose prompt is not a string (line 2)", ["xg-generate", "--base", base, "--prompts", prompts,
        "--max-new-tokens", 2], needle=":2")
write(prompts, '{"prompt": "a"}\n{"messages": [{"role": "user", "content": "x"}, {"role": "user"}]}\n')
refused(K, "a --prompts conversation with a message without content (line 2)", ["xg-generate", "--base", base, "--prompts", prompts,
        "--chat-template", qwen, "--max-new-tokens", 2], needle=":2")
write(prompts, '{"prompt": "a"}\n{"messages": [{"role": "user", "content": "x"}, {"role": "user", "content": "y"}]}\n')
refused(K, "a --prompts conversation with two user messages in a row (line 2)", ["xg-generate", "--base", base, "--prompts",
        prompts, "--chat-template", qwen, "--max-new-tokens", 2], needle=":2: messages[1] (user) is out of order")
write(prompts, '{"prompt": "a"}\n{"prompt": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]}\n')
refused(K, "a --prompts conversation that ends with the assistant's turn (line 2)", ["xg-generate", "--base", base,
        "--prompts", prompts, "--chat-template", qwen, "--max-new-tokens", 2], needle=":2: prompt[1] (assistant)")
write(prompts, '{"prompt": "a"}\n{"prompt": "b"\n')
refused(K, "a --prompts line that is not JSON (line 2)", ["xg-generate", "--base", base, "--prompts", prompts,
        "--max-new-tokens", 2], needle=":2")

# ---- reward programs (--reward-cmd): one JSON line in, one number out, bounded -----------------
K = "reward programs"
# Each program reads its request first (except where not reading is the attack). The run must
# stop within --reward-timeout plus startup, naming the program and what it did, in one line,
# and leave --out as it found it: absent (the first step's rewards fail, before any checkpoint).
programs = [
    ("hangs (never answers)", "import sys, time\nsys.stdin.readline()\ntime.sleep(1000)\n", "gave no answer within 1 s"),
    ("hangs in a child it started (the shell's process group)",
     "import subprocess, sys\nsys.stdin.readline()\nsubprocess.Popen(['sleep', '1000'])\nsubprocess.call(['sleep', '1000'])\n",
     "gave no answer within 1 s"),
    # The shell execs a one-command program, so the crash is the program's own signal, and no
    # "Segmentation fault" line of the shell's joins xg-finetune's one line on stderr.
    ("crashes (SIGSEGV)", "import os, signal, sys\nsys.stdin.readline()\nos.kill(os.getpid(), signal.SIGSEGV)\n",
     "killed by signal 11 (SIGSEGV)"),
    ("exits with status 3", "import sys\nsys.stdin.readline()\nsys.exit(3)\n", "status 3"),
    ("floods its output (100 MB without a newline)", "import sys\nsys.stdin.readline()\nsys.stdout.write('1' * 100000000)\n",
     "without a newline"),
    ("prints a word", "import sys\nsys.stdin.readline()\nprint('great job', flush=True)\nsys.stdin.readline()\n", "not a number"),
    ("prints NaN", "import sys\nsys.stdin.readline()\nprint('nan', flush=True)\nsys.stdin.readline()\n", "finite"),
    ("prints 1e999", "import sys\nsys.stdin.readline()\nprint('1e999', flush=True)\nsys.stdin.readline()\n", "finite"),
    ("never reads its input", "import time\ntime.sleep(1000)\n", "within 1 s"),
]
for what, source, needle in programs:
    prog = os.path.join(T, f"reward{len(results)}.py"); write(prog, source)
    o = fresh(f"r{len(results)}")
    t0 = time.time()
    status, _, err, took = run(finetune(grpo, "--objective", "grpo", "--reward-cmd", f"python3 {prog}", "--reward-timeout", 1,
                                        "--group-size", 2, "--max-new-tokens", 4, "--out", o), timeout=30)
    lines = [l for l in err.split("\n") if l.strip()]
    ok = (status not in (0, None) and len(lines) == 1 and needle in err and prog in err and took < 20
          and empty_or_absent(o))
    check(K, f"a reward program that {what}", ok,
          f"exit {status} in {took:.1f} s: {lines[0] if len(lines) == 1 else lines}"[:200])

# A program that cannot run is found before the model loads: one line naming --reward-cmd.
plain = os.path.join(T, "not-executable.py"); write(plain, "print(1)\n")
for what, cmd, needle in [("is not there", "no-such-reward-program-xg --flag", "no program 'no-such-reward-program-xg'"),
                          ("is a file that is not executable", plain, "is not executable")]:
    o = fresh(f"r{len(results)}")
    refused(K, f"a --reward-cmd program that {what}", finetune(grpo, "--objective", "grpo", "--reward-cmd", cmd, "--out", o),
            o, needle)

# ---- report --------------------------------------------------------------------------------
shutil.rmtree(T, ignore_errors=True)
kinds = []
for kind, what, ok, detail in results:
    if kind not in kinds:
        kinds.append(kind)
    print(f"{'ok ' if ok else 'BAD'}  [{kind}] {what}: {detail}")
print()
for kind in kinds:
    rs = [r for r in results if r[0] == kind]
    print(f"{kind}: {sum(r[2] for r in rs)} of {len(rs)} as expected")
print(f"total: {len(results)} attempts, {sum(r[2] for r in results)} ended as expected, {sum(not r[2] for r in results)} did not")
sys.exit(0 if all(r[2] for r in results) else 1)
