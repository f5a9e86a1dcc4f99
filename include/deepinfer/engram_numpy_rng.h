// SPDX-License-Identifier: Apache-2.0
// NumPy's `np.random.default_rng(seed)` (SeedSequence -> PCG64, XSL-RR 128/64) and
// `Generator.integers(low, high, size, dtype=np.int64)` reproduced bit for bit. DeepSeek-V4.1's
// Engram hash multipliers are drawn this way (spec §5.3), so the engine needs the exact stream;
// tests/python/test_v41_numpy_rng.py checks it against NumPy itself.
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer {

// NumPy's SeedSequence(entropy).generate_state(num_words, np.uint32) for a non-negative integer
// entropy and no spawn key (pool size 4).
std::vector<uint32_t> numpy_seed_sequence_state(uint64_t entropy, int64_t num_words);

// The bit generator behind `np.random.default_rng(seed)` (numpy.random.PCG64, not PCG64DXSM).
// Not thread-safe; cheap to construct.
class NumpyPcg64 {
public:
    explicit NumpyPcg64(uint64_t seed);

    uint64_t next_uint64();
    // NumPy's next_uint32: the low half of a fresh 64-bit draw, then the buffered high half.
    uint32_t next_uint32();

    // `Generator.integers(low, high, size=count, dtype=np.int64)`, `high` exclusive, `low < high`
    // (NumPy's unmasked Lemire rejection sampler, including its 32-bit path for small ranges).
    std::vector<int64_t> integers_int64(int64_t low, int64_t high, int64_t count);

private:
    unsigned __int128 state_ = 0;
    unsigned __int128 inc_ = 0;
    bool has_uint32_ = false;
    uint32_t buffered_uint32_ = 0;
};

}  // namespace deepinfer
