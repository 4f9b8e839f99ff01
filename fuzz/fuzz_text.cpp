// libFuzzer target: the pre-training text reader (finetune::TextDataset) and its batches. The
// first 4 bytes pick batch, seq_len and an evaluation batch index (each from -2 up, so that
// zero and negative values are tried) and the sampling seed; the rest is the file. Beyond
// "only xg::Error escapes", every batch is checked against the text: targets are the inputs
// shifted by one token, and batch_at's windows are the consecutive ones it documents.
#include <cstdlib>

#include "autograd/random.hpp"
#include "finetune/dataset.hpp"
#include "fuzz/fuzz_util.hpp"

namespace {

// x, y: int64 [B, T]; y[b, t] == x[b, t + 1], and every token is a byte.
void check_shifted(const xg::finetune::LmBatch& b, int64_t T) {
  const int64_t* x = b.x.data<int64_t>();
  const int64_t* y = b.y.data<int64_t>();
  const int64_t rows = b.x.size(0);
  if (b.x.shape() != b.y.shape() || b.x.size(1) != T) std::abort();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < T; ++t) {
      if (x[r * T + t] < 0 || x[r * T + t] > 255 || y[r * T + t] < 0 || y[r * T + t] > 255) std::abort();
      if (t + 1 < T && y[r * T + t] != x[r * T + t + 1]) std::abort();
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  if (size < 4) return 0;
  const int64_t batch = static_cast<int64_t>(data[0]) - 2, seq_len = static_cast<int64_t>(data[1]) - 2;
  const int64_t index = static_cast<int64_t>(data[2]) - 2;
  const uint64_t seed = data[3];
  return xg::fuzz::expect_only_xg_errors([&] {
    const std::string path = xg::fuzz::scratch_file("corpus.txt", xg::fuzz::as_string(data + 4, size - 4));
    const xg::finetune::TextDataset text(path);
    if (text.text() != xg::fuzz::as_string(data + 4, size - 4)) std::abort();
    xg::Generator gen(seed);
    check_shifted(text.random_batch(gen, batch, seq_len), seq_len);
    const int64_t n = text.num_batches(batch, seq_len);
    const xg::finetune::LmBatch b = text.batch_at(index, batch, seq_len);
    check_shifted(b, seq_len);
    // batch_at(index): windows index * batch ..., window w = tokens w * seq_len ... + seq_len.
    const int64_t rows = b.x.size(0);
    if (rows < 1 || rows > batch || (index + 1 < n && rows != batch)) std::abort();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t t = 0; t < seq_len; ++t) {
        const std::size_t at = static_cast<std::size_t>((index * batch + r) * seq_len + t);
        if (b.x.data<int64_t>()[r * seq_len + t] != static_cast<unsigned char>(text.text()[at]) ||
            b.y.data<int64_t>()[r * seq_len + t] != static_cast<unsigned char>(text.text()[at + 1]))
          std::abort();
      }
  });
}
