// SPDX-License-Identifier: Apache-2.0
// The byte-level BPE tokenizer of the DeepSeek V3/V4/V4.1 family, loaded from a Hugging Face
// `tokenizer.json`. Encoding equals `tokenizers`' `encode(text, add_special_tokens=False).ids`
// and decoding equals `decode(ids, skip_special_tokens=...)`, byte for byte.
//
// Invalid UTF-8 (the library takes bytes, Python takes `str`): every maximal ill-formed subpart is
// replaced by U+FFFD before anything else, exactly as Python's `bytes.decode("utf-8", "replace")`
// and Rust's `String::from_utf8_lossy` do. So `encode(b)` equals HF
// `encode(b.decode("utf-8", "replace"))`, and no input can crash or throw.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer {

// One entry of `added_tokens` in tokenizer.json, with the flags that change how it is matched.
struct AddedToken {
    int32_t id = 0;
    std::string content;
    bool special = false;      // dropped by decode(skip_special_tokens=true)
    bool lstrip = false;       // the match swallows whitespace on its left
    bool rstrip = false;       // ... and on its right
    bool single_word = false;  // only matches outside words
    bool normalized = false;   // matched on the normalized text (a second pass, after the others)
};

// Immutable after construction; every method is const and safe to call from many threads at
// once. Copying is cheap (shared state).
class Tokenizer {
public:
    // Throws deepinfer::Error naming the file and the unsupported or malformed part.
    static Tokenizer from_file(const std::string& path);
    static Tokenizer from_json(std::string_view json_text, const std::string& origin = "<memory>");

    // Text -> ids; added tokens (e.g. "<｜User｜>") in the text become their ids.
    std::vector<int32_t> encode(std::string_view text) const;
    // Text -> ids with the added vocabulary switched off: "<｜User｜>" is 5 ordinary tokens.
    // This is how message content is encoded, so content cannot inject control tokens.
    std::vector<int32_t> encode_ordinary(std::string_view text) const;
    void encode_ordinary_append(std::string_view text, std::vector<int32_t>& out) const;
    // Many texts at once on the CPU threads (deepinfer::cpu_num_threads()); same results as
    // calling encode() on each.
    std::vector<std::vector<int32_t>> encode_batch(std::span<const std::string> texts) const;

    // Ids -> text. Unknown ids are skipped (as Hugging Face does); byte sequences that are not
    // valid UTF-8 become U+FFFD.
    std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

    // The id of a token in tokenizer.json spelling (byte-level form for vocabulary entries, the
    // literal content for added tokens).
    std::optional<int32_t> token_to_id(std::string_view token) const;
    // The id of an added token by its content ("<｜User｜>"); nullopt if the file has none.
    std::optional<int32_t> added_token_id(std::string_view content) const;
    std::string id_to_token(int32_t id) const;  // "" for an unknown id
    // The raw bytes an id contributes to decoded text (may be a partial UTF-8 character).
    std::string_view token_bytes(int32_t id) const;
    bool is_added(int32_t id) const;
    bool is_special(int32_t id) const;
    std::span<const AddedToken> added_tokens() const;
    int32_t vocab_size() const;  // largest id + 1

    struct Impl;
    const Impl& impl() const { return *impl_; }

private:
    explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
    std::shared_ptr<const Impl> impl_;
};

// Streaming detokenization: feed ids one at a time, get back only complete UTF-8 characters.
// The concatenation of every push() and the final finish() equals Tokenizer::decode() of all
// the ids. Holds a reference to the tokenizer; one instance per stream, not thread-safe.
class IncrementalDecoder {
public:
    explicit IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false)
        : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}
    // The text that became complete with this id ("" while a character is still partial).
    std::string push(int32_t id);
    // Flushes what is left (an unfinished character becomes U+FFFD).
    std::string finish();
    // Number of bytes held back waiting for the rest of a character (0-3).
    size_t num_pending_bytes() const { return pending_.size(); }

private:
    const Tokenizer& tokenizer_;
    bool skip_special_tokens_;
    std::string pending_;
};

// Replaces every maximal ill-formed UTF-8 subpart with U+FFFD (Unicode "best practice", as
// Python and Rust do). Valid input is returned unchanged.
std::string sanitize_utf8(std::string_view bytes);
bool is_valid_utf8(std::string_view bytes);

}  // namespace deepinfer
