// Bpe: the vocabulary and merge tables (open addressing), a word's initial symbols, the
// priority-queue merge, the word cache.
#include "text/bpe.hpp"

#include <algorithm>
#include <cstring>
#include <queue>

#include "autograd/error.hpp"
#include "text/unicode.hpp"

namespace xg::text {

namespace {

constexpr std::size_t kCachedWordBytes = 256;  // longer words are merged every time
constexpr std::size_t kCacheEntries = 1 << 18;   // the cache is emptied when it reaches this
constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // SentencePiece's "▁"

uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return h;
}

uint64_t hash_bytes(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ULL ^ s.size();
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = mix(h ^ w);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  return mix(h ^ tail);
}

std::size_t table_size_for(std::size_t n) {
  std::size_t size = 16;
  while (size < 2 * n) size *= 2;
  return size;
}

}  // namespace

struct Bpe::Tables {
  // word (model form) -> id
  struct WordSlot {
    uint64_t hash = 0;
    uint32_t offset = 0, length = 0;
    int32_t id = -1;
  };
  std::string arena;
  std::vector<WordSlot> words;
  // (left id, right id) -> (rank, merged id)
  struct MergeSlot {
    uint64_t key = ~0ULL;
    int32_t rank = 0, id = 0;
  };
  std::vector<MergeSlot> merges;
  int32_t byte_ids[256];  // byte level: each byte's token; otherwise byte_fallback's <0xNN>

  void add_word(std::string_view w, int32_t id) {
    const uint64_t h = hash_bytes(w);
    const std::size_t mask = words.size() - 1;
    for (std::size_t i = h & mask;; i = (i + 1) & mask) {
      WordSlot& s = words[i];
      if (s.id < 0) {
        s = {h, static_cast<uint32_t>(arena.size()), static_cast<uint32_t>(w.size()), id};
        arena.append(w);
        return;
      }
      if (s.hash == h && std::string_view(arena).substr(s.offset, s.length) == w) return;  // the first id wins
    }
  }
  int32_t find_word(std::string_view w) const {
    const uint64_t h = hash_bytes(w);
    const std::size_t mask = words.size() - 1;
    for (std::size_t i = h & mask;; i = (i + 1) & mask) {
      const WordSlot& s = words[i];
      if (s.id < 0) return -1;
      if (s.hash == h && s.length == w.size() && std::memcmp(arena.data() + s.offset, w.data(), w.size()) == 0)
        return s.id;
    }
  }
  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void add_merge(int32_t a, int32_t b, int32_t rank, int32_t id) {
    const uint64_t key = pair_key(a, b);
    const std::size_t mask = merges.size() - 1;
    for (std::size_t i = mix(key) & mask;; i = (i + 1) & mask) {
      if (merges[i].key == ~0ULL) {
        merges[i] = {key, rank, id};
        return;
      }
      if (merges[i].key == key) return;  // a repeated merge keeps its first rank
    }
  }
  const MergeSlot* find_merge(int32_t a, int32_t b) const {
    const uint64_t key = pair_key(a, b);
    const std::size_t mask = merges.size() - 1;
    for (std::size_t i = mix(key) & mask;; i = (i + 1) & mask) {
      if (merges[i].key == key) return &merges[i];
      if (merges[i].key == ~0ULL) return nullptr;
    }
  }
};

Bpe::Bpe(const std::vector<std::string>& tokens, const std::vector<std::pair<int32_t, int32_t>>& merges,
         const std::vector<int32_t>& merged, const BpeOptions& options)
    : options_(options), tables_(std::make_unique<Tables>()) {
  Tables& t = *tables_;
  t.words.resize(table_size_for(tokens.size()));
  for (std::size_t id = 0; id < tokens.size(); ++id) {
    if (tokens[id].empty()) continue;
    if (options.byte_level) {
      // A token outside the byte-level alphabet can never be a byte-level word's piece.
      if (std::optional<std::string> bytes = byte_level_bytes(tokens[id])) t.add_word(*bytes, static_cast<int32_t>(id));
    } else {
      t.add_word(tokens[id], static_cast<int32_t>(id));
    }
  }
  t.merges.resize(table_size_for(merges.size()));
  for (std::size_t r = 0; r < merges.size(); ++r)
    t.add_merge(merges[r].first, merges[r].second, static_cast<int32_t>(r), merged[r]);
  // Whether long words may be cut before "▁" (encode_word): SentencePiece-style vocabularies
  // whose tokens hold "▁" only in a leading run, and no ignore_merges (which looks at whole words).
  split_at_metaspace_ = !options.byte_level && !options.ignore_merges && t.find_word(kMetaspace) >= 0;
  for (const std::string& token : tokens) {
    for (std::size_t at = token.find(kMetaspace, 1); split_at_metaspace_ && at != std::string::npos;
         at = token.find(kMetaspace, at + 1))
      if (at < kMetaspace.size() || token.compare(at - kMetaspace.size(), kMetaspace.size(), kMetaspace) != 0)
        split_at_metaspace_ = false;
  }
  for (int b = 0; b < 256; ++b) {
    if (options.byte_level) {
      t.byte_ids[b] = t.find_word(std::string(1, static_cast<char>(b)));
    } else {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      t.byte_ids[b] = t.find_word(name);
    }
  }
}

Bpe::~Bpe() = default;

int32_t Bpe::word_id(std::string_view word) const { return tables_->find_word(word); }

void Bpe::merge_word(std::string_view word, std::vector<int32_t>& ids) const {
  const Tables& t = *tables_;
  struct Symbol {
    int32_t id;
    int32_t prev, next;
    bool removed;
  };
  thread_local std::vector<Symbol> symbols;
  symbols.clear();
  const auto add = [&](int32_t id) {
    const int32_t n = static_cast<int32_t>(symbols.size());
    if (n > 0) symbols.back().next = n;
    symbols.push_back({id, n - 1, -1, false});
  };
  // The characters (bytes, for a byte-level vocabulary) as symbols.
  int32_t pending_unk = 0;  // unknown characters not yet written (fuse_unk)
  const auto flush_unk = [&] {
    for (; pending_unk > 0; --pending_unk) add(options_.unk_id);
  };
  std::size_t i = 0;
  while (i < word.size()) {
    std::size_t n = 1;
    int32_t id;
    if (options_.byte_level) {
      id = t.byte_ids[static_cast<unsigned char>(word[i])];
    } else {
      n = std::max<std::size_t>(1, utf8_sequence_length(word, i));
      id = t.find_word(word.substr(i, n));
    }
    if (id >= 0) {
      flush_unk();
      add(id);
    } else if (!options_.byte_level && options_.byte_fallback &&
               std::all_of(word.begin() + i, word.begin() + i + n,
                           [&](char c) { return t.byte_ids[static_cast<unsigned char>(c)] >= 0; })) {
      // NOTE: as in Hugging Face's BPE, byte-fallback tokens do not end a run of unknowns.
      for (std::size_t k = i; k < i + n; ++k) add(t.byte_ids[static_cast<unsigned char>(word[k])]);
    } else if (options_.unk_id >= 0) {
      if (!options_.fuse_unk) flush_unk();
      pending_unk = options_.fuse_unk ? 1 : pending_unk + 1;
    }
    i += n;
  }
  flush_unk();

  // Merge the pair of lowest rank (leftmost among equal ranks) until none is left.
  struct Merge {
    int32_t rank, pos, id;
    bool operator<(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<Merge> heap_storage;
  heap_storage.clear();
  std::priority_queue<Merge, std::vector<Merge>> queue(std::less<Merge>(), std::move(heap_storage));
  for (std::size_t k = 0; k + 1 < symbols.size(); ++k)
    if (const Tables::MergeSlot* m = t.find_merge(symbols[k].id, symbols[k + 1].id))
      queue.push({m->rank, static_cast<int32_t>(k), m->id});
  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.removed || left.next < 0) continue;
    const Symbol right = symbols[left.next];
    // NOTE: an entry is stale unless the pair now there merges into the same token; this is
    // Hugging Face's test, kept as it is so that ties come out the same.
    const Tables::MergeSlot* now = t.find_merge(left.id, right.id);
    if (now == nullptr || now->id != top.id) continue;
    symbols[left.next].removed = true;
    left.id = top.id;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0)
      if (const Tables::MergeSlot* m = t.find_merge(symbols[left.prev].id, left.id))
        queue.push({m->rank, left.prev, m->id});
    if (left.next >= 0)
      if (const Tables::MergeSlot* m = t.find_merge(left.id, symbols[left.next].id))
        queue.push({m->rank, top.pos, m->id});
  }
  ids.clear();
  for (const Symbol& s : symbols)
    if (!s.removed) ids.push_back(s.id);
}

void Bpe::encode_word(const std::string& word, std::vector<int64_t>& out) const {
  if (word.size() < kCachedWordBytes || !split_at_metaspace_) return encode_piece(word, out);
  // A long SentencePiece word (a whole paragraph: such files have no pre-tokenizer) is cut
  // before each "▁" that follows another character. No token holds such a pair (checked when
  // the vocabulary was read), so no merge crosses the cut and each piece merges on its own,
  // through the cache, to the same ids.
  std::size_t begin = 0;
  for (std::size_t at = word.find(kMetaspace, 1); at != std::string::npos; at = word.find(kMetaspace, at + 1)) {
    if (at >= kMetaspace.size() && word.compare(at - kMetaspace.size(), kMetaspace.size(), kMetaspace) == 0) continue;
    encode_piece(word.substr(begin, at - begin), out);
    begin = at;
  }
  encode_piece(word.substr(begin), out);
}

void Bpe::encode_piece(const std::string& word, std::vector<int64_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    const int32_t id = tables_->find_word(word);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
  }
  const bool cached = word.size() < kCachedWordBytes;
  if (cached) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  thread_local std::vector<int32_t> ids;
  merge_word(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cached) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() >= kCacheEntries) cache_.clear();
    cache_.emplace(word, ids);
  }
}

}  // namespace xg::text
