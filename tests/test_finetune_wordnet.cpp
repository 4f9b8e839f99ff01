// Tests for finetune/data/wordnet: the wndb line format on hand-written lines in WordNet 3.0's
// exact layout, the SFT/DPO/GRPO builders, the lemma split, and file:line errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "finetune/data/wordnet.hpp"
#include "torch_fixture.hpp"

using namespace xg::finetune::wordnet;
namespace fs = std::filesystem;

namespace {

const char* kHeader =
    "  1 This software and database is being provided to you, the LICENSEE, by  \n"
    "  2 Princeton University under the following license.  \n";

// A tiny WordNet in the real format (own lines, made up offsets).
const char* kNoun =
    "00001000 03 n 01 animal 0 002 ~ 00002000 n 0000 ~ 00003000 n 0000 | a living organism; \"animals move\"  \n"
    "00002000 05 n 02 cat 0 true_cat 0 001 @ 00001000 n 0000 | feline mammal usually having thick soft fur; \"cats purr\"  \n"
    "00003000 05 n 01 dog 0 001 @ 00001000 n 0000 | a member of the genus Canis  \n";
const char* kNounIndex =
    "animal n 1 1 ~ 1 0 00001000  \n"
    "cat n 1 1 @ 1 0 00002000  \n"
    "dog n 1 1 @ 1 0 00003000  \n"
    "true_cat n 1 1 @ 1 0 00002000  \n";
const char* kAdj =
    "00010000 00 a 01 good 0 003 ! 00020000 a 0101 & 00030000 s 0000 & 00040000 s 0000 | having desirable qualities; \"good news\"  \n"
    "00020000 00 a 02 bad 0 evil(p) 0 001 ! 00010000 a 0101 | having undesirable qualities  \n"
    "00030000 00 s 01 fine 0 001 & 00010000 a 0000 | superior in quality  \n"
    "00040000 00 s 01 Nice 0 001 & 00010000 a 0000 | pleasant or pleasing  \n";
const char* kAdjIndex =
    "bad a 1 1 ! 1 0 00020000  \n"
    "evil a 1 1 ! 1 0 00020000  \n"
    "fine a 1 1 & 1 0 00030000  \n"
    "good a 1 2 ! & 1 0 00010000  \n"
    "nice a 1 1 & 1 0 00040000  \n";
const char* kVerb =
    "00050000 29 v 01 exhale 0 001 ! 00060000 v 0101 02 + 02 00 + 08 01 | expel air; \"Exhale when you lift\"  \n"
    "00060000 29 v 01 inhale 0 001 ! 00050000 v 0101 01 + 02 00 | draw in air  \n";
const char* kVerbIndex = "exhale v 1 1 ! 1 0 00050000  \ninhale v 1 1 ! 1 0 00060000  \n";
const char* kAdv = "00070000 02 r 01 a_cappella 0 000 | without musical accompaniment; \"they performed a cappella\"  \n";
const char* kAdvIndex = "a_cappella r 1 0 1 0 00070000  \n";

std::string test_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path dir = fs::path(XGRAD_BINARY_DIR) / (std::string("ft_wordnet_") + info->name());
  fs::create_directories(dir);
  return dir.string();
}

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string tiny_wordnet() {
  const std::string dir = test_dir();
  write(dir + "/data.noun", std::string(kHeader) + kNoun);
  write(dir + "/index.noun", std::string(kHeader) + kNounIndex);
  write(dir + "/data.adj", std::string(kHeader) + kAdj);
  write(dir + "/index.adj", std::string(kHeader) + kAdjIndex);
  write(dir + "/data.verb", std::string(kHeader) + kVerb);
  write(dir + "/index.verb", std::string(kHeader) + kVerbIndex);
  write(dir + "/data.adv", std::string(kHeader) + kAdv);
  write(dir + "/index.adv", std::string(kHeader) + kAdvIndex);
  return dir;
}

template <class Rows, class Pred>
const auto* find_row(const Rows& rows, Pred pred) {
  auto it = std::find_if(rows.begin(), rows.end(), pred);
  return it == rows.end() ? nullptr : &*it;
}

std::string response_to(const std::vector<SftRow>& rows, const std::string& prompt) {
  const auto* r = find_row(rows, [&](const SftRow& x) { return x.prompt == prompt; });
  return r ? r->response : "<no row>";
}

}  // namespace

TEST(FinetuneWordnet, ParsesADataLine) {
  const Synset s = parse_data_line(
      "00050000 29 v 02 exhale 0 breathe_out 1 002 @ 00001740 v 0000 ! 00060000 v 0201 02 + 02 00 + 08 0a "
      "| expel air; \"Exhale when you lift\"  ",
      "data.verb", 40);
  EXPECT_EQ(s.offset, 50000u);
  EXPECT_EQ(s.lex_filenum, 29);
  EXPECT_EQ(s.ss_type, 'v');
  ASSERT_EQ(s.words.size(), 2u);
  EXPECT_EQ(s.words[1].lemma, "breathe_out");
  EXPECT_EQ(s.words[1].lex_id, 1);
  ASSERT_EQ(s.pointers.size(), 2u);
  EXPECT_EQ(s.pointers[0].symbol, "@");
  EXPECT_EQ(s.pointers[0].offset, 1740u);
  EXPECT_EQ(s.pointers[1].symbol, "!");
  EXPECT_EQ(s.pointers[1].source, 2);  // 0201: word 2 here -> word 1 there
  EXPECT_EQ(s.pointers[1].target, 1);
  EXPECT_EQ(s.frames, (std::vector<std::pair<int, int>>{{2, 0}, {8, 10}}));
  EXPECT_EQ(s.gloss, "expel air; \"Exhale when you lift\"");
  EXPECT_EQ(definition(s.gloss), "expel air");
  // An adjective marker is dropped from the lemma.
  const Synset a = parse_data_line("00020000 00 a 01 evil(p) 0 000 | morally bad", "data.adj", 1);
  EXPECT_EQ(a.words[0].lemma, "evil");
}

TEST(FinetuneWordnet, ParsesAnIndexLine) {
  const IndexEntry e = parse_index_line("good a 3 2 ! & 3 1 00010000 00030000 00040000  ", "index.adj", 9);
  EXPECT_EQ(e.lemma, "good");
  EXPECT_EQ(e.pos, 'a');
  EXPECT_EQ(e.offsets, (std::vector<uint32_t>{10000, 30000, 40000}));
}

TEST(FinetuneWordnet, DefinitionIsTheGlossBeforeTheFirstExample) {
  EXPECT_EQ(definition("a living organism; \"animals move\"; \"more\""), "a living organism");
  EXPECT_EQ(definition("(usually followed by `to') having the means; able"), "(usually followed by `to') having the means; able");
  EXPECT_EQ(definition("\"only an example\""), "");
  EXPECT_EQ(display_lemma("a_cappella"), "a cappella");
}

TEST(FinetuneWordnet, BadLinesNameFileAndLine) {
  EXPECT_XG_ERROR(parse_data_line("00001000 03 n 01 cat 0 001 @ 0000100x n 0000 | x", "data.noun", 31),
                  "data.noun:31: bad pointer offset '0000100x' (expected decimal digits)");
  EXPECT_XG_ERROR(parse_data_line("00001000 03 n 02 cat 0 | x", "data.noun", 32),
                  "data.noun:32: line ends where a word was expected");
  EXPECT_XG_ERROR(parse_data_line("00001000 03 q 01 cat 0 000 | x", "data.noun", 33),
                  "data.noun:33: bad ss_type 'q' (expected one of n v a s r)");
  EXPECT_XG_ERROR(parse_data_line("00001000 03 n 01 cat 0 000 extra | x", "data.noun", 34),
                  "data.noun:34: unexpected 'extra' before the gloss");
  EXPECT_XG_ERROR(parse_data_line("00001000 03 n 01 cat 0 001 ! 00002000 n 0301 | x", "data.noun", 35),
                  "data.noun:35: pointer source word 3 but the synset has 1 words");
  EXPECT_XG_ERROR(parse_index_line("cat n 2 0 1 0 00002000", "index.noun", 36),
                  "index.noun:36: line ends where synset offset was expected");

  const std::string dir = test_dir();
  write(dir + "/data.noun", std::string(kHeader) + kNoun + "00004000 05 n 01 cow 0 00x | bovine\n");
  EXPECT_XG_ERROR(read_data_file(dir + "/data.noun"), dir + "/data.noun:6: bad pointer count '00x'");
  write(dir + "/header_only", kHeader);
  EXPECT_XG_ERROR(read_data_file(dir + "/header_only"), "header_only: no entries (empty file, or only the license header)");
  EXPECT_XG_ERROR(read_index_file(dir + "/absent"), "absent: cannot open file");
}

TEST(FinetuneWordnet, BuildsSftPairsFromFirstSensesAndLexicalAntonyms) {
  const WordNet wn = WordNet::load(tiny_wordnet());
  EXPECT_EQ(wn.synset_count(), 10u);
  const Datasets d = build_datasets(wn, LemmaSplit{0.0, 0});
  EXPECT_TRUE(d.sft.heldout.empty());
  const auto& sft = d.sft.train;
  EXPECT_EQ(response_to(sft, "Define the noun \"cat\"."), "feline mammal usually having thick soft fur");
  EXPECT_EQ(response_to(sft, "Define the noun \"true cat\"."), "feline mammal usually having thick soft fur");
  EXPECT_EQ(response_to(sft, "Define the adverb \"a cappella\"."), "without musical accompaniment");
  EXPECT_EQ(response_to(sft, "Define the adjective \"Nice\"."), "pleasant or pleasing");  // the synset's spelling
  EXPECT_EQ(response_to(sft, "Define the verb \"exhale\"."), "expel air");
  EXPECT_EQ(response_to(sft, "Give an antonym of the adjective \"good\"."), "bad");
  EXPECT_EQ(response_to(sft, "Give an antonym of the adjective \"bad\"."), "good");
  EXPECT_EQ(response_to(sft, "Give an antonym of the verb \"inhale\"."), "exhale");
  // The antonym pointer is lexical (source word 1, "bad"): "evil" has no antonym.
  EXPECT_EQ(response_to(sft, "Give an antonym of the adjective \"evil\"."), "<no row>");
  EXPECT_EQ(response_to(sft, "Name a more general word for the noun \"true cat\"."), "animal");
  EXPECT_EQ(response_to(sft, "Name a more general word for the noun \"animal\"."), "<no row>");
  EXPECT_EQ(sft.size(), 12u + 3u + 4u);  // a define row per index entry, 3 hypernym rows, 4 antonym rows
  ASSERT_EQ(d.grpo.train.size(), 4u);
  const auto* g = find_row(d.grpo.train, [](const GrpoRow& r) { return r.prompt == "Give an antonym of the adjective \"good\"."; });
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->answers, (std::vector<std::string>{"bad"}));
}

TEST(FinetuneWordnet, DpoRejectsASiblingOrTheAntonymGloss) {
  const Datasets d = build_datasets(WordNet::load(tiny_wordnet()), LemmaSplit{0.0, 3});
  auto rejected = [&](const std::string& prompt) {
    const auto* r = find_row(d.dpo.train, [&](const DpoRow& x) { return x.prompt == prompt; });
    return r ? r->chosen + " | " + r->rejected : "<no row>";
  };
  // Siblings under the same hypernym (cat, dog under animal).
  EXPECT_EQ(rejected("Define the noun \"cat\"."), "feline mammal usually having thick soft fur | a member of the genus Canis");
  EXPECT_EQ(rejected("Define the noun \"dog\"."), "a member of the genus Canis | feline mammal usually having thick soft fur");
  // Satellites of one head adjective are siblings; a head adjective falls back to its antonym.
  EXPECT_EQ(rejected("Define the adjective \"fine\"."), "superior in quality | pleasant or pleasing");
  EXPECT_EQ(rejected("Define the adjective \"good\"."), "having desirable qualities | having undesirable qualities");
  // No hypernym and no antonym: no row.
  EXPECT_EQ(rejected("Define the noun \"animal\"."), "<no row>");
  EXPECT_EQ(rejected("Define the adverb \"a cappella\"."), "<no row>");
}

TEST(FinetuneWordnet, DpoAntonymRejectsTheAntonymGlossOnly) {
  const Datasets d = build_datasets(WordNet::load(tiny_wordnet()), LemmaSplit{0.0, 3});
  auto pair = [&](const std::string& prompt) {
    const auto* r = find_row(d.dpo_antonym.train, [&](const DpoRow& x) { return x.prompt == prompt; });
    return r ? r->chosen + " | " + r->rejected : "<no row>";
  };
  EXPECT_EQ(pair("Define the adjective \"good\"."), "having desirable qualities | having undesirable qualities");
  EXPECT_EQ(pair("Define the adjective \"bad\"."), "having undesirable qualities | having desirable qualities");
  EXPECT_EQ(pair("Define the verb \"inhale\"."), "draw in air | expel air");
  EXPECT_EQ(pair("Define the adjective \"evil\"."), "<no row>");  // the antonym pointer is bad's only
  EXPECT_EQ(pair("Define the noun \"cat\"."), "<no row>");        // a sibling, but no antonym
  EXPECT_EQ(d.dpo_antonym.train.size(), 4u);
  EXPECT_TRUE(d.dpo_antonym.heldout.empty());
}

TEST(FinetuneWordnet, LemmaSplitIsDeterministicAndKeepsHeldOutWordsOutOfTraining) {
  const LemmaSplit s{0.05, 11};
  EXPECT_EQ(s.heldout("Ice_cream"), s.heldout("ice cream"));
  int held = 0;
  for (int i = 0; i < 20000; ++i) held += s.heldout("word" + std::to_string(i));
  EXPECT_GT(held, 800);  // 5% of 20000 = 1000
  EXPECT_LT(held, 1200);
  EXPECT_FALSE((LemmaSplit{0.0, 11}.heldout("cat")));
  EXPECT_TRUE((LemmaSplit{1.0, 11}.heldout("cat")));

  // Hold out about half: every held-out row is about a held-out word, and no training row
  // asks about or answers with one.
  const WordNet wn = WordNet::load(tiny_wordnet());
  const LemmaSplit half{0.5, 5};
  const Datasets d = build_datasets(wn, half);
  EXPECT_FALSE(d.sft.heldout.empty());
  EXPECT_FALSE(d.sft.train.empty());
  auto word_of = [](const std::string& prompt) {
    const std::size_t a = prompt.find('"');
    return prompt.substr(a + 1, prompt.rfind('"') - a - 1);
  };
  for (const auto& r : d.sft.heldout) EXPECT_TRUE(half.heldout(word_of(r.prompt))) << r.prompt;
  for (const auto& r : d.sft.train) {
    EXPECT_FALSE(half.heldout(word_of(r.prompt))) << r.prompt;
    if (r.prompt.rfind("Define", 0) != 0) {
      EXPECT_FALSE(half.heldout(r.response)) << r.prompt << " -> " << r.response;
    }
  }
  for (const auto& r : d.grpo.train)
    for (const auto& a : r.answers) EXPECT_FALSE(half.heldout(a)) << r.prompt << " -> " << a;
  for (const auto& r : d.dpo.heldout) EXPECT_TRUE(half.heldout(word_of(r.prompt))) << r.prompt;
  for (const auto& r : d.dpo_antonym.heldout) EXPECT_TRUE(half.heldout(word_of(r.prompt))) << r.prompt;
  for (const auto& r : d.dpo_antonym.train) EXPECT_FALSE(half.heldout(word_of(r.prompt))) << r.prompt;
}

TEST(FinetuneWordnet, PartOfSpeechRowsAreOneWordOnePartAndBalanced) {
  WordNet wn = WordNet::load(tiny_wordnet());
  // Two one-word adverbs, and "dog" also a verb: a word listed under two parts is left out.
  wn.add_data('r', {parse_data_line("00080000 02 r 01 quickly 0 000 | with speed  ", "t", 1),
                    parse_data_line("00090000 02 r 01 soon 0 000 | in the near future  ", "t", 2)});
  wn.add_index('r', {parse_index_line("quickly r 1 0 1 0 00080000  ", "t", 1),
                     parse_index_line("soon r 1 0 1 0 00090000  ", "t", 2)});
  wn.add_data('v', {parse_data_line("00100000 38 v 01 dog 0 000 01 + 01 00 | go after with the intent to catch  ", "t", 3)});
  wn.add_index('v', {parse_index_line("dog v 1 0 1 0 00100000  ", "t", 3)});

  const Datasets d = build_datasets(wn, LemmaSplit{0.0, 0});
  // Candidates: nouns animal, cat (dog: two parts; true_cat: two words); verbs exhale,
  // inhale; five adjectives; adverbs quickly, soon (a_cappella: two words). Two per class.
  std::vector<std::string> got;
  for (const SftRow& r : d.pos_sft.train) got.push_back(r.response + " <- " + r.prompt);
  std::sort(got.begin(), got.end());
  ASSERT_EQ(got.size(), 8u);
  for (int i : {0, 1}) EXPECT_EQ(got[i].rfind("adjective <- What part of speech is \"", 0), 0u) << got[i];
  EXPECT_EQ(got[2], "adverb <- What part of speech is \"quickly\"?");
  EXPECT_EQ(got[3], "adverb <- What part of speech is \"soon\"?");
  EXPECT_EQ(got[4], "noun <- What part of speech is \"animal\"?");
  EXPECT_EQ(got[5], "noun <- What part of speech is \"cat\"?");
  EXPECT_EQ(got[6], "verb <- What part of speech is \"exhale\"?");
  EXPECT_EQ(got[7], "verb <- What part of speech is \"inhale\"?");
  EXPECT_TRUE(d.pos_sft.heldout.empty());

  // DPO: the same prompt, the right part against a wrong one; GRPO: the one right answer.
  ASSERT_EQ(d.pos_dpo.train.size(), 8u);
  ASSERT_EQ(d.pos_grpo.train.size(), 8u);
  const std::vector<std::string> parts = {"noun", "verb", "adjective", "adverb"};
  for (std::size_t i = 0; i < 8; ++i) {
    const SftRow& s = d.pos_sft.train[i];
    EXPECT_EQ(d.pos_dpo.train[i].prompt, s.prompt);
    EXPECT_EQ(d.pos_dpo.train[i].chosen, s.response);
    EXPECT_NE(d.pos_dpo.train[i].rejected, s.response);
    EXPECT_NE(std::find(parts.begin(), parts.end(), d.pos_dpo.train[i].rejected), parts.end());
    EXPECT_EQ(d.pos_grpo.train[i].prompt, s.prompt);
    EXPECT_EQ(d.pos_grpo.train[i].answers, (std::vector<std::string>{s.response}));
  }

  // Caps per class, and a held-out word is only ever held out.
  EXPECT_EQ(build_datasets(wn, LemmaSplit{0.0, 0}, PosTask{1, 1}).pos_sft.train.size(), 4u);
  const LemmaSplit all_held{1.0, 0};
  const Datasets h = build_datasets(wn, all_held);
  EXPECT_TRUE(h.pos_sft.train.empty());
  EXPECT_EQ(h.pos_sft.heldout.size(), 8u);
}

TEST(FinetuneWordnet, RealAdverbFileIfExtracted) {
  const std::string dir = std::string(XGRAD_BINARY_DIR) + "/data/pkgs/usr/share/wordnet";
  if (!fs::exists(dir + "/data.adv")) GTEST_SKIP() << "run scripts/data.sh " << XGRAD_BINARY_DIR << " first";
  const auto synsets = read_data_file(dir + "/data.adv");
  EXPECT_EQ(synsets.size(), 3621u);  // WordNet 3.0's adverb synsets
  EXPECT_EQ(synsets[0].words[0].lemma, "a_cappella");
  EXPECT_EQ(definition(synsets[0].gloss), "without musical accompaniment");
  EXPECT_EQ(read_index_file(dir + "/index.adv").size(), 4481u);  // adverb lemmas
}

TEST(FinetuneWordnet, DanglingPointerIsAnError) {
  WordNet wn;
  wn.add_data('n', {parse_data_line("00002000 05 n 01 cat 0 001 @ 00009999 n 0000 | a cat", "data.noun", 1)});
  wn.add_index('n', {parse_index_line("cat n 1 1 @ 1 0 00002000", "index.noun", 1)});
  EXPECT_XG_ERROR(build_datasets(wn, LemmaSplit{}), "no synset at offset 9999 in data.noun");
}
