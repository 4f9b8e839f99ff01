// Best-fit-decreasing packing of SFT sequences and DPO pairs into rows of one length, their
// collation, and the per-sequence log-prob sums DPO needs.
#include "finetune/packing.hpp"

#include <algorithm>
#include <numeric>
#include <set>
#include <utility>

#include "autograd/error.hpp"
#include "autograd/matmul.hpp"
#include "autograd/shape.hpp"
#include "finetune/detail/seq.hpp"

namespace xg::finetune {

namespace {

// Units (a sequence, or a DPO pair's two) placed whole into rows of row_len tokens.
using Unit = std::vector<Seq>;

int64_t unit_len(const Unit& u) {
  int64_t n = 0;
  for (const Seq& s : u) n += static_cast<int64_t>(s.ids.size());
  return n;
}

// Best-fit decreasing: units longest first (ties in input order, so the packing is
// deterministic), each into the open row with the least room left that holds it.
std::vector<PackedRow> pack_units(const std::vector<Unit>& units, int64_t row_len, int64_t pad_id) {
  std::vector<std::size_t> order(units.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return unit_len(units[a]) > unit_len(units[b]); });
  std::vector<PackedRow> rows;
  std::set<std::pair<int64_t, std::size_t>> room;  // {tokens left, row}, least room first
  for (std::size_t u : order) {
    const int64_t n = unit_len(units[u]);
    auto it = room.lower_bound({n, 0});
    std::size_t r;
    int64_t left;
    if (it == room.end()) {
      r = rows.size();
      rows.emplace_back();
      left = row_len;
    } else {
      r = it->second;
      left = it->first;
      room.erase(it);
    }
    PackedRow& row = rows[r];
    for (const Seq& s : units[u]) {
      const int64_t start = static_cast<int64_t>(row.ids.size()), len = static_cast<int64_t>(s.ids.size());
      row.spans.push_back({start, len});
      for (int64_t t = 0; t < len; ++t) {
        row.ids.push_back(s.ids[static_cast<std::size_t>(t)]);
        // A sequence's first token is never a target: here it would be the previous one's.
        row.labels.push_back(s.train[static_cast<std::size_t>(t)] && t > 0 ? s.ids[static_cast<std::size_t>(t)] : -100);
        row.position_ids.push_back(t);
      }
    }
    left -= n;
    if (left > 0) room.insert({left, r});
  }
  for (PackedRow& row : rows)  // padding: a run of positions of its own, never a target
    for (int64_t t = 0, n = row_len - static_cast<int64_t>(row.ids.size()); t < n; ++t) {
      row.ids.push_back(pad_id);
      row.labels.push_back(-100);
      row.position_ids.push_back(t);
    }
  return rows;
}

}  // namespace

std::vector<PackedRow> pack_sft(const RowFormat& format, const std::vector<SftExample>& rows, int64_t row_len) {
  check(!rows.empty(), "pack_sft: no rows to pack");
  check(row_len >= 2, "pack_sft: row_len ", row_len, " must be >= 2 (a prompt token and a response token)");
  std::vector<Unit> units;
  units.reserve(rows.size());
  for (const SftExample& r : rows) units.push_back({make_seq(format, r, row_len)});
  return pack_units(units, row_len, format.pad_id());
}

std::vector<PackedRow> pack_dpo(const RowFormat& format, const std::vector<DpoExample>& rows, int64_t row_len) {
  check(!rows.empty(), "pack_dpo: no rows to pack");
  check(row_len >= 4, "pack_dpo: row_len ", row_len,
        " must be >= 4 (a pair shares a row: two sequences of a prompt token and a response token)");
  std::vector<Unit> units;
  units.reserve(rows.size());
  for (const DpoExample& r : rows)
    units.push_back({make_seq(format, chosen_row(r), row_len / 2), make_seq(format, rejected_row(r), row_len / 2)});
  return pack_units(units, row_len, format.pad_id());
}

PackedBatch collate_packed(const std::vector<PackedRow>& rows) {
  check(!rows.empty(), "collate_packed: no rows");
  const int64_t R = static_cast<int64_t>(rows.size()), L = static_cast<int64_t>(rows[0].ids.size());
  std::vector<int64_t> ids, labels, pos;
  PackedBatch b;
  for (int64_t r = 0; r < R; ++r) {
    const PackedRow& row = rows[static_cast<std::size_t>(r)];
    check(static_cast<int64_t>(row.ids.size()) == L, "collate_packed: row ", r, " has ", row.ids.size(),
          " tokens, row 0 has ", L, " (pack them with one row_len)");
    ids.insert(ids.end(), row.ids.begin(), row.ids.end());
    labels.insert(labels.end(), row.labels.begin(), row.labels.end());
    pos.insert(pos.end(), row.position_ids.begin(), row.position_ids.end());
    for (const auto& s : row.spans) {
      b.spans.push_back({r, s[0], s[1]});
      b.real_tokens += s[1];
    }
  }
  b.input_ids = from_vector(ids, {R, L});
  b.labels = from_vector(labels, {R, L});
  b.position_ids = from_vector(pos, {R, L});
  return b;
}

// sums[s] = sum of token_logps[row_s, start_s .. start_s + len_s - 2]: position t scores token
// t + 1, so a sequence's targets (its tokens after the first) are scored there.
Tensor span_logprob_sums(const Tensor& token_logps, const PackedBatch& batch) {
  check(token_logps.defined() && token_logps.shape() == batch.input_ids.shape(), "span_logprob_sums: expected ",
        "token log-probs ", shape_str(batch.input_ids.shape()), " (the batch's ids), got ",
        token_logps.defined() ? shape_str(token_logps.shape()) : std::string("an undefined tensor"));
  const int64_t S = static_cast<int64_t>(batch.spans.size()), N = token_logps.numel(), L = token_logps.size(1);
  std::vector<double> select(static_cast<std::size_t>(S * N), 0.0);
  for (int64_t s = 0; s < S; ++s) {
    const auto& [row, start, len] = batch.spans[static_cast<std::size_t>(s)];
    for (int64_t t = start; t < start + len - 1; ++t) select[static_cast<std::size_t>(s * N + row * L + t)] = 1.0;
  }
  const Tensor m = from_vector(select, {S, N}, token_logps.dtype());
  return reshape(matmul(m, reshape(token_logps, {N, 1})), {S});
}

}  // namespace xg::finetune
