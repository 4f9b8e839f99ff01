// WordNet 3.0 database files (wndb(5WN): data.noun/verb/adj/adv and index.*) and the
// builders that turn them into SFT pairs, DPO triples and GRPO prompts, split by lemma.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace xg::finetune::wordnet {

struct Pointer {
  std::string symbol;  // "@" hypernym, "~" hyponym, "!" antonym, "&" similar to, ...
  uint32_t offset = 0;
  char pos = 'n';      // n v a s r
  int source = 0;      // word number in this synset (1-based), 0 = the whole synset
  int target = 0;      // word number in the target synset, 0 = the whole synset
};

struct Word {
  std::string lemma;   // as in the file: underscores for spaces, adjective markers "(p)" removed
  int lex_id = 0;
};

struct Synset {
  uint32_t offset = 0;
  int lex_filenum = 0;
  char ss_type = 'n';  // n v a s r
  std::vector<Word> words;
  std::vector<Pointer> pointers;
  std::vector<std::pair<int, int>> frames;  // verbs: (frame number, word number; 0 = all words)
  std::string gloss;   // everything after "| ", trailing spaces removed
};

struct IndexEntry {
  std::string lemma;   // lower case, underscores for spaces
  char pos = 'n';      // n v a r
  std::vector<uint32_t> offsets;  // the senses, most frequent first
};

// One line of a data.<pos> file / an index.<pos> file. Errors: "file:line: what".
Synset parse_data_line(const std::string& line, const std::string& file, int64_t line_no);
IndexEntry parse_index_line(const std::string& line, const std::string& file, int64_t line_no);

// Whole files (the license header, lines starting with two spaces, is skipped). An empty or
// header-only file is an error.
std::vector<Synset> read_data_file(const std::string& path);
std::vector<IndexEntry> read_index_file(const std::string& path);

// The gloss's definition: the part before the first `; "` example, trimmed.
std::string definition(const std::string& gloss);
// "ice_cream" -> "ice cream".
std::string display_lemma(const std::string& lemma);

// The four parts of speech loaded from a folder with data.* and index.* (e.g.
// /usr/share/wordnet). Satellite adjectives ('s') live in data.adj with the heads.
class WordNet {
 public:
  static WordNet load(const std::string& dir);
  void add_data(char file_pos, std::vector<Synset> synsets);
  void add_index(char file_pos, std::vector<IndexEntry> entries);
  // The synset a pointer (or an index entry) names; throws when it does not exist.
  const Synset& synset(char pos, uint32_t offset) const;
  const std::vector<IndexEntry>& index(char file_pos) const;
  std::size_t synset_count() const { return synsets_.size(); }

 private:
  std::map<std::pair<char, uint32_t>, Synset> synsets_;  // key: file pos (n v a r), offset
  std::map<char, std::vector<IndexEntry>> index_;
};

struct SftRow { std::string prompt, response; };
struct DpoRow { std::string prompt, chosen, rejected; };
struct GrpoRow { std::string prompt; std::vector<std::string> answers; };

// Deterministic split by lemma: a lemma (display form, lower case) is held out when a hash of
// it and the seed falls below `fraction`. The same lemma is held out in every dataset.
struct LemmaSplit {
  double fraction = 0.05;
  uint64_t seed = 0;
  bool heldout(const std::string& lemma) const;
};

template <class Row> struct Split { std::vector<Row> train, heldout; };

struct Datasets {
  Split<SftRow> sft;    // define, hypernym and antonym pairs
  Split<DpoRow> dpo;    // define prompts: correct gloss vs a sibling's (or the antonym's) gloss
  Split<DpoRow> dpo_antonym;  // define prompts: correct gloss vs the antonym's gloss
  Split<GrpoRow> grpo;  // antonym prompts with every accepted answer
  // Part of speech: `What part of speech is "X"?` -> noun, verb, adjective or adverb.
  Split<SftRow> pos_sft;
  Split<DpoRow> pos_dpo;    // the right part of speech against another (picked by hash)
  Split<GrpoRow> pos_grpo;  // the one right answer
};

// The part-of-speech task's words: one-word lower-case lemmas (a-z, 3 letters or more) that
// WordNet lists under exactly one part of speech, so the answer is not ambiguous. Classes
// are balanced: each class gets as many words as the smallest has (adverbs: about 3,000),
// at most `train_per_class` training and `heldout_per_class` held-out words, chosen by hash.
struct PosTask {
  std::size_t train_per_class = 3000;
  std::size_t heldout_per_class = 150;
};

// Prompts: `Define the noun "X".` -> the first sense's definition; `Name a more general word
// for the noun "X".` -> the first word of the first sense's hypernym (nouns, verbs);
// `Give an antonym of the adjective "X".` -> the first antonym (senses in frequency order);
// GRPO answers: all antonyms. DPO rejects a sibling's definition (the antonym's when the
// concept has no sibling); dpo_antonym always rejects the definition of the first sense's
// antonym, the pairs where a word's form (un-, in-, dis-) can tell the sides apart. A row is held out when its word is; a training row whose
// answer is a held-out word is dropped, so held-out words never appear as prompt or answer
// in the training rows (they may still occur inside a definition's text).
Datasets build_datasets(const WordNet& wn, const LemmaSplit& split, const PosTask& pos_task = {});

}  // namespace xg::finetune::wordnet
