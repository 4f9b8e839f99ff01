// Tests for finetune/dataset: TextDataset windows, the JSONL readers and their file:line
// errors, SFT/DPO collation (padding, masking, truncation) against the losses' API, and rows
// formatted by a Hugging Face tokenizer and its chat template.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "autograd/random.hpp"
#include "finetune/dataset.hpp"
#include "losses/logprobs.hpp"
#include "losses/sft.hpp"
#include "text/chat_template.hpp"
#include "torch_fixture.hpp"

using namespace xg::finetune;

namespace {

// A per-test file under the build tree (CTest runs tests in parallel).
std::string write_file(const std::string& suffix, const std::string& text) {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string path =
      std::string(XGRAD_BINARY_DIR) + "/ft_dataset_" + info->test_suite_name() + "_" + info->name() + "_" + suffix;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::vector<int64_t> ints(const xg::Tensor& t) {
  std::vector<int64_t> v;
  for (double d : t.to_vector()) v.push_back(static_cast<int64_t>(d));
  return v;
}

constexpr int64_t P = ByteTokenizer::kPad, BOS = ByteTokenizer::kBos, EOS = ByteTokenizer::kEos, M = -100;

}  // namespace

TEST(FinetuneDataset, RandomBatchIsShiftedWindowsOfTheText) {
  const std::string text = "the quick brown fox";
  TextDataset ds(write_file("a.txt", text));
  EXPECT_EQ(ds.size(), 19);
  xg::Generator gen(7), gen2(7);
  LmBatch b = ds.random_batch(gen, 5, 4);
  EXPECT_EQ(b.x.shape(), (xg::Shape{5, 4}));
  EXPECT_EQ(b.y.shape(), (xg::Shape{5, 4}));
  EXPECT_EQ(b.x.dtype(), xg::kInt64);
  const auto x = ints(b.x), y = ints(b.y);
  for (int r = 0; r < 5; ++r) {
    std::string xs, ys;
    for (int t = 0; t < 4; ++t) {
      xs.push_back(static_cast<char>(x[r * 4 + t]));
      ys.push_back(static_cast<char>(y[r * 4 + t]));
    }
    const std::size_t at = text.find(xs + ys.back());
    ASSERT_NE(at, std::string::npos) << "row " << r << " is not a window: " << xs;
    EXPECT_EQ(text.substr(at + 1, 4), ys);
  }
  EXPECT_EQ(ints(ds.random_batch(gen2, 5, 4).x), x);  // same seed, same batch
}

TEST(FinetuneDataset, BatchAtCutsConsecutiveWindows) {
  TextDataset ds(write_file("a.txt", "abcdefghijk"));  // 11 tokens: windows of 3 start at 0, 3, 6
  EXPECT_EQ(ds.num_batches(2, 3), 2);
  LmBatch b0 = ds.batch_at(0, 2, 3), b1 = ds.batch_at(1, 2, 3);
  EXPECT_EQ(ints(b0.x), (std::vector<int64_t>{'a', 'b', 'c', 'd', 'e', 'f'}));
  EXPECT_EQ(ints(b0.y), (std::vector<int64_t>{'b', 'c', 'd', 'e', 'f', 'g'}));
  EXPECT_EQ(b1.x.shape(), (xg::Shape{1, 3}));  // the last batch holds the one window left
  EXPECT_EQ(ints(b1.x), (std::vector<int64_t>{'g', 'h', 'i'}));
  EXPECT_EQ(ints(b1.y), (std::vector<int64_t>{'h', 'i', 'j'}));
  EXPECT_XG_ERROR(ds.batch_at(2, 2, 3), "index 2 out of range [0, 2)");
}

TEST(FinetuneDataset, TextErrorsNameTheFile) {
  const std::string empty = write_file("empty.txt", "");
  EXPECT_XG_ERROR(TextDataset ds(empty), empty + ": empty text file");
  const std::string shortf = write_file("short.txt", "abc");
  TextDataset ds(shortf);
  xg::Generator gen(0);
  EXPECT_XG_ERROR(ds.random_batch(gen, 1, 3), shortf + ": 3 tokens, too short for seq_len 3 (needs 4)");
  EXPECT_XG_ERROR(ds.batch_at(0, 1, 5), shortf + ": 3 tokens, too short for seq_len 5");
  EXPECT_XG_ERROR(ds.random_batch(gen, 0, 2), "batch 0 and seq_len 2 must be positive");
  EXPECT_XG_ERROR(TextDataset ds2(shortf + ".missing"), ".missing: cannot open file");
}

TEST(FinetuneDataset, ReadsJsonlRowsSkippingBlankLines) {
  const auto sft = read_sft_jsonl(write_file("sft.jsonl",
      "{\"prompt\": \"Define the noun \\\"cat\\\".\", \"response\": \"feline mammal\"}\n\n"
      "{\"response\": \"b\", \"prompt\": \"a\", \"extra\": 1}\n"));
  ASSERT_EQ(sft.size(), 2u);
  EXPECT_EQ(sft[0].prompt, "Define the noun \"cat\".");
  EXPECT_EQ(sft[0].response, "feline mammal");
  EXPECT_EQ(sft[1].prompt, "a");
  const auto dpo = read_dpo_jsonl(write_file("dpo.jsonl", "{\"prompt\":\"p\",\"chosen\":\"c\",\"rejected\":\"r\"}"));
  ASSERT_EQ(dpo.size(), 1u);
  EXPECT_EQ(dpo[0].chosen, "c");
  EXPECT_EQ(dpo[0].rejected, "r");
  const auto grpo = read_grpo_jsonl(write_file("grpo.jsonl", "{\"prompt\":\"p\",\"answers\":[\"bad\",\"evil\"]}\n"));
  ASSERT_EQ(grpo.size(), 1u);
  EXPECT_EQ(grpo[0].answers, (std::vector<std::string>{"bad", "evil"}));
}

TEST(FinetuneDataset, JsonlErrorsNameFileAndLine) {
  const std::string bad = write_file("bad.jsonl", "{\"prompt\":\"a\",\"response\":\"b\"}\n{\"prompt\": oops}\n");
  EXPECT_XG_ERROR(read_sft_jsonl(bad), bad + ":2: invalid JSON");
  // Found by fuzz_jsonl: a number too large for a double is json's out_of_range, not a parse error.
  const std::string huge = write_file("huge.jsonl", "{\"prompt\":\"a\",\"response\":\"b\",\"n\":4444e444}\n");
  EXPECT_XG_ERROR(read_sft_jsonl(huge), huge + ":1: invalid JSON ([json.exception.out_of_range.406] number overflow");
  const std::string missing = write_file("missing.jsonl", "{\"prompt\":\"a\",\"response\":\"b\"}\n\n{\"prompt\":\"a\"}\n");
  EXPECT_XG_ERROR(read_sft_jsonl(missing), missing + ":3: missing field \"response\" (expected a string)");
  const std::string num = write_file("num.jsonl", "{\"prompt\":1,\"chosen\":\"c\",\"rejected\":\"r\"}\n");
  EXPECT_XG_ERROR(read_dpo_jsonl(num), num + ":1: field \"prompt\" must be a string, got number");
  const std::string arr = write_file("arr.jsonl", "[1, 2]\n");
  EXPECT_XG_ERROR(read_sft_jsonl(arr), arr + ":1: expected a JSON object, got array");
  const std::string empty = write_file("empty.jsonl", "\n  \n");
  EXPECT_XG_ERROR(read_sft_jsonl(empty), empty + ": no rows (the file is empty)");
  EXPECT_XG_ERROR(read_sft_jsonl(empty + ".missing"), ".missing: cannot open file");
  const std::string ans = write_file("ans.jsonl", "{\"prompt\":\"p\",\"answers\":[\"a\"]}\n{\"prompt\":\"p\",\"answers\":[\"a\",2]}\n");
  EXPECT_XG_ERROR(read_grpo_jsonl(ans), ans + ":2: answers[1] must be a string, got number");
  const std::string noans = write_file("noans.jsonl", "{\"prompt\":\"p\",\"answers\":\"a\"}\n");
  EXPECT_XG_ERROR(read_grpo_jsonl(noans), noans + ":1: field \"answers\" must be a non-empty list of strings, got string");
}

TEST(FinetuneDataset, CollateSftPadsAndMasksThePrompt) {
  ByteTokenizer tok;
  EXPECT_EQ(encode_prompt(tok, "ab"), (std::vector<int64_t>{BOS, 'a', 'b', '\n'}));
  SftBatch b = collate_sft(tok, {{"ab", "cd"}, {"x", "y"}}, 64);
  EXPECT_EQ(b.input_ids.shape(), (xg::Shape{2, 7}));
  EXPECT_EQ(ints(b.input_ids), (std::vector<int64_t>{BOS, 'a', 'b', '\n', 'c', 'd', EOS,  //
                                                     BOS, 'x', '\n', 'y', EOS, P, P}));
  EXPECT_EQ(ints(b.labels), (std::vector<int64_t>{M, M, M, M, 'c', 'd', EOS,  //
                                                  M, M, M, 'y', EOS, M, M}));
  EXPECT_EQ(ints(b.prompt_lengths), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(ints(b.attention_mask), (std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0}));
  // The loss's own masking from prompt_lengths and the mask selects exactly our labels.
  const xg::Tensor from_loss = xg::losses::sft_labels(b.input_ids, b.prompt_lengths, b.attention_mask);
  EXPECT_EQ(ints(from_loss), ints(xg::losses::shift_labels(b.labels)));
}

TEST(FinetuneDataset, CollateTruncatesTheResponseEndThenThePrompt) {
  ByteTokenizer tok;
  // [BOS a b \n] + [x y z EOS] cut to 6: the response loses z and EOS.
  SftBatch a = collate_sft(tok, {{"ab", "xyz"}}, 6);
  EXPECT_EQ(ints(a.input_ids), (std::vector<int64_t>{BOS, 'a', 'b', '\n', 'x', 'y'}));
  EXPECT_EQ(ints(a.prompt_lengths), (std::vector<int64_t>{4}));
  // A prompt longer than max_len keeps its first max_len - 1 tokens and one response token.
  SftBatch b = collate_sft(tok, {{"abcdef", "xyz"}}, 5);
  EXPECT_EQ(ints(b.input_ids), (std::vector<int64_t>{BOS, 'a', 'b', 'c', 'x'}));
  EXPECT_EQ(ints(b.labels), (std::vector<int64_t>{M, M, M, M, 'x'}));
  EXPECT_EQ(ints(b.prompt_lengths), (std::vector<int64_t>{4}));
  EXPECT_XG_ERROR(collate_sft(tok, {{"a", "b"}}, 1), "collate_sft: max_len 1 must be >= 2");
  EXPECT_XG_ERROR(collate_sft(tok, {}, 8), "collate_sft: no rows to collate");
}

TEST(FinetuneDataset, CollateDpoStacksChosenThenRejected) {
  ByteTokenizer tok;
  SftBatch b = collate_dpo(tok, {{"p", "good", "bad"}, {"q", "yes", "no"}}, 64);
  EXPECT_EQ(b.input_ids.shape(), (xg::Shape{4, 8}));  // [BOS p \n g o o d EOS]
  EXPECT_EQ(ints(b.prompt_lengths), (std::vector<int64_t>{3, 3, 3, 3}));
  const auto ids = ints(b.input_ids), labels = ints(b.labels);
  auto row = [&](const std::vector<int64_t>& v, int r) {
    return std::vector<int64_t>(v.begin() + r * 8, v.begin() + r * 8 + 8);
  };
  EXPECT_EQ(row(ids, 0), (std::vector<int64_t>{BOS, 'p', '\n', 'g', 'o', 'o', 'd', EOS}));
  EXPECT_EQ(row(ids, 1), (std::vector<int64_t>{BOS, 'q', '\n', 'y', 'e', 's', EOS, P}));
  EXPECT_EQ(row(ids, 2), (std::vector<int64_t>{BOS, 'p', '\n', 'b', 'a', 'd', EOS, P}));
  EXPECT_EQ(row(labels, 3), (std::vector<int64_t>{M, M, M, 'n', 'o', EOS, M, M}));
}

TEST(FinetuneDataset, ChatTemplateFormatsAnSftRowAndTrainsOnTheAssistantTurn) {
  // Qwen3's tokenizer and template: [system] user = prompt, assistant = response; the prompt
  // part ends with the generation prompt, the completion holds the empty think block Qwen3
  // renders for a final reply, the reply and <|im_end|>. Ids by the vocabulary's spellings.
  const std::string folder = std::string(XGRAD_FIXTURE_DIR) + "/tokenizers/qwen3";
  const auto tok = xg::text::load_tokenizer(folder);
  const std::unique_ptr<xg::text::ChatTemplate> chat = chat_template_for(xg::io::ModelSource::open(folder), "auto");
  ASSERT_TRUE(chat != nullptr);
  auto id = [&](const std::string& token) {
    const int64_t i = tok->token_to_id(token);
    EXPECT_GE(i, 0) << token;
    return i;
  };
  const int64_t start = id("<|im_start|>"), end = id("<|im_end|>"), nl = id("\xC4\x8A"), nlnl = id("\xC4\x8A\xC4\x8A");
  const std::vector<int64_t> prompt = {start, id("user"), nl, id("Hi"), end, nl, start, id("assistant"), nl};
  const std::vector<int64_t> completion = {id("<think>"), nlnl, id("</think>"), nlnl, id("Hello"), end, nl};
  const RowFormat format{tok.get(), chat.get(), ""};
  EXPECT_EQ(format.prompt_ids("Hi"), prompt);
  const SftBatch b = collate_sft(format, {{"Hi", "Hello"}}, 64);
  std::vector<int64_t> all = prompt, labels(prompt.size(), M);
  all.insert(all.end(), completion.begin(), completion.end());
  labels.insert(labels.end(), completion.begin(), completion.end());
  EXPECT_EQ(ints(b.input_ids), all);
  EXPECT_EQ(ints(b.labels), labels);
  EXPECT_EQ(ints(b.prompt_lengths), (std::vector<int64_t>{static_cast<int64_t>(prompt.size())}));

  // A system message goes first.
  const RowFormat with_system{tok.get(), chat.get(), "Be brief."};
  const std::vector<int64_t> sys = with_system.prompt_ids("Hi");
  const std::vector<int64_t> head = {start, id("system"), nl, id("Be"), id("\xC4\xA0" "brief"), id("."), end, nl};
  ASSERT_GE(sys.size(), head.size());
  EXPECT_EQ(std::vector<int64_t>(sys.begin(), sys.begin() + static_cast<std::ptrdiff_t>(head.size())), head);
  EXPECT_EQ(std::vector<int64_t>(sys.begin() + static_cast<std::ptrdiff_t>(head.size()), sys.end()), prompt);

  // Without the template: the plain format in this tokenizer's ids (Qwen adds no BOS), EOS
  // from tokenizer_config.json, padding with its pad_token.
  EXPECT_TRUE(chat_template_for(xg::io::ModelSource::open(folder), "none") == nullptr);
  const SftBatch plain = collate_sft(*tok, {{"Hi", "Hello"}, {"Hi", "Hello there"}}, 64);
  const int64_t eos = tok->eos_id(), pad = tok->pad_id();
  EXPECT_EQ(eos, end);
  EXPECT_EQ(pad, id("<|endoftext|>"));
  EXPECT_EQ(ints(plain.input_ids), (std::vector<int64_t>{id("Hi"), nl, id("Hello"), eos, pad,  //
                                                         id("Hi"), nl, id("Hello"), id("\xC4\xA0there"), eos}));
  EXPECT_EQ(ints(plain.prompt_lengths), (std::vector<int64_t>{2, 2}));
  EXPECT_XG_ERROR(chat_template_for(xg::io::ModelSource::open(folder), "chatml"),
                  "--chat-template: expected auto, none or a template file (a Jinja file or a tokenizer_config.json), "
                  "got 'chatml' (no such file)");
  // A folder without tokenizer_config.json has no template.
  EXPECT_TRUE(chat_template_for(xg::io::ModelSource::open(std::string(XGRAD_FIXTURE_DIR) + "/hf/mistral"), "auto") == nullptr);
}

namespace trl_formats_test {

using nlohmann::ordered_json;

// A small ChatML-like template: <role>content</s> per message, "<assistant>" as the generation prompt.
const char* kTemplate =
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>\n{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}";

// The bytes of `s` as ids.
std::vector<int64_t> bytes(const std::string& s) { return std::vector<int64_t>(s.begin(), s.end()); }

// What a row's tokens train on, as text (byte tokenizer): the trained bytes, untrained ones as '.'.
std::string trained(const RowFormat& f, const SftExample& row) {
  const auto [ids, train] = f.tokens(row);
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i)
    out += !train[i] ? '.' : ids[i] < 256 ? static_cast<char>(ids[i]) : ids[i] == BOS ? '^' : '$';
  return out;
}

TEST(FinetuneDatasetFormats, EveryTrlFormatIsReadAndNamedFromTheFirstRow) {
  std::string format;
  auto sft = read_sft_jsonl(write_file("messages.jsonl",
      R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]})" "\n"),
      nullptr, &format);
  EXPECT_EQ(format, "{messages}");
  ASSERT_EQ(sft.size(), 1u);
  EXPECT_EQ(sft[0].style, RowStyle::Conversation);
  EXPECT_EQ(sft[0].messages.size(), 3u);
  EXPECT_EQ(sft[0].prompt_messages, -1);
  sft = read_sft_jsonl(write_file("text.jsonl", "{\"text\": \"The sky is blue.\"}\n"), nullptr, &format);
  EXPECT_EQ(format, "{text}");
  EXPECT_EQ(sft[0].style, RowStyle::Raw);
  EXPECT_EQ(sft[0].response, "The sky is blue.");
  sft = read_sft_jsonl(write_file("pc.jsonl", "{\"prompt\": \"The sky is\", \"completion\": \" blue.\"}\n"), nullptr, &format);
  EXPECT_EQ(format, "{prompt, completion}");
  EXPECT_EQ(sft[0].prompt, "The sky is");
  EXPECT_EQ(sft[0].response, " blue.");
  sft = read_sft_jsonl(write_file("cpc.jsonl",
      R"({"prompt": [{"role": "user", "content": "sky?"}], "completion": [{"role": "assistant", "content": "blue"}]})" "\n"),
      nullptr, &format);
  EXPECT_EQ(format, "conversational {prompt, completion}");
  EXPECT_EQ(sft[0].prompt_messages, 1);
  EXPECT_EQ(sft[0].messages.size(), 2u);
  sft = read_sft_jsonl(write_file("pr.jsonl", "{\"prompt\": \"p\", \"response\": \"r\"}\n"), nullptr, &format);
  EXPECT_EQ(format, "{prompt, response}");
  EXPECT_EQ(sft[0].style, RowStyle::Plain);

  auto dpo = read_dpo_jsonl(write_file("pref.jsonl", "{\"prompt\": \"p\", \"chosen\": \"c\", \"rejected\": \"r\"}\n"), nullptr, &format);
  EXPECT_EQ(format, "{prompt, chosen, rejected}");
  EXPECT_EQ(dpo[0].style, RowStyle::Plain);
  // TRL's extract_prompt: the common start, its last space left to the answers.
  dpo = read_dpo_jsonl(write_file("implicit.jsonl", "{\"chosen\": \"The sky is blue.\", \"rejected\": \"The sky is green.\"}\n"),
                       nullptr, &format);
  EXPECT_EQ(format, "{chosen, rejected} (implicit prompt)");
  EXPECT_EQ(dpo[0].style, RowStyle::Raw);
  EXPECT_EQ(dpo[0].prompt, "The sky is");
  EXPECT_EQ(dpo[0].chosen, " blue.");
  EXPECT_EQ(dpo[0].rejected, " green.");
  dpo = read_dpo_jsonl(write_file("cimplicit.jsonl",
      R"({"chosen": [{"role": "user", "content": "sky?"}, {"role": "assistant", "content": "blue"}],)"
      R"( "rejected": [{"role": "user", "content": "sky?"}, {"role": "assistant", "content": "green"}]})" "\n"),
      nullptr, &format);
  EXPECT_EQ(format, "conversational {chosen, rejected} (implicit prompt)");
  EXPECT_EQ(dpo[0].prompt_messages.size(), 1u);
  EXPECT_EQ(dpo[0].chosen_messages[0]["content"], "blue");
  EXPECT_EQ(dpo[0].rejected_messages[0]["content"], "green");
  dpo = read_dpo_jsonl(write_file("cexplicit.jsonl",
      R"({"prompt": [{"role": "user", "content": "sky?"}], "chosen": [{"role": "assistant", "content": "blue"}],)"
      R"( "rejected": [{"role": "assistant", "content": "green"}]})" "\n"),
      nullptr, &format);
  EXPECT_EQ(format, "conversational {prompt, chosen, rejected}");
  const SftExample c = chosen_row(dpo[0]), r = rejected_row(dpo[0]);
  EXPECT_EQ(c.prompt_messages, 1);
  EXPECT_EQ(c.messages[1]["content"], "blue");
  EXPECT_EQ(r.messages[1]["content"], "green");
}

TEST(FinetuneDatasetFormats, ARowThatFitsNoFormatOrAnotherIsRefusedByFileAndLine) {
  const std::string u = R"({"role": "user", "content": "u"})", a = R"({"role": "assistant", "content": "a"})";
  const std::string ok = "{\"messages\": [" + u + ", " + a + "]}\n";
  auto refused = [&](const std::string& name, const std::string& second_row, const std::string& message) {
    const std::string path = write_file(name, ok + second_row + "\n");
    EXPECT_XG_ERROR(read_sft_jsonl(path), path + ":2: " + message);
  };
  refused("other.jsonl", "{\"text\": \"t\"}", "a {text} row, but the file's first row (line 1) is {messages}");
  refused("order.jsonl", "{\"messages\": [" + a + ", " + u + "]}",
          "messages[0] (assistant) is out of order: an assistant message must follow a user or tool message");
  refused("users.jsonl", "{\"messages\": [" + u + ", " + u + ", " + a + "]}",
          "messages[1] (user) is out of order: two user messages in a row");
  refused("system.jsonl", "{\"messages\": [" + u + ", {\"role\": \"system\", \"content\": \"s\"}, " + a + "]}",
          "messages[1] (system) is out of order: a system message may only come first");
  refused("nocontent.jsonl", "{\"messages\": [" + u + ", {\"role\": \"assistant\"}]}", "messages[1] (assistant) has no \"content\"");
  refused("numcontent.jsonl", "{\"messages\": [" + u + ", {\"role\": \"assistant\", \"content\": 3}]}",
          "messages[1] (assistant): \"content\" must be a string, got number");
  refused("empty.jsonl", "{\"messages\": []}", "field \"messages\" is an empty conversation");
  refused("role.jsonl", "{\"messages\": [{\"role\": \"human\", \"content\": \"u\"}, " + a + "]}",
          "messages[0] has role \"human\" (expected system, user, assistant or tool)");
  refused("noassistant.jsonl", "{\"messages\": [" + u + "]}", "the conversation has no assistant message to train on");
  refused("notalist.jsonl", "{\"messages\": \"hi\"}", "field \"messages\" must be a list of messages, got string");
  const std::string none = write_file("none.jsonl", "{\"question\": \"q\"}\n");
  EXPECT_XG_ERROR(read_sft_jsonl(none), none + ":1: the row fits none of the SFT formats ({messages}, {text}, "
                                               "conversational {prompt, completion}, {prompt, completion}, {prompt, response})");
  const std::string pc = write_file("pcorder.jsonl",
      "{\"prompt\": [" + a + "], \"completion\": [" + a + "]}\n");
  EXPECT_XG_ERROR(read_sft_jsonl(pc), pc + ":1: prompt[0] (assistant): a prompt must end with a user or tool message");
  const std::string same = write_file("same.jsonl", "{\"chosen\": \"abc\", \"rejected\": \"abc\"}\n");
  EXPECT_XG_ERROR(read_dpo_jsonl(same), same + ":1: \"chosen\" and \"rejected\" must differ after their common start");
  const std::string share = write_file("share.jsonl", "{\"chosen\": [" + u + ", " + a + "], \"rejected\": [" + a + "]}\n");
  EXPECT_XG_ERROR(read_dpo_jsonl(share), share + ":1: \"chosen\" and \"rejected\" share no first message");
}

TEST(FinetuneDatasetFormats, EachFormatTrainsOnWhatTrlTrainsOn) {
  const ByteTokenizer tok;
  const xg::text::ChatTemplate chat(kTemplate);
  RowFormat f{&tok, &chat, ""};
  // text: every token, BOS and EOS included.
  SftExample text("", "sky");
  text.style = RowStyle::Raw;
  EXPECT_EQ(trained(f, text), "^sky$");
  // prompt/completion strings: the completion and EOS, the text as it is (no newline between).
  SftExample pc("The sky is", " blue");
  pc.style = RowStyle::Raw;
  EXPECT_EQ(trained(f, pc), "........... blue$");
  EXPECT_EQ(f.tokens(pc).first.front(), BOS);
  // {messages}: each assistant's content and end of turn.
  SftExample m;
  m.style = RowStyle::Conversation;
  m.messages = ordered_json::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "q1"},
      {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}])");
  EXPECT_EQ(chat.render(m.messages, false), "<system>S</s>\n<user>q1</s>\n<assistant>a1</s>\n<user>q2</s>\n<assistant>a2</s>\n");
  EXPECT_EQ(trained(f, m), std::string(38, '.') + "a1</s>\n" + std::string(24, '.') + "a2</s>\n");
  // Conversational prompt/completion: everything after the prompt's generation prompt.
  SftExample cpc = m;
  cpc.prompt_messages = 4;
  EXPECT_EQ(trained(f, cpc), std::string(69, '.') + "a2</s>\n");
  // --completion-only false: everything.
  RowFormat all = f;
  all.completion_only = false;
  EXPECT_EQ(trained(all, m), chat.render(m.messages, false));
  EXPECT_EQ(trained(all, pc), "^The sky is blue$");
  // Collation: the labels are the trained ids; the leading untrained ids are the prompt length.
  const SftBatch b = collate_sft(f, {m}, 200);
  const auto ids = ints(b.input_ids), labels = ints(b.labels);
  const auto [want_ids, want_train] = f.tokens(m);
  ASSERT_EQ(ids, want_ids);
  for (std::size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(labels[i], want_train[i] ? ids[i] : M) << i;
  EXPECT_EQ(ints(b.prompt_lengths), (std::vector<int64_t>{38}));
  // Truncation keeps the first trained token: the untrained start is cut to max_len - 1.
  const SftBatch cut = collate_sft(f, {m}, 10);
  EXPECT_EQ(ints(cut.labels), (std::vector<int64_t>{M, M, M, M, M, M, M, M, M, 'a'}));
  // A conversation needs a template.
  const RowFormat plain{&tok, nullptr, ""};
  EXPECT_XG_ERROR(plain.tokens(m), "conversational rows are rendered by a chat template, and there is none");
}

TEST(FinetuneDatasetFormats, DpoRowsOfEveryFormatCollateChosenThenRejected) {
  const ByteTokenizer tok;
  const xg::text::ChatTemplate chat(kTemplate);
  const RowFormat f{&tok, &chat, ""};
  const auto dpo = read_dpo_jsonl(write_file("cimplicit.jsonl",
      R"({"chosen": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "yes"}],)"
      R"( "rejected": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "no"}]})" "\n"));
  const SftBatch b = collate_dpo(f, dpo, 64);
  const auto ids = ints(b.input_ids), labels = ints(b.labels);
  const int64_t T = b.input_ids.size(1);
  const std::string prompt = "<user>q</s>\n<assistant>";
  auto row = [&](const std::vector<int64_t>& v, int r) { return std::vector<int64_t>(v.begin() + r * T, v.begin() + r * T + T); };
  std::vector<int64_t> chosen = bytes(prompt + "yes</s>\n"), rejected = bytes(prompt + "no</s>\n");
  rejected.resize(static_cast<std::size_t>(T), P);
  EXPECT_EQ(row(ids, 0), chosen);
  EXPECT_EQ(row(ids, 1), rejected);
  std::vector<int64_t> want(prompt.size(), M);
  for (char ch : std::string("no</s>\n")) want.push_back(ch);
  want.resize(static_cast<std::size_t>(T), M);
  EXPECT_EQ(row(labels, 1), want);
}

}  // namespace trl_formats_test

namespace chat_template_file_test {

using nlohmann::ordered_json;

TEST(FinetuneDatasetFormats, ChatTemplateFromAFileTakesTheBasesSpecialTokens) {
  // A Jinja file, with the special tokens of the base's tokenizer_config.json (Qwen3's: eos <|im_end|>).
  const std::string folder = std::string(XGRAD_FIXTURE_DIR) + "/tokenizers/qwen3";
  const auto source = xg::io::ModelSource::open(folder);
  const auto tok = xg::text::load_tokenizer(folder);
  const std::string jinja = write_file("t.jinja", "{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}");
  auto t = chat_template_for(source, jinja, tok.get());
  ASSERT_TRUE(t != nullptr);
  EXPECT_EQ(t->render(xg::text::messages_json({{"user", "hi"}}), false), "hi<|im_end|>");
  // A tokenizer_config.json: its own tokens, and a named template of its list by FILE:NAME.
  const std::string config = write_file("tokenizer_config.json",
      R"({"bos_token": "<B>", "chat_template": [{"name": "default", "template": "D"},)"
      R"( {"name": "tool_use", "template": "{{ bos_token }}T{{ eos_token }}"}]})");
  EXPECT_EQ(chat_template_for(source, config, tok.get())->render(ordered_json::array(), false), "D");
  EXPECT_EQ(chat_template_for(source, config + ":tool_use", tok.get())->render(ordered_json::array(), false), "<B>T<|im_end|>");
  EXPECT_XG_ERROR(chat_template_for(source, config + ":rag", tok.get()), "no chat template named 'rag' (it has default, tool_use)");
  const std::string bad = write_file("bad.jinja", "{% for %}");
  EXPECT_XG_ERROR(chat_template_for(source, bad, tok.get()), bad + ": chat template line 1");
}

}  // namespace chat_template_file_test

namespace grpo_conversation_test {

using nlohmann::ordered_json;

TEST(FinetuneDatasetFormats, GrpoPromptsMayBeConversations) {
  std::string format;
  const auto rows = read_grpo_jsonl(write_file("grpo.jsonl",
      R"({"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}], "answers": ["2"]})" "\n"),
      nullptr, &format);
  EXPECT_EQ(format, "conversational {prompt, answers}");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].answers, (std::vector<std::string>{"2"}));
  const ByteTokenizer tok;
  const xg::text::ChatTemplate chat(
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}</s>\n{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}");
  const RowFormat f{&tok, &chat, ""};
  const std::string want = "<system>Be brief.</s>\n<user>1+1?</s>\n<assistant>";
  EXPECT_EQ(f.prompt_ids(rows[0]), std::vector<int64_t>(want.begin(), want.end()));
  EXPECT_XG_ERROR(RowFormat{}.prompt_ids(rows[0]), "conversational rows are rendered by a chat template");
  const std::string bad = write_file("bad.jsonl", R"({"prompt": [{"role": "assistant", "content": "2"}], "answers": ["2"]})" "\n");
  EXPECT_XG_ERROR(read_grpo_jsonl(bad), bad + ":1: prompt[0] (assistant) is out of order");
}

}  // namespace grpo_conversation_test

namespace one_line_role_test {

// An unknown role is quoted in the error as JSON (escaped) and cut: a role holding a newline or a
// megabyte must not make xg-finetune's one-line error two lines or a megabyte long.
TEST(FinetuneDatasetFormats, AnUnknownRoleIsQuotedOnOneLineAndCut) {
  const std::string row = "{\"messages\": [{\"role\": \"hu\\nman" + std::string(100000, 'x') +
                          "\", \"content\": \"u\"}, {\"role\": \"assistant\", \"content\": \"a\"}]}\n";
  const std::string path = write_file("role.jsonl", row);
  try {
    read_sft_jsonl(path);
    FAIL() << "the row was accepted";
  } catch (const xg::Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m.substr(0, 200);
    EXPECT_LT(m.size(), path.size() + 200);
    EXPECT_NE(m.find(path + ":1: messages[0] has role \"hu\\nmanxxx"), std::string::npos) << m.substr(0, 200);
    EXPECT_NE(m.find("(expected system, user, assistant or tool)"), std::string::npos) << m.substr(0, 200);
  }
}

}  // namespace one_line_role_test

namespace prompts_reader_test {

// xg-generate's --prompts: text prompts and conversations may mix, blank lines are skipped,
// each keeps its file:line; a conversation must end with the turn the model answers.
TEST(FinetuneDatasetFormats, PromptFilesMixTextAndConversations) {
  const std::string path = write_file("prompts.jsonl",
      "{\"prompt\": \"Say yes.\"}\n\n"
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}, {"role": "user", "content": "again"}]})" "\n"
      R"({"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1+1?"}]})" "\n");
  const std::vector<PromptRow> rows = read_prompts_jsonl(path);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].text, "Say yes.");
  EXPECT_TRUE(rows[0].messages.is_null());
  EXPECT_EQ(rows[0].where, path + ":1");
  EXPECT_EQ(rows[1].messages.size(), 3u);
  EXPECT_EQ(rows[1].messages[2]["content"], "again");
  EXPECT_EQ(rows[1].where, path + ":3");
  EXPECT_EQ(rows[2].messages[0]["role"], "system");
  const std::string ends = write_file("ends.jsonl", R"({"prompt": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]})" "\n");
  EXPECT_XG_ERROR(read_prompts_jsonl(ends), ends + ":1: prompt[1] (assistant): a prompt must end with a user or tool message");
  const std::string none = write_file("none.jsonl", "\n\n");
  EXPECT_XG_ERROR(read_prompts_jsonl(none), none + ": holds no prompt");
  const std::string other = write_file("other.jsonl", "{\"text\": \"a\"}\n");
  EXPECT_XG_ERROR(read_prompts_jsonl(other), other + ":1: expected a \"prompt\" (a string or a list of messages) or \"messages\"");
}

}  // namespace prompts_reader_test
