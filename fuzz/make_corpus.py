#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora (fuzz/corpus/<target>/): small valid inputs of each
format, made here by hand with the standard library only. Run: python3 fuzz/make_corpus.py"""
import json
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors(tensors, metadata=None):
    """tensors: {name: (dtype, shape, raw bytes)} -> a safetensors file, names in order."""
    header, data = {}, b""
    if metadata:
        header["__metadata__"] = metadata
    for name, (dt, shape, raw) in tensors.items():
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


f32 = lambda *v: struct.pack("<%df" % len(v), *v)
put("safetensors", "f32_i64_bool", safetensors({"w": ("F32", [2, 2], f32(1, 2, 3, 4)),
                                                "i": ("I64", [2], struct.pack("<2q", 7, -1)),
                                                "m": ("BOOL", [3], b"\x01\x00\x01")}, {"format": "pt"}))
put("safetensors", "f16_bf16_i32", safetensors({"h": ("F16", [2], struct.pack("<2e", 1.5, -2.0)),
                                                "b": ("BF16", [1], b"\x80\x3f"),
                                                "n": ("I32", [1], struct.pack("<i", 5)),
                                                "e": ("F64", [0], b"")}))
put("safetensors", "empty", safetensors({}))

put("checkpoint", "tiny", safetensors(
    {"model.lin.weight": ("F32", [1, 2], f32(0.5, -0.5)),
     "optim.state.0.step": ("F32", [], f32(3)),
     "sched.last_epoch": ("I64", [], struct.pack("<q", 3))},
    {"format": "xgrad-checkpoint-1", "step": "3", "tokens_seen": "96", "data_rng": "1 2 3", "global_rng": "4 5 6",
     "extra.config": "d=2"}))

# text: batch 4, seq_len 8, evaluation batch 1, seed 7 (each byte is the value + 2), then the file.
put("text", "prose", bytes([6, 10, 3, 7]) + b"A harbor is a sheltered part of a body of water deep enough to anchor a ship.\n" * 3)
put("text", "short", bytes([3, 3, 2, 0]) + b"ab")

put("jsonl", "sft", b"\x00" + b'{"prompt":"Define the noun \\"cat\\".","response":"feline mammal"}\n\n{"prompt":"a","response":"b"}\n')
put("jsonl", "dpo", b"\x01" + b'{"prompt":"p","chosen":"yes","rejected":"no"}\n')
put("jsonl", "grpo", b"\x02" + b'{"prompt":"Give an antonym of \\"good\\".","answers":["bad","evil"]}\n')

config = {"vocab_size": 259, "n_layers": 2, "tie_embeddings": False, "final_norm": True, "dtype": "float32",
          "block": {"d_model": 32, "n_heads": 2, "n_kv_heads": 1, "d_ff": 64, "norm_position": "pre", "norm": "rmsnorm",
                    "ffn": "swiglu", "attention": "gqa", "position": "rope", "max_seq_len": 64}}
put("config", "model_config", b"\x00" + json.dumps(config).encode())  # the flat block of earlier versions
# Today's form names every field (a config.json missing one is refused).
config["block"] = {"d_model": 32, "norm_position": "pre", "position": "rope", "rope_layout": "interleaved",
                   "rope_base": 10000.0, "max_seq_len": 64, "dropout": 0.0, "naming": "llama",
                   "norm": {"kind": "rmsnorm", "eps": 1e-6},
                   "attention": {"kind": "gqa", "n_heads": 2, "n_kv_heads": 1, "head_dim": 16, "qkv_bias": True,
                                 "out_bias": False, "qk_norm": False},
                   "ffn": {"kind": "swiglu", "d_ff": 64, "bias": False, "naming": "upper"}}
put("config", "model_config_specs", b"\x00" + json.dumps(config).encode())
adapter = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4, "lora_alpha": 8, "lora_dropout": 0.05,
           "target_modules": ["w_q", "w_v"], "bias": "none", "use_rslora": False, "fan_in_fan_out": False,
           "base_model_name_or_path": "runs/base"}
put("config", "adapter_config", b"\x01" + json.dumps(adapter).encode())

# WordNet 3.0 lines in the real layout (own words and offsets).
put("wordnet", "data_noun", b"\x00" + b"00002000 05 n 02 cat 0 true_cat 0 001 @ 00001000 n 0000 | feline mammal; \"cats purr\"  ")
put("wordnet", "data_verb", b"\x00" + b"00050000 29 v 01 exhale 0 001 ! 00060000 v 0101 02 + 02 00 + 08 01 | expel air  ")
put("wordnet", "index", b"\x01" + b"good a 1 2 ! & 1 0 00010000  ")


def xdr_strings(values):
    """R's XDR serialization (format 2) of a character vector."""
    out = b"X\n" + struct.pack(">3i", 2, 0x040002, 0x020300) + struct.pack(">2i", 16, len(values))
    for v in values:
        out += struct.pack(">2i", 9 | (1 << 15), len(v)) + v.encode()  # CHARSXP, UTF-8 flag
    return out


put("rdata", "strings", b"\x00" + xdr_strings(["It is a truth universally acknowledged", "", "CHAPTER 1"]))
put("rdata", "strings_zlib", b"\x01" + zlib.compress(xdr_strings(["Emma Woodhouse, handsome, clever, and rich"])))

# Hugging Face folders (fuzz_hf.cpp): 0 + config.json, 1 + an index, 2 + the weights of its tiny Llama.
hf_config = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "vocab_size": 16, "hidden_size": 8,
             "intermediate_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 1,
             "head_dim": 8, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "max_position_embeddings": 64,
             "tie_word_embeddings": True, "torch_dtype": "bfloat16", "eos_token_id": [1, 2],
             "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 32}}
put("hf", "config_qwen3", b"\x00" + json.dumps(hf_config).encode())
tiny = {"model.embed_tokens.weight": [8, 4], "model.norm.weight": [4],
        "model.layers.0.input_layernorm.weight": [4], "model.layers.0.post_attention_layernorm.weight": [4],
        "model.layers.0.self_attn.q_proj.weight": [4, 4], "model.layers.0.self_attn.k_proj.weight": [2, 4],
        "model.layers.0.self_attn.v_proj.weight": [2, 4], "model.layers.0.self_attn.o_proj.weight": [4, 4],
        "model.layers.0.mlp.gate_proj.weight": [4, 4], "model.layers.0.mlp.up_proj.weight": [4, 4],
        "model.layers.0.mlp.down_proj.weight": [4, 4]}
numel = lambda s: s[0] * (s[1] if len(s) > 1 else 1)  # noqa: E731
put("hf", "index", b"\x01" + json.dumps({"metadata": {"total_size": 8},
                                         "weight_map": {n: "model-00001-of-00001.safetensors" for n in tiny}}).encode())
put("hf", "weights_bf16", b"\x02" + safetensors({n: ("BF16", s, b"\x80\x3f" * numel(s)) for n, s in tiny.items()},
                                                {"format": "pt"}))
put("hf", "weights_f16", b"\x02" + safetensors({n: ("F16", s, struct.pack("<e", 0.5) * numel(s))
                                                for n, s in tiny.items()}))


def gguf(kvs, tensors, alignment=32):
    """kvs: [(key, type, value)] with GGUF type numbers (9 = array: value (element type, list));
    tensors: [(name, shape (outermost first), ggml type, raw bytes)] -> a GGUF v3 file."""
    def s(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b
    fmt = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
    def scalar(t, v):
        return s(v) if t == 8 else struct.pack("<" + fmt[t], v)
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, t, v in kvs:
        out += s(key) + struct.pack("<I", t)
        if t == 9:
            et, items = v
            out += struct.pack("<IQ", et, len(items)) + b"".join(scalar(et, x) for x in items)
        else:
            out += scalar(t, v)
    data, offsets = b"", []
    for name, shape, ty, raw in tensors:
        offsets.append(len(data))
        data += raw + b"\0" * ((-len(raw)) % alignment)
    for (name, shape, ty, raw), off in zip(tensors, offsets):
        out += s(name) + struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in reversed(shape))
        out += struct.pack("<IQ", ty, off)
    return out + b"\0" * ((-len(out)) % alignment) + data


# A one-layer llama of width 4 (2 heads, 1 KV head) with a 3-token byte-level vocabulary, and
# a Q8_0 / Q4_0 / F16 tensor file without a model.
llama_kv = [("general.architecture", 8, "llama"), ("general.type", 8, "model"), ("llama.context_length", 4, 64),
            ("llama.embedding_length", 4, 4), ("llama.block_count", 4, 1), ("llama.feed_forward_length", 4, 4),
            ("llama.attention.head_count", 4, 2), ("llama.attention.head_count_kv", 4, 1),
            ("llama.rope.freq_base", 6, 10000.0), ("llama.attention.layer_norm_rms_epsilon", 6, 1e-5),
            ("tokenizer.ggml.model", 8, "gpt2"), ("tokenizer.ggml.pre", 8, "qwen2"),
            ("tokenizer.ggml.tokens", 9, (8, ["a", "b", "ab"])), ("tokenizer.ggml.token_type", 9, (5, [1, 1, 1])),
            ("tokenizer.ggml.merges", 9, (8, ["a b"])), ("tokenizer.ggml.eos_token_id", 4, 2)]
llama_t = [("token_embd.weight", [3, 4]), ("output_norm.weight", [4]), ("blk.0.attn_norm.weight", [4]),
           ("blk.0.ffn_norm.weight", [4]), ("blk.0.attn_q.weight", [4, 4]), ("blk.0.attn_k.weight", [2, 4]),
           ("blk.0.attn_v.weight", [2, 4]), ("blk.0.attn_output.weight", [4, 4]), ("blk.0.ffn_gate.weight", [4, 4]),
           ("blk.0.ffn_up.weight", [4, 4]), ("blk.0.ffn_down.weight", [4, 4])]
put("gguf", "llama_f32", gguf(llama_kv, [(n, sh, 0, f32(*[0.25] * numel(sh))) for n, sh in llama_t]))
put("gguf", "q8_0_q4_0_f16_bf16", gguf([("general.alignment", 4, 32)],
                                       [("q", [1, 32], 8, struct.pack("<e", 0.5) + bytes(range(32))),
                                        ("q4", [1, 32], 2, struct.pack("<e", -0.25) + bytes(range(0, 256, 16))),
                                        ("h", [2], 1, struct.pack("<2e", 1.5, -2.0)), ("b", [1], 30, b"\x80\x3f")]))
# llama.cpp's read-only block types, one block each (ggml-common.h's layouts): Q4_1, Q5_0, Q5_1 of
# 32 values, and the k-quants Q2_K ... Q6_K of 256, their half scales at the layouts' places.
half = lambda *v: struct.pack(f"<{len(v)}e", *v)  # noqa: E731
ramp = lambda n, step=37: bytes((i * step + 11) % 256 for i in range(n))  # noqa: E731
put("gguf", "k_quants_q4_1_q5", gguf([], [
    ("q4_1", [1, 32], 3, half(0.5, -1.0) + ramp(16)),
    ("q5_0", [1, 32], 6, half(0.25) + ramp(4) + ramp(16, 29)),
    ("q5_1", [1, 32], 7, half(0.125, 0.5) + ramp(4) + ramp(16, 29)),
    ("q2_k", [1, 256], 10, ramp(16) + ramp(64, 29) + half(0.5, 0.25)),
    ("q3_k", [1, 256], 11, ramp(32) + ramp(64, 29) + ramp(12, 53) + half(0.75)),
    ("q4_k", [1, 256], 12, half(0.5, 0.25) + ramp(12, 53) + ramp(128, 29)),
    ("q5_k", [1, 256], 13, half(0.5, 0.25) + ramp(12, 53) + ramp(32) + ramp(128, 29)),
    ("q6_k", [1, 256], 14, ramp(128, 29) + ramp(64) + ramp(16, 53) + half(0.0625))]))
# and its non-linear 4-bit ones: IQ4_NL (32 values) and IQ4_XS (256: scales_h, scales_l, codes)
put("gguf", "iq4_nl_xs", gguf([], [
    ("iq4_nl", [1, 32], 20, half(0.5) + ramp(16)),
    ("iq4_xs", [1, 256], 23, half(0.0625) + ramp(2, 101) + ramp(4, 53) + ramp(128, 29))]))

# Command-line values (fuzz_flags.cpp): an argv, NUL-separated.
argv = lambda *a: "\0".join(a)  # noqa: E731
put("flags", "loop", argv("--lr", "3e-4", "--steps", "100", "--warmup", "10", "--schedule", "linear", "--list", "1,2,3"))
put("flags", "nan_and_lists", argv("--on-nan", "skip", "--max-skipped", "0.5", "--allow-change", "steps,lr",
                                   "--overwrite", "--seed", "7", "--scale", "inf"))
put("flags", "bad_values", argv("--batch", "-3", "--list", "1e308,nan", "--seed", "-1"))
# fuzz/corpus/flags/non_utf8_value is not made here: it is the input fuzz_flags found (a flag value
# that is not UTF-8 made args.json's dump throw), kept as a regression seed.

# fuzz_resume.cpp's seed, fuzz/corpus/resume/tiny_run, is a real checkpoint (AdamW's state as it
# writes it, its CRC32s), written by xg-train rather than by hand:
#   xg-train --data TEXT --out DIR --d-model 8 --layers 1 --heads 2 --kv-heads 1 --max-seq-len 16
#            --seq-len 8 --batch 2 --steps 2 --warmup 0 --sample-tokens 0   # then DIR/checkpoint.safetensors

# Adapter folders (fuzz_adapter.cpp): 0 + adapter_config.json, 1 + adapter_model.safetensors, for
# its base (one LLaMA block of width 8, 1 KV head of 4): LoRA r=4 on w_q and w_v.
lora = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": 4, "lora_alpha": 8, "lora_dropout": 0.0,
        "target_modules": ["w_q", "w_v"], "bias": "none", "use_rslora": False, "fan_in_fan_out": False}
put("adapter", "config", b"\x00" + json.dumps(lora).encode())
pre = "base_model.model.layers.0.attention."
put("adapter", "weights", b"\x01" + safetensors({pre + "w_q.lora_A.weight": ("F32", [4, 8], f32(*[0.01] * 32)),
                                                 pre + "w_q.lora_B.weight": ("F32", [8, 4], f32(*[0.02] * 32)),
                                                 pre + "w_v.lora_A.weight": ("F32", [4, 8], f32(*[0.03] * 32)),
                                                 pre + "w_v.lora_B.weight": ("F32", [4, 4], f32(*[0.04] * 16))}))

# Chat templates (fuzz_template.cpp): 0 + a template's source, 1 + a tokenizer_config.json,
# 2 + the messages a ChatML template renders.
llama3 = ("{{ bos_token }}{% for m in messages %}{% if loop.index0 == 0 and m['role'] == 'system' %}"
          "{% set sys = m['content'] %}{% endif %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n'"
          " + m['content'] | trim + '<|eot_id|>' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
put("template", "llama3", b"\x00" + llama3.encode())
put("template", "loops_and_macros", b"\x00" + b"{% macro turn(m) %}[{{ m.role | upper }}] {{ m.content }}{% endmacro %}"
    b"{% for m in messages %}{{ turn(m) }}{% if not loop.last %}\n{% endif %}{% endfor %}"
    b"{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}")
put("template", "tokenizer_config", b"\x01" + json.dumps({"bos_token": "<s>", "eos_token": {"content": "</s>"},
                                                          "chat_template": llama3}).encode())
put("template", "messages", b"\x02" + json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant"},
                                                  {"role": "tool", "content": ["x"]}]).encode())

# TRL's dataset rows (fuzz_conversation.cpp): the first byte picks the reader (% 3: SFT, DPO, GRPO),
# the chat template (/ 3 % 3: Qwen2.5, Llama 3, none) and completion-only loss (/ 9 % 2: on, off).
rows = lambda *rs: "".join(json.dumps(r) + "\n" for r in rs).encode()  # noqa: E731
msgs = lambda *turns: [{"role": r, "content": c} for r, c in turns]  # noqa: E731
put("conversation", "messages", b"\x00" + rows(
    {"messages": msgs(("system", "Be brief."), ("user", "Is apple a word?"), ("assistant", "yes"),
                      ("user", "And xyzzy?"), ("assistant", "no"))},
    {"messages": msgs(("user", "Weather?"), ("assistant", "Let me look."), ("tool", "sunny"), ("assistant", "Sunny."))}))
put("conversation", "messages_llama3_all_tokens", bytes([3 + 9]) + rows({"messages": msgs(("user", "hi"), ("assistant", "hello"))}))
put("conversation", "text", b"\x00" + rows({"text": "A harbor is sheltered water."}, {"text": ""}))
put("conversation", "prompt_completion", bytes([3]) + rows({"prompt": "The sky is", "completion": " blue."}))
put("conversation", "prompt_completion_messages", b"\x00" + rows(
    {"prompt": msgs(("user", "Is apple a word?")), "completion": msgs(("assistant", "yes"))}))
put("conversation", "dpo_messages", b"\x01" + rows(
    {"prompt": msgs(("user", "Say yes.")), "chosen": msgs(("assistant", "yes")), "rejected": msgs(("assistant", "no"))}))
put("conversation", "dpo_implicit_prompt", bytes([4]) + rows(
    {"chosen": msgs(("user", "Say yes."), ("assistant", "yes")), "rejected": msgs(("user", "Say yes."), ("assistant", "no"))},
    {"chosen": "Say yes. yes", "rejected": "Say yes. no"}))
put("conversation", "grpo_messages", b"\x02" + rows({"prompt": msgs(("system", "Be brief."), ("user", "Say yes.")), "answers": ["yes"]}))
put("conversation", "roles_out_of_order", b"\x00" + rows({"messages": msgs(("assistant", "first"), ("user", "then"))}))
put("conversation", "content_not_a_string", b"\x00" + rows({"messages": [{"role": "user", "content": ["x"]},
                                                                       {"role": "assistant"}]}))

# Chat-template variables (fuzz_template_vars.cpp): the first byte picks the template (% 4: Qwen3,
# Qwen2.5, Llama 3, the input's own source before the first NUL); NAME=VALUE items, NUL-separated.
put("template_vars", "qwen3_thinking_tools", b"\x00" + "\0".join([
    "enable_thinking=false",
    "tools=" + json.dumps([{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                                             "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])]).encode())
put("template_vars", "unread_variable", b"\x02" + b"enable_thinking=true")
put("template_vars", "own_template_loops", b"\x03" + "\0".join([
    "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% for x in items %}{% for y in items %}"
    "{{ greeting ~ x ~ y }}{% endfor %}{% endfor %}{{ nested.a.b | tojson }}",
    "greeting=Hello", "items=[1,2,3]", 'nested={"a":{"b":[null,true,1.5,"s"]}}']).encode())

# A reward program's answer line (fuzz_reward_answer.cpp): the bytes as they came.
put("reward_answer", "number", b" 0.25 \r")
put("reward_answer", "c_syntax", b"-2.5e-1")
put("reward_answer", "hex_and_words", b"0x1p-3 great job")
put("reward_answer", "overflow", b"9" * 400)

# xg-generate's --prompts (fuzz_prompts.cpp): the first byte picks the template (% 3: Qwen2.5,
# Llama 3, none), the rest is the file: text prompts and conversations, mixed.
put("prompts", "text_and_messages", b"\x00" + rows(
    {"prompt": "Say yes."},
    {"messages": msgs(("system", "Be brief."), ("user", "hi"), ("assistant", "yo"), ("user", "again"))},
    {"prompt": msgs(("user", "Weather?"), ("assistant", "Let me look."), ("tool", "sunny"))}))
put("prompts", "llama3", b"\x01" + rows({"prompt": msgs(("user", "1+1?"))}))
put("prompts", "ends_with_assistant", b"\x00" + rows({"messages": msgs(("user", "a"), ("assistant", "b"))}))
put("prompts", "no_template", b"\x02" + rows({"prompt": "raw text"}, {"messages": msgs(("user", "hi"))}))
