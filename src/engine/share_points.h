// SPDX-License-Identifier: Apache-2.0
// Where prefill chunks end so that prefix snapshots land where known prompts diverge.
// A V4 sequence state can only be cached at the end of a forward chunk, so the engine used to end
// every prefill chunk on every prefix block (64 tokens): prompts then prefilled 64 tokens per step,
// which on a GPU is several times slower than whole chunks. Instead, the engine keeps a count of the
// whole-block prefixes of every prompt it holds (waiting or running) and ends a chunk only at the
// whole-block points where a prompt parts from another held prompt: that is where the other one will
// look its state up. Counting is by a chained 64-bit hash per block; a collision can only move
// a chunk boundary (PrefixCache compares tokens before it reuses a state). Engine thread only.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

namespace deepinfer {

class SharePoints {
public:
    explicit SharePoints(int64_t block) : block_(block) {}

    // Hash of each whole-block prefix of `prompt`: element k covers tokens [0, (k + 1) * block).
    std::vector<uint64_t> block_hashes(std::span<const int32_t> prompt) const;
    void add(std::span<const uint64_t> hashes);     // a prompt the engine now holds
    void remove(std::span<const uint64_t> hashes);  // a prompt it no longer holds
    // The first point after `from` where this held prompt (its block_hashes) parts from another
    // held prompt: the smallest multiple p of the block, from < p <= max_len, such that another held
    // prompt starts with the same p tokens but not with the same p + block (or p is the last whole
    // block within max_len). 0 if there is none.
    int64_t next_share_point(std::span<const uint64_t> hashes, int64_t from, int64_t max_len) const;
    int64_t block() const { return block_; }

private:
    int64_t count(uint64_t h) const;
    int64_t block_;
    std::unordered_map<uint64_t, int64_t> count_;
};

}  // namespace deepinfer
