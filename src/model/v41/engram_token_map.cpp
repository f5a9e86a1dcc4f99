// SPDX-License-Identifier: Apache-2.0
// The Engram compressed token map from tokenizer.json, with ICU for the Unicode work (spec §5.2;
// transformers' build_compressed_token_map over the Rust `tokenizers` decoder and normalizers).
// The decode of one id follows `tokenizers`: the token string (added-token content or BPE vocab
// entry) goes through the ByteLevel decoder, which maps each character back to its byte when
// every character of the token is in the byte-level alphabet and keeps the raw UTF-8 otherwise.
#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <array>
#include <bit>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "deepinfer/check.h"
#include "deepinfer/engram.h"
#include "core/sha256.h"

namespace deepinfer {
namespace {

using nlohmann::json;

// GPT-2's bytes_to_unicode, inverted: code point -> byte, -1 for code points outside the alphabet.
struct ByteLevelAlphabet {
    std::array<int, 512> byte_of{};
    ByteLevelAlphabet() {
        byte_of.fill(-1);
        std::vector<int> printable;
        for (int b = '!'; b <= '~'; ++b) printable.push_back(b);
        for (int b = 0xA1; b <= 0xAC; ++b) printable.push_back(b);
        for (int b = 0xAE; b <= 0xFF; ++b) printable.push_back(b);
        std::array<bool, 256> is_printable{};
        for (int b : printable) {
            is_printable[size_t(b)] = true;
            byte_of[size_t(b)] = b;
        }
        int n = 0;
        for (int b = 0; b < 256; ++b)
            if (!is_printable[size_t(b)]) byte_of[size_t(256 + n++)] = b;
    }
};

// Decodes one UTF-8 code point at s[i]; returns false on any ill-formed sequence (Rust's
// str::from_utf8 rules: no overlongs, no surrogates, nothing above U+10FFFF).
bool next_code_point(std::string_view s, size_t& i, uint32_t& cp) {
    const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
    const uint8_t b0 = byte(i);
    int len;
    uint32_t min;
    if (b0 < 0x80) {
        cp = b0, ++i;
        return true;
    } else if ((b0 & 0xE0) == 0xC0) {
        len = 2, cp = b0 & 0x1F, min = 0x80;
    } else if ((b0 & 0xF0) == 0xE0) {
        len = 3, cp = b0 & 0x0F, min = 0x800;
    } else if ((b0 & 0xF8) == 0xF0) {
        len = 4, cp = b0 & 0x07, min = 0x10000;
    } else {
        return false;
    }
    if (i + size_t(len) > s.size()) return false;
    for (int k = 1; k < len; ++k) {
        const uint8_t b = byte(i + size_t(k));
        if ((b & 0xC0) != 0x80) return false;
        cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += size_t(len);
    return true;
}

// The ByteLevel decoder on one token: bytes if every character is in the alphabet, else the token.
std::string byte_level_decode(std::string_view token, const ByteLevelAlphabet& alphabet) {
    std::string out;
    size_t i = 0;
    while (i < token.size()) {
        uint32_t cp;
        if (!next_code_point(token, i, cp) || cp >= alphabet.byte_of.size() || alphabet.byte_of[cp] < 0)
            return std::string(token);
        out.push_back(static_cast<char>(alphabet.byte_of[cp]));
    }
    return out;
}

// True when `text` is well-formed UTF-8 without U+FFFD (what a lossy decode would insert).
bool clean_utf8(std::string_view text) {
    size_t i = 0;
    while (i < text.size()) {
        uint32_t cp;
        if (!next_code_point(text, i, cp) || cp == 0xFFFD) return false;
    }
    return true;
}

bool is_ws_run_char(UChar32 c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

}  // namespace

std::string engram_normalize(std::string_view utf8_text) {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* nfkc = icu::Normalizer2::getNFKCInstance(status);
    const icu::Normalizer2* nfd = icu::Normalizer2::getNFDInstance(status);
    DI_CHECK(U_SUCCESS(status), "ICU normalizers unavailable: ", u_errorName(status));

    icu::UnicodeString text = icu::UnicodeString::fromUTF8(icu::StringPiece(utf8_text.data(), int32_t(utf8_text.size())));
    icu::UnicodeString composed = nfkc->normalize(text, status);
    icu::UnicodeString decomposed = nfd->normalize(composed, status);
    DI_CHECK(U_SUCCESS(status), "ICU normalization failed: ", u_errorName(status));

    // Strip accents (every General_Category Mark), lowercase code point by code point (the full
    // mapping of Rust's char::to_lowercase: no context, so a lone Σ is σ), and collapse runs of
    // [ \t\r\n] into one space.
    std::vector<UChar32> cps;
    const icu::Locale& root = icu::Locale::getRoot();
    for (int32_t i = 0; i < decomposed.length();) {
        const UChar32 c = decomposed.char32At(i);
        i += U16_LENGTH(c);
        if (U_GET_GC_MASK(c) & U_GC_M_MASK) continue;
        if (c < 0x80) {
            cps.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
            continue;
        }
        icu::UnicodeString one(c);
        one.toLower(root);
        for (int32_t k = 0; k < one.length();) {
            const UChar32 lc = one.char32At(k);
            k += U16_LENGTH(lc);
            cps.push_back(lc);
        }
    }
    std::vector<UChar32> collapsed;
    bool in_run = false;
    for (UChar32 c : cps) {
        if (is_ws_run_char(c)) {
            if (!in_run) collapsed.push_back(' ');
            in_run = true;
        } else {
            collapsed.push_back(c);
            in_run = false;
        }
    }
    // A text that is exactly one space survives the strip (transformers uses a sentinel for this).
    if (collapsed.size() == 1 && collapsed[0] == ' ') return " ";
    size_t begin = 0, end = collapsed.size();
    while (begin < end && u_isUWhiteSpace(collapsed[begin])) ++begin;
    while (end > begin && u_isUWhiteSpace(collapsed[end - 1])) --end;

    icu::UnicodeString result;
    for (size_t i = begin; i < end; ++i) result.append(collapsed[i]);
    std::string out;
    result.toUTF8String(out);
    return out;
}

std::string EngramTokenMap::sha256() const {
    // int32 little-endian: the in-memory layout on the little-endian hosts we support.
    static_assert(std::endian::native == std::endian::little, "big-endian hosts need a byte swap here");
    return sha256_hex(compressed_ids.data(), compressed_ids.size() * sizeof(int32_t));
}

EngramTokenMap build_engram_token_map(std::string_view tokenizer_json, std::string_view source) {
    json root;
    try {
        root = json::parse(tokenizer_json.begin(), tokenizer_json.end());
    } catch (const json::parse_error& e) {
        DI_THROW(source, ": not valid JSON (", e.what(), ")");
    }
    DI_CHECK(root.is_object() && root.contains("model") && root["model"].is_object() &&
                 root["model"].contains("vocab") && root["model"]["vocab"].is_object(),
             source, ": not a tokenizer.json (no model.vocab object)");
    const json& decoder = root.value("decoder", json());
    DI_CHECK(decoder.is_object() && decoder.value("type", "") == "ByteLevel", source,
             ": the Engram token map needs a ByteLevel decoder, got ", decoder.dump().substr(0, 80));

    // id -> token string; added tokens take precedence over the model vocabulary (as `tokenizers`).
    std::vector<std::string> tokens;
    std::vector<bool> present;
    auto put = [&](int64_t id, const std::string& token, bool overwrite) {
        DI_CHECK(id >= 0 && id < (int64_t{1} << 24), source, ": token id ", id, " out of range");
        if (size_t(id) >= tokens.size()) tokens.resize(size_t(id) + 1), present.resize(size_t(id) + 1);
        if (present[size_t(id)] && !overwrite) return;
        tokens[size_t(id)] = token;
        present[size_t(id)] = true;
    };
    for (const auto& [token, id] : root["model"]["vocab"].items()) {
        DI_CHECK(id.is_number_integer(), source, ": vocab entry '", token, "' has a non-integer id");
        put(id.get<int64_t>(), token, false);
    }
    if (root.contains("added_tokens")) {
        for (const json& t : root["added_tokens"]) {
            DI_CHECK(t.is_object() && t.contains("id") && t.contains("content"), source, ": malformed added_tokens entry");
            put(t["id"].get<int64_t>(), t["content"].get<std::string>(), true);
        }
    }
    for (size_t id = 0; id < tokens.size(); ++id)
        DI_CHECK(present[id], source, ": token id ", id, " is missing (ids must be contiguous)");

    static const ByteLevelAlphabet alphabet;
    EngramTokenMap map;
    map.compressed_ids.resize(tokens.size());
    std::unordered_map<std::string, int32_t> key_to_id;
    key_to_id.reserve(tokens.size());
    for (size_t id = 0; id < tokens.size(); ++id) {
        const std::string text = byte_level_decode(tokens[id], alphabet);
        std::string key;
        if (!clean_utf8(text)) {
            key = tokens[id];  // a partial UTF-8 byte token: keyed by its raw form
        } else {
            key = engram_normalize(text);
            if (key.empty()) key = text;
        }
        auto [it, inserted] = key_to_id.try_emplace(std::move(key), static_cast<int32_t>(key_to_id.size()));
        map.compressed_ids[id] = it->second;
    }
    map.num_compressed = static_cast<int64_t>(key_to_id.size());
    return map;
}

EngramTokenMap load_engram_token_map(const std::string& tokenizer_json_path) {
    std::ifstream in(tokenizer_json_path, std::ios::binary);
    DI_CHECK(in.good(), "cannot open tokenizer file ", tokenizer_json_path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return build_engram_token_map(ss.str(), tokenizer_json_path);
}

void verify_engram_token_map(const EngramTokenMap& map,
                             int64_t expected_num_compressed,
                             std::string_view expected_sha256,
                             std::string_view source) {
    DI_CHECK(map.num_compressed == expected_num_compressed, source, ": the Engram compressed token map has ",
             map.num_compressed, " ids but engram_compressed_vocab_size is ", expected_num_compressed,
             "; this tokenizer does not match the checkpoint (every Engram row address would be wrong)");
    if (expected_sha256.empty()) return;
    const std::string got = map.sha256();
    DI_CHECK(got == expected_sha256, source, ": the Engram compressed token map's SHA-256 is ", got, ", expected ",
             expected_sha256, "; the tokenizer or the Unicode normalization differs from the reference");
}

}  // namespace deepinfer
