// libFuzzer target: everything a --resume reads. The input is a checkpoint file; from it a model
// is built (its recorded config: building a model from a config), its tensors are copied in
// (load_state_dict), and AdamW, the LR schedule and both generators take their state, as
// TrainLoop does. A machine of 256 MB is assumed, so an absurd config is refused, not allocated.
#include <cstdlib>

#include "finetune/checkpoint.hpp"
#include "fuzz/fuzz_util.hpp"
#include "nn/decoder.hpp"
#include "optim/optim.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  static const bool limited = ::setenv("XGRAD_MEMORY_LIMIT", "268435456", 1) == 0;
  (void)limited;
  return xg::fuzz::expect_only_xg_errors([&] {
    const auto c =
        xg::finetune::load_checkpoint(xg::fuzz::scratch_file("checkpoint.safetensors", xg::fuzz::as_string(data, size)));
    auto config = c.progress.extra.find("config");
    if (config == c.progress.extra.end()) return;
    xg::nn::DecoderLM model(xg::nn::LMConfig::from_json(config->second, "extra.config"));
    model.load_state_dict(c.model, /*strict=*/true);
    xg::optim::AdamWOptions ao;
    xg::optim::AdamW opt(xg::optim::weight_decay_groups(model.named_parameters(), ao));
    opt.load_state_dict(c.optim);
    xg::optim::LambdaLR sched(opt, xg::optim::cosine_with_warmup(1, 10, 0.1));
    sched.load_state_dict(c.sched);
    xg::Generator data_rng(0), global(0);
    data_rng.set_state(c.progress.data_rng);
    global.set_state(c.progress.global_rng);
  });
}
