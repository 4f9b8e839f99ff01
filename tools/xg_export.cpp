// xg-export: a base model (an xgrad or Hugging Face folder, or a GGUF file) written for another
// runtime: --to gguf, llama.cpp's GGUF (the model, or with --adapter the LoRA adapter as a GGUF
// adapter, or with --adapter --merge the model with the adapter merged in); --to hf, a Hugging
// Face folder (with --adapter: merged).
#include <cstdio>
#include <string>

#include "autograd/error.hpp"
#include "finetune/base_model.hpp"
#include "finetune/gguf_export.hpp"
#include "finetune/lora.hpp"
#include "finetune/peft.hpp"
#include "nn/hf.hpp"
#include "tools/cli/flags.hpp"
#include "tools/cli/run_main.hpp"
#include "tools/cli/threads.hpp"

namespace cli = xg::cli;
namespace ft = xg::finetune;
namespace nn = xg::nn;
namespace po = boost::program_options;

namespace {

constexpr const char* kProg = "xg-export";

// The model without its LoRA modules (merged in first when asked), as a plain DecoderLM.
std::shared_ptr<nn::DecoderLM> plain_copy(nn::DecoderLM& model) {
  auto plain = std::make_shared<nn::DecoderLM>(model.config());
  xg::TensorMap state;
  for (const auto& [name, t] : model.state_dict())
    if (name.find(".lora_") == std::string::npos) state.emplace(name, t);
  plain->load_state_dict(state, true);
  return plain;
}

}  // namespace

int main(int argc, char** argv) {
  std::string base, adapter, to, out, dtype = "f32", name;
  bool merge = false;
  po::options_description opts = cli::flag_group("xg-export options");
  // clang-format off
  opts.add_options()
    ("help", "show this help")
    ("base", po::value(&base)->required(), "the model: an xgrad or Hugging Face folder, or a .gguf file")
    ("adapter", po::value(&adapter), "a LoRA adapter folder (xg-finetune's output, or PEFT's) for the base")
    ("merge", po::bool_switch(&merge), "with --adapter and --to gguf: write the model with the adapter merged in")
    ("to", po::value(&to)->required(), "gguf | hf")
    ("out", po::value(&out)->required(), "the GGUF file, or the Hugging Face folder, to write")
    ("dtype", po::value(&dtype)->default_value(dtype), "--to gguf: the 2-D weights as f32 | f16 | bf16 | q8_0 | q4_0")
    ("name", po::value(&name), "--to gguf: general.name (default: the base's file or folder name)");
  // clang-format on
  int threads = 0;
  opts.add(cli::threads_flag(threads));
  po::variables_map vm;
  xg::io::GgmlType type = xg::io::GgmlType::F32;
  return cli::run_main(
      kProg,
      [&] {
        if (cli::parse(argc, argv, opts, vm,
                       "usage: xg-export --base MODEL [--adapter DIR [--merge]] --to gguf|hf --out PATH [--dtype f32|f16|bf16|q8_0|q4_0]"))
          return 0;
        cli::apply_threads(threads);
        cli::choice<int>("to", to, {{"gguf", 0}, {"hf", 1}});
        type = cli::choice<xg::io::GgmlType>("dtype", dtype, {{"f32", xg::io::GgmlType::F32}, {"f16", xg::io::GgmlType::F16},
                                                           {"bf16", xg::io::GgmlType::BF16}, {"q8_0", xg::io::GgmlType::Q8_0},
                                                           {"q4_0", xg::io::GgmlType::Q4_0}});
        cli::require(!merge || !adapter.empty(), "--merge needs --adapter");
        cli::require(to == "gguf" || (vm["dtype"].defaulted() && name.empty()), "--dtype and --name are for --to gguf");
        return -1;
      },
      [&] {
        const xg::io::ModelSource source = xg::io::ModelSource::open(base, kProg);
        xg::check(to == "gguf" || source.format != xg::io::ModelFormat::Gguf, kProg,
                  ": --to hf from a GGUF base is not written (its tokenizer has no tokenizer.json)");
        ft::BaseModel loaded = ft::load_base(source, kProg);
        std::shared_ptr<nn::DecoderLM> model = loaded.model;
        if (name.empty()) {
          const std::string trimmed = base.back() == '/' ? base.substr(0, base.size() - 1) : base;
          name = trimmed.substr(trimmed.rfind('/') + 1);
        }
        nn::GgufExportOptions o;
        o.dtype = type;
        o.name = name;
        if (!adapter.empty()) ft::load_adapter(*model, adapter, loaded.naming);
        if (to == "gguf" && !adapter.empty() && !merge) {
          ft::save_gguf_adapter(*model, out, type, name + " LoRA adapter", ft::gguf_export_architecture(*model, source));
          std::printf("%s: wrote the LoRA adapter of %s as the GGUF adapter %s\n", kProg, adapter.c_str(), out.c_str());
          return 0;
        }
        if (!adapter.empty()) ft::merge(*model);
        const std::shared_ptr<nn::DecoderLM> plain = adapter.empty() ? model : plain_copy(*model);
        if (to == "gguf") {
          ft::save_gguf_model(*plain, source, out, o);
        } else {
          nn::SaveHFOptions h;
          if (loaded.hf()) h.source = base;
          nn::save_hf(*plain, out, h);
        }
        std::printf("%s: wrote %s%s as %s\n", kProg, base.c_str(), adapter.empty() ? "" : " with the adapter merged",
                    out.c_str());
        return 0;
      });
}
