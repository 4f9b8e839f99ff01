#!/usr/bin/python3
# torch_step.py: the reference training step in PyTorch 1.13 (Debian's python3-torch), the same
# model, init, data and FLOP formula as xgrad_step_bench, printing the same JSON keys.
"""Times training steps of the reference LLaMA-style byte LM (bench/README.md) in PyTorch and
prints one JSON object with the keys of build/bench/xgrad_step_bench. Run with /usr/bin/python3.

The model is plain PyTorch code: attention is matmul + causal mask + softmax + matmul (torch
1.13 has no fused SDPA), RMSNorm is written out (torch 1.13 has none), RoPE is rotate-half.
Parameters keep the modules' default init, as xgrad's DecoderLM does: nn.Linear's
kaiming_uniform(a=sqrt(5)), nn.Embedding's N(0, 1), RMSNorm gains 1.

Threads: --threads N calls torch.set_num_threads(N) (with Debian's OpenMP OpenBLAS that is also
the BLAS thread count: both read libgomp's omp_get_max_threads); --wait-policy sets
OMP_WAIT_POLICY before torch (and so libgomp) is loaded. GLIBC_TUNABLES (malloc) can only
come from the environment; bench/compare sets it for the settings that use it.
"""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

CONFIGS = {
    # d, layers, heads, seq, batch, default warmup, default steps (as step_bench.cpp)
    "tiny": (64, 2, 2, 64, 8, 10, 100),
    "small": (256, 4, 4, 128, 8, 3, 20),
    "medium": (512, 8, 8, 256, 4, 2, 10),
    "gpt2s": (768, 12, 12, 512, 4, 2, 3),  # GPT-2 small's width, depth, heads and context; 2 warm-up steps as step_bench.cpp
}
VOCAB = 256
FLOP_FORMULA = ("per token 6*N + 12*L*T*d, N = L*(4*d^2 + 3*d*d_ff) + d*V (matmul weights incl. LM head, "
                "no embedding); per step times B*T tokens")


def ffn_dim(d):
    """8/3 d rounded up to a multiple of 64 (64 -> 192, 256 -> 704, 512 -> 1408)."""
    return ((8 * d + 2) // 3 + 63) // 64 * 64


def matmul_params(d, layers):
    return layers * (4 * d * d + 3 * d * ffn_dim(d)) + d * VOCAB


def flop_per_step(d, layers, seq, batch):
    """PaLM's model FLOPs (see step_bench.cpp): 6 N + 12 L T d per token."""
    return (6.0 * matmul_params(d, layers) + 12.0 * layers * seq * d) * batch * seq


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="tiny", choices=sorted(CONFIGS))
    p.add_argument("--warmup", type=int, default=-1, help="untimed steps first (-1: the config's default)")
    p.add_argument("--steps", type=int, default=-1, help="timed steps (-1: the config's default)")
    p.add_argument("--seed", type=int, default=0, help="seeds the initialisation and the token batches")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads(N) (0: leave torch's default)")
    p.add_argument("--interop", type=int, default=0, help="torch.set_num_interop_threads(N) (0: leave the default)")
    p.add_argument("--wait-policy", default="", choices=["", "passive", "active"],
                   help="OMP_WAIT_POLICY for libgomp (set before torch is imported; '': inherit)")
    p.add_argument("--foreach", action="store_true", help="AdamW(foreach=True) (torch 1.13's default is off)")
    p.add_argument("--autocast", action="store_true",
                   help="forward and loss under torch.autocast('cpu', dtype=torch.bfloat16) (mixed precision, "
                        "float32 weights and AdamW state), as TRL's bf16=True runs on a CPU")
    a = p.parse_args(argv)
    if a.warmup < -1 or a.steps == 0 or a.steps < -1:
        p.error(f"--warmup must be >= 0 and --steps > 0 (or -1 for the defaults), got {a.warmup} and {a.steps}")
    if a.threads < 0 or a.interop < 0:
        p.error(f"--threads and --interop must be >= 0, got {a.threads} and {a.interop}")
    return a


def build_model(d, L, H, T):
    """The reference model as plain PyTorch modules, named as xgrad's DecoderLM names its
    parameters (so an xgrad state dict loads with load_state_dict)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    hd = d // H
    d_ff = ffn_dim(d)

    class RMSNorm(nn.Module):
        def __init__(self, dim, eps=1e-6):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(dim))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight

    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.w_q = nn.Linear(d, d, bias=False)
            self.w_k = nn.Linear(d, d, bias=False)
            self.w_v = nn.Linear(d, d, bias=False)
            self.w_o = nn.Linear(d, d, bias=False)

        def forward(self, x, cos, sin, mask):
            b, t, _ = x.shape
            q = self.w_q(x).view(b, t, H, hd).transpose(1, 2)
            k = self.w_k(x).view(b, t, H, hd).transpose(1, 2)
            v = self.w_v(x).view(b, t, H, hd).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
            att = att.masked_fill(mask, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, d)
            return self.w_o(y)

    class SwiGLU(nn.Module):
        def __init__(self):
            super().__init__()
            self.W_gate = nn.Linear(d, d_ff, bias=False)
            self.W_up = nn.Linear(d, d_ff, bias=False)
            self.W_down = nn.Linear(d_ff, d, bias=False)

        def forward(self, x):
            return self.W_down(F.silu(self.W_gate(x)) * self.W_up(x))

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm_attn = RMSNorm(d)
            self.attention = Attention()
            self.norm_ffn = RMSNorm(d)
            self.ffn = SwiGLU()

        def forward(self, x, cos, sin, mask):
            x = x + self.attention(self.norm_attn(x), cos, sin, mask)
            return x + self.ffn(self.norm_ffn(x))

    class DecoderLM(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok_embeddings = nn.Embedding(VOCAB, d)
            self.layers = nn.ModuleList(Block() for _ in range(L))
            self.norm = RMSNorm(d)
            self.output = nn.Linear(d, VOCAB, bias=False)
            # rotate-half RoPE tables [T, hd] (each angle twice) and the causal mask (True = hidden)
            inv_freq = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
            ang = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
            ang = torch.cat((ang, ang), dim=-1)
            self.register_buffer("cos", ang.cos().float(), persistent=False)
            self.register_buffer("sin", ang.sin().float(), persistent=False)
            self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).triu(1), persistent=False)

        def forward(self, tokens):
            h = self.tok_embeddings(tokens)
            for layer in self.layers:
                h = layer(h, self.cos, self.sin, self.mask)
            return self.output(self.norm(h))

    return DecoderLM()


def main(argv):
    a = parse_args(argv)
    if a.wait_policy:
        os.environ["OMP_WAIT_POLICY"] = a.wait_policy.upper()  # read when libgomp loads
    import torch
    import torch.nn.functional as F

    if a.interop:
        torch.set_num_interop_threads(a.interop)
    if a.threads:
        torch.set_num_threads(a.threads)

    d, L, H, T, B, warmup, steps = CONFIGS[a.config]
    warmup = warmup if a.warmup < 0 else a.warmup
    steps = steps if a.steps < 0 else a.steps
    d_ff = ffn_dim(d)

    torch.manual_seed(a.seed)
    model = build_model(d, L, H, T)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, foreach=a.foreach or None)
    gen = torch.Generator().manual_seed(a.seed)
    batches = [torch.randint(0, VOCAB, (B, T + 1), generator=gen) for _ in range(warmup + steps)]
    batches = [(x[:, :-1].contiguous(), x[:, 1:].contiguous()) for x in batches]

    secs = []
    loss_first = loss_last = 0.0
    for s, (inp, tgt) in enumerate(batches):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast):
            logits = model(inp)
            loss = F.cross_entropy(logits.view(-1, VOCAB), tgt.view(-1))
        loss.backward()
        opt.step()
        loss_last = loss.item()
        dt = time.perf_counter() - t0
        if s == 0:
            loss_first = loss_last
        if s >= warmup:
            secs.append(dt)

    sec = statistics.median(secs)
    flop = flop_per_step(d, L, T, B)
    out = {
        "impl": "torch",
        "config": a.config,
        "d_model": d, "n_layers": L, "n_heads": H, "seq_len": T, "batch": B, "d_ff": d_ff, "vocab": VOCAB,
        "params": sum(p.numel() for p in model.parameters()),
        "params_matmul": matmul_params(d, L),
        "warmup": warmup, "steps": steps,
        "ms_per_step": sec * 1e3,
        "ms_per_step_min": min(secs) * 1e3,
        "ms_per_step_max": max(secs) * 1e3,
        "ms_per_step_mean": statistics.mean(secs) * 1e3,
        "tokens_per_s": B * T / sec,
        "gflop_per_step": flop / 1e9,
        "gflops": flop / sec / 1e9,
        "flop_formula": FLOP_FORMULA,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "threads": torch.get_num_threads(),
        "loss_first": loss_first,
        "loss_last": loss_last,
        "seed": a.seed,
        "torch_version": torch.__version__,
        "interop_threads": torch.get_num_interop_threads(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
        "foreach": bool(a.foreach),
        "autocast": bool(a.autocast),
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
