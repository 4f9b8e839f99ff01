// WordNet 3.0 parsing (wndb(5WN) line format) and the SFT/DPO/GRPO builders.
// Every malformed line is an xg::Error "file:line: what was expected".
#include "finetune/data/wordnet.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>

#include "autograd/error.hpp"

namespace xg::finetune::wordnet {

namespace {

// The fields of a line, split on spaces; `next` names what it expected when the line ends.
class Fields {
 public:
  Fields(const std::string& text, const std::string& file, int64_t line) : file_(file), line_(line) {
    std::size_t i = 0;
    while (i < text.size()) {
      while (i < text.size() && text[i] == ' ') ++i;
      std::size_t j = i;
      while (j < text.size() && text[j] != ' ') ++j;
      if (j > i) tokens_.push_back(text.substr(i, j - i));
      i = j;
    }
  }
  [[noreturn]] void fail(const std::string& what) const { throw Error(str_cat(file_, ":", line_, ": ", what)); }
  const std::string& next(const char* what) {
    if (i_ >= tokens_.size()) fail(str_cat("line ends where ", what, " was expected"));
    return tokens_[i_++];
  }
  // An unsigned number of base 10 or 16 with at most max_digits digits.
  uint32_t number(const char* what, int base, std::size_t max_digits) {
    const std::string& t = next(what);
    if (t.empty() || t.size() > max_digits) fail(str_cat("bad ", what, " '", t, "'"));
    uint32_t v = 0;
    for (char c : t) {
      const int d = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                    : (base == 16 && c >= 'a' && c <= 'f') ? c - 'a' + 10
                    : (base == 16 && c >= 'A' && c <= 'F') ? c - 'A' + 10
                                                            : -1;
      if (d < 0) fail(str_cat("bad ", what, " '", t, "' (expected ", base == 16 ? "hex" : "decimal", " digits)"));
      v = v * static_cast<uint32_t>(base) + static_cast<uint32_t>(d);
    }
    return v;
  }
  char pos(const char* what) {
    const std::string& t = next(what);
    if (t.size() != 1 || std::string("nvasr").find(t[0]) == std::string::npos)
      fail(str_cat("bad ", what, " '", t, "' (expected one of n v a s r)"));
    return t[0];
  }
  bool done() const { return i_ >= tokens_.size(); }
  const std::string& peek() const { return tokens_[i_]; }

 private:
  std::vector<std::string> tokens_;
  std::size_t i_ = 0;
  const std::string& file_;
  int64_t line_;
};

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Adjectives in data.adj may carry a syntactic marker: "galore(ip)", "elect(p)", "former(a)".
std::string strip_marker(const std::string& w) {
  for (const char* m : {"(ip)", "(p)", "(a)"}) {
    const std::size_t n = std::char_traits<char>::length(m);
    if (w.size() > n && w.compare(w.size() - n, n, m) == 0) return w.substr(0, w.size() - n);
  }
  return w;
}

// Lines of a WordNet file without the license header (lines starting with two spaces).
template <class Parse>
auto read_lines(const std::string& path, Parse parse) {
  std::ifstream f(path);
  if (!f) throw Error(str_cat(path, ": cannot open file"));
  std::vector<decltype(parse(std::string(), int64_t(0)))> out;
  std::string line;
  int64_t n = 0;
  while (std::getline(f, line)) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.rfind("  ", 0) == 0 || line.empty()) continue;
    out.push_back(parse(line, n));
  }
  if (f.bad()) throw Error(str_cat(path, ": read error"));
  if (out.empty()) throw Error(str_cat(path, ": no entries (empty file, or only the license header)"));
  return out;
}

char file_pos(char pos) { return pos == 's' ? 'a' : pos; }

const char* pos_name(char pos) {
  switch (pos) {
    case 'n': return "noun";
    case 'v': return "verb";
    case 'a': case 's': return "adjective";
    default: return "adverb";
  }
}

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// The 1-based number of `lemma` (lower case, underscores) among a synset's words, 0 if absent.
int word_number(const Synset& s, const std::string& lemma) {
  for (std::size_t i = 0; i < s.words.size(); ++i)
    if (lower(s.words[i].lemma) == lemma) return static_cast<int>(i) + 1;
  return 0;
}

// The antonyms of word `k` of synset `s` (lexical `!` pointers), display form.
void antonyms_of(const WordNet& wn, const Synset& s, int k, std::vector<std::string>& out) {
  for (const Pointer& p : s.pointers) {
    if (p.symbol != "!" || (p.source != 0 && p.source != k)) continue;
    const Synset& t = wn.synset(p.pos, p.offset);
    for (std::size_t j = 0; j < t.words.size(); ++j) {
      if (p.target != 0 && p.target != static_cast<int>(j) + 1) continue;
      const std::string a = display_lemma(t.words[j].lemma);
      if (std::find(out.begin(), out.end(), a) == out.end()) out.push_back(a);
    }
  }
}

// Concepts that share a parent with `s`: hyponyms of its hypernyms (nouns, verbs), or the
// other satellites of its head adjective.
std::vector<const Synset*> siblings(const WordNet& wn, const Synset& s) {
  std::vector<const Synset*> out;
  auto add_children = [&](const Synset& parent, std::initializer_list<const char*> down) {
    for (const Pointer& q : parent.pointers) {
      if (std::none_of(down.begin(), down.end(), [&](const char* d) { return q.symbol == d; })) continue;
      const Synset& c = wn.synset(q.pos, q.offset);
      if (c.offset != s.offset && std::find(out.begin(), out.end(), &c) == out.end()) out.push_back(&c);
    }
  };
  for (const Pointer& p : s.pointers) {
    if (p.symbol == "@" || p.symbol == "@i") add_children(wn.synset(p.pos, p.offset), {"~", "~i"});
    if (s.ss_type == 's' && p.symbol == "&") add_children(wn.synset(p.pos, p.offset), {"&"});
  }
  return out;
}

// The definitions of the antonyms of word `k` of synset `s` (lexical `!` pointers), each with
// the antonym word; empty definitions and ones equal to `own` (the word's) are left out.
struct AntonymGloss { std::string definition, word; };
std::vector<AntonymGloss> antonym_glosses(const WordNet& wn, const Synset& s, int k, const std::string& own) {
  std::vector<AntonymGloss> out;
  for (const Pointer& p : s.pointers) {
    if (p.symbol != "!" || (p.source != 0 && p.source != k)) continue;
    const Synset& t = wn.synset(p.pos, p.offset);
    if (p.target > static_cast<int>(t.words.size())) continue;  // names no word of t
    const std::string r = definition(t.gloss);
    if (r.empty() || r == own) continue;
    out.push_back({r, t.words[p.target > 0 ? static_cast<std::size_t>(p.target) - 1 : 0].lemma});
  }
  return out;
}

// The part-of-speech rows: words of one part of speech only, classes balanced (see PosTask).
void add_pos_task(const WordNet& wn, const LemmaSplit& split, const PosTask& task, Datasets& d) {
  std::map<std::string, std::set<char>> parts;  // lemma -> the parts of speech it is listed under
  for (char pos : {'n', 'v', 'a', 'r'})
    for (const IndexEntry& e : wn.index(pos)) parts[e.lemma].insert(pos);
  const char kinds[] = {'n', 'v', 'a', 'r'};
  std::map<char, std::vector<std::pair<uint64_t, std::string>>> train, held;  // (hash, lemma)
  for (const auto& [lemma, set] : parts) {
    if (set.size() != 1 || lemma.size() < 3) continue;
    if (!std::all_of(lemma.begin(), lemma.end(), [](char c) { return c >= 'a' && c <= 'z'; })) continue;
    const uint64_t h = splitmix64(fnv1a(lemma) ^ splitmix64(split.seed + 1));
    (split.heldout(lemma) ? held : train)[*set.begin()].emplace_back(h, lemma);
  }
  auto balanced = [&](std::map<char, std::vector<std::pair<uint64_t, std::string>>>& by, std::size_t cap) {
    std::size_t n = cap;
    for (char k : kinds) n = std::min(n, by[k].size());
    std::vector<std::pair<uint64_t, std::pair<char, std::string>>> rows;  // shuffled by hash
    for (char k : kinds) {
      auto& v = by[k];
      std::sort(v.begin(), v.end());
      for (std::size_t i = 0; i < n; ++i) rows.push_back({splitmix64(v[i].first), {k, v[i].second}});
    }
    std::sort(rows.begin(), rows.end());
    return rows;
  };
  auto add = [&](auto& rows, bool heldout) {
    for (const auto& [h, row] : rows) {
      const auto& [k, lemma] = row;
      const std::string ask = str_cat("What part of speech is \"", lemma, "\"?");
      const std::string answer = pos_name(k);
      std::string wrong = answer;
      for (uint64_t i = h; wrong == answer; ++i) wrong = pos_name(kinds[i % 4]);
      (heldout ? d.pos_sft.heldout : d.pos_sft.train).push_back({ask, answer});
      (heldout ? d.pos_dpo.heldout : d.pos_dpo.train).push_back({ask, answer, wrong});
      (heldout ? d.pos_grpo.heldout : d.pos_grpo.train).push_back({ask, {answer}});
    }
  };
  auto train_rows = balanced(train, task.train_per_class);
  auto held_rows = balanced(held, task.heldout_per_class);
  add(train_rows, false);
  add(held_rows, true);
}

}  // namespace

Synset parse_data_line(const std::string& line, const std::string& file, int64_t line_no) {
  Synset s;
  const std::size_t bar = line.find(" | ");
  std::string head = line.substr(0, bar);
  if (bar != std::string::npos) {
    s.gloss = line.substr(bar + 3);
    while (!s.gloss.empty() && (s.gloss.back() == ' ' || s.gloss.back() == '\n')) s.gloss.pop_back();
  } else if (!head.empty() && head.back() == '|') {
    head.pop_back();  // an empty gloss
  }
  Fields f(head, file, line_no);
  s.offset = f.number("synset offset", 10, 8);
  s.lex_filenum = static_cast<int>(f.number("lex_filenum", 10, 2));
  s.ss_type = f.pos("ss_type");
  const uint32_t w_cnt = f.number("word count (hex)", 16, 2);
  if (w_cnt == 0) f.fail("synset with no words");
  for (uint32_t i = 0; i < w_cnt; ++i) {
    Word w;
    w.lemma = strip_marker(f.next("a word"));
    w.lex_id = static_cast<int>(f.number("lex_id (hex)", 16, 1));
    s.words.push_back(std::move(w));
  }
  const uint32_t p_cnt = f.number("pointer count", 10, 3);
  for (uint32_t i = 0; i < p_cnt; ++i) {
    Pointer p;
    p.symbol = f.next("a pointer symbol");
    p.offset = f.number("pointer offset", 10, 8);
    p.pos = f.pos("pointer part of speech");
    const uint32_t st = f.number("pointer source/target (hex)", 16, 4);
    p.source = static_cast<int>(st >> 8);
    p.target = static_cast<int>(st & 0xFF);
    if (p.source > static_cast<int>(w_cnt))
      f.fail(str_cat("pointer source word ", p.source, " but the synset has ", w_cnt, " words"));
    s.pointers.push_back(std::move(p));
  }
  if (s.ss_type == 'v') {
    const uint32_t f_cnt = f.number("frame count", 10, 2);
    for (uint32_t i = 0; i < f_cnt; ++i) {
      if (f.next("'+' before a frame") != "+") f.fail("expected '+' before a verb frame");
      const int fn = static_cast<int>(f.number("frame number", 10, 2));
      s.frames.emplace_back(fn, static_cast<int>(f.number("frame word number (hex)", 16, 2)));
    }
  }
  if (!f.done()) f.fail(str_cat("unexpected '", f.peek(), "' before the gloss (expected '| ')"));
  return s;
}

IndexEntry parse_index_line(const std::string& line, const std::string& file, int64_t line_no) {
  Fields f(line, file, line_no);
  IndexEntry e;
  e.lemma = f.next("a lemma");
  e.pos = f.pos("part of speech");
  if (e.pos == 's') f.fail("part of speech 's' in an index file (expected n v a r)");
  const uint32_t synset_cnt = f.number("synset count", 10, 5);
  const uint32_t p_cnt = f.number("pointer count", 10, 3);
  for (uint32_t i = 0; i < p_cnt; ++i) f.next("a pointer symbol");
  f.number("sense count", 10, 5);
  f.number("tagged sense count", 10, 5);
  for (uint32_t i = 0; i < synset_cnt; ++i) e.offsets.push_back(f.number("synset offset", 10, 8));
  if (!f.done()) f.fail(str_cat("unexpected '", f.peek(), "' after ", synset_cnt, " synset offsets"));
  if (e.offsets.empty()) f.fail("lemma with no synsets");
  return e;
}

std::vector<Synset> read_data_file(const std::string& path) {
  return read_lines(path, [&](const std::string& l, int64_t n) { return parse_data_line(l, path, n); });
}

std::vector<IndexEntry> read_index_file(const std::string& path) {
  return read_lines(path, [&](const std::string& l, int64_t n) { return parse_index_line(l, path, n); });
}

std::string definition(const std::string& gloss) {
  std::string d = gloss.substr(0, gloss.find("; \""));
  if (!d.empty() && d[0] == '"') d.clear();  // a gloss that is only examples
  while (!d.empty() && (d.back() == ' ' || d.back() == ';')) d.pop_back();
  std::size_t b = 0;
  while (b < d.size() && d[b] == ' ') ++b;
  return d.substr(b);
}

std::string display_lemma(const std::string& lemma) {
  std::string s = lemma;
  std::replace(s.begin(), s.end(), '_', ' ');
  return s;
}

WordNet WordNet::load(const std::string& dir) {
  WordNet wn;
  const std::pair<char, const char*> files[] = {{'n', "noun"}, {'v', "verb"}, {'a', "adj"}, {'r', "adv"}};
  for (const auto& [pos, name] : files) {
    wn.add_data(pos, read_data_file(str_cat(dir, "/data.", name)));
    wn.add_index(pos, read_index_file(str_cat(dir, "/index.", name)));
  }
  return wn;
}

void WordNet::add_data(char pos, std::vector<Synset> synsets) {
  for (auto& s : synsets) synsets_[{file_pos(pos), s.offset}] = std::move(s);
}

void WordNet::add_index(char pos, std::vector<IndexEntry> entries) {
  auto& v = index_[file_pos(pos)];
  for (auto& e : entries) v.push_back(std::move(e));
}

const Synset& WordNet::synset(char pos, uint32_t offset) const {
  auto it = synsets_.find({file_pos(pos), offset});
  if (it == synsets_.end())
    throw Error(str_cat("wordnet: no synset at offset ", offset, " in data.", pos_name(pos),
                        " (a pointer or index entry names a missing synset)"));
  return it->second;
}

const std::vector<IndexEntry>& WordNet::index(char pos) const {
  static const std::vector<IndexEntry> none;
  auto it = index_.find(file_pos(pos));
  return it == index_.end() ? none : it->second;
}

bool LemmaSplit::heldout(const std::string& lemma) const {
  const uint64_t h = splitmix64(fnv1a(lower(display_lemma(lemma))) ^ splitmix64(seed));
  return static_cast<double>(h >> 11) * 0x1.0p-53 < fraction;
}

Datasets build_datasets(const WordNet& wn, const LemmaSplit& split, const PosTask& pos_task) {
  Datasets d;
  for (char pos : {'n', 'v', 'a', 'r'}) {
    for (const IndexEntry& e : wn.index(pos)) {
      const Synset& first = wn.synset(pos, e.offsets[0]);
      const int k = word_number(first, e.lemma);
      // The lemma as the synset spells it ("AD", "Aberdeen"); the index is lower case.
      const std::string word = display_lemma(k > 0 ? first.words[static_cast<std::size_t>(k) - 1].lemma : e.lemma);
      const bool held = split.heldout(e.lemma);
      const std::string kind = pos_name(pos);

      const std::string def = definition(first.gloss);
      const std::string define = str_cat("Define the ", kind, " \"", word, "\".");
      if (!def.empty()) {
        (held ? d.sft.heldout : d.sft.train).push_back({define, def});
        // DPO: a sibling concept's definition (picked by hash), else the antonym's.
        std::string rejected;
        const auto sibs = siblings(wn, first);
        const uint64_t h = splitmix64(fnv1a(str_cat(pos, e.lemma)) ^ split.seed);
        for (std::size_t i = 0; i < sibs.size() && rejected.empty(); ++i) {
          const std::string r = definition(sibs[(h + i) % sibs.size()]->gloss);
          if (!r.empty() && r != def) rejected = r;
        }
        const std::vector<AntonymGloss> antonyms = antonym_glosses(wn, first, k, def);
        if (rejected.empty() && !antonyms.empty()) rejected = antonyms[0].definition;
        if (!rejected.empty()) (held ? d.dpo.heldout : d.dpo.train).push_back({define, def, rejected});
        for (const AntonymGloss& a : antonyms) {
          if (!held && split.heldout(a.word)) continue;  // held-out words stay out of training rows
          (held ? d.dpo_antonym.heldout : d.dpo_antonym.train).push_back({define, def, a.definition});
          break;
        }
      }

      // The first sense's hypernym (nouns, verbs): its first word.
      for (const Pointer& p : first.pointers) {
        if (p.symbol != "@" && p.symbol != "@i") continue;
        const std::string parent = display_lemma(wn.synset(p.pos, p.offset).words[0].lemma);
        if (held || !split.heldout(parent))
          (held ? d.sft.heldout : d.sft.train).push_back({str_cat("Name a more general word for the ", kind, " \"", word, "\"."), parent});
        break;
      }

      std::vector<std::string> answers;
      for (uint32_t off : e.offsets) {
        const Synset& s = wn.synset(pos, off);
        const int n = word_number(s, e.lemma);
        if (n > 0) antonyms_of(wn, s, n, answers);
      }
      if (answers.empty()) continue;
      if (!held && std::any_of(answers.begin(), answers.end(), [&](const std::string& a) { return split.heldout(a); }))
        continue;
      const std::string ask = str_cat("Give an antonym of the ", kind, " \"", word, "\".");
      (held ? d.sft.heldout : d.sft.train).push_back({ask, answers[0]});
      (held ? d.grpo.heldout : d.grpo.train).push_back({ask, answers});
    }
  }
  add_pos_task(wn, split, pos_task, d);
  return d;
}

}  // namespace xg::finetune::wordnet
