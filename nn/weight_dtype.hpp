// Frozen weights in low precision: a model's matrices (every Linear's weight and the token
// embeddings, the output head with them) stored as bfloat16 or as q8_0 or q4_0 blocks, while its
// norms, biases and activations stay float32 and adapters train in float32 on top (QLoRA's
// recipe, Dettmers et al. 2023, with llama.cpp's Q8_0 or Q4_0 in place of NF4). A product with
// such a weight reads it as stored: bf16 on the bf16 kernels (the float32 input rounded to bf16,
// as torch.autocast does), q8_0 and q4_0 widened a tile at a time (autograd/blocks.hpp).
#pragma once

#include <string>
#include <vector>

#include "nn/decoder.hpp"

namespace xg::nn {

// --base-dtype's values. Auto: as the file stores them (a bf16 folder stays bf16, a GGUF's block
// types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K ... Q6_K, IQ4_NL, IQ4_XS) stay in those blocks, F16
// stays float16 (a float16 folder's too), F32 becomes float32: io::auto_dtype). f16 keeps
// IEEE halves as stored: 2 bytes a value and all 10 of a half's mantissa bits, where bf16 keeps 7.
enum class WeightDtype { Auto, F32, BF16, F16, Q8_0, Q4_0 };
const char* weight_dtype_name(WeightDtype d);  // "auto", "f32", "bf16", "f16", "q8_0", "q4_0"
// "auto", "f32", "bf16", "f16", "q8_0" or "q4_0"; anything else is an xg::Error starting with `who`.
WeightDtype parse_weight_dtype(const std::string& value, const std::string& who);
Dtype weight_dtype_tensor(WeightDtype d);  // kFloat32, kBFloat16, kF16, kQ8_0, kQ4_0 (Auto: an error)

// How load_model stores a model's matrices (the default widens everything to float32).
struct LoadOptions {
  WeightDtype weights = WeightDtype::F32;
};

// The parameters store_weights_in converts, by their names in `model`: each Linear's weight and
// the token embeddings, in state_dict order. For q8_0 and q4_0, a matrix whose rows are not whole
// blocks of 32 stays float32 (as llama.cpp's converter keeps it).
std::vector<std::string> weight_matrix_names(const DecoderLM& model, Dtype dtype = kFloat32);

// Stores the model's matrices in `dtype` (float32, bfloat16, q8_0 or q4_0) and freezes them
// (requires_grad off); the embeddings' rows are then widened to float32 as they are looked up
// (DecoderLM::set_widen_embeddings), so that the rest of the model runs in float32. With
// `values` false the new storage is left unset: a loader fills it next (and the float32
// storage, never touched, costs nothing). A value the blocks cannot hold is an xg::Error naming the
// parameter. Returns the bytes the model's parameters take after.
double store_weights_in(DecoderLM& model, Dtype dtype, bool values = true);

// One line for logs: the parameters by dtype and their bytes, "q8_0 x 210, float32 x 61: 145.3 MB".
std::string weights_summary(const Module& model);

}  // namespace xg::nn
