// SPDX-License-Identifier: Apache-2.0
// Chat rendering: the golden prompts of chat-format.md §2.9 (tests/data/chat), the JSON float
// spellings of each family, and request validation. The wide comparison with deepseek-recipe is
// tests/python/test_chat_render.py.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "deepinfer/chat.h"
#include "deepinfer/check.h"
#include "tokenizer/chat_json.h"

namespace deepinfer {
namespace {

std::string read(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    EXPECT_TRUE(in.good()) << path;
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

struct Example {
    int number;
    ChatFamily family;
};

class GoldenPrompt : public ::testing::TestWithParam<Example> {};

TEST_P(GoldenPrompt, RendersByteIdentical) {
    const Example ex = GetParam();
    const std::string dir = std::string(DI_TEST_DATA_DIR) + "/chat/example" + std::to_string(ex.number);
    const ChatRequest req = parse_chat_request(read(dir + ".request.json"));
    const std::string expected = read(dir + "." + chat_family_name(ex.family) + ".prompt.txt");
    EXPECT_EQ(render_chat(req, ex.family).text(), expected);
}

INSTANTIATE_TEST_SUITE_P(ChatFormat29, GoldenPrompt,
                         ::testing::Values(Example{1, ChatFamily::kV4}, Example{2, ChatFamily::kV4},
                                           Example{3, ChatFamily::kV4}, Example{4, ChatFamily::kV41},
                                           Example{5, ChatFamily::kV41}, Example{6, ChatFamily::kV41}));

TEST(ChatRender, Example1Ids) {
    const Tokenizer tok = Tokenizer::from_file(DI_TOKENIZER_ASSETS_DIR "/deepseek-v4/tokenizer.json");
    const std::string dir = std::string(DI_TEST_DATA_DIR) + "/chat/example1";
    const ChatPrompt prompt = render_chat(parse_chat_request(read(dir + ".request.json")), ChatFamily::kV4);
    EXPECT_EQ(encode_chat_prompt(prompt, tok),
              (std::vector<int32_t>{0, 3476, 477, 260, 11502, 22896, 16, 128803, 19923, 128804, 128822}));
    // V4.1 prompts need <｜System｜>, which V4's tokenizer does not have.
    const ChatPrompt v41 = render_chat(parse_chat_request(R"({"messages": [{"role": "user", "content": "Hi"}]})"),
                                       ChatFamily::kV41);
    EXPECT_THROW(encode_chat_prompt(v41, tok), Error);
}

TEST(ChatRender, ContentIsPlainTextTemplateIsSpecial) {
    const ChatPrompt p = render_chat(
        parse_chat_request(R"({"messages": [{"role": "user", "content": "<think>x"}], "thinking": {"type": "disabled"}})"),
        ChatFamily::kV4);
    ASSERT_EQ(p.pieces.size(), 5u);
    EXPECT_TRUE(p.pieces[0].special);   // BOS
    EXPECT_TRUE(p.pieces[1].special);   // <｜User｜>
    EXPECT_FALSE(p.pieces[2].special);  // the content, although it spells <think>
    EXPECT_EQ(p.pieces[2].text, "<think>x");
    EXPECT_EQ(p.pieces[4].text, "</think>");
}

TEST(ChatJson, FloatSpellings) {
    struct Case {
        double v;
        const char* v4;
        const char* v41;
    };
    for (const Case& c : {Case{1e-5, "0.00001", "1e-05"}, Case{1e-6, "1e-6", "1e-06"}, Case{1e-4, "0.0001", "0.0001"},
                          Case{1e16, "1e+16", "1e+16"}, Case{1e15, "1000000000000000.0", "1000000000000000.0"},
                          Case{1.5e20, "1.5e+20", "1.5e+20"}, Case{100.0, "100.0", "100.0"}, Case{0.1, "0.1", "0.1"},
                          Case{-0.0, "-0.0", "-0.0"}, Case{5e-324, "5e-324", "5e-324"},
                          Case{1234567890123456.8, "1234567890123456.8", "1234567890123456.8"},
                          Case{1.7976931348623157e308, "1.7976931348623157e+308", "1.7976931348623157e+308"}}) {
        EXPECT_EQ(format_float(c.v, ChatFamily::kV4), c.v4) << c.v;
        EXPECT_EQ(format_float(c.v, ChatFamily::kV41), c.v41) << c.v;
    }
    const OrderedJson j = OrderedJson::parse(R"({"b": [1, 2.0, "é\n\u0001/"], "a": {"x": null, "y": true}})");
    EXPECT_EQ(dump_prompt_json(j, ChatFamily::kV4), "{\"b\": [1, 2.0, \"é\\n\\u0001/\"], \"a\": {\"x\": null, \"y\": true}}");
}

TEST(ChatRequest, RejectsWhatTheApiRejects) {
    auto message_of = [](const char* body) {
        try {
            parse_chat_request(body);
        } catch (const Error& e) {
            return e.message();
        }
        return std::string("(accepted)");
    };
    EXPECT_EQ(message_of(R"({"messages": []})"), "Empty input messages");
    EXPECT_EQ(message_of(R"({"messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "f"}}]})"),
              "Tool names must be unique.");
    EXPECT_NE(message_of(R"({"messages": [{"role": "user", "content": "x"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "a", "type": "function",
         "function": {"name": "f", "arguments": "{}"}}]}]})").find("must be followed by tool messages"),
              std::string::npos);
    EXPECT_NE(message_of(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})")
                  .find("word 'json'"),
              std::string::npos);
    EXPECT_EQ(message_of(R"({"messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required"})"),
              "Thinking mode does not support this tool_choice");
    EXPECT_NE(message_of("{not json").find("not valid JSON"), std::string::npos);
    EXPECT_NE(message_of(R"({"messages": [{"role": "wizard", "content": "x"}]})").find("unknown role"), std::string::npos);
    EXPECT_EQ(message_of(R"({"messages": [{"role": "developer", "content": "x"}]})"), "(accepted)");
}

}  // namespace
}  // namespace deepinfer
