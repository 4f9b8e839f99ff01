// The attention family, one header for users: the kinds xgrad ships (multi-head, grouped-query
// with MQA/QK-Norm/RoPE, multi-head latent; nn/attention_*.hpp, each with its block spec) on
// one kernel (scaled_dot_product_attention), and the KV cache (nn/attention_parts.hpp).
// Attribute names follow the usual hand-written PyTorch classes (a naming enum per module picks
// w_q or W_q, kv_down_proj or W_kv_down, ...) so that their state dicts load by name.
//
// Masks are xg::AttnMask: a bool tensor (true = keep, as the common
// scores.masked_fill(mask == 0, -1e9)), a float tensor added to the scores
// (torch.triu(torch.full((T, T), -inf), 1), as torch.nn.MultiheadAttention's float attn_mask),
// and/or `causal` (aligned to the end, so it stays right with a KV cache). NOTE: tutorial code
// often builds its masks as float 0/1 tensors (torch.tril(torch.ones(T, T))) for that
// masked_fill; pass them as bool here, since a float mask is additive.
#pragma once

#include "nn/attention_gqa.hpp"
#include "nn/attention_mha.hpp"
#include "nn/attention_mla.hpp"
#include "nn/attention_parts.hpp"
