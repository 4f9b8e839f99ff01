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
import statistics
import subprocess
import sys
import time

import torch
import torch.nn.functional as F

LINEAR_SHAPES = [(1024, 256, 704), (1024, 704, 256), (1024, 512, 1408), (1024, 1408, 512)]
SOFTMAX_ROWS, SOFTMAX_T = 8 * 8 * 256, 256
SUM_R, SUM_C = 4096, 1024


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

    for n in (256, 512, 1024):
        out.append((f"BM_MatmulForward/{n}", lambda n=n: matmul_fwd(n)))
    for n in (256, 512, 1024):
        out.append((f"BM_MatmulForwardBackward/{n}", lambda n=n: matmul_fwd_bwd(n)))
    for m, k, n in LINEAR_SHAPES:
        out.append((f"BM_LinearForward/M:{m}/in:{k}/out:{n}", lambda s=(m, k, n): linear_fwd(*s)))
    for m, k, n in LINEAR_SHAPES:
        out.append((f"BM_LinearForwardBackward/M:{m}/in:{k}/out:{n}", lambda s=(m, k, n): linear_fwd_bwd(*s)))
    out.append(("BM_SgemmRaw/1024", lambda: mm_out(1024)))
    out.append((f"BM_SoftmaxForward/rows:{SOFTMAX_ROWS}/T:{SOFTMAX_T}", lambda: softmax_fwd(SOFTMAX_ROWS, SOFTMAX_T)))
    out.append((f"BM_SoftmaxForwardBackward/rows:{SOFTMAX_ROWS}/T:{SOFTMAX_T}",
                lambda: softmax_fwd_bwd(SOFTMAX_ROWS, SOFTMAX_T)))
    out.append((f"BM_SumLastDim/R:{SUM_R}/C:{SUM_C}", lambda: sum_last(SUM_R, SUM_C)))
    out.append((f"BM_SumDim0/R:{SUM_R}/C:{SUM_C}", lambda: sum_dim0(SUM_R, SUM_C)))
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
    """name -> median seconds per iteration, from a Google Benchmark JSON file."""
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    with open(path) as f:
        data = json.load(f)
    res = {}
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
            continue
        res[b["run_name"].replace("/real_time", "")] = b["real_time"] * scale[b["time_unit"]]
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
    ap.add_argument("--filter", default="", help="substring of the benchmark names to run")
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
    torch_sec, rows = {}, []
    for threads in args.threads:
        torch.set_num_threads(threads)
        for name, make in cases():
            if args.filter not in name:
                continue
            _, work, unit = make()
            sec = statistics.median(run_isolated(name, threads, args.reps, args.min_time)["wall"]
                                    for _ in range(args.procs))
            torch_sec[(name, threads)] = sec
            if (name, work, unit) not in rows:
                rows.append((name, work, unit))
            print(f"{threads} thr  {name:55s} {sec * 1e3:10.3f} ms  {work / sec:8.1f} {unit}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({f"{n}/threads:{t}": s for (n, t), s in torch_sec.items()}, f, indent=1)
    if not xg:
        return
    # Rates (higher is better); the ratio is xgrad's rate over PyTorch's (> 1: xgrad faster).
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
            xs = xg.get(t, {}).get(name)
            line += f" {work / xs:.1f} |" if xs else " - |"
            line += f" {work / ts:.1f} |" if ts else " - |"
            line += f" {ts / xs:.2f} |" if xs and ts else " - |"
        print(line)


if __name__ == "__main__":
    main()
