#!/usr/bin/python3
# torch_lora.py: the LoRA SFT step of build/bench/xgrad_lora_bench in PyTorch 1.13 (Debian's
# python3-torch): the same model shape, adapters, loss, optimizer and token rows' shapes,
# printing the same JSON keys.
"""Times LoRA SFT steps of a random-weight Llama-architecture model of SmolLM2-135M's shape in
PyTorch and prints one JSON object with the keys of xgrad_lora_bench. Run with /usr/bin/python3.

The model is transformers' LlamaForCausalLM eager forward written out in plain PyTorch
(modeling_llama.py, transformers 4.4x): RMSNorm in float32 (x * rsqrt(mean(x^2) + eps) * w),
rotate-half RoPE, grouped-query attention with repeat_kv, matmul + additive causal mask +
float32 softmax + matmul (torch 1.13 has no fused SDPA), SiLU-gated MLP, LM head tied to the
embeddings. Weights N(0, initializer_range) as LlamaPreTrainedModel._init_weights draws them.
LoRA is PEFT's LoraLayer on q_proj and v_proj: base(x) + lora_B(lora_A(x)) * alpha / r,
lora_A kaiming-uniform(a = sqrt 5), lora_B zeros, everything else frozen. The loss is SFT's:
cross-entropy of next tokens with the first --prompt tokens of each row masked (-100); the
labels are shifted instead of the logits, so the [B, T, V] logits are not copied (transformers
copies them with logits[..., :-1, :].contiguous()). AdamW (lr 2e-4, no weight decay) on the
adapters only.

Threads: --threads N calls torch.set_num_threads(N); --wait-policy sets OMP_WAIT_POLICY before
torch is imported. GLIBC_TUNABLES (malloc) and OPENBLAS_CORETYPE come from the environment
(bench/lora_compare sets them for the settings that use them).
"""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

# HuggingFaceTB/SmolLM2-135M's config.json (as kSmolLM2Config in lora_bench.cpp).
SMOLLM2 = {"hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
           "num_key_value_heads": 3, "vocab_size": 49152, "rms_norm_eps": 1e-5, "rope_theta": 100000.0,
           "max_position_embeddings": 8192, "initializer_range": 0.041666666666666664}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--prompt", type=int, default=128, help="prompt tokens of each row (masked from the loss)")
    p.add_argument("--r", type=int, default=16)
    p.add_argument("--alpha", type=float, default=32.0)
    p.add_argument("--gradient-checkpointing", action="store_true",
                   help="torch.utils.checkpoint around each decoder layer (transformers' gradient_checkpointing)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads(N) (0: leave torch's default)")
    p.add_argument("--wait-policy", default="", choices=["", "passive", "active"],
                   help="OMP_WAIT_POLICY for libgomp (set before torch is imported; '': inherit)")
    a = p.parse_args(argv)
    if a.seq_len < 2 or a.batch < 1 or not 0 <= a.prompt < a.seq_len - 1 or a.warmup < 0 or a.steps < 1:
        p.error("need --seq-len > 1, --batch > 0, 0 <= --prompt < --seq-len - 1, --warmup >= 0, --steps > 0")
    return a


def build_model(cfg, r, alpha):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    d, H, KV = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd, eps = d // H, cfg["rms_norm_eps"]

    class RMSNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

        def forward(self, x):
            return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    class LoRALinear(nn.Module):
        """PEFT's lora.Linear: the frozen base plus lora_B(lora_A(x)) * scaling (dropout 0)."""

        def __init__(self, base):
            super().__init__()
            self.base_layer = base
            self.lora_A = nn.Linear(base.in_features, r, bias=False)
            self.lora_B = nn.Linear(r, base.out_features, bias=False)
            nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
            nn.init.zeros_(self.lora_B.weight)
            self.scaling = alpha / r

        def forward(self, x):
            return self.base_layer(x) + self.lora_B(self.lora_A(x)) * self.scaling

    def rotate_half(x):
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    def repeat_kv(x, n):
        b, kv, t, h = x.shape
        return x[:, :, None].expand(b, kv, n, t, h).reshape(b, kv * n, t, h)

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = nn.Linear(d, H * hd, bias=False)
            self.k_proj = nn.Linear(d, KV * hd, bias=False)
            self.v_proj = nn.Linear(d, KV * hd, bias=False)
            self.o_proj = nn.Linear(H * hd, d, bias=False)

        def forward(self, x, cos, sin, mask):
            b, t, _ = x.shape
            q = self.q_proj(x).view(b, t, H, hd).transpose(1, 2)
            k = self.k_proj(x).view(b, t, KV, hd).transpose(1, 2)
            v = self.v_proj(x).view(b, t, KV, hd).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            k, v = repeat_kv(k, H // KV), repeat_kv(v, H // KV)
            att = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(hd) + mask
            att = F.softmax(att, dim=-1, dtype=torch.float32)
            y = torch.matmul(att, v).transpose(1, 2).reshape(b, t, d)
            return self.o_proj(y)

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            f = cfg["intermediate_size"]
            self.gate_proj = nn.Linear(d, f, bias=False)
            self.up_proj = nn.Linear(d, f, bias=False)
            self.down_proj = nn.Linear(f, d, bias=False)

        def forward(self, x):
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.input_layernorm = RMSNorm()
            self.self_attn = Attention()
            self.post_attention_layernorm = RMSNorm()
            self.mlp = MLP()

        def forward(self, x, cos, sin, mask):
            x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
            return x + self.mlp(self.post_attention_layernorm(x))

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = nn.Embedding(cfg["vocab_size"], d)
            self.layers = nn.ModuleList(Layer() for _ in range(cfg["num_hidden_layers"]))
            self.norm = RMSNorm()
            self.checkpointing = False

        def forward(self, ids):
            t = ids.shape[1]
            inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
            ang = torch.outer(torch.arange(t, dtype=torch.float32), inv_freq)
            emb = torch.cat((ang, ang), dim=-1)
            cos, sin = emb.cos(), emb.sin()
            mask = torch.full((t, t), float("-inf")).triu(1)
            h = self.embed_tokens(ids)
            for layer in self.layers:
                if self.checkpointing:
                    h = torch.utils.checkpoint.checkpoint(layer, h, cos, sin, mask, use_reentrant=False)
                else:
                    h = layer(h, cos, sin, mask)
            return F.linear(self.norm(h), self.embed_tokens.weight)  # tied LM head

    model = LM()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, cfg["initializer_range"])
    for p in model.parameters():
        p.requires_grad_(False)
    for layer in model.layers:
        layer.self_attn.q_proj = LoRALinear(layer.self_attn.q_proj)
        layer.self_attn.v_proj = LoRALinear(layer.self_attn.v_proj)
    return model


def main(argv):
    a = parse_args(argv)
    if a.wait_policy:
        os.environ["OMP_WAIT_POLICY"] = a.wait_policy.upper()  # read when libgomp loads
    import torch
    import torch.nn.functional as F
    import torch.utils.checkpoint  # noqa: F401 (torch.utils.checkpoint.checkpoint)

    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = build_model(SMOLLM2, a.r, a.alpha)
    model.checkpointing = a.gradient_checkpointing
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=2e-4, weight_decay=0.0)
    V = SMOLLM2["vocab_size"]
    gen = torch.Generator().manual_seed(a.seed)
    rows = [torch.randint(0, V, (a.batch, a.seq_len), generator=gen) for _ in range(a.warmup + a.steps)]

    def targets(ids):
        """labels[:, 1:] with the prompt masked, -100 at the end: the targets of logits[:, t]."""
        tg = torch.full_like(ids, -100)
        tg[:, :-1] = ids[:, 1:]
        tg[:, : max(a.prompt - 1, 0)] = -100  # target t is token t + 1; tokens 0 .. prompt - 1 are the prompt
        return tg

    secs = []
    loss_first = loss_last = 0.0
    for s, ids in enumerate(rows):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        logits = model(ids)
        loss = F.cross_entropy(logits.view(-1, V), targets(ids).view(-1), ignore_index=-100)
        loss.backward()
        opt.step()
        loss_last = loss.item()
        dt = time.perf_counter() - t0
        if s == 0:
            loss_first = loss_last
        if s >= a.warmup:
            secs.append(dt)

    sec = statistics.median(secs)
    out = {
        "impl": "torch",
        "model": "SmolLM2-135M shape",
        "hidden": SMOLLM2["hidden_size"], "n_layers": SMOLLM2["num_hidden_layers"], "vocab": V,
        "seq_len": a.seq_len, "batch": a.batch, "prompt_tokens": a.prompt,
        "lora_r": a.r, "lora_alpha": a.alpha, "lora_targets": "q_proj,v_proj",
        "lora_modules": 2 * SMOLLM2["num_hidden_layers"],
        "params": sum(p.numel() for p in model.parameters()),
        "trainable": sum(p.numel() for p in trainable),
        "gradient_checkpointing": a.gradient_checkpointing,
        "warmup": a.warmup, "steps": a.steps,
        "ms_per_step": sec * 1e3, "ms_per_step_min": min(secs) * 1e3, "ms_per_step_max": max(secs) * 1e3,
        "tokens_per_s": a.batch * a.seq_len / sec,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "threads": torch.get_num_threads(),
        "loss_first": loss_first, "loss_last": loss_last, "seed": a.seed,
        "torch_version": torch.__version__,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", ""),
        "glibc_tunables": os.environ.get("GLIBC_TUNABLES", ""),
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""),
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
