// The Jinja corpus (tests/fixtures/jinja_corpus/*.txt): one template per construct of
// Jinja2's language, rendered by Jinja2 3.1.2 as transformers sets it up
// (tests/fixtures/gen_jinja_corpus.py wrote tests/fixtures/jinja_corpus.json). xgrad renders
// each one byte for byte the same, or raises where Jinja2 raised (naming the same template
// line), or refuses by name what the corpus marks as refused.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "autograd/error.hpp"
#include "text/jinja.hpp"

namespace jinja_corpus_test {

using nlohmann::ordered_json;
namespace jinja = xg::text::jinja;

const ordered_json& corpus() {
  static const ordered_json f = [] {
    std::ifstream in(std::string(XGRAD_FIXTURE_DIR) + "/jinja_corpus.json");
    return ordered_json::parse(in);
  }();
  return f;
}

struct Outcome {
  bool raised = false;
  std::string text;  // the rendering, or the error's message
};

Outcome render(const ordered_json& c) {
  jinja::TemplateOptions opts;
  opts.name = "t";
  jinja::Dict context;
  for (const auto& [k, v] : c["vars"].items()) context.set(k, jinja::from_json(v));
  try {
    return {false, jinja::Template(c["template"].get<std::string>(), opts).render(context)};
  } catch (const xg::Error& e) {
    return {true, e.what()};
  }
}

TEST(TextJinjaCorpus, EveryTemplateRendersAsJinja2Does) {
  const ordered_json& cases = corpus()["cases"];
  ASSERT_GE(cases.size(), 150u);
  size_t rendered = 0, raised = 0, refused = 0;
  for (const auto& c : cases) {
    const std::string name = c["name"];
    SCOPED_TRACE(name + " (" + c["file"].get<std::string>() + "): " + c["template"].get<std::string>());
    const Outcome got = render(c);
    if (c.contains("refused")) {
      // xgrad refuses the construct by name, with the template line.
      EXPECT_TRUE(got.raised) << "rendered " << got.text;
      EXPECT_NE(got.text.find(c["refused"].get<std::string>()), std::string::npos) << got.text;
      EXPECT_EQ(got.text.rfind("t line ", 0), 0u) << got.text;
      ++refused;
    } else if (c.contains("raises")) {
      EXPECT_TRUE(got.raised) << "Jinja2 raised " << c["raises"] << ", xgrad rendered " << got.text;
      if (got.raised && c["line"].is_number()) {
        EXPECT_EQ(got.text.rfind("t line " + std::to_string(c["line"].get<int>()) + ":", 0), 0u)
            << got.text << " (Jinja2: " << c["raises"] << ")";
      }
      ++raised;
    } else {
      EXPECT_FALSE(got.raised) << got.text;
      EXPECT_EQ(got.text, c["output"].get<std::string>());
      ++rendered;
    }
  }
  EXPECT_EQ(rendered + raised + refused, cases.size());
}

TEST(TextJinjaCorpus, NamesAreUniqueAndEveryFileIsUsed) {
  std::set<std::string> names, files;
  for (const auto& c : corpus()["cases"]) {
    EXPECT_TRUE(names.insert(c["name"].get<std::string>()).second) << c["name"];
    files.insert(c["file"].get<std::string>());
  }
  EXPECT_EQ(files, (std::set<std::string>{"filters.txt", "operators.txt", "printing.txt", "statements.txt",
                                          "tests_methods.txt", "whitespace.txt"}));
}

}  // namespace jinja_corpus_test
