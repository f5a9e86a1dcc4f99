// SPDX-License-Identifier: Apache-2.0
// The BPE model over raw bytes: each byte starts as its own token, then adjacent pairs merge in
// the order of their merge rank (lowest first, leftmost first among equals). Merge lookups go
// through a flat open-addressing table keyed by the two token ids, so the hot path hashes
// integers, never strings.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

namespace deepinfer {

class BpeModel {
public:
    static constexpr uint32_t kNoRank = 0xFFFFFFFFu;

    // `byte_ids[b]`: the token of the single byte b (-1 when the vocabulary lacks it; such bytes
    // are dropped, as Hugging Face drops characters it cannot map without an unk token).
    explicit BpeModel(const std::array<int32_t, 256>& byte_ids) : byte_ids_(byte_ids) {}

    // Declares that (left, right) merges into `merged` with priority `rank` (lower = earlier).
    // A later duplicate of a pair is ignored, as in Hugging Face's loader.
    void add_merge(int32_t left, int32_t right, int32_t merged, uint32_t rank);
    void finalize();  // builds the lookup table; call once after the last add_merge()

    // Appends the tokens of one pre-tokenized piece (raw bytes) to `out`.
    void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

    size_t num_merges() const { return num_merges_; }

private:
    struct Entry {
        uint64_t key;    // (left << 32) | right; kEmptyKey when free
        uint32_t rank;
        int32_t merged;
    };
    static constexpr uint64_t kEmptyKey = ~0ull;

    static uint64_t pair_key(int32_t left, int32_t right) {
        return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
    }
    const Entry* lookup(int32_t left, int32_t right) const {
        const uint64_t key = pair_key(left, right);
        size_t i = (key * 0x9E3779B97F4A7C15ull) >> shift_;
        while (true) {
            const Entry& e = table_[i];
            if (e.key == key) return &e;
            if (e.key == kEmptyKey) return nullptr;
            i = (i + 1) & mask_;
        }
    }
    uint32_t rank_of(int32_t left, int32_t right) const {
        const Entry* e = lookup(left, right);
        return e == nullptr ? kNoRank : e->rank;
    }

    void encode_small(const int32_t* ids, size_t n, std::vector<int32_t>& out) const;
    void encode_large(const int32_t* ids, size_t n, std::vector<int32_t>& out) const;

    std::array<int32_t, 256> byte_ids_;
    std::vector<Entry> pending_;
    std::vector<Entry> table_;
    size_t mask_ = 0;
    int shift_ = 64;
    size_t num_merges_ = 0;
};

}  // namespace deepinfer
