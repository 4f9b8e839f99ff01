// attach_ppo: PPO with a value head (TRL's PPOTrainer): rollouts sampled from the policy and
// scored by the rewards, GAE advantages, then ppo_epochs passes of clipped policy and value losses.
#include <cmath>
#include <memory>

#include "autograd/elementwise.hpp"
#include "autograd/error.hpp"
#include "autograd/graph.hpp"
#include "finetune/detail/completions.hpp"
#include "finetune/detail/objective_util.hpp"
#include "finetune/objectives.hpp"
#include "finetune/world.hpp"
#include "losses/losses.hpp"

namespace xg::finetune {

namespace {

// One sampled completion and what the rollout computed for its tokens (index j: the j-th
// completion token, predicted at position prompt_len - 1 + j).
struct PpoSample {
  std::vector<int64_t> ids;  // prompt, then the completion (EOS included when it stopped)
  int64_t prompt_len = 0, len = 0;
  std::vector<double> old_logprobs, old_values, advantages, returns;  // [len] each
};

// The rollout of one iteration (steps_per_rollout() optimizer steps) and the order of each of its epochs.
struct PpoRollout {
  int64_t iteration = -1;
  std::vector<PpoSample> samples;
  std::vector<std::vector<int64_t>> order;  // [ppo_epochs][rollout_size]
  Metrics metrics;                          // logged with each of its steps
};

// Samples `idx` as a right-padded batch: ids [b, T] (padded with `pad`), shifted targets [b, T]
// (the completion token each position predicts, else -100) and the completion mask [b, T].
struct PpoBatch {
  Tensor ids, targets, mask;
  int64_t T = 0;
};

PpoBatch collate(const std::vector<PpoSample>& samples, const std::vector<int64_t>& idx, int64_t pad) {
  PpoBatch out;
  for (int64_t i : idx) out.T = std::max<int64_t>(out.T, static_cast<int64_t>(samples[i].ids.size()));
  const int64_t b = static_cast<int64_t>(idx.size()), T = out.T;
  std::vector<int64_t> ids(b * T, pad), targets(b * T, -100);
  std::vector<double> mask(b * T, 0.0);
  for (int64_t r = 0; r < b; ++r) {
    const PpoSample& s = samples[idx[r]];
    std::copy(s.ids.begin(), s.ids.end(), ids.begin() + r * T);
    for (int64_t j = 0; j < s.len; ++j) {
      const int64_t t = s.prompt_len - 1 + j;
      targets[r * T + t] = s.ids[s.prompt_len + j];
      mask[r * T + t] = 1.0;
    }
  }
  out.ids = from_vector(ids, {b, T});
  out.targets = from_vector(targets, {b, T});
  out.mask = from_vector(mask, {b, T});
  return out;
}

// A per-token field of the samples laid out as the batch's [b, T] (0 off the completion), in `dtype`.
Tensor spread(const std::vector<PpoSample>& samples, const std::vector<int64_t>& idx, int64_t T, Dtype dtype,
              std::vector<double> PpoSample::*field) {
  const int64_t b = static_cast<int64_t>(idx.size());
  std::vector<double> out(b * T, 0.0);
  for (int64_t r = 0; r < b; ++r) {
    const PpoSample& s = samples[idx[r]];
    const std::vector<double>& v = s.*field;
    for (int64_t j = 0; j < s.len; ++j) out[r * T + s.prompt_len - 1 + j] = v[j];
  }
  return from_vector(out, {b, T}, dtype);
}

// log softmax(logits / temperature) at the targets, [b, T], from the trunk's hidden states
// h [b, T, C]: through the head a block of rows at a time when it is a plain matrix W
// (logits / temperature = (h / temperature) W^T), else on the [b, T, V] logits.
Tensor tempered_logprobs(const nn::DecoderLM& model, const Tensor& h, const Tensor& targets, double temperature) {
  const Tensor head = model.plain_head_weight();
  if (head.defined()) return losses::linear_token_logprobs(temperature == 1.0 ? h : h * (1.0 / temperature), head, targets);
  const Tensor logits = model.logits_from_hidden(h);
  return losses::token_logprobs(temperature == 1.0 ? logits : logits * (1.0 / temperature), targets);
}

// The completion tokens' values of a [b, T] tensor, per sample of the batch.
std::vector<std::vector<double>> gather(const std::vector<PpoSample>& samples, const std::vector<int64_t>& idx,
                                        const Tensor& x) {
  const std::vector<double> v = x.to_vector();
  const int64_t T = x.shape()[1];
  std::vector<std::vector<double>> out;
  for (std::size_t r = 0; r < idx.size(); ++r) {
    const PpoSample& s = samples[idx[r]];
    const auto begin = v.begin() + static_cast<int64_t>(r) * T + s.prompt_len - 1;
    out.emplace_back(begin, begin + s.len);
  }
  return out;
}

// Samples, scores and evaluates one rollout (no graph, the model in eval mode): old log-probs,
// reference log-probs and values per token, then rewards, advantages and returns.
void sample_rollout(nn::DecoderLM& model, const ValueHead& value_head, const PpoTask& task, bool no_reference,
                    int64_t iteration, Generator& rng, PpoRollout& out) {
  const text::Tokenizer& tok = task.format.tok();
  const int64_t N = task.rollout_size();
  out = PpoRollout();
  out.iteration = iteration;
  std::vector<double> scores;
  std::vector<std::string> texts;
  const std::vector<Reward> funcs = rewards_or_exact(task.rewards);
  for (int64_t i = 0; i < N; ++i) {
    const GrpoExample& row = (*task.train)[rng.next_u64() % task.train->size()];
    const Tensor prompt = prompt_batch(task.format, row, 1);
    nn::GenerateOptions g;
    g.temperature = task.temperature;
    g.seed = rng.next_u64();
    g.eos_id = tok.eos_id();
    const int64_t T0 = prompt.shape()[1];
    const Tensor out_ids = model.generate(prompt, room(model, T0, task.max_new_tokens, "PPO"), g);
    const Completions c = split_completions(tok, out_ids, T0);
    PpoSample s;
    s.prompt_len = T0;
    s.len = c.lengths[0];
    const int64_t* p = c.ids.data<int64_t>();
    s.ids.assign(p, p + T0 + s.len);
    out.samples.push_back(std::move(s));
    scores.push_back(score_completions(funcs, row, c.texts, 1.0 / static_cast<double>(N), out.metrics)[0]);
  }

  // Old log-probs, reference log-probs and values, `batch` samples at a time.
  int64_t n_max = 0;
  for (const PpoSample& s : out.samples) n_max = std::max(n_max, s.len);
  std::vector<double> lp(N * n_max, 0.0), ref(N * n_max, 0.0), values(N * n_max, 0.0), mask(N * n_max, 0.0);
  {
    NoGradGuard no_grad;
    model.eval();  // generate restored the train mode; the rollout's passes run without dropout
    for (int64_t first = 0; first < N; first += task.batch) {
      std::vector<int64_t> idx;
      for (int64_t i = first; i < std::min(N, first + task.batch); ++i) idx.push_back(i);
      const PpoBatch b = collate(out.samples, idx, tok.eos_id());
      const Tensor h = model.hidden(b.ids);
      const Tensor lp_b = tempered_logprobs(model, h, b.targets, task.temperature);
      const Tensor ref_b = no_reference ? lp_b : reference_pass(model, task.reference, [&](const nn::DecoderLM& m) {
        return tempered_logprobs(m, m.hidden(b.ids), b.targets, task.temperature);
      });
      const auto lp_s = gather(out.samples, idx, lp_b), ref_s = gather(out.samples, idx, ref_b),
                 v_s = gather(out.samples, idx, value_head.forward(h));
      for (std::size_t r = 0; r < idx.size(); ++r) {
        PpoSample& s = out.samples[idx[r]];
        s.old_logprobs = lp_s[r];
        s.old_values = v_s[r];
        for (int64_t j = 0; j < s.len; ++j) {
          const int64_t k = idx[r] * n_max + j;
          lp[k] = lp_s[r][j];
          ref[k] = ref_s[r][j];
          values[k] = v_s[r][j];
          mask[k] = 1.0;
        }
      }
    }
    model.train();
  }
  const Shape shape{N, n_max};
  const losses::PpoAdvantages a =
      losses::ppo_advantages(from_vector(lp, shape, kFloat64), from_vector(ref, shape, kFloat64),
                             from_vector(values, shape, kFloat64), from_vector(scores, {N}, kFloat64),
                             from_vector(mask, shape, kFloat64), task.kl_coef, task.gamma, task.lam);
  const std::vector<double> adv = a.advantages.to_vector(), ret = a.returns.to_vector();
  double kl = 0, len = 0, score = 0;
  for (int64_t i = 0; i < N; ++i) {
    PpoSample& s = out.samples[i];
    s.advantages.assign(adv.begin() + i * n_max, adv.begin() + i * n_max + s.len);
    s.returns.assign(ret.begin() + i * n_max, ret.begin() + i * n_max + s.len);
    for (int64_t j = 0; j < s.len; ++j) kl += (lp[i * n_max + j] - ref[i * n_max + j]) / static_cast<double>(N);
    len += static_cast<double>(s.len) / static_cast<double>(N);
    score += scores[i] / static_cast<double>(N);
  }
  // TRL's objective/scores, objective/kl (summed over a completion's tokens, averaged over completions).
  out.metrics["reward"] = score;
  out.metrics["kl"] = kl;
  out.metrics["completion_len"] = len;

  // Each epoch's order: a Fisher-Yates shuffle from the rollout's own generator.
  Generator shuffle(rng.next_u64());
  for (int64_t e = 0; e < task.ppo_epochs; ++e) {
    std::vector<int64_t> order(N);
    for (int64_t i = 0; i < N; ++i) order[i] = i;
    for (int64_t i = N - 1; i > 0; --i) std::swap(order[i], order[shuffle.next_u64() % (i + 1)]);
    out.order.push_back(std::move(order));
  }
}

// The share of kept entries where `a` > `b` (TRL's clipfrac), over [b, T] tensors.
double share_greater(const Tensor& a, const Tensor& b, const Tensor& mask) {
  const std::vector<double> x = a.to_vector(), y = b.to_vector(), m = mask.to_vector();
  double n = 0, k = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (m[i] != 0) {
      n += 1;
      k += x[i] > y[i];
    }
  return n > 0 ? k / n : 0.0;
}

}  // namespace

void attach_ppo(TrainLoop& loop, nn::DecoderLM& model, ValueHead& value_head, const PpoTask& task) {
  check(task.train && !task.train->empty(), "PPO: no training rows");
  check(task.batch >= 1 && task.grad_accum >= 1 && task.num_mini_batches >= 1 && task.ppo_epochs >= 1,
        "PPO: batch, grad_accum, num_mini_batches and ppo_epochs must be positive, got ", task.batch, ", ",
        task.grad_accum, ", ", task.num_mini_batches, ", ", task.ppo_epochs);
  check(task.max_new_tokens >= 1, "--max-new-tokens: PPO needs at least 1, got ", task.max_new_tokens);
  check(task.temperature > 0, "--temperature: PPO samples, so it must be > 0, got ", task.temperature);
  check(task.clip_eps > 0 && task.clip_value > 0 && task.vf_coef >= 0, "PPO: --clip-eps and --cliprange-value must ",
        "be > 0 and --vf-coef >= 0, got ", task.clip_eps, ", ", task.clip_value, ", ", task.vf_coef);
  check(task.kl_coef >= 0 && task.gamma >= 0 && task.gamma <= 1 && task.lam >= 0 && task.lam <= 1,
        "PPO: --kl-coef must be >= 0 and --gamma, --lam in [0, 1], got ", task.kl_coef, ", ", task.gamma, ", ", task.lam);
  check(world().size() == 1, "PPO runs in one process (its rollout is not shared between ranks), got ",
        world().size(), " ranks");
  for (const Reward& r : task.rewards) check(static_cast<bool>(r.fn), "PPO: reward '", r.name, "' has no function");
  if (task.kl_coef > 0) check_reference(model, task.reference, "PPO");
  const bool no_reference = task.kl_coef == 0 && task.reference == nullptr && lora_adapters(model).empty();
  auto rollout = std::make_shared<PpoRollout>();
  loop.micro_step = [&model, &value_head, task, no_reference, rollout](int64_t step, int64_t micro, Generator& rng) {
    const int64_t cycle = task.steps_per_rollout(), iteration = step / cycle, within = step % cycle;
    if (within == 0 && micro == 0) sample_rollout(model, value_head, task, no_reference, iteration, rng, *rollout);
    check(rollout->iteration == iteration, "PPO: step ", step + 1, " continues a rollout sampled at step ",
          iteration * cycle + 1, " that this process did not sample (a resume must start a rollout: --steps, ",
          "--checkpoint-every and early stopping's --eval-every are multiples of --ppo-epochs x --num-mini-batches)");
    const std::vector<int64_t>& order = rollout->order[within / task.num_mini_batches];
    const int64_t first = ((within % task.num_mini_batches) * task.grad_accum + micro) * task.batch;
    const std::vector<int64_t> idx(order.begin() + first, order.begin() + first + task.batch);
    const std::vector<PpoSample>& samples = rollout->samples;

    const PpoBatch b = collate(samples, idx, task.format.tok().eos_id());
    const Tensor h = model.hidden(b.ids);
    const Tensor lp = tempered_logprobs(model, h, b.targets, task.temperature);
    const Tensor values = value_head.forward(h);
    const Dtype dt = lp.dtype();
    const Tensor mask = b.mask.to(dt);
    const Tensor old_lp = spread(samples, idx, b.T, dt, &PpoSample::old_logprobs);
    const Tensor adv = spread(samples, idx, b.T, dt, &PpoSample::advantages);
    const Tensor old_v = spread(samples, idx, b.T, dt, &PpoSample::old_values);
    const Tensor ret = spread(samples, idx, b.T, dt, &PpoSample::returns);
    const Tensor pg_loss = losses::ppo_clip_loss(old_lp, lp, adv, task.clip_eps, mask);
    const Tensor vf_loss = losses::ppo_value_loss(values, old_v, ret, task.clip_value, mask);
    const Tensor loss = pg_loss + vf_loss * task.vf_coef;

    // TRL's statistics: how often each clip bites, and approxkl = 0.5 mean((log r)^2).
    NoGradGuard no_grad;
    const Tensor ratio = exp(lp.detach() - old_lp);
    const Tensor pg1 = -adv * ratio, pg2 = -adv * clamp(ratio, 1.0 - task.clip_eps, 1.0 + task.clip_eps);
    const Tensor v = values.detach();
    const Tensor v1 = pow(v - ret, 2.0);
    const Tensor v2 = pow(maximum(minimum(v, old_v + task.clip_value), old_v - task.clip_value) - ret, 2.0);
    const Tensor log_ratio = lp.detach() - old_lp;
    Metrics m = rollout->metrics;
    m["pg_loss"] = pg_loss.item();
    m["vf_loss"] = vf_loss.item();
    m["pg_clipfrac"] = share_greater(pg2, pg1, mask);
    m["vf_clipfrac"] = share_greater(v2, v1, mask);
    m["approxkl"] = 0.5 * losses::masked_mean(log_ratio * log_ratio, mask).item();
    return MicroResult{loss, b.ids.numel(), m};
  };
  if (task.heldout && !task.heldout->empty()) {
    GrpoTask eval;
    eval.group_size = task.eval_samples;
    eval.max_new_tokens = task.max_new_tokens;
    eval.temperature = task.temperature;
    eval.rewards = task.rewards;
    eval.format = task.format;
    loop.evaluate = [&model, rows = head(*task.heldout, task.eval_rows), eval](int64_t) {
      return grpo_eval(model, rows, eval);
    };
  }
}

}  // namespace xg::finetune
