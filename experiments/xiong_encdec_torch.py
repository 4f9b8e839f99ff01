#!/usr/bin/python3
"""An independent PyTorch reproduction of prenorm_vs_postnorm --xiong (experiments/encdec.cpp):
the encoder-decoder of Xiong et al. (2020) at initialisation, fairseq's init, tied embeddings
scaled by sqrt(d) plus sinusoidal positions, label smoothing 0.1, no dropout. Prints, per depth,
the median over seeds of the top/bottom ratio of the FFN W2 gradient norm (expected loss: the
gradient summed over `--batches` batches) in each stack, with its 95% percentile-bootstrap
interval computed exactly as experiments/bootstrap.cpp does (4,000 resamples, SplitMix64 seeded
20200612, numpy's quantile rule). Uses PyTorch's random stream, so it agrees with xgrad in
distribution, not digit for digit.

    /usr/bin/python3 experiments/xiong_encdec_torch.py --depths 6,12 --seeds 10
"""
import argparse
import math
import statistics

import torch
import torch.nn as nn
import torch.nn.functional as F


class MHA(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.h = h
        self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
        for lin in (self.q, self.k, self.v):
            nn.init.xavier_uniform_(lin.weight, gain=1 / math.sqrt(2))
        nn.init.xavier_uniform_(self.o.weight)
        for lin in (self.q, self.k, self.v, self.o):
            nn.init.zeros_(lin.bias)

    def forward(self, x, ctx=None, causal=False):
        ctx = x if ctx is None else ctx
        B, T, C = x.shape
        S = ctx.shape[1]
        q = self.q(x).view(B, T, self.h, -1).transpose(1, 2)
        k = self.k(ctx).view(B, S, self.h, -1).transpose(1, 2)
        v = self.v(ctx).view(B, S, self.h, -1).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        if causal:
            scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool).triu(1), float("-inf"))
        y = scores.softmax(-1) @ v
        return self.o(y.transpose(1, 2).reshape(B, T, C))


class FFN(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        for lin in (self.fc1, self.fc2):
            nn.init.xavier_uniform_(lin.weight)
            nn.init.zeros_(lin.bias)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


class Layer(nn.Module):
    def __init__(self, d, h, decoder):
        super().__init__()
        self.sa, self.ffn = MHA(d, h), FFN(d)
        self.ca = MHA(d, h) if decoder else None
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(3 if decoder else 2))

    def forward(self, x, pre, mem=None):
        subs = [lambda z: self.sa(z, causal=mem is not None)]
        if self.ca is not None:
            subs.append(lambda z: self.ca(z, mem))
        subs.append(self.ffn)
        for f, n in zip(subs, self.norms):
            x = x + f(n(x)) if pre else n(x + f(x))
        return x


def sinusoid(T, d):
    pos = torch.arange(T).float()[:, None]
    div = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d))
    pe = torch.zeros(T, d)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * div), torch.cos(pos * div)
    return pe


def ratios(L, seed, a):
    torch.manual_seed(seed)
    d = a.d_model
    emb = nn.Embedding(a.vocab, d)
    nn.init.normal_(emb.weight, 0, d ** -0.5)
    enc = nn.ModuleList(Layer(d, a.heads, False) for _ in range(L))
    dec = nn.ModuleList(Layer(d, a.heads, True) for _ in range(L))
    enc_norm, dec_norm = nn.LayerNorm(d), nn.LayerNorm(d)
    pe = sinusoid(a.seq_len, d)
    out = {}
    for pre in (False, True):
        for m in (emb, enc, dec):
            m.zero_grad()
        g = torch.Generator().manual_seed(seed + 1000)
        for _ in range(a.batches):
            src, tgt, lab = (torch.randint(0, a.vocab, (a.batch, a.seq_len), generator=g) for _ in range(3))
            h = emb(src) * math.sqrt(d) + pe
            for layer in enc:
                h = layer(h, pre)
            mem = enc_norm(h) if pre else h
            y = emb(tgt) * math.sqrt(d) + pe
            for layer in dec:
                y = layer(y, pre, mem)
            if pre:
                y = dec_norm(y)
            F.cross_entropy((y @ emb.weight.T).view(-1, a.vocab), lab.view(-1), label_smoothing=0.1).backward()
        for name, stack in (("encoder", enc), ("decoder", dec)):
            w = [l.ffn.fc2.weight.grad.norm().item() for l in stack]
            out[(name, "Pre-LN" if pre else "Post-LN")] = w[-1] / w[0]
    return out


def splitmix64(state):
    """experiments/bootstrap.cpp's generator: yields 64-bit values."""
    mask = (1 << 64) - 1
    while True:
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        yield z ^ (z >> 31)


def median_ci(values, resamples=4000, seed=20200612, level=0.95):
    """The median and its percentile-bootstrap interval, as experiments/bootstrap.cpp computes them."""
    gen, n = splitmix64(seed), len(values)
    stats = sorted(statistics.median(values[(next(gen) * n) >> 64] for _ in range(n)) for _ in range(resamples))

    def quantile(q):
        pos = q * (len(stats) - 1)
        lo = math.floor(pos)
        hi = min(lo + 1, len(stats) - 1)
        return stats[lo] + (pos - lo) * (stats[hi] - stats[lo])

    return statistics.median(values), quantile((1 - level) / 2), quantile((1 + level) / 2)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--depths", default="6,12")
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--batches", type=int, default=32)
    p.add_argument("--d-model", dest="d_model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq-len", dest="seq_len", type=int, default=16)
    p.add_argument("--vocab", type=int, default=64)
    a = p.parse_args()
    torch.set_num_threads(1)
    print("layers stack    norm     top/bottom W2 grad, median over %d seeds [95%% bootstrap interval] "
          "(expected loss, %d batches)" % (a.seeds, a.batches))
    for L in map(int, a.depths.split(",")):
        runs = [ratios(L, 42 + s, a) for s in range(a.seeds)]
        for key in runs[0]:
            print("%6d %-8s %-8s %.2f [%.2f, %.2f]" % ((L, key[0], key[1]) + median_ci([r[key] for r in runs])))


if __name__ == "__main__":
    main()
