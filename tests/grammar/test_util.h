// SPDX-License-Identifier: Apache-2.0
// Helpers of the grammar tests: small vocabularies, acceptance of whole strings, brute-force masks.
#pragma once

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "deepinfer/grammar.h"

namespace deepinfer::test {

// Every single byte of `alphabet` plus `extra` random multi-byte strings over it; id 0 is EOS.
inline std::shared_ptr<TokenVocabulary> small_vocab(const std::string& alphabet, int extra, uint64_t seed,
                                                    int max_len = 4) {
    std::vector<std::string> toks = {"<eos>"};
    for (char c : alphabet) toks.emplace_back(1, c);
    std::mt19937_64 rng(seed);
    for (int i = 0; i < extra; ++i) {
        std::string s;
        const int len = 2 + int(rng() % uint64_t(max_len - 1));
        for (int k = 0; k < len; ++k) s.push_back(alphabet[rng() % alphabet.size()]);
        toks.push_back(s);
    }
    return std::make_shared<TokenVocabulary>(std::move(toks), std::vector<int32_t>{0});
}

// Whether the whole string is in the language.
inline bool accepts(const CompiledGrammar& g, const std::string& s) {
    GrammarMatcher m(g);
    return m.accept_bytes(s) && m.can_end();
}
// Whether the string is a prefix of some string of the language.
inline bool prefix_ok(const CompiledGrammar& g, const std::string& s) {
    GrammarMatcher m(g);
    return m.accept_bytes(s);
}

inline bool bit(const std::vector<uint64_t>& m, int32_t id) { return (m[size_t(id) >> 6] >> (id & 63)) & 1; }

}  // namespace deepinfer::test
