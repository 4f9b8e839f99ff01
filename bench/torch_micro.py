#!/usr/bin/python3
"""PyTorch side of the micro-benchmarks in bench_*.cpp: the same shapes, the same names.

Each case is timed like Google Benchmark: calibrate an iteration count that runs about
--min-time seconds, then take --reps repetitions of the mean time per iteration and report
their median. Each case runs in a fresh process: PyTorch's CPU tensors come straight from
glibc malloc, and what earlier cases freed decides whether a 16 MB buffer is page-faulted
in again (measured: softmax forward + backward at 36 GB/s alone, 2.8 GB/s after the
forward case in the same process), and even alone it varies from run to run, so each case
runs in --procs fresh processes (default 3) and the median of their medians is reported.
Run with Debian's PyTorch:

  /usr/bin/python3 bench/torch_micro.py --threads 2 1
  # side by side with xgrad (a JSON written by xgrad_bench --benchmark_out=...):
  /usr/bin/python3 bench/torch_micro.py --threads 2 1 --xgrad 2=xg2.json 1=xg1.json
"""
import argparse
import json
import math
import re
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

# the three reference configs (bench_util.hpp's kRefConfigs): name, d, L, H, T, B
CONFIGS = [("tiny", 64, 2, 2, 64, 8), ("small", 256, 4, 4, 128, 8), ("medium", 512, 8, 8, 256, 4)]
VOCAB = 256
SOFTMAX_ROWS, SOFTMAX_T = 8 * 8 * 256, 256
SUM_R, SUM_C = 4096, 1024
EPS = 1e-6
CONTENDED = 1.15  # wall / CPU time above which a measurement is marked as contended


def ffn_dim(d):
    """8/3 d rounded up to a multiple of 64 (64 -> 192, 256 -> 704, 512 -> 1408)."""
    return ((8 * d + 2) // 3 + 63) // 64 * 64


def linear_shapes():
    """(M, in, out) of the configs' projections, in bench_matmul.cpp's order: qkv/o, gate/up,
    down, LM head (small's LM head is its qkv/o shape and is listed once)."""
    out = []
    for _, d, _, _, t, b in CONFIGS:
        m, f = b * t, ffn_dim(d)
        out += [(m, d, d), (m, d, f), (m, f, d)] + ([(m, d, VOCAB)] if d != VOCAB else [])
    return out


def decoder_param_shapes(d, layers):
    """bench_adamw.cpp's parameter list: the decoder LM's parameters in named_parameters() order."""
    f = ffn_dim(d)
    layer = [(d,), (d, d), (d, d), (d, d), (d, d), (d,), (f, d), (f, d), (d, f)]
    return [(VOCAB, d)] + layer * layers + [(d,), (VOCAB, d)]


LINEAR_SHAPES = linear_shapes()


def randn(*shape, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float32).requires_grad_(grad)


def cases():
    """(name, make) pairs; make() returns (step function, GFLOP or GB per step, unit)."""
    out = []

    def matmul_fwd(n):
        a, b = randn(n, n, seed=1), randn(n, n, seed=2)
        return (lambda: torch.matmul(a, b)), 2 * n ** 3 / 1e9, "GFLOP/s"

    def matmul_fwd_bwd(n):
        a, b, g = randn(n, n, seed=1, grad=True), randn(n, n, seed=2, grad=True), randn(n, n, seed=3)

        def step():
            torch.matmul(a, b).backward(g)
            a.grad = None
            b.grad = None
        return step, 3 * 2 * n ** 3 / 1e9, "GFLOP/s"

    def linear_fwd(m, k, n):
        x, w = randn(m, k, seed=1), randn(n, k, seed=2)
        return (lambda: F.linear(x, w)), 2 * m * k * n / 1e9, "GFLOP/s"

    def linear_fwd_bwd(m, k, n):
        x, w, g = randn(m, k, seed=1, grad=True), randn(n, k, seed=2, grad=True), randn(m, n, seed=3)

        def step():
            F.linear(x, w).backward(g)
            x.grad = None
            w.grad = None
        return step, 3 * 2 * m * k * n / 1e9, "GFLOP/s"

    def linear_bwd(m, k, n):
        x, w, g = randn(m, k, seed=1, grad=True), randn(n, k, seed=2, grad=True), randn(m, n, seed=3)
        y = F.linear(x, w)

        def step():
            y.backward(g, retain_graph=True)
            x.grad = None
            w.grad = None
        return step, 2 * 2 * m * k * n / 1e9, "GFLOP/s"

    def mm_out(n):
        a, b, c = randn(n, n, seed=1), randn(n, n, seed=2), torch.empty(n, n)
        return (lambda: torch.mm(a, b, out=c)), 2 * n ** 3 / 1e9, "GFLOP/s"

    def softmax_fwd(rows, t):
        x = randn(rows, t, seed=1)
        return (lambda: torch.softmax(x, -1)), 4 * 2 * rows * t / 1e9, "GB/s"

    def softmax_fwd_bwd(rows, t):
        x, g = randn(rows, t, seed=1, grad=True), randn(rows, t, seed=2)

        def step():
            torch.softmax(x, -1).backward(g)
            x.grad = None
        return step, 4 * 5 * rows * t / 1e9, "GB/s"

    def sum_last(r, c):
        x = randn(r, c, seed=1)
        return (lambda: x.sum(-1)), 4 * (r * c + r) / 1e9, "GB/s"

    def sum_dim0(r, c):
        x = randn(r, c, seed=1)
        return (lambda: x.sum(0)), 4 * (r * c + c) / 1e9, "GB/s"

    # --- the hot kernels of the reference model, as torch_step.py writes them (plain ops) ----
    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    def attention(q, k, v, mask):
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        att = att.masked_fill(mask, float("-inf"))
        return F.softmax(att, dim=-1) @ v

    def attention_fwd(b, h, t, hs, backward):
        q, k, v = (randn(b, h, t, hs, seed=i, grad=backward) for i in (1, 2, 3))
        g, mask = randn(b, h, t, hs, seed=4), torch.ones(t, t, dtype=torch.bool).triu(1)
        flop = 4 * b * h * t * t * hs  # full T x T scores, as bench_attention.cpp counts
        if not backward:
            return (lambda: attention(q, k, v, mask)), flop / 1e9, "GFLOP/s"

        def step():
            attention(q, k, v, mask).backward(g)
            q.grad = k.grad = v.grad = None
        return step, 3 * flop / 1e9, "GFLOP/s"

    def rms_norm(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w

    def rms_norm_case(rows, c, backward):
        x, w, g = randn(rows, c, seed=1, grad=backward), randn(c, seed=2, grad=backward), randn(rows, c, seed=3)
        if not backward:
            return (lambda: rms_norm(x, w)), 4 * 2 * rows * c / 1e9, "GB/s"

        def step():
            rms_norm(x, w).backward(g)
            x.grad = w.grad = None
        return step, 4 * 5 * rows * c / 1e9, "GB/s"

    def rope_case(b, h, t, hs, backward):
        x, g = randn(b, h, t, hs, seed=1, grad=backward), randn(b, h, t, hs, seed=2)
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, hs, 2, dtype=torch.float64) / hs))
        ang = torch.outer(torch.arange(t, dtype=torch.float64), inv_freq)
        ang = torch.cat((ang, ang), dim=-1)
        cos, sin = ang.cos().float(), ang.sin().float()
        n = b * h * t * hs
        if not backward:
            return (lambda: x * cos + rotate_half(x) * sin), 4 * 2 * n / 1e9, "GB/s"

        def step():
            (x * cos + rotate_half(x) * sin).backward(g)
            x.grad = None
        return step, 4 * 4 * n / 1e9, "GB/s"

    def swiglu_act(rows, f, backward):
        gate, up, g = randn(rows, f, seed=1, grad=backward), randn(rows, f, seed=2, grad=backward), randn(rows, f, seed=3)
        if not backward:
            return (lambda: F.silu(gate) * up), 4 * 3 * rows * f / 1e9, "GB/s"

        def step():
            (F.silu(gate) * up).backward(g)
            gate.grad = up.grad = None
        return step, 4 * 8 * rows * f / 1e9, "GB/s"

    def swiglu_ffn(b, t, d, f, backward):
        torch.manual_seed(0)
        w_gate, w_up, w_down = (torch.nn.Linear(i, o, bias=False) for i, o in ((d, f), (d, f), (f, d)))
        params = [w_gate.weight, w_up.weight, w_down.weight]
        x, g = randn(b, t, d, seed=1, grad=backward), randn(b, t, d, seed=2)
        flop = 3 * 2 * b * t * d * f
        if not backward:
            def fwd():
                with torch.no_grad():
                    return w_down(F.silu(w_gate(x)) * w_up(x))
            return fwd, flop / 1e9, "GFLOP/s"

        def step():
            w_down(F.silu(w_gate(x)) * w_up(x)).backward(g)
            x.grad = None
            for p in params:
                p.grad = None
        return step, 3 * flop / 1e9, "GFLOP/s"

    def cross_entropy(rows, v, backward):
        x, t = randn(rows, v, seed=1, grad=backward), torch.randint(0, v, (rows,), generator=torch.Generator().manual_seed(2))
        if not backward:
            return (lambda: F.cross_entropy(x, t)), 4 * rows * v / 1e9, "GB/s"

        def step():
            F.cross_entropy(x, t).backward()
            x.grad = None
        return step, 4 * 3 * rows * v / 1e9, "GB/s"

    def adamw(d, layers):
        params = []
        for i, shape in enumerate(decoder_param_shapes(d, layers)):
            p = randn(*shape, seed=2 * i + 1, grad=True)
            p.grad = randn(*shape, seed=2 * i + 2)
            params.append(p)
        opt = torch.optim.AdamW(params, lr=3e-4, weight_decay=0.1)
        opt.step()  # allocates m and v, as bench_adamw.cpp's untimed first step
        return opt.step, 4 * 7 * sum(p.numel() for p in params) / 1e9, "GB/s"

    for n in (256, 512, 1024):
        out.append((f"BM_MatmulForward/{n}", lambda n=n: matmul_fwd(n)))
    for n in (256, 512, 1024):
        out.append((f"BM_MatmulForwardBackward/{n}", lambda n=n: matmul_fwd_bwd(n)))
    for m, k, n in LINEAR_SHAPES:
        out.append((f"BM_LinearForward/M:{m}/in:{k}/out:{n}", lambda s=(m, k, n): linear_fwd(*s)))
    for m, k, n in LINEAR_SHAPES:
        out.append((f"BM_LinearForwardBackward/M:{m}/in:{k}/out:{n}", lambda s=(m, k, n): linear_fwd_bwd(*s)))
    for m, k, n in LINEAR_SHAPES:
        out.append((f"BM_LinearBackward/M:{m}/in:{k}/out:{n}", lambda s=(m, k, n): linear_bwd(*s)))
    out.append(("BM_SgemmRaw/1024", lambda: mm_out(1024)))
    out.append((f"BM_SoftmaxForward/rows:{SOFTMAX_ROWS}/T:{SOFTMAX_T}", lambda: softmax_fwd(SOFTMAX_ROWS, SOFTMAX_T)))
    out.append((f"BM_SoftmaxForwardBackward/rows:{SOFTMAX_ROWS}/T:{SOFTMAX_T}",
                lambda: softmax_fwd_bwd(SOFTMAX_ROWS, SOFTMAX_T)))
    out.append((f"BM_SumLastDim/R:{SUM_R}/C:{SUM_C}", lambda: sum_last(SUM_R, SUM_C)))
    out.append((f"BM_SumDim0/R:{SUM_R}/C:{SUM_C}", lambda: sum_dim0(SUM_R, SUM_C)))
    for bw, kind in ((False, "Forward"), (True, "ForwardBackward")):
        for _, d, _, h, t, b in CONFIGS:
            out.append((f"BM_Attention{kind}/B:{b}/H:{h}/T:{t}/hs:{d // h}",
                        lambda s=(b, h, t, d // h), bw=bw: attention_fwd(*s, bw)))
    for bw, kind in ((False, "Forward"), (True, "ForwardBackward")):
        for _, d, _, _, t, b in CONFIGS:
            out.append((f"BM_RMSNorm{kind}/rows:{b * t}/C:{d}", lambda s=(b * t, d), bw=bw: rms_norm_case(*s, bw)))
    for bw, kind in ((False, "Forward"), (True, "ForwardBackward")):
        for _, d, _, h, t, b in CONFIGS:
            out.append((f"BM_Rope{kind}/B:{b}/H:{h}/T:{t}/hs:{d // h}",
                        lambda s=(b, h, t, d // h), bw=bw: rope_case(*s, bw)))
    for bw, kind in ((False, "Forward"), (True, "ForwardBackward")):
        for _, d, _, _, t, b in CONFIGS:
            out.append((f"BM_SwiGLUAct{kind}/rows:{b * t}/F:{ffn_dim(d)}",
                        lambda s=(b * t, ffn_dim(d)), bw=bw: swiglu_act(*s, bw)))
    for _, d, _, _, t, b in CONFIGS:  # PyTorch has one way to write it: the same F.silu(gate) * up
        out.append((f"BM_SiLUTimesUpForward/rows:{b * t}/F:{ffn_dim(d)}",
                    lambda s=(b * t, ffn_dim(d)): swiglu_act(*s, False)))
    for bw, kind in ((False, "Forward"), (True, "ForwardBackward")):
        for _, d, _, _, t, b in CONFIGS:
            out.append((f"BM_SwiGLUFFN{kind}/B:{b}/T:{t}/d:{d}/F:{ffn_dim(d)}",
                        lambda s=(b, t, d, ffn_dim(d)), bw=bw: swiglu_ffn(*s, bw)))
    ce_rows = sorted({b * t for _, _, _, _, t, b in CONFIGS})
    for bw, kind in ((False, "Forward"), (True, "ForwardBackward")):
        for rows in ce_rows:
            out.append((f"BM_CrossEntropy{kind}/rows:{rows}/V:{VOCAB}", lambda r=rows, bw=bw: cross_entropy(r, VOCAB, bw)))
    for _, d, layers, _, _, _ in CONFIGS:
        out.append((f"BM_AdamWStep/d:{d}/L:{layers}", lambda s=(d, layers): adamw(*s)))
    return out


def time_step(step, min_time, reps, with_cpu=False):
    """Median over reps of the mean seconds per call, each rep lasting about min_time.
    with_cpu: also return the median CPU seconds of the calling thread per call (close to
    the wall time on an idle machine; well below it when other processes take the cores)."""
    step()  # warm-up (allocator, thread pool)
    iters = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(iters):
            step()
        dt = time.perf_counter() - t0
        if dt >= min_time / 4 or iters >= 1 << 20:
            break
        iters *= 2
    iters = max(1, int(iters * min_time / max(dt, 1e-9)))
    wall, cpu = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(iters):
            step()
        wall.append((time.perf_counter() - t0) / iters)
        cpu.append((time.thread_time() - c0) / iters)
    if with_cpu:
        return statistics.median(wall), statistics.median(cpu)
    return statistics.median(wall)


def load_xgrad(path):
    """name -> (median wall seconds, median main-thread CPU seconds) per iteration, from a
    Google Benchmark JSON file."""
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    with open(path) as f:
        data = json.load(f)
    res = {}
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        res[b["run_name"].replace("/real_time", "")] = (b["real_time"] * scale[b["time_unit"]],
                                                        b["cpu_time"] * scale[b["time_unit"]])
    return res


def run_isolated(name, threads, reps, min_time):
    """Times one case in a fresh interpreter; returns {"wall": s, "cpu": s} per iteration."""
    cmd = [sys.executable, __file__, "--one", name, "--threads", str(threads), "--reps", str(reps),
           "--min-time", str(min_time)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, nargs="+", default=[2, 1])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.5)
    ap.add_argument("--procs", type=int, default=3, help="fresh processes per case (median of their medians)")
    ap.add_argument("--filter", default="", help="regular expression (re.search) on the benchmark names to run, "
                                                 "e.g. 'Attention|RMSNorm'")
    ap.add_argument("--xgrad", nargs="*", default=[], metavar="THREADS=FILE",
                    help="xgrad_bench JSON per thread count, e.g. 2=xg2.json 1=xg1.json: prints a markdown "
                         "table side by side")
    ap.add_argument("--json", help="write the PyTorch medians (seconds) here")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # child mode: time one case, print JSON
    args = ap.parse_args()

    if args.one:
        torch.set_num_threads(args.threads[0])
        make = dict(cases())[args.one]
        step, _, _ = make()
        wall, cpu = time_step(step, args.min_time, args.reps, with_cpu=True)
        print(json.dumps({"wall": wall, "cpu": cpu}))
        return

    xg = {int(t): load_xgrad(f) for t, f in (x.split("=", 1) for x in args.xgrad)}
    print(f"torch {torch.__version__}", flush=True)
    torch_sec, torch_cpu, rows = {}, {}, []
    for threads in args.threads:
        torch.set_num_threads(threads)
        for name, make in cases():
            if not re.search(args.filter, name):
                continue
            _, work, unit = make()
            runs = [run_isolated(name, threads, args.reps, args.min_time) for _ in range(args.procs)]
            sec = statistics.median(r["wall"] for r in runs)
            torch_sec[(name, threads)] = sec
            torch_cpu[(name, threads)] = statistics.median(r["cpu"] for r in runs)
            if (name, work, unit) not in rows:
                rows.append((name, work, unit))
            print(f"{threads} thr  {name:55s} {sec * 1e3:10.3f} ms  {work / sec:8.1f} {unit}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({f"{n}/threads:{t}": s for (n, t), s in torch_sec.items()}, f, indent=1)
    if not xg:
        return
    # Rates (higher is better); the ratio is xgrad's rate over PyTorch's (> 1: xgrad faster).
    # A rate marked * was contended: its wall time is above CONTENDED x the main thread's CPU
    # time (the calling thread computes or spin-waits throughout, so on free cores the two agree).
    def rate(work, wall, cpu):
        return f" {work / wall:.1f}{'*' if wall > CONTENDED * cpu else ''} |"

    head = "| benchmark | unit |"
    rule = "| --- | --- |"
    for t in args.threads:
        head += f" xgrad {t}T | torch {t}T | xgrad/torch {t}T |"
        rule += " ---: | ---: | ---: |"
    print("\n" + head + "\n" + rule)
    for name, work, unit in rows:
        line = f"| {name.replace('BM_', '')} | {unit} |"
        for t in args.threads:
            ts = torch_sec.get((name, t))
            xs, xcpu = xg.get(t, {}).get(name, (None, None))
            line += rate(work, xs, xcpu) if xs else " - |"
            line += rate(work, ts, torch_cpu[(name, t)]) if ts else " - |"
            line += f" {ts / xs:.2f} |" if xs and ts else " - |"
        print(line)
    print(f"\n* contended: wall time above {CONTENDED}x the main thread's CPU time (other processes had the cores)")


if __name__ == "__main__":
    main()
