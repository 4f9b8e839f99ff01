// Tests for nn/decoder.cpp (DecoderLM): logits and gradients against PyTorch (tied and untied,
// RoPE / learned / sinusoidal positions), float64 gradient checks, KV-cache decoding against
// the full forward (MHA, GQA, MLA), generation (greedy, seeded sampling, eos, modes), the
// MoE auxiliary loss, config JSON and save_pretrained / load_pretrained, errors.
#include "nn/decoder.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "autograd/graph.hpp"
#include "autograd/index.hpp"
#include "autograd/settings.hpp"
#include "autograd/shape.hpp"
#include "tests/torch_fixture.hpp"

using namespace xg;
using namespace xg::nn;
using xg::test::param_names;
using xg::test::randomize64;
using test::expect_module_matches_torch;
using V = std::vector<Tensor>;

namespace {

Tensor random_tokens(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  Generator gen(seed);
  return randint(0, V, {B, T}, &gen);
}

// The fixture script's models.
LMConfig llama_lm() {
  LMConfig c;
  c.vocab_size = 11;
  c.n_layers = 2;
  c.block = BlockConfig::llama(16, 4, 2);
  std::get<SwiGLUSpec>(c.block.ffn).d_ff = 32;
  c.block.max_seq_len = 64;
  return c;
}

LMConfig gpt2_tied_lm() {
  LMConfig c;
  c.vocab_size = 11;
  c.n_layers = 2;
  c.block.d_model = 16;
  std::get<MHASpec>(c.block.attention).n_heads = 4;
  std::get<MLPSpec>(c.block.ffn).d_ff = 32;  // defaults: Pre-Norm, LayerNorm, GELU (fc1, fc2), MHA, learned positions
  c.block.max_seq_len = 16;
  c.tie_embeddings = true;
  return c;
}

LMConfig teaching_tied_lm() {
  LMConfig c;
  c.vocab_size = 11;
  c.n_layers = 2;
  c.block = BlockConfig::teaching(16, 4);
  std::get<MLPSpec>(c.block.ffn).d_ff = 24;
  c.block.max_seq_len = 16;
  c.final_norm = false;  // Post-Norm blocks end normalised
  c.tie_embeddings = true;
  return c;
}

// Small models of each attention kind for cache and generation tests.
enum class AttentionKind { MHA, GQA, MLA };

LMConfig small_lm(AttentionKind kind, bool decoupled_rope_key = false) {
  LMConfig c;
  c.vocab_size = 13;
  c.n_layers = 2;
  c.block.d_model = 16;
  c.block.max_seq_len = 32;
  if (kind == AttentionKind::MHA) {
    std::get<MHASpec>(c.block.attention).n_heads = 4;
    std::get<MLPSpec>(c.block.ffn).d_ff = 24;
    c.block.position = PositionKind::Learned;  // positions added at the input, offset by start_pos
  } else if (kind == AttentionKind::GQA) {
    c.block = BlockConfig::llama(16, 4, 2);
    std::get<SwiGLUSpec>(c.block.ffn).d_ff = 24;
    c.block.max_seq_len = 32;
  } else {
    MLASpec mla;
    mla.n_heads = 4;
    mla.latent_dim = 6;
    mla.rope_dim = 2;
    mla.decoupled_rope_key = decoupled_rope_key;
    c.block.attention = mla;
    c.block.position = PositionKind::RoPE;
    c.block.norm = RMSNormSpec{1e-5};
    SwiGLUSpec swiglu;
    swiglu.d_ff = 24;
    c.block.ffn = swiglu;
  }
  return c;
}

}  // namespace

// --- against PyTorch ------------------------------------------------------------------------

TEST(NnDecoderTorch, LLaMAUntied) {
  DecoderLM lm(llama_lm());
  expect_module_matches_torch("nn_decoder", "llama_untied", lm, [&](const V& x) { return lm(x[0]); });
}

TEST(NnDecoderTorch, GPT2Tied) {
  DecoderLM lm(gpt2_tied_lm());
  expect_module_matches_torch("nn_decoder", "gpt2_tied", lm, [&](const V& x) { return lm(x[0]); });
}

TEST(NnDecoderTorch, TeachingTied) {
  DecoderLM lm(teaching_tied_lm());
  expect_module_matches_torch("nn_decoder", "teaching_tied", lm, [&](const V& x) { return lm(x[0]); });
}

// --- structure ----------------------------------------------------------------------------

TEST(NnDecoder, ChildNames) {
  DecoderLM untied(llama_lm());
  std::vector<std::string> n = param_names(untied);
  EXPECT_EQ(n.front(), "tok_embeddings.weight");
  EXPECT_EQ(n[1], "layers.0.norm_attn.weight");
  EXPECT_NE(std::find(n.begin(), n.end(), "layers.1.attention.w_k.weight"), n.end());
  EXPECT_NE(std::find(n.begin(), n.end(), "layers.1.ffn.W_down.weight"), n.end());
  EXPECT_EQ(n[n.size() - 2], "norm.weight");
  EXPECT_EQ(n.back(), "output.weight");
  EXPECT_EQ(untied.pos(), nullptr);  // RoPE lives in the attention

  DecoderLM tied(gpt2_tied_lm());
  n = param_names(tied);
  EXPECT_EQ(std::count(n.begin(), n.end(), "tok_embeddings.weight"), 1);
  EXPECT_EQ(n[1], "pos.weight");
  EXPECT_EQ(std::count_if(n.begin(), n.end(), [](const std::string& s) { return s.rfind("output", 0) == 0; }), 0);
  EXPECT_EQ(tied.output(), nullptr);
  LMConfig untied_cfg = gpt2_tied_lm();
  untied_cfg.tie_embeddings = false;
  EXPECT_EQ(DecoderLM(untied_cfg).num_parameters() - tied.num_parameters(), 11 * 16);

  DecoderLM teaching(teaching_tied_lm());
  const TensorMap sd = teaching.state_dict();
  EXPECT_EQ(sd.count("pos.pe"), 1u);  // the sinusoidal table is a persistent buffer
  EXPECT_EQ(sd.at("pos.pe").shape(), (Shape{16, 16}));
  EXPECT_EQ(teaching.norm(), nullptr);
  EXPECT_EQ((*teaching.layers())[1]->config().n_layers, 2);
}

TEST(NnDecoder, KVCacheBytes) {
  DecoderLM gqa(small_lm(AttentionKind::GQA));  // 2 layers x (K and V of 2 kv heads of 4)
  EXPECT_EQ(gqa.kv_cache_bytes_per_token(4), 2 * 2 * 2 * 4 * 4);
  DecoderLM mla(small_lm(AttentionKind::MLA));  // 2 layers x latent 6
  EXPECT_EQ(mla.kv_cache_bytes_per_token(2), 2 * 6 * 2);
}

// --- gradient checks ----------------------------------------------------------------------

TEST(NnDecoderGradcheck, Untied) {
  LMConfig c;
  c.vocab_size = 7;
  c.n_layers = 2;
  c.block = BlockConfig::llama(8, 2, 1);
  std::get<SwiGLUSpec>(c.block.ffn).d_ff = 12;
  c.block.max_seq_len = 8;
  DecoderLM lm(c);
  randomize64(lm, 1);
  const Tensor tokens = random_tokens(2, 4, 7, 2);
  auto* attn = dynamic_cast<GroupedQueryAttention*>((*lm.layers())[0]->attention().get());
  auto* ffn = dynamic_cast<SwiGLU*>((*lm.layers())[1]->ffn().get());
  EXPECT_GRADCHECK([&](const V&) { return lm(tokens); },
                   {lm.tok_embeddings()->weight(), attn->w_q()->weight(), attn->w_v()->weight(),
                    ffn->down()->weight(), dynamic_cast<RMSNorm*>(lm.norm().get())->weight(), lm.output()->weight()});
}

TEST(NnDecoderGradcheck, TiedLearnedPositions) {
  LMConfig c;
  c.vocab_size = 7;
  c.n_layers = 2;
  c.block.d_model = 8;
  std::get<MHASpec>(c.block.attention).n_heads = 2;
  std::get<MLPSpec>(c.block.ffn).d_ff = 12;
  c.block.max_seq_len = 6;
  c.tie_embeddings = true;
  DecoderLM lm(c);
  randomize64(lm, 3);
  const Tensor tokens = random_tokens(2, 4, 7, 4);
  auto* attn = dynamic_cast<MultiHeadAttention*>((*lm.layers())[1]->attention().get());
  auto* ffn = dynamic_cast<FFN*>((*lm.layers())[0]->ffn().get());
  auto* norm = dynamic_cast<LayerNorm*>(lm.norm().get());
  // The embedding is used twice (input and LM head): both paths reach its gradient.
  EXPECT_GRADCHECK([&](const V&) { return lm(tokens); },
                   {lm.tok_embeddings()->weight(), dynamic_cast<LearnedPositionalEmbedding*>(lm.pos().get())->weight(),
                    attn->w_k()->weight(), ffn->up()->weight(), norm->weight(), norm->bias()});
}

// --- KV cache: decoding token by token gives the full forward's logits ----------------------

namespace {

void expect_cached_decode_matches(AttentionKind kind, bool decoupled = false) {
  LMConfig c = small_lm(kind, decoupled);
  DecoderLM lm(c);
  randomize64(lm, 11);
  const Tensor tokens = random_tokens(2, 9, c.vocab_size, 12);
  const Tensor full = lm(tokens);
  NoGradGuard no_grad;
  std::vector<KVCache> caches;
  V parts = {lm(narrow(tokens, 1, 0, 4), 0, &caches)};  // prefill 4 tokens
  for (int64_t t = 4; t < 9; ++t)
    parts.push_back(lm(narrow(tokens, 1, t, 1), t % 2 ? t : -1, &caches));  // explicit or "after the cache"
  ASSERT_EQ(caches.size(), 2u);
  EXPECT_EQ(caches[1].length, 9);
  if (kind == AttentionKind::MLA) {  // MLA caches its latent, not keys and values
    EXPECT_FALSE(caches[0].k.defined());
    EXPECT_EQ(caches[0].latent.shape(), (Shape{2, 9, 6}));
    EXPECT_EQ(caches[0].k_rope.defined(), decoupled);
  } else {  // buffers doubled from the 4-token prefill (4 -> 8 -> 16), 9 positions filled
    EXPECT_EQ(caches[0].k.size(2), 16);
    EXPECT_EQ(caches[0].bytes(), 2 * caches[0].k.numel() / 16 * 9 * 8);  // k and v, float64
  }
  EXPECT_TRUE(test::tensors_close(cat(parts, int64_t{1}), full, 1e-10, 1e-12));
  // Rolling back: re-decoding the last 3 tokens from position 6 gives their logits again.
  const Tensor again = lm(narrow(tokens, 1, 6, 3), 6, &caches);
  EXPECT_TRUE(test::tensors_close(again, narrow(full, 1, 6, 3), 1e-10, 1e-12));
}

}  // namespace

TEST(NnDecoderCache, MHALearnedPositions) { expect_cached_decode_matches(AttentionKind::MHA); }
TEST(NnDecoderCache, GQARope) { expect_cached_decode_matches(AttentionKind::GQA); }
TEST(NnDecoderCache, MLALatent) { expect_cached_decode_matches(AttentionKind::MLA); }
TEST(NnDecoderCache, MLADecoupledRopeKey) { expect_cached_decode_matches(AttentionKind::MLA, true); }

TEST(NnDecoderCache, SinusoidalPositions) {
  LMConfig c = teaching_tied_lm();
  DecoderLM lm(c);
  randomize64(lm, 13);
  const Tensor tokens = random_tokens(1, 6, 11, 14);
  const Tensor full = lm(tokens);
  std::vector<KVCache> caches;
  V parts = {lm(narrow(tokens, 1, 0, 2), 0, &caches)};
  for (int64_t t = 2; t < 6; ++t) parts.push_back(lm(narrow(tokens, 1, t, 1), t, &caches));
  EXPECT_TRUE(test::tensors_close(cat(parts, int64_t{1}), full, 1e-10, 1e-12));
}

// --- generation ---------------------------------------------------------------------------

namespace {

// Token-by-token generation by full forwards over the whole sequence (no cache): the reference.
Tensor generate_by_full_forwards(const DecoderLM& lm, const Tensor& prompt, int64_t n, const SamplingOptions& s,
                                 uint64_t seed) {
  NoGradGuard no_grad;
  Generator gen(seed);
  Tensor seq = prompt;
  const int64_t B = prompt.size(0), Vn = lm.config().vocab_size;
  for (int64_t i = 0; i < n; ++i) {
    const Tensor logits = lm(seq);
    const Tensor last = reshape(narrow(logits, 1, seq.size(1) - 1, 1), {B, Vn});
    std::vector<int64_t> next;
    for (int64_t b = 0; b < B; ++b) {
      std::vector<int64_t> context;  // the row so far: what the repetition penalty reads
      for (double v : narrow(seq, 0, b, 1).to_vector()) context.push_back(static_cast<int64_t>(v));
      next.push_back(sample_token(reshape(narrow(last, 0, b, 1), {Vn}), s, gen, context));
    }
    seq = cat({seq, from_vector(next, {B, 1})}, int64_t{1});
  }
  return seq;
}

}  // namespace

TEST(NnDecoderGenerate, GreedyEqualsArgmaxOfFullForwards) {
  for (AttentionKind kind : {AttentionKind::MHA, AttentionKind::GQA, AttentionKind::MLA}) {
    DecoderLM lm(small_lm(kind));
    randomize64(lm, 21);
    const Tensor prompt = random_tokens(2, 3, 13, 22);
    GenerateOptions o;
    o.temperature = 0;
    const Tensor out = lm.generate(prompt, 8, o);
    ASSERT_EQ(out.shape(), (Shape{2, 11}));
    EXPECT_EQ(narrow(out, 1, 0, 3).to_vector(), prompt.to_vector());  // the prompt comes first
    // argmax over repeated full forwards
    NoGradGuard no_grad;
    Tensor seq = prompt;
    for (int i = 0; i < 8; ++i) {
      const Tensor logits = lm(seq);
      const Tensor next = argmax(narrow(logits, 1, seq.size(1) - 1, 1), -1);  // [B, 1]
      seq = cat({seq, next}, int64_t{1});
    }
    EXPECT_EQ(out.to_vector(), seq.to_vector()) << "attention kind " << static_cast<int>(kind);
  }
}

TEST(NnDecoderGenerate, SeededSamplingIsReproducible) {
  DecoderLM lm(small_lm(AttentionKind::GQA));
  randomize64(lm, 31, 0.3);
  const Tensor prompt = random_tokens(3, 2, 13, 32);
  GenerateOptions o;
  o.temperature = 0.9;
  o.top_k = 6;
  o.top_p = 0.95;
  o.seed = 42;
  const Tensor a = lm.generate(prompt, 10, o);
  const Tensor b = lm.generate(prompt, 10, o);
  EXPECT_EQ(a.to_vector(), b.to_vector());
  // The same draws as sampling after full forwards with a generator of the same seed.
  const Tensor ref = generate_by_full_forwards(lm, prompt, 10, {0.9, 6, 0.95}, 42);
  EXPECT_EQ(a.to_vector(), ref.to_vector());
  o.seed = 43;
  EXPECT_NE(lm.generate(prompt, 10, o).to_vector(), a.to_vector());
}

// min_p and the repetition penalty draw as sample_token does after full forwards, each row's
// penalty over its own prompt and tokens so far; the penalty changes greedy output too.
TEST(NnDecoderGenerate, MinPAndRepetitionPenaltyFollowSampleToken) {
  DecoderLM lm(small_lm(AttentionKind::GQA));
  randomize64(lm, 51, 0.3);
  const Tensor prompt = random_tokens(2, 4, 13, 52);
  GenerateOptions o;
  o.temperature = 0.8;
  o.min_p = 0.1;
  o.repetition_penalty = 1.5;
  o.seed = 7;
  const Tensor ref = generate_by_full_forwards(lm, prompt, 10, {0.8, 0, 1.0, 0.1, 1.5}, 7);
  EXPECT_EQ(lm.generate(prompt, 10, o).to_vector(), ref.to_vector());
  o.temperature = 0;
  o.repetition_penalty = 3.0;
  const Tensor greedy_ref = generate_by_full_forwards(lm, prompt, 10, {0.0, 0, 1.0, 0.0, 3.0}, 0);
  const Tensor penalised = lm.generate(prompt, 10, o);
  EXPECT_EQ(penalised.to_vector(), greedy_ref.to_vector());
  o.repetition_penalty = 1.0;
  EXPECT_NE(lm.generate(prompt, 10, o).to_vector(), penalised.to_vector());
}

// on_token sees each row's tokens in order as they are drawn; returning true ends that row,
// which is padded with eos_id after it, while the other rows go on.
TEST(NnDecoderGenerate, OnTokenStreamsAndStopsARow) {
  DecoderLM lm(small_lm(AttentionKind::GQA));
  randomize64(lm, 61, 0.3);
  const Tensor prompt = random_tokens(2, 3, 13, 62);
  GenerateOptions o;
  o.temperature = 0;
  o.eos_id = 12;
  const Tensor plain = lm.generate(prompt, 8, o);
  std::vector<std::vector<int64_t>> seen(2);
  o.on_token = [&](int64_t row, int64_t tok) {
    seen[row].push_back(tok);
    return row == 0 && seen[0].size() == 3;  // row 0 stops after its third token
  };
  const Tensor out = lm.generate(prompt, 8, o);
  const auto want = plain.to_vector(), got = out.to_vector();
  const int64_t W = out.size(1);
  ASSERT_EQ(seen[0].size(), 3u);
  for (int64_t t = 0; t < W; ++t) {
    if (t < 6) EXPECT_EQ(got[t], want[t]) << t;       // prompt and the three tokens
    else EXPECT_EQ(got[t], 12) << t;                  // then eos_id
    EXPECT_EQ(got[W + t], want[W + t]) << t;           // row 1 as without the callback
  }
  for (std::size_t i = 0; i < seen[1].size(); ++i) EXPECT_EQ(seen[1][i], want[W + 3 + i]) << i;
}

// The timings count the prefill of the whole prompt once and one decode step per generated token
// after the first (which the prefill's logits give); asking for them changes no token.
TEST(NnDecoderGenerate, TimingsCountThePrefillAndEachDecodeStep) {
  DecoderLM lm(small_lm(AttentionKind::GQA));
  randomize64(lm, 41);
  const Tensor prompt = random_tokens(2, 3, 13, 42);
  GenerateOptions o;
  o.temperature = 0;
  GenerateTimings t;
  t.decode_steps = 99;  // overwritten
  const Tensor timed = lm.generate(prompt, 5, o, &t);
  EXPECT_EQ(timed.to_vector(), lm.generate(prompt, 5, o).to_vector());
  EXPECT_EQ(t.prompt_tokens, 2 * 3);
  EXPECT_EQ(t.decode_steps, 4);
  EXPECT_EQ(t.decode_tokens, 2 * 4);
  EXPECT_GT(t.prefill_seconds, 0);
  EXPECT_GT(t.decode_seconds, 0);
  EXPECT_GT(t.sample_seconds, 0);
  lm.generate(prompt, 1, o, &t);  // one token: the prefill's logits only
  EXPECT_EQ(t.decode_steps, 0);
  EXPECT_EQ(t.decode_seconds, 0);
}

TEST(NnDecoderGenerate, EosStopsARowAndPads) {
  DecoderLM lm(small_lm(AttentionKind::MHA));
  randomize64(lm, 41);
  const Tensor prompt = random_tokens(2, 2, 13, 42);
  GenerateOptions o;
  o.temperature = 0;
  const Tensor free_run = lm.generate(prompt, 6, o);
  std::vector<double> f = free_run.to_vector();  // rows of 8
  // eos: the latest of row 0's new tokens that is new in that row (so that row 0 stops midway)
  int64_t chosen = 2;
  for (int64_t t = 3; t < 8; ++t)
    if (std::find(f.begin() + 2, f.begin() + t, f[t]) == f.begin() + t) chosen = t;
  o.eos_id = static_cast<int64_t>(f[chosen]);
  const Tensor stopped = lm.generate(prompt, 6, o);
  // Expected: each row as in the free run up to its first eos among the new tokens, then eos;
  // the output ends once every row has stopped.
  std::vector<int64_t> first_eos(2, 8);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 2; t < 8; ++t)
      if (static_cast<int64_t>(f[b * 8 + t]) == o.eos_id) {
        first_eos[b] = t;
        break;
      }
  const int64_t width = std::max(first_eos[0], first_eos[1]) == 8 ? 8 : std::max(first_eos[0], first_eos[1]) + 1;
  ASSERT_EQ(stopped.shape(), (Shape{2, width}));
  const std::vector<double> s = stopped.to_vector();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < width; ++t)
      EXPECT_EQ(s[b * width + t], t <= first_eos[b] ? f[b * 8 + t] : static_cast<double>(o.eos_id))
          << "row " << b << " position " << t;
  EXPECT_EQ(first_eos[0], chosen);
}

TEST(NnDecoderGenerate, EvalSemanticsWithoutChangingModes) {
  LMConfig c = small_lm(AttentionKind::GQA);
  c.block.dropout = 0.3;
  DecoderLM lm(c);
  randomize64(lm, 51);
  const Tensor prompt = random_tokens(2, 3, 13, 52);
  GenerateOptions o;
  o.temperature = 0;
  lm.eval();
  const Tensor in_eval = lm.generate(prompt, 6, o);
  lm.train();
  (*lm.layers())[0]->eval();  // a mixed state, restored as it was
  const Tensor in_train = lm.generate(prompt, 6, o);
  EXPECT_EQ(in_train.to_vector(), in_eval.to_vector());  // dropout was off
  EXPECT_TRUE(lm.is_training());
  EXPECT_FALSE((*lm.layers())[0]->is_training());
  EXPECT_FALSE((*lm.layers())[0]->attention()->is_training());
  EXPECT_TRUE((*lm.layers())[1]->is_training());
  EXPECT_TRUE(lm.tok_embeddings()->is_training());
  EXPECT_FALSE(in_train.requires_grad());
  for (const Tensor& p : lm.parameters()) EXPECT_FALSE(p.grad().defined());
  // and a zero-length continuation is the prompt
  EXPECT_EQ(lm.generate(prompt, 0, o).to_vector(), prompt.to_vector());
}

// --- the MoE auxiliary loss ---------------------------------------------------------------

TEST(NnDecoder, ForwardWithAuxSumsTheBlocksLosses) {
  LMConfig c;
  c.vocab_size = 9;
  c.n_layers = 2;
  c.block.d_model = 8;
  std::get<MHASpec>(c.block.attention).n_heads = 2;
  MoESpec moe;
  moe.num_experts = 4;
  moe.top_k = 2;
  c.block.ffn = moe;
  c.block.position = PositionKind::None;
  DecoderLM lm(c);
  const Tensor tokens = random_tokens(2, 5, 9, 61);
  const LMOutput out = lm.forward_with_aux(tokens);
  ASSERT_TRUE(out.aux_loss.defined());
  const AttnMask causal = AttnMask::causal_mask();
  const BlockOutput r0 = (*lm.layers())[0]->forward(lm.tok_embeddings()->forward(tokens), causal);
  const BlockOutput r1 = (*lm.layers())[1]->forward(r0.out, causal);
  EXPECT_NEAR(out.aux_loss.item(), r0.aux_loss.item() + r1.aux_loss.item(), 1e-7);
  EXPECT_GT(out.aux_loss.item(), 0.0);
  EXPECT_TRUE(test::tensors_close(out.logits, lm(tokens), 0, 0));
  EXPECT_FALSE(DecoderLM(small_lm(AttentionKind::MHA)).forward_with_aux(tokens).aux_loss.defined());
}

// --- config JSON and save_pretrained / load_pretrained --------------------------------------

TEST(NnDecoderConfig, JsonRoundTrip) {
  LMConfig c;
  c.vocab_size = 101;
  c.n_layers = 3;
  c.tie_embeddings = true;
  c.final_norm = false;
  c.dtype = kFloat64;
  BlockConfig& b = c.block;
  b.d_model = 24;
  b.norm_position = NormPosition::DeepNorm;
  b.norm = RMSNormSpec{1.25e-7};
  MoESpec moe;
  moe.d_ff = 40;
  moe.num_experts = 5;
  moe.top_k = 3;
  moe.aux_loss_coef = 0.125;
  moe.expert = ExpertKind::SwiGLU;
  moe.activation = Activation::GELUTanh;
  b.ffn = moe;
  MLASpec mla;
  mla.n_heads = 6;
  mla.head_dim = 8;
  mla.latent_dim = 12;
  mla.rope_dim = 4;
  mla.q_latent_dim = 0;
  mla.decoupled_rope_key = true;
  b.attention = mla;
  b.position = PositionKind::RoPE;
  b.rope_layout = RopeLayout::Interleaved;
  b.rope_base = 500000.0;
  b.max_seq_len = 77;
  b.dropout = 0.1;
  b.naming = BlockNaming::LLaMA;
  const std::string text = c.to_json();
  EXPECT_NE(text.find("\"norm_position\": \"deepnorm\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"rope_layout\": \"interleaved\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"kind\": \"mla\""), std::string::npos) << text;
  const LMConfig d = LMConfig::from_json(text);
  EXPECT_EQ(d.to_json(), text);
  EXPECT_EQ(d.vocab_size, 101);
  EXPECT_EQ(d.block.n_layers, 3);
  EXPECT_EQ(d.dtype, kFloat64);
  EXPECT_EQ(d.block.norm_position, NormPosition::DeepNorm);
  EXPECT_EQ(std::get<MoESpec>(d.block.ffn).expert, ExpertKind::SwiGLU);
  EXPECT_EQ(std::get<MoESpec>(d.block.ffn).activation, Activation::GELUTanh);
  EXPECT_EQ(std::get<MoESpec>(d.block.ffn).top_k, 3);
  EXPECT_DOUBLE_EQ(std::get<RMSNormSpec>(d.block.norm).eps, 1.25e-7);
  EXPECT_DOUBLE_EQ(d.block.dropout, 0.1);
  EXPECT_TRUE(std::get<MLASpec>(d.block.attention).decoupled_rope_key);
  EXPECT_EQ(std::get<MLASpec>(d.block.attention).q_latent_dim, 0);
  // GQA with the options of Qwen-style models: q/k/v biases and a head_dim of its own.
  GQASpec gqa;
  gqa.n_heads = 4;
  gqa.n_kv_heads = 2;
  gqa.head_dim = 10;
  gqa.qkv_bias = true;
  gqa.qk_norm = true;
  c.block.attention = gqa;
  const LMConfig g = LMConfig::from_json(c.to_json());
  EXPECT_EQ(g.to_json(), c.to_json());
  EXPECT_EQ(std::get<GQASpec>(g.block.attention).head_dim, 10);
  EXPECT_TRUE(std::get<GQASpec>(g.block.attention).qkv_bias);
  EXPECT_FALSE(std::get<GQASpec>(g.block.attention).out_bias);
}

// A config.json asking for more memory than the machine has is refused before its blocks are
// allocated (n_layers 1e9 of a tiny block; 2e8 positions), naming the file, the field and the bytes.
TEST(NnDecoderConfig, AModelTooLargeForTheMachineIsRefusedBeforeAllocating) {
  const std::filesystem::path d = std::filesystem::path(XGRAD_BINARY_DIR) / "dir_NnDecoderConfig_TooLarge";
  std::filesystem::remove_all(d);
  LMConfig c;
  c.vocab_size = 259;
  c.n_layers = 1;
  c.block = BlockConfig::llama(16, 2, 1);
  save_pretrained(DecoderLM(c), d.string());
  const std::string config = (d / "config.json").string();
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(std::ifstream(config));
  // A stand-in for a machine of 1 GB, so that the figures do not depend on this one.
  Settings one_gb = settings();
  one_gb.memory_limit = "1073741824";
  auto guard = std::make_unique<SettingsGuard>(one_gb);
  j["n_layers"] = 1000000000;
  std::ofstream(config) << j.dump();
  EXPECT_XG_ERROR(load_pretrained(d.string()),
                  config + ": DecoderLM: field 'n_layers' 1000000000 (");
  EXPECT_XG_ERROR(load_pretrained(d.string()), "per block, d_model 16) needs about");
  EXPECT_XG_ERROR(load_pretrained(d.string()), "TB, more than this machine's 1 GB of memory");
  j["n_layers"] = 1;
  j["block"]["max_seq_len"] = 200000000;
  std::ofstream(config) << j.dump();
  EXPECT_XG_ERROR(load_pretrained(d.string()), "position tables (field 'max_seq_len' 200000000) needs about 11.9 GB");
  guard.reset();
  // The estimate without building is about what the built model holds (its parameters, plus
  // the position tables it counts at d_model wide).
  c.n_layers = 3;
  const double params = 4.0 * static_cast<double>(DecoderLM(c).num_parameters());
  EXPECT_GE(model_bytes(c), params);
  EXPECT_LE(model_bytes(c), params + 4.0 * static_cast<double>(c.block.max_seq_len * 16) + 1024);
  std::filesystem::remove_all(d);
}

// A field left out is an error naming it, at any depth: a default (8 heads, the interleaved RoPE
// layout) would load without a word and compute another model than the weights'.
TEST(NnDecoderConfig, EveryFieldIsRequired) {
  LMConfig c;
  c.vocab_size = 50;
  c.block = BlockConfig::llama(32, 4, 2);
  const std::string full = c.to_json();
  auto without = [&](const std::vector<std::string>& path) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(full);
    nlohmann::ordered_json* at = &j;
    for (std::size_t i = 0; i + 1 < path.size(); ++i) at = &(*at)[path[i]];
    at->erase(path.back());
    return j.dump();
  };
  EXPECT_XG_ERROR(LMConfig::from_json(without({"block", "attention", "n_heads"}), "m/config.json"),
                  "m/config.json: missing field 'block.attention.n_heads' (every field is required");
  EXPECT_XG_ERROR(LMConfig::from_json(without({"block", "rope_layout"}), "m/config.json"),
                  "m/config.json: missing field 'block.rope_layout'");
  EXPECT_XG_ERROR(LMConfig::from_json(without({"n_layers"}), "m/config.json"), "m/config.json: missing field 'n_layers'");
  EXPECT_XG_ERROR(LMConfig::from_json(without({"block", "ffn", "d_ff"}), "m/config.json"),
                  "m/config.json: missing field 'block.ffn.d_ff'");
  EXPECT_EQ(LMConfig::from_json(full).to_json(), full);
}

// A config.json written before the sublayer specs, with flat block fields, still loads as
// the same model.
TEST(NnDecoderConfig, FlatBlockOfEarlierVersions) {
  const LMConfig c = LMConfig::from_json(R"({"vocab_size": 259, "n_layers": 2, "block": {"d_model": 32,
      "n_heads": 2, "n_kv_heads": 1, "d_ff": 64, "norm_position": "pre", "norm": "rmsnorm", "norm_eps": 1e-6,
      "ffn": "swiglu", "ffn_naming": "fc", "swiglu_naming": "seed", "attention": "gqa", "qk_norm": false,
      "position": "rope", "rope_layout": "interleaved", "max_seq_len": 64, "bias": false, "naming": "llama"}})");
  LMConfig want;
  want.vocab_size = 259;
  want.n_layers = 2;
  want.block = BlockConfig::llama(32, 2, 1);
  std::get<SwiGLUSpec>(want.block.ffn).d_ff = 64;
  want.block.max_seq_len = 64;
  EXPECT_EQ(c.to_json(), want.to_json());
  const LMConfig mla = LMConfig::from_json(R"({"block": {"d_model": 16, "n_heads": 4, "attention": "mla",
      "mla_latent_dim": 6, "mla_rope_dim": 2, "position": "rope", "ffn": "relu", "bias": false}})");
  EXPECT_EQ(std::get<MLASpec>(mla.block.attention).latent_dim, 6);
  EXPECT_EQ(std::get<MLPSpec>(mla.block.ffn).activation, Activation::ReLU);
  EXPECT_FALSE(std::get<MLPSpec>(mla.block.ffn).bias);
}

namespace {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    path = std::filesystem::temp_directory_path() /
           ("xgrad_" + tag + "_" + std::to_string(reinterpret_cast<std::uintptr_t>(this)) + "_" +
            std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
    std::filesystem::remove_all(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

}  // namespace

TEST(NnDecoderConfig, SavePretrainedLoadPretrained) {
  for (const LMConfig& c : {gpt2_tied_lm(), small_lm(AttentionKind::MLA)}) {
    DecoderLM lm(c);
    if (std::holds_alternative<MLASpec>(c.block.attention)) randomize64(lm, 71);  // a float64 model
    TempDir dir("lm");
    save_pretrained(lm, (dir.path / "model").string());
    EXPECT_TRUE(std::filesystem::exists(dir.path / "model" / "config.json"));
    EXPECT_TRUE(std::filesystem::exists(dir.path / "model" / "model.safetensors"));
    std::shared_ptr<DecoderLM> back = load_pretrained((dir.path / "model").string());
    EXPECT_EQ(back->tok_embeddings()->weight().dtype(), lm.tok_embeddings()->weight().dtype());
    EXPECT_EQ(param_names(*back), param_names(lm));
    const Tensor tokens = random_tokens(2, 5, c.vocab_size, 72);
    EXPECT_TRUE(test::tensors_close(back->forward(tokens), lm(tokens), 0, 0));
    LMConfig want = c;
    want.dtype = lm.tok_embeddings()->weight().dtype();  // after randomize64's conversion
    EXPECT_EQ(back->config().to_json(), want.to_json());  // every block and sublayer field
    EXPECT_EQ(back->config().tie_embeddings, c.tie_embeddings);
  }
}

// Loading draws nothing from the default generator (the weights come from the file): a seeded
// script gets the same random numbers after a load as without it. Before, the model's
// random init ran and was then overwritten (1.1-1.8 s of a SmolLM2-135M-sized load_hf).
TEST(NnDecoderConfig, LoadPretrainedDrawsNoRandomInit) {
  DecoderLM lm(llama_lm());
  TempDir dir("noinit");
  save_pretrained(lm, (dir.path / "model").string());
  manual_seed(11);
  std::shared_ptr<DecoderLM> back = load_pretrained((dir.path / "model").string());
  const std::vector<double> after_load = randn({8}).to_vector();
  manual_seed(11);
  EXPECT_EQ(after_load, randn({8}).to_vector());
  const Tensor tokens = random_tokens(2, 5, llama_lm().vocab_size, 73);
  EXPECT_TRUE(test::tensors_close(back->forward(tokens), lm(tokens), 0, 0));
}

// --- errors -------------------------------------------------------------------------------

TEST(NnDecoderErrors, BadTokens) {
  DecoderLM lm(llama_lm());
  const std::string who = "DecoderLM(vocab_size=11, n_layers=2, d_model=16)";
  EXPECT_XG_ERROR(lm(randn({2, 3})), who + ": expected tokens int64 [B, T], got float32 [2,3]");
  EXPECT_XG_ERROR(lm(from_vector(std::vector<int64_t>{1, 2, 3}, {3})), "expected tokens int64 [B, T], got int64 [3]");
  EXPECT_XG_ERROR(lm(from_vector(std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 11}, {2, 4})),
                  who + ": token id 11 at [1,3] is out of range [0, 11) (tokens [2,4])");
  EXPECT_XG_ERROR(lm(from_vector(std::vector<int64_t>{-1, 2}, {1, 2})), "token id -1 at [0,0] is out of range");
  std::vector<KVCache> caches(3);
  EXPECT_XG_ERROR(lm(random_tokens(1, 2, 11, 1), 0, &caches), "expected 2 KV caches (one per layer), got 3");
  EXPECT_XG_ERROR(lm(random_tokens(1, 2, 11, 1), -1), "start_pos must be >= 0 (or -1 with caches), got -1");
}

TEST(NnDecoderErrors, LongerThanMaxSeqLen) {
  for (PositionKind kind : {PositionKind::Learned, PositionKind::Sinusoidal, PositionKind::RoPE}) {
    LMConfig c = small_lm(AttentionKind::MHA);
    c.block.position = kind;
    c.block.max_seq_len = 8;
    DecoderLM lm(c);
    EXPECT_XG_ERROR(lm(random_tokens(1, 9, 13, 1)), "DecoderLM(vocab_size=13, n_layers=2, d_model=16): positions 0..8 "
                                                    "of tokens [1,9] (start_pos 0) exceed max_seq_len 8");
    EXPECT_XG_ERROR(lm(random_tokens(2, 3, 13, 1), 6), "positions 6..8 of tokens [2,3] (start_pos 6) exceed max_seq_len 8");
    EXPECT_XG_ERROR(lm.generate(random_tokens(1, 5, 13, 1), 4),
                    "generate: the prompt's 5 tokens (prompt [1,5]) + max_new_tokens 4 exceed max_seq_len 8");
  }
  LMConfig c = small_lm(AttentionKind::MHA);
  c.block.position = PositionKind::None;  // no table, no limit
  c.block.max_seq_len = 8;
  DecoderLM lm(c);
  EXPECT_EQ(lm(random_tokens(1, 12, 13, 1)).shape(), (Shape{1, 12, 13}));
}

TEST(NnDecoderErrors, BadGenerateArguments) {
  DecoderLM lm(small_lm(AttentionKind::MHA));
  EXPECT_XG_ERROR(lm.generate(randn({1, 3}), 2), "generate: expected a prompt int64 [B, T0] with B, T0 >= 1, got float32 [1,3]");
  GenerateOptions o;
  o.eos_id = 13;
  EXPECT_XG_ERROR(lm.generate(random_tokens(1, 2, 13, 1), 2, o), "eos_id must be -1 (none) or in [0, 13), got 13");
  o.eos_id = -1;
  o.top_p = 0;
  EXPECT_XG_ERROR(lm.generate(random_tokens(1, 2, 13, 1), 2, o), "top_p must be in (0, 1], got 0");
}

TEST(NnDecoderErrors, BadConfig) {
  EXPECT_XG_ERROR(LMConfig::from_json(R"({"vocab_size": 11, "n_layer": 2})", "my.json"),
                  "my.json: unknown field 'n_layer'");
  EXPECT_XG_ERROR(LMConfig::from_json(R"({"block": {"n_head": 2}})", "my.json"), "my.json: unknown field 'block.n_head'");
  EXPECT_XG_ERROR(LMConfig::from_json(R"({"vocab_size": 1e999})", "my.json"), "my.json: not valid JSON ([json.exception.out_of_range.406]");
  EXPECT_XG_ERROR(LMConfig::from_json(R"({"vocab_size": "eleven"})", "my.json"),
                  "my.json: field 'vocab_size' must be an integer, got \"eleven\"");
  EXPECT_XG_ERROR(LMConfig::from_json(R"({"block": {"norm_position": "middle"}})", "my.json"),
                  "my.json: field 'block.norm_position' must be one of \"post\", \"pre\", \"deepnorm\", \"sandwich\", got \"middle\"");
  EXPECT_XG_ERROR(LMConfig::from_json(R"({"block": {"attention": {"kind": "mha", "bias": 1}}})", "my.json"),
                  "field 'block.attention.bias' must be true or false, got 1");
  // Validation runs on a config with every field (a missing one is an error of its own).
  auto full_with = [](LMConfig c, const std::function<void(nlohmann::ordered_json&)>& edit) {
    nlohmann::ordered_json j = nlohmann::ordered_json::parse(c.to_json());
    edit(j);
    return j.dump();
  };
  EXPECT_XG_ERROR(LMConfig::from_json(full_with(small_lm(AttentionKind::MHA),
                                                [](auto& j) {
                                                  j["block"]["d_model"] = 16;
                                                  j["block"]["attention"]["n_heads"] = 3;
                                                }),
                                      "my.json"),
                  "my.json: block: field 'attention.n_heads' (3) must divide d_model (16)");
  EXPECT_XG_ERROR(LMConfig::from_json(R"({"block": {"attention": {"kind": "gqa", "latent_dim": 3}}})", "my.json"),
                  "my.json: unknown field 'block.attention.latent_dim' (known fields: head_dim, kind, n_heads, "
                  "n_kv_heads, out_bias, qk_norm, qkv_bias, scale, softcap)");
  EXPECT_XG_ERROR(LMConfig::from_json(R"({"block": {"ffn": {"kind": "reglu"}}})", "my.json"),
                  "my.json: field 'block.ffn.kind' must be one of \"mlp\", \"swiglu\", \"moe\", \"geglu\", got \"reglu\"");
  EXPECT_XG_ERROR(LMConfig::from_json(R"({"block": {"norm": {"eps": 1e-5}}})", "my.json"),
                  "my.json: field 'block.norm.kind' must be one of \"layernorm\", \"rmsnorm\", \"rmsnorm_unit_offset\", got nothing");
  EXPECT_XG_ERROR(LMConfig::from_json(R"({"block": {"norm": "rmsnorm", "bias": 1}})", "my.json"),
                  "field 'block.attention.bias' must be true or false, got 1");  // the flat form
  EXPECT_XG_ERROR(LMConfig::from_json(full_with(llama_lm(), [](auto& j) { j["vocab_size"] = 0; }), "my.json"),
                  "my.json: field 'vocab_size' must be positive");
  EXPECT_XG_ERROR(LMConfig::from_json(R"({"block": 3})", "my.json"), "field 'block' must be a JSON object, got 3");
  EXPECT_XG_ERROR(LMConfig::from_json("{\"vocab_size\": ", "my.json"), "my.json: not valid JSON");
  LMConfig c = llama_lm();
  c.vocab_size = 0;
  EXPECT_XG_ERROR(DecoderLM{c}, "DecoderLM: field 'vocab_size' must be positive, got 0");

  // load_pretrained names the file.
  TempDir dir("badcfg");
  std::filesystem::create_directories(dir.path);
  {
    std::ofstream out(dir.path / "config.json");
    out << R"({"vocab_size": 11, "block": {"ffn": {"kind": "swish"}}})";
  }
  EXPECT_XG_ERROR(load_pretrained(dir.path.string()),
                  (dir.path / "config.json").string() + ": field 'block.ffn.kind' must be one of");
  EXPECT_XG_ERROR(load_pretrained((dir.path / "missing").string()), "load_pretrained: cannot open");
}

// GenerateOptions::sliding_window: each token is the greedy choice given the last
// max_seq_len tokens (positions from 0), as nanoGPT's idx[:, -block_size:] crop; a prompt
// longer than the window is cropped too.
TEST(NnDecoderGenerate, SlidingWindowConditionsOnTheLastMaxSeqLenTokens) {
  for (PositionKind kind : {PositionKind::Learned, PositionKind::RoPE}) {
    SCOPED_TRACE(static_cast<int>(kind));
    LMConfig c = small_lm(AttentionKind::MHA);
    c.block.position = kind;
    c.block.max_seq_len = 8;
    manual_seed(5);
    DecoderLM lm(c);
    lm.eval();
    GenerateOptions o;
    o.temperature = 0;
    o.sliding_window = true;
    for (int64_t T0 : {5, 10}) {
      const Tensor prompt = random_tokens(2, T0, 13, 3);
      const Tensor out = lm.generate(prompt, 7, o);
      ASSERT_EQ(out.shape(), (Shape{2, T0 + 7}));
      EXPECT_EQ(out.narrow(1, 0, T0).to_vector(), prompt.to_vector());
      NoGradGuard ng;
      for (int64_t i = T0; i < T0 + 7; ++i) {
        const int64_t from = std::max<int64_t>(0, i - 8);
        const Tensor logits = lm(out.narrow(1, from, i - from));  // [2, i - from, V]
        const Tensor want = logits.narrow(1, i - from - 1, 1).argmax(-1).reshape({2});
        EXPECT_EQ(out.narrow(1, i, 1).reshape({2}).to_vector(), want.to_vector()) << "token " << i;
      }
    }
  }
}

// --- packed rows: each sequence gets the logits it gets alone ------------------------------

namespace {

// Row 0 packs sequences of 3, 4 and 2 tokens (the last one padding-like), row 1 one of 5 and
// one of 4; each sequence's logits from forward_packed must equal its own forward's.
void expect_packed_matches_alone(const LMConfig& c, uint64_t seed) {
  DecoderLM lm(c);
  randomize64(lm, seed);
  const int64_t Vn = c.vocab_size, T = 9;
  const std::vector<std::vector<int64_t>> lengths = {{3, 4, 2}, {5, 4}};
  const Tensor tokens = random_tokens(2, T, Vn, seed + 1);
  std::vector<int64_t> pos;
  for (const auto& row : lengths)
    for (int64_t n : row)
      for (int64_t t = 0; t < n; ++t) pos.push_back(t);
  const Tensor packed = lm.forward_packed(tokens, from_vector(pos, {2, T}));
  for (int64_t b = 0; b < 2; ++b) {
    int64_t start = 0;
    for (int64_t n : lengths[static_cast<std::size_t>(b)]) {
      const Tensor seq = narrow(narrow(tokens, 0, b, 1), 1, start, n);
      const Tensor got = narrow(narrow(packed, 0, b, 1), 1, start, n);
      EXPECT_TRUE(test::tensors_close(got, lm(seq), 1e-10, 1e-12)) << "row " << b << ", tokens " << start << ".."
                                                                   << start + n - 1;
      start += n;
    }
  }
}

}  // namespace

TEST(NnDecoderPacked, RopeGQAEachSequenceAsAlone) { expect_packed_matches_alone(small_lm(AttentionKind::GQA), 21); }
TEST(NnDecoderPacked, LearnedPositionsEachSequenceAsAlone) { expect_packed_matches_alone(small_lm(AttentionKind::MHA), 22); }
TEST(NnDecoderPacked, MLAEachSequenceAsAlone) { expect_packed_matches_alone(small_lm(AttentionKind::MLA, true), 23); }
TEST(NnDecoderPacked, SinusoidalEachSequenceAsAlone) { expect_packed_matches_alone(teaching_tied_lm(), 24); }

TEST(NnDecoderPacked, NoPositionsEachSequenceAsAlone) {
  LMConfig c = small_lm(AttentionKind::GQA);
  c.block.position = PositionKind::None;
  expect_packed_matches_alone(c, 25);
}

TEST(NnDecoderPacked, GradcheckLearnedPositions) {
  LMConfig c = small_lm(AttentionKind::MHA);
  c.block.d_model = 8;
  std::get<MHASpec>(c.block.attention).n_heads = 2;
  std::get<MLPSpec>(c.block.ffn).d_ff = 12;
  DecoderLM lm(c);
  randomize64(lm, 26);
  const Tensor tokens = random_tokens(1, 5, c.vocab_size, 27);
  const Tensor pos = test::ids(std::vector<int64_t>{0, 1, 2, 0, 1}, {1, 5});
  auto* attn = dynamic_cast<MultiHeadAttention*>((*lm.layers())[0]->attention().get());
  EXPECT_GRADCHECK([&](const V&) { return lm.forward_packed(tokens, pos); },
                   {lm.tok_embeddings()->weight(), dynamic_cast<LearnedPositionalEmbedding*>(lm.pos().get())->weight(),
                    attn->w_q()->weight(), attn->w_k()->weight(), attn->w_v()->weight()});
}

TEST(NnDecoderPacked, BadPositionIdsAreRefused) {
  DecoderLM lm(small_lm(AttentionKind::GQA));
  const Tensor tokens = random_tokens(1, 4, 13, 28);
  EXPECT_XG_ERROR(lm.forward_packed(tokens, test::ids(std::vector<int64_t>{0, 1, 2}, {1, 3})),
                  "expected position_ids int64 [1,4] (the tokens' shape), got int64 [1,3]");
  EXPECT_XG_ERROR(lm.forward_packed(tokens, test::ids(std::vector<int64_t>{1, 2, 3, 4}, {1, 4})),
                  "position_ids[0, 0] is 1, but a row starts a sequence at 0");
  EXPECT_XG_ERROR(lm.forward_packed(tokens, test::ids(std::vector<int64_t>{0, 1, 3, 0}, {1, 4})),
                  "position_ids[0, 2] is 3 after 1");
}
