// SPDX-License-Identifier: Apache-2.0
// NumPy's SeedSequence, PCG64 and bounded integer sampling (numpy/random/bit_generator.pyx,
// src/pcg64/pcg64.h, src/distributions/distributions.c), transcribed from their documented
// algorithms. Every constant below is NumPy's.
#include "deepinfer/engram_numpy_rng.h"

#include "deepinfer/check.h"

namespace deepinfer {
namespace {

// SeedSequence hashing constants (uint32 arithmetic throughout).
constexpr uint32_t kInitA = 0x43b0d7e5u;
constexpr uint32_t kMultA = 0x931e8875u;
constexpr uint32_t kInitB = 0x8b51f9ddu;
constexpr uint32_t kMultB = 0x58f38dedu;
constexpr uint32_t kMixMultL = 0xca01f9ddu;
constexpr uint32_t kMixMultR = 0x4973f715u;
constexpr int kXShift = 16;
constexpr int kPoolSize = 4;

uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
    value ^= hash_const;
    hash_const *= kMultA;
    value *= hash_const;
    value ^= value >> kXShift;
    return value;
}

uint32_t mix(uint32_t x, uint32_t y) {
    uint32_t result = kMixMultL * x - kMixMultR * y;
    result ^= result >> kXShift;
    return result;
}

// PCG64's 128-bit LCG multiplier (PCG_DEFAULT_MULTIPLIER_128).
constexpr unsigned __int128 kPcgMultiplier =
    (static_cast<unsigned __int128>(2549297995355413924ULL) << 64) | 4865540595714422341ULL;

unsigned __int128 make_u128(uint64_t high, uint64_t low) {
    return (static_cast<unsigned __int128>(high) << 64) | low;
}

}  // namespace

std::vector<uint32_t> numpy_seed_sequence_state(uint64_t entropy, int64_t num_words) {
    DI_CHECK(num_words >= 0, "numpy_seed_sequence_state: negative word count ", num_words);
    // _int_to_uint32_array: little-endian 32-bit words, [0] for zero.
    std::vector<uint32_t> words;
    if (entropy == 0) words.push_back(0);
    for (uint64_t n = entropy; n > 0; n >>= 32) words.push_back(static_cast<uint32_t>(n & 0xffffffffu));

    // mix_entropy into a pool of four words.
    uint32_t pool[kPoolSize];
    uint32_t hash_const = kInitA;
    for (int i = 0; i < kPoolSize; ++i)
        pool[i] = hashmix(i < static_cast<int>(words.size()) ? words[size_t(i)] : 0u, hash_const);
    for (int src = 0; src < kPoolSize; ++src)
        for (int dst = 0; dst < kPoolSize; ++dst)
            if (src != dst) pool[dst] = mix(pool[dst], hashmix(pool[src], hash_const));
    for (size_t src = kPoolSize; src < words.size(); ++src)
        for (int dst = 0; dst < kPoolSize; ++dst) pool[dst] = mix(pool[dst], hashmix(words[src], hash_const));

    // generate_state: cycle over the pool.
    std::vector<uint32_t> state(static_cast<size_t>(num_words));
    uint32_t hash_b = kInitB;
    for (int64_t i = 0; i < num_words; ++i) {
        uint32_t value = pool[i % kPoolSize];
        value ^= hash_b;
        hash_b *= kMultB;
        value *= hash_b;
        value ^= value >> kXShift;
        state[size_t(i)] = value;
    }
    return state;
}

NumpyPcg64::NumpyPcg64(uint64_t seed) {
    // PCG64.__init__: generate_state(4, np.uint64) = 8 uint32 words read as little-endian uint64s;
    // words 0,1 are the seed (high, low) and words 2,3 the increment (high, low).
    std::vector<uint32_t> s = numpy_seed_sequence_state(seed, 8);
    uint64_t w[4];
    for (int i = 0; i < 4; ++i) w[i] = uint64_t(s[size_t(2 * i)]) | (uint64_t(s[size_t(2 * i + 1)]) << 32);
    const unsigned __int128 initstate = make_u128(w[0], w[1]);
    const unsigned __int128 initseq = make_u128(w[2], w[3]);
    // pcg_setseq_128_srandom_r
    state_ = 0;
    inc_ = (initseq << 1) | 1;
    state_ = state_ * kPcgMultiplier + inc_;
    state_ += initstate;
    state_ = state_ * kPcgMultiplier + inc_;
}

uint64_t NumpyPcg64::next_uint64() {
    state_ = state_ * kPcgMultiplier + inc_;
    // XSL-RR output of the new state.
    const uint64_t value = static_cast<uint64_t>(state_ >> 64) ^ static_cast<uint64_t>(state_);
    const unsigned rot = static_cast<unsigned>(state_ >> 122);
    return (value >> rot) | (value << ((64u - rot) & 63u));
}

uint32_t NumpyPcg64::next_uint32() {
    if (has_uint32_) {
        has_uint32_ = false;
        return buffered_uint32_;
    }
    const uint64_t next = next_uint64();
    has_uint32_ = true;
    buffered_uint32_ = static_cast<uint32_t>(next >> 32);
    return static_cast<uint32_t>(next & 0xffffffffu);
}

std::vector<int64_t> NumpyPcg64::integers_int64(int64_t low, int64_t high, int64_t count) {
    DI_CHECK(low < high, "integers_int64: low (", low, ") must be < high (", high, ")");
    DI_CHECK(count >= 0, "integers_int64: negative count ", count);
    // random_bounded_uint64_fill(off = low, rng = high - 1 - low, use_masked = false)
    const uint64_t rng = static_cast<uint64_t>(high) - 1 - static_cast<uint64_t>(low);
    const uint64_t off = static_cast<uint64_t>(low);
    std::vector<int64_t> out(static_cast<size_t>(count));
    for (auto& o : out) {
        uint64_t v;
        if (rng == 0) {
            v = 0;
        } else if (rng <= 0xffffffffULL) {
            if (rng == 0xffffffffULL) {
                v = next_uint32();
            } else {
                // buffered_bounded_lemire_uint32
                const uint32_t rng_excl = static_cast<uint32_t>(rng) + 1;
                uint64_t m = uint64_t(next_uint32()) * rng_excl;
                uint32_t leftover = static_cast<uint32_t>(m & 0xffffffffu);
                if (leftover < rng_excl) {
                    const uint32_t threshold = (UINT32_MAX - static_cast<uint32_t>(rng)) % rng_excl;
                    while (leftover < threshold) {
                        m = uint64_t(next_uint32()) * rng_excl;
                        leftover = static_cast<uint32_t>(m & 0xffffffffu);
                    }
                }
                v = m >> 32;
            }
        } else if (rng == UINT64_MAX) {
            v = next_uint64();
        } else {
            // bounded_lemire_uint64
            const uint64_t rng_excl = rng + 1;
            unsigned __int128 m = static_cast<unsigned __int128>(next_uint64()) * rng_excl;
            uint64_t leftover = static_cast<uint64_t>(m);
            if (leftover < rng_excl) {
                const uint64_t threshold = (UINT64_MAX - rng) % rng_excl;
                while (leftover < threshold) {
                    m = static_cast<unsigned __int128>(next_uint64()) * rng_excl;
                    leftover = static_cast<uint64_t>(m);
                }
            }
            v = static_cast<uint64_t>(m >> 64);
        }
        o = static_cast<int64_t>(off + v);
    }
    return out;
}

}  // namespace deepinfer
