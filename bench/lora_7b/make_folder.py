#!/usr/bin/python3
"""Writes a random-weight Hugging Face folder of Llama-2-7B's shape (config.json as
meta-llama/Llama-2-7b-hf's: hidden 4096, 32 layers, 32 heads, intermediate 11008, vocab 32000,
untied head; 6,738,415,616 parameters) in bfloat16 shards of at most 5 GB with
model.safetensors.index.json, as the Hub lays it out, and Llama 2's tokenizer files from
tests/fixtures/tokenizers/llama2. Weights N(0, 0.02) as transformers initialises them, norms 1.
About 13.5 GB on disk; numpy only, a tensor at a time (a few hundred MB of memory).

usage: bench/lora_7b/make_folder.py OUT_DIR [--layers N] [--seed S]
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TOKENIZER = os.path.join(ROOT, "tests", "fixtures", "tokenizers", "llama2")
MAX_SHARD = 5_000_000_000


def config(layers):
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "intermediate_size": 11008, "num_hidden_layers": layers, "num_attention_heads": 32,
        "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
        "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16", "initializer_range": 0.02,
    }


def tensors(layers):
    """(name, shape) in the order transformers' state_dict lists them."""
    d, f, v = 4096, 11008, 32000
    yield "model.embed_tokens.weight", (v, d)
    for i in range(layers):
        p = f"model.layers.{i}."
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            yield p + f"self_attn.{n}.weight", (d, d)
        yield p + "mlp.gate_proj.weight", (f, d)
        yield p + "mlp.up_proj.weight", (f, d)
        yield p + "mlp.down_proj.weight", (d, f)
        yield p + "input_layernorm.weight", (d,)
        yield p + "post_attention_layernorm.weight", (d,)
    yield "model.norm.weight", (d,)
    yield "lm_head.weight", (v, d)


def bf16_bytes(x):
    """float32 array -> bfloat16 bytes, round to nearest even (torch's .to(torch.bfloat16))."""
    u = x.astype(np.float32).view(np.uint32)
    r = ((u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)).astype(np.uint16)
    return r.tobytes()


def write_shard(path, names, rng):
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, shape in names:
        n = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as out:
        out.write(struct.pack("<Q", len(h)))
        out.write(h)
        for name, shape in names:
            if len(shape) == 1:
                out.write(bf16_bytes(np.ones(shape, np.float32)))
                continue
            rows_per = max(1, (1 << 24) // shape[1])  # 16M values at a time
            for r in range(0, shape[0], rows_per):
                rows = min(rows_per, shape[0] - r)
                out.write(bf16_bytes(rng.standard_normal((rows, shape[1]), dtype=np.float32) * 0.02))
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    shards, size = [[]], 0
    for name, shape in tensors(a.layers):
        n = int(np.prod(shape)) * 2
        if shards[-1] and size + n > MAX_SHARD:
            shards.append([])
            size = 0
        shards[-1].append((name, shape))
        size += n
    rng = np.random.default_rng(a.seed)
    weight_map, total = {}, 0
    for i, names in enumerate(shards):
        file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        print(f"writing {file} ({len(names)} tensors)", file=sys.stderr, flush=True)
        write_shard(os.path.join(a.out, file), names, rng)
        for name, shape in names:
            weight_map[name] = file
            total += int(np.prod(shape)) * 2
    with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    with open(os.path.join(a.out, "config.json"), "w") as f:
        json.dump(config(a.layers), f, indent=2)
    for t in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(TOKENIZER, t), os.path.join(a.out, t))
    print(f"{a.out}: {total / 1e9:.2f} GB of bf16 weights", file=sys.stderr)


if __name__ == "__main__":
    main()
