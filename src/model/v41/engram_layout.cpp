// SPDX-License-Identifier: Apache-2.0
// Engram bucket layout (primes, offsets), hash multipliers and the rolling-XOR row hash (spec
// §5.3; transformers' EngramLayout, compute_hash_multipliers and DeepseekV41NgramHashState).
#include <algorithm>
#include <limits>

#include "deepinfer/check.h"
#include "deepinfer/engram.h"
#include "deepinfer/engram_numpy_rng.h"

namespace deepinfer {
namespace {

uint64_t mul_mod(uint64_t a, uint64_t b, uint64_t m) {
    return static_cast<uint64_t>(static_cast<unsigned __int128>(a) * b % m);
}

uint64_t pow_mod(uint64_t base, uint64_t exp, uint64_t m) {
    uint64_t result = 1;
    base %= m;
    for (; exp > 0; exp >>= 1) {
        if (exp & 1) result = mul_mod(result, base, m);
        base = mul_mod(base, base, m);
    }
    return result;
}

}  // namespace

bool engram_is_prime(uint64_t n) {
    if (n < 2) return false;
    for (uint64_t p : {2u, 3u, 5u, 7u, 11u, 13u, 17u, 19u, 23u, 29u, 31u, 37u}) {
        if (n % p == 0) return n == p;
    }
    uint64_t d = n - 1;
    int s = 0;
    for (; d % 2 == 0; d /= 2) ++s;
    // These 12 bases make Miller-Rabin deterministic for every n < 2^64.
    for (uint64_t a : {2u, 3u, 5u, 7u, 11u, 13u, 17u, 19u, 23u, 29u, 31u, 37u}) {
        uint64_t x = pow_mod(a, d, n);
        if (x == 1 || x == n - 1) continue;
        bool composite = true;
        for (int r = 1; r < s && composite; ++r) {
            x = mul_mod(x, x, n);
            if (x == n - 1) composite = false;
        }
        if (composite) return false;
    }
    return true;
}

std::vector<int64_t> engram_hash_multipliers(int64_t layer_id, int64_t max_ngram_size, int64_t compressed_vocab_size) {
    DI_CHECK(layer_id >= 0, "engram layer id must be >= 0, got ", layer_id);
    DI_CHECK(compressed_vocab_size > 0, "engram_compressed_vocab_size must be > 0, got ", compressed_vocab_size);
    DI_CHECK(max_ngram_size >= 2, "engram_max_ngram_size must be >= 2, got ", max_ngram_size);
    const int64_t bound = std::max<int64_t>(1, (std::numeric_limits<int64_t>::max() / compressed_vocab_size) / 2);
    NumpyPcg64 rng(static_cast<uint64_t>(10007 * layer_id));
    std::vector<int64_t> values = rng.integers_int64(0, bound, max_ngram_size);
    for (int64_t& v : values) v = v * 2 + 1;
    return values;
}

EngramLayout EngramLayout::build(std::span<const int64_t> layer_ids,
                                 int64_t engram_vocab_size,
                                 int64_t max_ngram_size,
                                 int64_t n_heads,
                                 int64_t compressed_vocab_size) {
    DI_CHECK(engram_vocab_size >= 1, "engram_vocab_size must be >= 1, got ", engram_vocab_size);
    DI_CHECK(n_heads >= 1, "engram_n_heads must be >= 1, got ", n_heads);
    EngramLayout layout;
    layout.layer_ids_.assign(layer_ids.begin(), layer_ids.end());
    layout.max_ngram_size_ = max_ngram_size;
    layout.n_heads_ = n_heads;
    std::vector<int64_t> used;  // every prime drawn so far, over all layers
    auto is_used = [&](int64_t p) { return std::find(used.begin(), used.end(), p) != used.end(); };
    for (int64_t layer_id : layer_ids) {
        int64_t total = 0;
        for (int64_t n = 2; n <= max_ngram_size; ++n) {
            int64_t current = engram_vocab_size - 1;
            for (int64_t head = 0; head < n_heads; ++head) {
                int64_t candidate = current + 1;
                while (!engram_is_prime(static_cast<uint64_t>(candidate)) || is_used(candidate)) ++candidate;
                current = candidate;
                used.push_back(candidate);
                layout.primes_.push_back(candidate);
                layout.offsets_.push_back(total);
                total += candidate;
            }
        }
        layout.num_rows_.push_back(total);
        for (int64_t m : engram_hash_multipliers(layer_id, max_ngram_size, compressed_vocab_size))
            layout.multipliers_.push_back(m);
    }
    return layout;
}

void EngramLayout::check_num_embeddings(std::span<const int64_t> engram_num_embeddings, std::string_view source) const {
    DI_CHECK(static_cast<int64_t>(engram_num_embeddings.size()) == num_layers(), source,
             ": engram_num_embeddings has ", engram_num_embeddings.size(), " entries but engram_layer_ids has ",
             num_layers());
    for (int64_t l = 0; l < num_layers(); ++l) {
        DI_CHECK(engram_num_embeddings[size_t(l)] == num_rows(l), source, ": engram_num_embeddings[", l,
                 "] (layer ", layer_id(l), ") = ", engram_num_embeddings[size_t(l)],
                 " but the prime bucket layout (engram_vocab_size, engram_max_ngram_size, engram_n_heads) "
                 "gives ",
                 num_rows(l), " rows");
    }
}

void EngramLayout::rows(int64_t layer, std::span<const int64_t> tokens, std::span<int64_t> rows_out) const {
    DI_DCHECK(static_cast<int64_t>(tokens.size()) == max_ngram_size_);
    DI_DCHECK(static_cast<int64_t>(rows_out.size()) == num_cols());
    // Products never overflow: ids < compressed_vocab_size and multipliers <= INT64_MAX / that.
    int64_t rolling = tokens[0] * multiplier(layer, 0);
    for (int64_t shift = 1; shift < max_ngram_size_; ++shift) {
        rolling ^= tokens[size_t(shift)] * multiplier(layer, shift);
        for (int64_t head = 0; head < n_heads_; ++head) {
            const int64_t col = (shift - 1) * n_heads_ + head;
            rows_out[size_t(col)] = rolling % prime(layer, col) + offset(layer, col);
        }
    }
}

void engram_lookback(std::span<const int64_t> history, int64_t position, int64_t pad_id, std::span<int64_t> tokens) {
    DI_DCHECK(position >= 0 && position < static_cast<int64_t>(history.size()));
    bool blocked = false;
    for (size_t shift = 0; shift < tokens.size(); ++shift) {
        const int64_t p = position - static_cast<int64_t>(shift);
        blocked = blocked || p < 0 || history[size_t(p)] == kEngramDead;
        tokens[shift] = blocked ? pad_id : history[size_t(p)];
    }
}

}  // namespace deepinfer
