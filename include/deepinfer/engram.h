// SPDX-License-Identifier: Apache-2.0
// The data behind DeepSeek-V4.1's Engram n-gram memory (spec §5.2-5.3), derived at load time
// without Python: the compressed token map (from tokenizer.json, normalized with ICU exactly as
// transformers' `build_compressed_token_map`), the prime bucket layout, the per-layer hash
// multipliers (NumPy PCG64 draws) and the rolling-XOR row hash. Every mismatch against the config
// or the published digests is a load error: a wrong map or layout would read the wrong table rows.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer {

// History marker of a position whose token is not text (an image-span token): n-grams never
// span it.
inline constexpr int64_t kEngramDead = -1;

// DeepSeek-V4.1-Flash's published token map (spec §5.2): size and SHA-256 of the int32
// little-endian array over the 129,280 ids of the DeepSeek V4/V4.1 tokenizer.json.
inline constexpr int64_t kV41EngramCompressedVocabSize = 99092;
inline constexpr std::string_view kV41EngramTokenMapSha256 =
    "c60a86322ec17b4142bfef3c57a8d81fb428550cdf487f88a4320cb59fe46481";

struct EngramTokenMap {
    std::vector<int32_t> compressed_ids;  // [tokenizer vocabulary] compressed id of each token id
    int64_t num_compressed = 0;           // number of distinct compressed ids
    std::string sha256() const;           // of `compressed_ids` as int32 little-endian bytes
};

// The normalization the map keys on: NFKC, NFD, strip accents (General_Category Mark), per-code-
// point full lowercase, runs of [ \t\r\n] -> " ", a text that is exactly " " survives the strip,
// strip White_Space at both ends. Input and output are UTF-8. (No empty-result fallback here.)
std::string engram_normalize(std::string_view utf8_text);

// Builds the map from a Hugging Face tokenizer.json (byte-level BPE; DeepSeek V3/V4/V4.1): every
// id is decoded alone (added tokens included); a decode that is not valid UTF-8 (or contains
// U+FFFD) keys on the raw token string, otherwise on engram_normalize(text), falling back to the
// text when that is empty. Compressed ids are assigned in order of first appearance.
EngramTokenMap build_engram_token_map(std::string_view tokenizer_json, std::string_view source);
EngramTokenMap load_engram_token_map(const std::string& tokenizer_json_path);

// Throws unless the map has `expected_num_compressed` ids (the config's
// engram_compressed_vocab_size) and, when `expected_sha256` is not empty, that digest.
void verify_engram_token_map(const EngramTokenMap& map,
                             int64_t expected_num_compressed,
                             std::string_view expected_sha256,
                             std::string_view source);

// The `max_ngram_size` odd multipliers of one Engram layer: 2·u + 1 with u the first draws of
// NumPy's default_rng(10007·layer_id).integers(0, (INT64_MAX // compressed_vocab_size) // 2).
std::vector<int64_t> engram_hash_multipliers(int64_t layer_id, int64_t max_ngram_size, int64_t compressed_vocab_size);

// True when `n` is prime (deterministic for every 64-bit n).
bool engram_is_prime(uint64_t n);

// The bucket layout and hash of all Engram layers of a model. Columns of a layer are ordered
// (n-gram size 2..max_ngram_size, head); column c owns rows [offset(l, c), offset(l, c) + prime(l, c))
// of that layer's table. Immutable after build; safe to share between threads.
class EngramLayout {
public:
    EngramLayout() = default;
    // Draws the primes exactly as transformers' EngramLayout.from_config: per layer, per n-gram
    // size, the search restarts at engram_vocab_size - 1 and takes the next prime not used yet.
    static EngramLayout build(std::span<const int64_t> layer_ids,
                              int64_t engram_vocab_size,
                              int64_t max_ngram_size,
                              int64_t n_heads,
                              int64_t compressed_vocab_size);

    // Throws (naming the key, the layer and both values) unless every layer's row count equals
    // the config's engram_num_embeddings entry.
    void check_num_embeddings(std::span<const int64_t> engram_num_embeddings, std::string_view source) const;

    int64_t num_layers() const { return static_cast<int64_t>(layer_ids_.size()); }
    int64_t num_cols() const { return (max_ngram_size_ - 1) * n_heads_; }
    int64_t max_ngram_size() const { return max_ngram_size_; }
    int64_t layer_id(int64_t layer) const { return layer_ids_[size_t(layer)]; }
    int64_t prime(int64_t layer, int64_t col) const { return primes_[size_t(layer * num_cols() + col)]; }
    int64_t offset(int64_t layer, int64_t col) const { return offsets_[size_t(layer * num_cols() + col)]; }
    int64_t num_rows(int64_t layer) const { return num_rows_[size_t(layer)]; }
    int64_t multiplier(int64_t layer, int64_t shift) const {
        return multipliers_[size_t(layer * max_ngram_size_ + shift)];
    }

    // Row ids (into layer `layer`'s table) of the n-grams ending at one position.
    // tokens: [max_ngram_size] the look-back (engram_lookback); rows: [num_cols()] out.
    void rows(int64_t layer, std::span<const int64_t> tokens, std::span<int64_t> rows) const;

private:
    std::vector<int64_t> layer_ids_;
    int64_t max_ngram_size_ = 0;
    int64_t n_heads_ = 0;
    std::vector<int64_t> primes_;       // [num_layers, num_cols]
    std::vector<int64_t> offsets_;      // [num_layers, num_cols]
    std::vector<int64_t> num_rows_;     // [num_layers]
    std::vector<int64_t> multipliers_;  // [num_layers, max_ngram_size]
};

// The look-back of position `position`: tokens[s] = history[position - s] for s = 0.., until
// position - s < 0 or a kEngramDead entry is met; that shift and every later one get `pad_id`.
// history: [>= position + 1] compressed ids; tokens: [max_ngram_size] out.
void engram_lookback(std::span<const int64_t> history, int64_t position, int64_t pad_id, std::span<int64_t> tokens);

}  // namespace deepinfer
