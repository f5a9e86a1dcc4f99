// SPDX-License-Identifier: Apache-2.0
// Test helper: prints what deepinfer computes for NumPy's RNG so that a pytest can compare it with
// NumPy itself. Usage:
//   v41_numpy_rng_dump integers SEED LOW HIGH COUNT   -> COUNT int64 values, one a line
//   v41_numpy_rng_dump raw SEED COUNT                 -> COUNT next_uint64 values
//   v41_numpy_rng_dump state SEED WORDS               -> SeedSequence(SEED).generate_state(WORDS)
//   v41_numpy_rng_dump multipliers LAYER NGRAM VOCAB  -> engram_hash_multipliers
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "deepinfer/engram.h"
#include "deepinfer/engram_numpy_rng.h"

int main(int argc, char** argv) {
    using namespace deepinfer;
    try {
        const std::string cmd = argc > 1 ? argv[1] : "";
        auto arg = [&](int i) { return std::strtoll(argv[i], nullptr, 10); };
        auto uarg = [&](int i) { return std::strtoull(argv[i], nullptr, 10); };
        if (cmd == "integers" && argc == 6) {
            NumpyPcg64 rng(uarg(2));
            for (int64_t v : rng.integers_int64(arg(3), arg(4), arg(5))) std::printf("%lld\n", static_cast<long long>(v));
        } else if (cmd == "raw" && argc == 4) {
            NumpyPcg64 rng(uarg(2));
            for (long long i = 0; i < arg(3); ++i) std::printf("%llu\n", static_cast<unsigned long long>(rng.next_uint64()));
        } else if (cmd == "state" && argc == 4) {
            for (uint32_t v : numpy_seed_sequence_state(uarg(2), arg(3))) std::printf("%u\n", v);
        } else if (cmd == "multipliers" && argc == 5) {
            for (int64_t v : engram_hash_multipliers(arg(2), arg(3), arg(4))) std::printf("%lld\n", static_cast<long long>(v));
        } else {
            std::fprintf(stderr, "usage: v41_numpy_rng_dump integers|raw|state|multipliers ...\n");
            return 2;
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "%s\n", e.what());
        return 1;
    }
    return 0;
}
