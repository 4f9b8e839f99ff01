#!/usr/bin/python3
"""Loads the initial states that `prenorm_vs_postnorm --xiong --xiong-save-init DIR` writes
(experiments/README.md, "Part 3's initial state") into PyTorch's own nn.TransformerEncoderLayer /
nn.TransformerDecoderLayer modules, runs the same forward and loss, and compares each layer's FFN
W2 gradient norm with xgrad's (the run's xiong_seeds.csv). Dropout 0 only: the dropout masks are
not in the files.

    build/experiments/prenorm_vs_postnorm --xiong --xiong-depths 2,6 --xiong-seeds 2 \\
        --xiong-save-init /tmp/states --out /tmp/xiong_out
    /usr/bin/python3 experiments/xiong_state_torch.py /tmp/states /tmp/xiong_out/xiong_seeds.csv

Reads safetensors with a few lines of its own (numpy), so it needs only torch and numpy.
"""
import csv
import json
import math
import os
import re
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from xiong_encdec_torch import sinusoid  # the same sinusoidal table, beside this file

DTYPES = {"F32": np.float32, "F64": np.float64, "I64": np.int64}


def read_safetensors(path):
    """{name: tensor} and the __metadata__ of a safetensors file."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        a = np.frombuffer(data[begin:end], dtype=DTYPES[e["dtype"]]).reshape(e["shape"])
        out[name] = torch.from_numpy(a.copy())
    return out, meta


def load_attention(attn, w, prefix):
    """xgrad's w_q/w_k/w_v/w_o into nn.MultiheadAttention's packed in_proj and out_proj."""
    attn.in_proj_weight.copy_(torch.cat([w[prefix + ".w_%s.weight" % k] for k in "qkv"]))
    attn.in_proj_bias.copy_(torch.cat([w[prefix + ".w_%s.bias" % k] for k in "qkv"]))
    attn.out_proj.weight.copy_(w[prefix + ".w_o.weight"])
    attn.out_proj.bias.copy_(w[prefix + ".w_o.bias"])


def load_layer(layer, w, prefix, decoder):
    load_attention(layer.self_attn, w, prefix + ".self_attn")
    if decoder:
        load_attention(layer.multihead_attn, w, prefix + ".cross_attn")
    for mine, theirs in (("linear1", "fc1"), ("linear2", "fc2")):
        getattr(layer, mine).weight.copy_(w["%s.ffn.%s.weight" % (prefix, theirs)])
        getattr(layer, mine).bias.copy_(w["%s.ffn.%s.bias" % (prefix, theirs)])
    for i in range(1, 4 if decoder else 3):
        getattr(layer, "norm%d" % i).weight.copy_(w["%s.norm%d.weight" % (prefix, i)])
        getattr(layer, "norm%d" % i).bias.copy_(w["%s.norm%d.bias" % (prefix, i)])


def w2_grad_norms(path, pre):
    """Per layer (bottom first) W2 gradient norms of one batch and of the expected loss."""
    w, meta = read_safetensors(path)
    L, d, h = int(meta["encoder_layers"]), int(meta["d_model"]), int(meta["heads"])
    V, smoothing = int(meta["vocab"]), float(meta["label_smoothing"])
    enc_layers = [nn.TransformerEncoderLayer(d, h, 4 * d, 0.0, "relu", batch_first=True, norm_first=pre)
                  for _ in range(L)]
    dec_layers = [nn.TransformerDecoderLayer(d, h, 4 * d, 0.0, "relu", batch_first=True, norm_first=pre)
                  for _ in range(int(meta["decoder_layers"]))]
    enc_norm, dec_norm = nn.LayerNorm(d), nn.LayerNorm(d)
    emb = nn.Embedding(V, d)
    with torch.no_grad():
        emb.weight.copy_(w["embed.weight"])
        for i, layer in enumerate(enc_layers):
            load_layer(layer, w, "encoder.%d" % i, False)
        for i, layer in enumerate(dec_layers):
            load_layer(layer, w, "decoder.%d" % i, True)
        for norm, name in ((enc_norm, "encoder_norm"), (dec_norm, "decoder_norm")):
            norm.weight.copy_(w[name + ".weight"])
            norm.bias.copy_(w[name + ".bias"])
    src, tgt, labels = w["src"], w["tgt"], w["labels"]
    K, T = src.shape[0], tgt.shape[2]
    causal = nn.Transformer.generate_square_subsequent_mask(T)
    single = None
    for k in range(K):
        h_ = emb(src[k]) * math.sqrt(d) + sinusoid(src.shape[2], d)
        for layer in enc_layers:
            h_ = layer(h_)
        memory = enc_norm(h_) if pre else h_
        y = emb(tgt[k]) * math.sqrt(d) + sinusoid(T, d)
        for layer in dec_layers:
            y = layer(y, memory, tgt_mask=causal)
        if pre:
            y = dec_norm(y)
        logits = y @ emb.weight.T
        F.cross_entropy(logits.reshape(-1, V), labels[k].reshape(-1), label_smoothing=smoothing).backward()
        if k == 0:
            single = [[l.linear2.weight.grad.norm().item() for l in s] for s in (enc_layers, dec_layers)]
    expected = [[l.linear2.weight.grad.norm().item() / K for l in s] for s in (enc_layers, dec_layers)]
    return single, expected


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    folder, seeds_csv = sys.argv[1], sys.argv[2]
    torch.set_num_threads(1)
    xgrad = {}
    for r in csv.DictReader(open(seeds_csv)):
        if float(r["dropout"]) == 0:
            key = (int(r["layers"]), int(r["seed"]), r["stack"], r["norm"], int(r["layer"]))
            xgrad[key] = (float(r["single"]), float(r["expected"]))
    worst = 0.0
    print("layers seed stack    norm     layer  W2 grad, expected: PyTorch    xgrad        rel. diff")
    for name in sorted(os.listdir(folder)):
        m = re.fullmatch(r"xiong_L(\d+)_seed(\d+)\.safetensors", name)
        if not m:
            continue
        L, seed = int(m.group(1)), int(m.group(2))
        for pre, norm in ((False, "Post-LN"), (True, "Pre-LN")):
            single, expected = w2_grad_norms(os.path.join(folder, name), pre)
            for s, stack in enumerate(("encoder", "decoder")):
                for i in range(L):
                    mine = xgrad[(L, seed, stack, norm, i + 1)]
                    for theirs, ours in ((single[s][i], mine[0]), (expected[s][i], mine[1])):
                        worst = max(worst, abs(theirs - ours) / abs(ours))
                    print("%6d %4d %-8s %-8s %5d  %24.7g %12.7g %12.2e" % (
                        L, seed, stack, norm, i + 1, expected[s][i], mine[1], abs(expected[s][i] - mine[1]) / mine[1]))
    print("largest relative difference, one-batch and expected gradients: %.2e" % worst)


if __name__ == "__main__":
    main()
