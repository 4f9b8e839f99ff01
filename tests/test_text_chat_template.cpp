// Chat templates (text/chat_template.*) and the Jinja subset under them (text/jinja*):
// every rendering of tests/fixtures/chat_templates.json (transformers.js's
// apply_chat_template, written by gen_chat_templates.mjs) byte for byte, the errors, and
// the interpreter's pieces against Jinja2's documented behaviour.
#include <gtest/gtest.h>

#include <ctime>
#include <fstream>
#include <map>

#include "autograd/error.hpp"
#include "cli_run.hpp"
#include "text/chat_template.hpp"
#include "text/jinja.hpp"

namespace chat_template_test {

using nlohmann::ordered_json;
using xg::text::ChatMessage;
using xg::text::ChatTemplate;
using Messages = std::vector<ChatMessage>;

const ordered_json& fixture() {
  static const ordered_json f = [] {
    std::ifstream in(std::string(XGRAD_FIXTURE_DIR) + "/chat_templates.json");
    return ordered_json::parse(in);
  }();
  return f;
}

ChatTemplate fixture_template(const std::string& name) {
  return ChatTemplate::from_tokenizer_config(fixture()["templates"][name]["tokenizer_config"], name);
}

// Renders `source` with Jinja2's defaults as transformers sets them (trim_blocks, lstrip_blocks).
std::string jinja(const std::string& source, const ordered_json& vars = ordered_json::object(),
                  xg::text::jinja::TemplateOptions opts = {}) {
  opts.name = "t";
  xg::text::jinja::Dict context;
  for (const auto& [k, v] : vars.items()) context.set(k, xg::text::jinja::from_json(v));
  return xg::text::jinja::Template(source, opts).render(context);
}

// The message of the xg::Error that fn throws ("" when it throws none).
template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const xg::Error& e) {
    return e.what();
  }
  return "";
}

TEST(TextChatTemplate, EveryFixtureRenderingMatchesTransformersJs) {
  const ordered_json& f = fixture();
  std::map<std::string, ordered_json> conversations;
  for (const auto& c : f["conversations"]) conversations[c["name"]] = c;
  ASSERT_GE(conversations.size(), 20u);
  ASSERT_GE(f["templates"].size(), 6u);
  size_t checked = 0;
  for (const auto& r : f["renderings"]) {
    const std::string t = r["template"], name = r["conversation"];
    SCOPED_TRACE(t + " / " + name);
    const ordered_json& c = conversations.at(name);
    const ChatTemplate tpl = fixture_template(t);
    const ordered_json extra = c.contains("extra") ? c["extra"] : ordered_json::object();
    const bool agp = c["add_generation_prompt"];
    if (r.contains("error")) {
      std::string err = error_of([&] { tpl.render(c["messages"], agp, extra); });
      EXPECT_NE(err.find("chat template line 1: " + r["error"].get<std::string>()), std::string::npos) << err;
    } else {
      EXPECT_EQ(tpl.render(c["messages"], agp, extra), r["text"].get<std::string>());
    }
    ++checked;
  }
  EXPECT_EQ(checked, conversations.size() * f["templates"].size());
}

TEST(TextChatTemplate, ReadsTokenizerConfigFileOrFolder) {
  auto dir = xg::test::fresh_test_dir();
  ordered_json config = fixture()["templates"]["llama2_chat"]["tokenizer_config"];
  // AddedToken objects, as older configs write the special tokens.
  config["bos_token"] = {{"__type", "AddedToken"}, {"content", "<s>"}, {"lstrip", false}};
  std::ofstream(dir / "tokenizer_config.json") << config.dump(2);
  const std::vector<ChatMessage> msgs = {{"user", "Hi"}};
  const std::string want = "<s>[INST] Hi [/INST]";
  EXPECT_EQ(ChatTemplate::from_tokenizer_config(dir.string()).render(msgs, true), want);
  EXPECT_EQ(ChatTemplate::from_tokenizer_config((dir / "tokenizer_config.json").string()).render(msgs, true), want);
  EXPECT_EQ(ChatTemplate::from_tokenizer_config(dir.string()).special_tokens().find("eos_token")->str(), "</s>");
}

TEST(TextChatTemplate, NamedTemplatesPickDefault) {
  ordered_json config = {{"chat_template",
                          {{{"name", "tool_use"}, {"template", "tools"}}, {{"name", "default"}, {"template", "plain"}}}}};
  EXPECT_TRUE(ChatTemplate::has_chat_template(config));
  EXPECT_EQ(ChatTemplate::from_tokenizer_config(config, "cfg").render(ordered_json::array(), false), "plain");
  EXPECT_EQ(ChatTemplate::from_tokenizer_config(config, "cfg", "tool_use").render(ordered_json::array(), false), "tools");
  EXPECT_EQ(error_of([&] { ChatTemplate::from_tokenizer_config(config, "cfg", "rag"); }),
            "cfg: no chat template named 'rag' (it has tool_use, default)");
  EXPECT_FALSE(ChatTemplate::has_chat_template({{"bos_token", "<s>"}}));
  EXPECT_EQ(error_of([] { ChatTemplate::from_tokenizer_config(ordered_json{{"bos_token", "<s>"}}, "cfg"); }),
            "cfg: no \"chat_template\" (the model has no chat template; use --chat-template none)");
}

TEST(TextChatTemplate, SplitsPromptFromCompletion) {
  const std::vector<ChatMessage> conv = {{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello"}};
  for (const char* name : {"llama2_chat", "llama3", "qwen2", "qwen3", "zephyr"}) {
    SCOPED_TRACE(name);
    ChatTemplate t = fixture_template(name);
    xg::text::ChatSplit s = t.render_split(conv);
    EXPECT_EQ(s.prompt, t.render_prompt({conv[0], conv[1]}));
    EXPECT_EQ(s.prompt + s.completion, t.render(conv, false));
  }
  EXPECT_EQ(fixture_template("llama2_chat").render_split(conv).completion, " Hello </s>");
  EXPECT_EQ(fixture_template("qwen3").render_split(conv).completion, "<think>\n\n</think>\n\nHello<|im_end|>\n");
  // NOTE: this Llama-3 template adds the assistant header whatever add_generation_prompt
  // says, so the completion ends with the next turn's header.
  EXPECT_EQ(fixture_template("llama3").render_split(conv).completion,
            "Hello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  ChatTemplate rewrites("{% for m in messages %}{{ m.content }}{% if loop.last %}!{% endif %}{% endfor %}");
  EXPECT_EQ(error_of([&] { rewrites.render_split({{"user", "Hi"}, {"assistant", "Yo"}}); }),
            "chat template: the conversation with the reply does not start with the prompt rendered without it "
            "(they differ from byte 2: prompt has \"!\", the whole conversation \"Yo!\")");
  EXPECT_EQ(error_of([&] { rewrites.render_split({{"user", "Hi"}}); }),
            "chat template: render_split needs messages that end with an assistant message");
}

TEST(TextChatTemplate, FollowsPythonWhereTransformersJsDiffers) {
  // Python's str.lstrip('\n') keeps the tab; transformers.js strips every whitespace.
  EXPECT_EQ(fixture_template("qwen3").render(Messages{{"user", "q"}, {"assistant", "\n\tx"}}, false),
            "<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n\tx<|im_end|>\n");
  // Python: '' != False, so an empty system message still makes the <<SYS>> block
  // (transformers.js's loose != drops it).
  EXPECT_EQ(fixture_template("llama2_chat").render(Messages{{"system", ""}, {"user", "Hi"}}, true),
            "<s>[INST] <<SYS>>\n\n<</SYS>>\n\nHi [/INST]");
  // str() of Python values: True, None, lists and dicts as Python prints them.
  EXPECT_EQ(jinja("{{ true }} {{ none }} {{ [1, 'a', none] }} {{ {'k': 1.5} }} {{ x }}", {{"x", {{"a", true}}}}),
            "True None [1, 'a', None] {'k': 1.5} {'a': True}");
}

TEST(TextChatTemplate, ContentPartsReachTheTemplate) {
  ChatTemplate t(
      "{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}"
      "{% for p in m.content if p.type == 'text' %}{{ p.text }}{% endfor %}{% endif %}|{% endfor %}");
  ordered_json msgs = ordered_json::parse(
      R"([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "image"}, {"type": "text", "text": "b"}]},
          {"role": "assistant", "content": "c"}])");
  EXPECT_EQ(t.render(msgs, false), "ab|c|");
}

TEST(TextChatTemplate, ErrorsNameTheConstructAndLine) {
  auto err = [](const std::string& src, const ordered_json& vars = ordered_json::object()) {
    return error_of([&] { jinja(src, vars); });
  };
  EXPECT_EQ(err("a\n{% include 'other.jinja' %}"), "t line 2: unsupported tag 'include'");
  EXPECT_EQ(err("{{ x }}\n\n{{ x | urlize }}"), "t line 3: unsupported filter 'urlize'");
  EXPECT_EQ(err("{% if x is prime %}{% endif %}"), "t line 1: unsupported test 'prime'");
  EXPECT_EQ(err("{% for x in range(3) %}{{ range(5)[1:] }}{% endfor %}"),
            "t line 1: unsupported construct: slicing a range (convert it with |list first)");
  EXPECT_EQ(err("{{ x(*args) }}"), "t line 1: unsupported construct: * or ** arguments");
  EXPECT_EQ(err("{{ '%s' % x }}"), "t line 1: 'x' is undefined");
  EXPECT_EQ(err("{{ '%s %s' % ('a',) }}"), "t line 1: not enough arguments for format string");
  EXPECT_EQ(err("{% if x %}\nopen"), "t line 2: missing 'endif' for the block opened on line 1");
  EXPECT_EQ(err("text {% endfor %}"), "t line 1: unexpected 'endfor' (no block of that kind is open)");
  EXPECT_EQ(err("{{ 'abc }}"), "t line 1: unterminated string literal");
  EXPECT_EQ(err("{{ x "), "t line 1: unclosed '{{'");
  EXPECT_EQ(err("{# never closed"), "t line 1: unclosed comment '{#'");
  EXPECT_EQ(err("{{ a b }}"), "t line 1: expected '}}', found 'b'");
  EXPECT_EQ(err("{{ a $ b }}"), "t line 1: unexpected character '$'");
  EXPECT_EQ(err("{% set x %}"), "t line 1: missing 'endset' for the block opened on line 1");
  // Runtime errors: raise_exception's message, Python's TypeErrors, undefined attributes.
  EXPECT_EQ(err("\n{{ raise_exception('Roles must alternate') }}"), "t line 2: Roles must alternate");
  EXPECT_EQ(err("{{ 'a' + 1 }}"), "t line 1: unsupported operand type(s) for +: 'str' and 'int'");
  EXPECT_EQ(err("{{ foo.bar }}"), "t line 1: 'foo' is undefined");
  EXPECT_EQ(err("{{ m.a.b }}", {{"m", ordered_json::object()}}), "t line 1: 'dict object' has no attribute 'a'");
  EXPECT_EQ(err("{{ 'x' + m.role }}", {{"m", ordered_json::object()}}), "t line 1: 'dict object' has no attribute 'role'");
  EXPECT_EQ(err("{% set n = 1 %}{% set n.x = 2 %}"), "t line 1: cannot assign attribute 'x' on 'n' (a int, not a namespace())");
  EXPECT_EQ(err("{{ x | tojson }}"), "t line 1: Object of type Undefined is not JSON serializable ('x' is undefined)");
  EXPECT_EQ(err("{{ 1 // 0 }}"), "t line 1: integer division or modulo by zero");
  EXPECT_EQ(err("{% for x in 3 %}{% endfor %}"), "t line 1: 'int' object is not iterable");
  EXPECT_EQ(err("{{ 'a'.encode() }}"), "t line 1: 'str object' has no attribute 'encode'");
  EXPECT_EQ(err("{{ 'a' | trim(1, 2) }}"), "t line 1: trim takes at most 1 argument(s) (2 given)");
  // Hostile templates end in an error, not a stack overflow or a runaway loop.
  EXPECT_EQ(err("{{ " + std::string(600, '(') + "1" + std::string(600, ')') + " }}"), "t line 1: nesting deeper than 500 levels");
  std::string chain = "{{ 1";
  for (int k = 0; k < 600; ++k) chain += " + 1";
  EXPECT_EQ(err(chain + " }}"), "t line 1: nesting deeper than 500 levels");
  std::string blocks;
  for (int k = 0; k < 600; ++k) blocks += "{% if true %}";
  EXPECT_EQ(err(blocks), "t line 1: nesting deeper than 500 levels");
  EXPECT_EQ(err("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}"), "t line 1: macro 'f' nested more than 100 calls deep");
  EXPECT_EQ(err("{% for i in range(10**9) %}{% endfor %}"),
            "t line 1: range too big: the sandbox blocks ranges longer than 100000");
  EXPECT_EQ(err("{{ 9223372036854775807 + 1 }}"), "t line 1: integer overflow (integers are 64-bit here)");
  EXPECT_EQ(err("{{ 99999999999999999999 }}"), "t line 1: integer literal 99999999999999999999 does not fit in 64 bits");
  EXPECT_EQ(err("{{ 'ab' * 100000000 }}"),
            "t line 1: the template would hold more than 33554432 bytes of strings, lists and output at once (its memory bound)");
  // The chat template names where it came from.
  EXPECT_EQ(error_of([] { ChatTemplate::from_tokenizer_config(ordered_json{{"chat_template", "{% autoescape true %}"}}, "cfg.json"); }),
            "cfg.json: chat template line 1: unsupported tag 'autoescape'");
  EXPECT_EQ(error_of([] { fixture_template("mistral_instruct").render(Messages{{"system", "s"}}, false); }),
            "chat template line 1: Conversation roles must alternate user/assistant/user/assistant/...");
}

TEST(TextChatTemplate, WhitespaceControl) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before it.
  const std::string src = "<ul>\n  {% for x in xs %}\n  <li>{{ x }}</li>\n  {% endfor %}\n</ul>\n";
  EXPECT_EQ(jinja(src, {{"xs", {1, 2}}}), "<ul>\n  <li>1</li>\n  <li>2</li>\n</ul>");
  xg::text::jinja::TemplateOptions raw;
  raw.trim_blocks = raw.lstrip_blocks = false;
  EXPECT_EQ(jinja(src, {{"xs", {1, 2}}}, raw), "<ul>\n  \n  <li>1</li>\n  \n  <li>2</li>\n  \n</ul>");
  EXPECT_EQ(jinja("a  \n  {%- if true -%}  \n  b  {{- ' c ' -}}  d {%- endif %}"), "ab c d");
  EXPECT_EQ(jinja("x\n    {%+ if true %}y{% endif %}"), "x\n    y");          // + keeps the indentation
  EXPECT_EQ(jinja("a {% if true %}b{% endif %}"), "a b");                       // not at a line start
  EXPECT_EQ(jinja("  {{ 'v' }}\n  {# note #}\nw"), "  v\nw");                    // lstrip is for blocks and comments
  EXPECT_EQ(jinja("line\r\nnext\n"), "line\nnext");                             // one trailing newline dropped
  EXPECT_EQ(jinja("{% if true %}\n\n{% endif %}"), "\n");                       // only one newline trimmed
}

TEST(TextChatTemplate, LoopsAndScopes) {
  EXPECT_EQ(jinja("{% for x in 'abc' %}{{ loop.index0 }}{{ loop.index }}{{ loop.revindex }}{{ x }}"
                  "{% if loop.first %}F{% endif %}{% if loop.last %}L{{ loop.length }}{% endif %} {% endfor %}"),
            "013aF 122b 231cL3 ");
  EXPECT_EQ(jinja("{% for x in xs if x is odd %}{{ x }}{{ '' if loop.last else ',' }}{% endfor %}", {{"xs", {1, 2, 3, 4, 5}}}),
            "1,3,5");
  EXPECT_EQ(jinja("{% for x in [] %}no{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(jinja("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
                  {{"d", {{"b", 1}, {"a", 2}}}}),
            "b=1;a=2;ba");
  EXPECT_EQ(jinja("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "0134");
  // {% set %} in a loop stays in the loop; a namespace carries state out; if opens no scope.
  EXPECT_EQ(jinja("{% set n = 0 %}{% set ns = namespace(n=0) %}{% for x in [1, 2] %}{% set n = n + x %}"
                  "{% set ns.n = ns.n + x %}{% endfor %}{% if true %}{% set m = 5 %}{% endif %}{{ n }} {{ ns.n }} {{ m }}"),
            "0 3 5");
  EXPECT_EQ(jinja("{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{% endfor %}{{ loop.index }}|{% endfor %}"), "121|122|");
  EXPECT_EQ(jinja("{% for m in ms[::-1] %}{{ m }}{{ loop.previtem | default('-') }}{% endfor %}", {{"ms", {1, 2, 3}}}),
            "3-2312");
  EXPECT_EQ(jinja("{% for x in undefined_list %}x{% endfor %}ok"), "ok");
}

TEST(TextChatTemplate, Filters) {
  EXPECT_EQ(jinja("{{ '  a b \n' | trim }}|{{ 'xxaxx' | trim('x') }}"), "a b|a");
  EXPECT_EQ(jinja("{{ 'héllo' | length }} {{ [1, 2] | length }} {{ {'a': 1} | length }} {{ nope | length }}"), "5 2 1 0");
  EXPECT_EQ(jinja("{{ 'aBc' | upper }} {{ 'aBc' | lower }} {{ \"they're here\" | title }} {{ 'hELLO' | capitalize }}"),
            "ABC abc They're Here Hello");
  EXPECT_EQ(jinja("{{ [1, 'a'] | join(', ') }} {{ 'abc' | join('-') }} {{ ms | join('/', attribute='r') }}",
                  {{"ms", {{{"r", "u"}}, {{"r", "a"}}}}}),
            "1, a a-b-c u/a");
  EXPECT_EQ(jinja("{{ x | default('d') }} {{ '' | default('d') }} {{ '' | default('d', true) }} {{ none | d('n', boolean=true) }}"),
            "d  d n");
  EXPECT_EQ(jinja("{% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}", {{"d", {{"z", 1}, {"y", 2}}}}), "z1y2");
  EXPECT_EQ(jinja("{{ [3, 1, 2] | first }}{{ [3, 1, 2] | last }}{{ [3, 1, 2] | sort | list }}{{ 'abc' | reverse }}"
                  "{{ [1, 2] | reverse | list }}{{ ['b', 'A', 'a'] | sort }}{{ [1, 2, 1] | unique | list }}"),
            "32[1, 2, 3]cba[2, 1]['A', 'a', 'b'][1, 2]");
  const ordered_json ms = ordered_json::parse(R"([{"role": "system", "c": 1}, {"role": "user", "c": 2}, {"role": "user", "c": 3}])");
  EXPECT_EQ(jinja("{{ ms | selectattr('role', 'equalto', 'user') | map(attribute='c') | list }}"
                  "{{ ms | rejectattr('role', 'eq', 'user') | list | length }}{{ [0, 1, '', 'a'] | select | list }}"
                  "{{ ['a', 'B'] | map('upper') | join }}{{ ms | sort(attribute='c', reverse=true) | map(attribute='c') | join }}",
                  {{"ms", ms}}),
            "[2, 3]1[1, 'a']AB321");
  EXPECT_EQ(jinja("{{ '3' | int + 1 }} {{ 'x' | int }} {{ '2.5' | float }} {{ -3 | abs }} {{ 'aaa' | replace('a', 'b', 2) }}"),
            "4 0 2.5 3 bba");
  EXPECT_EQ(jinja("{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(first=true) }}"), "a\n  b\n\n  c|    a\n    b");
  EXPECT_EQ(jinja("{{ 5 | string ~ 'x' }}{% filter upper %}up {{ 'here' }}{% endfilter %}"), "5xUP HERE");
}

TEST(TextChatTemplate, ToJsonAsTransformersCallsIt) {
  const ordered_json v = ordered_json::parse(R"({"b": [1, 2.5, "é\"\n", null, true], "a": {}, "c": []})");
  EXPECT_EQ(jinja("{{ v | tojson }}", {{"v", v}}), R"({"b": [1, 2.5, "é\"\n", null, true], "a": {}, "c": []})");
  EXPECT_EQ(jinja("{{ v | tojson(indent=2) }}", {{"v", v}}),
            "{\n  \"b\": [\n    1,\n    2.5,\n    \"é\\\"\\n\",\n    null,\n    true\n  ],\n  \"a\": {},\n  \"c\": []\n}");
  EXPECT_EQ(jinja("{{ v | tojson(sort_keys=true, separators=(',', ':')) }}", {{"v", v}}),
            R"({"a":{},"b":[1,2.5,"é\"\n",null,true],"c":[]})");
  EXPECT_EQ(jinja("{{ '😀é' | tojson(ensure_ascii=true) }}"), R"("\ud83d\ude00\u00e9")");
  EXPECT_EQ(jinja("{{ {'x': 1e-7, 'y': 1e16, 'z': 0.1 + 0.2, 'w': 3.0} | tojson }}"),
            R"({"x": 1e-07, "y": 1e+16, "z": 0.30000000000000004, "w": 3.0})");
}

TEST(TextChatTemplate, TestsAndOperators) {
  const ordered_json vars = {{"s", "x"}, {"n", nullptr}, {"d", {{"k", 1}}}, {"l", {1}}, {"f", false}};
  EXPECT_EQ(jinja("{{ s is string }}{{ n is none }}{{ d is mapping }}{{ l is iterable }}{{ s is iterable }}"
                  "{{ 3 is number }}{{ f is false }}{{ f is true }}{{ q is defined }}{{ q is not defined }}"
                  "{{ d.k is defined }}{{ d.z is defined }}{{ 6 is divisibleby(3) }}{{ 'a' is in ['a'] }}",
                  vars),
            "TrueTrueTrueTrueTrueTrueTrueFalseFalseTrueTrueFalseTrueTrue");
  EXPECT_EQ(jinja("{{ 'b' in 'abc' }}{{ 'k' in d }}{{ 2 not in l }}{{ 'x' in q }}{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}"
                  "{{ [1, 2] == [1, 2] }}{{ 1 == 1.0 }}{{ true == 1 }}{{ 'a' < 'b' }}",
                  vars),
            "TrueTrueTrueFalseTrueFalseTrueTrueTrueTrue");
  EXPECT_EQ(jinja("{{ '' or 'x' }}{{ 0 and 1 }}{{ not s }}{{ 'y' if n else 'z' }}{{ 'w' if s }}|{{ 'v' if n }}|", vars),
            "x0Falsezw||");
  EXPECT_EQ(jinja("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 - 4 }} {{ 'ab' * 2 }} "
                  "{{ [1] + [2] }} {{ 1 ~ 'a' ~ none ~ q }} {{ -(1 + 1) }} {{ 2.5 * 2 }} {{ 1e20 }} {{ 0.0001 }}"),
            "3 -4 2 3.5 1024 3 abab [1, 2] 1aNone -2 5.0 1e+20 0.0001");
  // Filters bind tighter than arithmetic, as in Jinja2.
  EXPECT_EQ(jinja("{{ 'a' + ' b ' | trim + 'c' }}{{ l | length - 1 }}", vars), "abc0");
}

TEST(TextChatTemplate, StringMethodsSubscriptsAndSlices) {
  EXPECT_EQ(jinja("{{ '\n x \n'.strip() }}|{{ '\n\tx\n'.strip('\n') }}|{{ 'xxa'.lstrip('x') }}|{{ 'axx'.rstrip('x') }}|"
                  "{{ ' a  b '.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a b c'.split(' ', 1) }}{{ 'a</t>b</t>c'.split('</t>')[-1] }}"),
            "x|\tx|a|a|['a', 'b']['a', 'b', '', 'c']['a', 'b c']c");
  EXPECT_EQ(jinja("{{ 'abc'.startswith('ab') }}{{ 'abc'.startswith(('x', 'a')) }}{{ 'abc'.endswith('bc') }}"
                  "{{ 'aXa'.replace('a', 'b') }}{{ 'ab'.upper() }}{{ 'a-b'.title() }}{{ 'abcb'.find('b') }}{{ '-'.join(['a', 'b']) }}"),
            "TrueTrueTruebXbABA-B1a-b");
  EXPECT_EQ(jinja("{{ xs[0] }}{{ xs[-1] }}{{ xs[1:] }}{{ xs[:-1] }}{{ xs[::-1] }}{{ xs[::2] }}{{ 'héllo'[1:3] }}{{ 'héllo'[1] }}"
                  "{{ d['k'] }}{{ d.k }}{{ d.get('z', 'dflt') }}{{ d.keys() | list }}{{ xs[7] is defined }}{{ xs.0 }}",
                  {{"xs", {1, 2, 3}}, {"d", {{"k", "v"}}}}),
            "13[2, 3][1, 2][3, 2, 1][1, 3]élévv" "dflt['k']False1");
}

TEST(TextChatTemplate, MacrosSetBlocksAndGlobals) {
  EXPECT_EQ(jinja("{% macro tag(name, body='x') %}<{{ name }}>{{ body }}</{{ name }}>{% endmacro %}"
                  "{{ tag('a') }}{{ tag('b', body='y') }}{{ tag(name='c', body=1) }}"),
            "<a>x</a><b>y</b><c>1</c>");
  EXPECT_EQ(jinja("{% set x %}in {{ 1 + 1 }}{% endset %}[{{ x }}]{% set a, b = [1, 2] %}{{ a + b }}"), "[in 2]3");
  EXPECT_EQ(jinja("{{ range(3) | list }}{{ range(1, 7, 2) | list }}{{ dict(a=1)['a'] }}{{ namespace(x=1).x }}"),
            "[0, 1, 2][1, 3, 5]11");
  EXPECT_EQ(jinja("{% generation %}kept{% endgeneration %}"), "kept");  // transformers' assistant-mask tag
  char year[8];
  std::time_t now = std::time(nullptr);
  std::strftime(year, sizeof year, "%Y", std::localtime(&now));
  EXPECT_EQ(jinja("{{ strftime_now('%Y') }}"), year);
  EXPECT_EQ(error_of([] { jinja("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"); }),
            "t line 1: macro 'm' takes not more than 1 argument(s)");
}

}  // namespace chat_template_test
