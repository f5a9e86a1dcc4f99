// SPDX-License-Identifier: Apache-2.0
// Output parsing: the §3 test vectors of chat-format.md (deepseek-recipe's tool-call test and the
// worked streaming example), streaming == one-shot for every split, malformed output, and the
// ids path. The comparison with deepseek-recipe on generated outputs is
// tests/python/test_chat_parse.py.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "deepinfer/chat_parser.h"

namespace deepinfer {
namespace {

ChatParseOptions options(OutputStart start, bool tools = true) {
    ChatParseOptions o;
    o.start = start;
    o.parse_tool_calls = tools;
    return o;
}

ParsedMessage stream(const std::vector<std::string>& chunks, const ChatParseOptions& o,
                     BackendFinish finish = BackendFinish::kStop) {
    ChatStreamParser p(o);
    for (const std::string& c : chunks) p.feed(c);
    p.finish(finish);
    return p.message();
}

void expect_same(const ParsedMessage& a, const ParsedMessage& b, const std::string& what) {
    EXPECT_EQ(a.content, b.content) << what;
    EXPECT_EQ(a.reasoning_content, b.reasoning_content) << what;
    ASSERT_EQ(a.tool_calls.size(), b.tool_calls.size()) << what;
    for (size_t i = 0; i < a.tool_calls.size(); ++i) {
        EXPECT_EQ(a.tool_calls[i].id, b.tool_calls[i].id) << what;
        EXPECT_EQ(a.tool_calls[i].name, b.tool_calls[i].name) << what;
        EXPECT_EQ(a.tool_calls[i].arguments, b.tool_calls[i].arguments) << what;
    }
    EXPECT_EQ(a.finish_reason, b.finish_reason) << what;
    EXPECT_EQ(a.errors, b.errors) << what;
}

// Start offsets of the UTF-8 characters of s.
std::vector<size_t> char_starts(const std::string& s) {
    std::vector<size_t> v;
    for (size_t i = 0; i < s.size(); ++i)
        if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) v.push_back(i);
    return v;
}

// Whole, every two-way split at a character boundary, and character by character.
void expect_split_invariant(const std::string& text, const ChatParseOptions& o, BackendFinish f = BackendFinish::kStop) {
    const ParsedMessage whole = parse_chat_output(text, o, f);
    const std::vector<size_t> starts = char_starts(text);
    for (size_t k = 1; k < starts.size(); ++k)
        expect_same(stream({text.substr(0, starts[k]), text.substr(starts[k])}, o, f), whole,
                    "split at " + std::to_string(starts[k]) + " of " + text);
    std::vector<std::string> chars;
    for (size_t k = 0; k < starts.size(); ++k)
        chars.push_back(text.substr(starts[k], (k + 1 < starts.size() ? starts[k + 1] : text.size()) - starts[k]));
    expect_same(stream(chars, o, f), whole, "char by char: " + text);
    // Byte-level cuts too (the parser works on bytes; only deltas may hold partial characters).
    for (size_t k = 1; k < text.size(); ++k)
        expect_same(stream({text.substr(0, k), text.substr(k)}, o, f), whole, "byte split " + std::to_string(k));
}

// ---- §3.2 test vector: quoted parameter names, both spellings ----------------------------------

TEST(ChatParser, RecipeToolCallVector) {
    const nlohmann::json expected = nlohmann::json::parse(
        R"({"shipping address": "Paris\n日本", " string= mode ": {"enabled": true}, "count": 2, "": "empty key"})");
    for (const auto& [block, prefix] : std::vector<std::pair<std::string, std::string>>{{"tool_calls", ""}, {" calls", " "}}) {
        const std::string out =
            "<｜DSML｜" + block + ">\n<｜DSML｜" + prefix + "invoke name=\"submit\">\n<｜DSML｜" + prefix +
            "parameter name=\"shipping address\" string=\"true\">Paris\n日本</｜DSML｜" + prefix + "parameter>\n<｜DSML｜" +
            prefix + "parameter name=\" string= mode \" string=\"false\">{\"enabled\":true}</｜DSML｜" + prefix +
            "parameter>\n<｜DSML｜" + prefix + "parameter name=\"count\" string=\"false\">2</｜DSML｜" + prefix +
            "parameter>\n<｜DSML｜" + prefix + "parameter name=\"\" string=\"true\">empty key</｜DSML｜" + prefix +
            "parameter>\n</｜DSML｜" + prefix + "invoke>\n</｜DSML｜" + block + ">";
        const ChatParseOptions o = options(OutputStart::kContent);
        const ParsedMessage m = parse_chat_output(out, o);
        ASSERT_EQ(m.tool_calls.size(), 1u) << block;
        EXPECT_EQ(m.tool_calls[0].name, "submit");
        EXPECT_EQ(nlohmann::json::parse(m.tool_calls[0].arguments), expected);
        EXPECT_EQ(m.finish_reason, "tool_calls");
        EXPECT_EQ(m.content, "");
        EXPECT_TRUE(m.errors.empty());
        expect_split_invariant(out, o);
    }
}

TEST(ChatParser, WorkedStreamingExample) {
    ChatParseOptions o = options(OutputStart::kReasoning, false);
    o.stop = {"END"};
    const ParsedMessage m =
        stream({"\nHmm, a story.", "\n</th", "ink>\n\nOnce upon", " a time. THE E", "ND. More"}, o);
    EXPECT_EQ(m.reasoning_content, "Hmm, a story.");
    EXPECT_EQ(m.content, "Once upon a time. THE ");
    EXPECT_EQ(m.finish_reason, "stop");
}

// ---- Streaming equals one-shot -----------------------------------------------------------------

TEST(ChatParser, EverySplitGivesTheOneShotMessage) {
    const std::string call = "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n"
                             "<｜DSML｜parameter name=\"city\" string=\"true\">Pa\"ris\\</｜DSML｜parameter>\n"
                             "<｜DSML｜parameter name=\"days\" string=\"false\">[1, 2]</｜DSML｜parameter>\n"
                             "</｜DSML｜invoke>\n<｜DSML｜invoke name=\"noop\">\n\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
    struct Case {
        std::string text;
        ChatParseOptions o;
    };
    ChatParseOptions json = options(OutputStart::kContent, true);
    json.json_output = true;
    ChatParseOptions stops = options(OutputStart::kReasoning, false);
    stops.stop = {"\n\nQ", "STOP", "aab"};
    const std::vector<Case> cases = {
        {"\n\nLet me think.\n\n</think>\n\nThe answer is 4.\n" + call + "ignored", options(OutputStart::kReasoning)},
        {"Reasoning with a stray <｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
         options(OutputStart::kReasoning)},
        {"\nHi</think> there</think>!\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"x\">\n</｜DSML｜ invoke>\n</｜DSML｜ calls>",
         options(OutputStart::kContent)},
        {"Sure: ```json\n{\"a\": [1, 2]}\n``` and then {\"b\": 1} <think> tail", json},
        {"abc\n\nxyz{\"k\": \"v\"}\n```\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
         json},
        {"thinking 日本語</think>answer aaab STOP never", stops},
        {"\n\n\n</think>\n\nQ", stops},
        {"partial <｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"true\">unfinis",
         options(OutputStart::kContent)},
        {"no markup at all, 😀 ünïcödé", options(OutputStart::kContentContinuation, false)},
        {"\n\nkept newlines", options(OutputStart::kReasoningContinuation, false)},
    };
    for (const Case& c : cases) expect_split_invariant(c.text, c.o);

    // Random cuts into 1-12 pieces.
    std::mt19937 rng(11);
    for (const Case& c : cases) {
        const ParsedMessage whole = parse_chat_output(c.text, c.o);
        for (int trial = 0; trial < 50; ++trial) {
            std::vector<size_t> cuts;
            for (int k = int(rng() % 12); k > 0; --k) cuts.push_back(rng() % (c.text.size() + 1));
            std::sort(cuts.begin(), cuts.end());
            std::vector<std::string> pieces;
            size_t prev = 0;
            for (size_t cut : cuts) {
                pieces.push_back(c.text.substr(prev, cut - prev));
                prev = cut;
            }
            pieces.push_back(c.text.substr(prev));
            expect_same(stream(pieces, c.o), whole, "random cut of " + c.text);
        }
    }
}

TEST(ChatParser, RequiredToolChoiceStartsInsideTheBlock) {
    ChatParseOptions o = options(OutputStart::kContent);
    o.starts_in_tool_calls = true;
    const ParsedMessage m = parse_chat_output(
        "<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"q\" string=\"true\">x</｜DSML｜parameter>\n"
        "</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
        o);
    ASSERT_EQ(m.tool_calls.size(), 1u);
    EXPECT_EQ(m.tool_calls[0].arguments, "{\"q\": \"x\"}");
    EXPECT_FALSE(m.reasoning_content.has_value());
}

// ---- Malformed output --------------------------------------------------------------------------

TEST(ChatParser, MalformedToolCallsGiveContentAndAnError) {
    const ChatParseOptions o = options(OutputStart::kContent);
    // Cut off inside a string value by the length limit.
    ParsedMessage m = parse_chat_output(
        "Checking.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"true\">Par",
        o, BackendFinish::kLength);
    EXPECT_EQ(m.content, "Checking.");
    EXPECT_EQ(m.finish_reason, "length");
    ASSERT_EQ(m.tool_calls.size(), 1u);
    EXPECT_EQ(m.tool_calls[0].arguments, "{\"a\": \"Par");
    ASSERT_GE(m.errors.size(), 2u);
    EXPECT_NE(m.errors[0].find("inside the tool-call block"), std::string::npos);
    EXPECT_NE(m.errors[1].find("not a JSON object"), std::string::npos);
    // A non-JSON raw value.
    m = parse_chat_output("<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"n\" "
                          "string=\"false\">not json</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>trailing",
                          o);
    EXPECT_EQ(m.finish_reason, "tool_calls");
    ASSERT_EQ(m.errors.size(), 2u);
    EXPECT_NE(m.errors[0].find("not a JSON object"), std::string::npos);
    EXPECT_NE(m.errors[1].find("dropped"), std::string::npos);
    // Garbage of every kind: never throws.
    std::mt19937 rng(5);
    const std::vector<std::string> atoms = {"<｜DSML｜", "</｜DSML｜", "tool_calls>", " calls>", "invoke name=\"",
                                            "parameter name=\"", "string=\"", "true\">", "false\">", "\"", "\n",
                                            "</think>", "```json\n", "\n```", "{", "x", "é", "END"};
    for (int i = 0; i < 500; ++i) {
        std::string s;
        for (int k = int(rng() % 30); k > 0; --k) s += atoms[rng() % atoms.size()];
        ChatParseOptions r = options(rng() % 2 ? OutputStart::kReasoning : OutputStart::kContent);
        r.json_output = rng() % 3 == 0;
        r.stop = {"END"};
        EXPECT_NO_THROW(parse_chat_output(s, r, BackendFinish(rng() % 3)));
    }
}

// ---- Ids ----------------------------------------------------------------------------------------

TEST(ChatParser, IdsStopAtEndOfSentence) {
    const Tokenizer tok = Tokenizer::from_file(DI_TOKENIZER_ASSETS_DIR "/deepseek-v4/tokenizer.json");
    std::vector<int32_t> ids = tok.encode("Hmm.</think>Hello 世界");
    ParsedMessage m = parse_chat_output_ids(ids, tok, options(OutputStart::kReasoning));
    EXPECT_EQ(m.finish_reason, "length");  // no end-of-sentence: the budget ran out
    ids.push_back(1);
    ids.push_back(19923);  // after EOS: ignored
    m = parse_chat_output_ids(ids, tok, options(OutputStart::kReasoning));
    EXPECT_EQ(m.reasoning_content, "Hmm.");
    EXPECT_EQ(m.content, "Hello 世界");
    EXPECT_EQ(m.finish_reason, "stop");
    EXPECT_EQ(m.to_json(),
              R"({"role":"assistant","content":"Hello 世界","reasoning_content":"Hmm.","finish_reason":"stop"})");
}

}  // namespace
}  // namespace deepinfer
