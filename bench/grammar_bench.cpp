// SPDX-License-Identifier: Apache-2.0
// Structured-output benchmark, deepinfer side: for each schema of a suite, the compile time
// (front end + automata + token caches, no cache hit) and the per-token mask time along random
// walks (a random allowed token each step, seeded). Writes one JSON line per schema with the
// token sequences walked, so bench/grammar_bench.py can replay the same tokens through xgrammar.
// Compile time: the median of --compile-reps fresh compiles (the machine may be shared and noisy).
//   grammar_bench --tokenizer tokenizer.json --schemas suite.jsonl [--walks 4] [--steps 200] [--compile-reps 5]
#include <algorithm>
#include <chrono>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "deepinfer/grammar.h"
#include "deepinfer/tokenizer.h"

using namespace deepinfer;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
    std::string tok_path, suite_path;
    int walks = 4, steps = 200, compile_reps = 5;
    int64_t vocab_size = 129280;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i];
        if (k == "--tokenizer") tok_path = argv[i + 1];
        else if (k == "--schemas") suite_path = argv[i + 1];
        else if (k == "--walks") walks = std::stoi(argv[i + 1]);
        else if (k == "--steps") steps = std::stoi(argv[i + 1]);
        else if (k == "--vocab-size") vocab_size = std::stoll(argv[i + 1]);
        else if (k == "--compile-reps") compile_reps = std::max(1, std::stoi(argv[i + 1]));
    }
    if (tok_path.empty() || suite_path.empty()) {
        std::cerr << "usage: grammar_bench --tokenizer FILE --schemas FILE.jsonl [--walks N] [--steps N]\n";
        return 2;
    }
    Tokenizer tok = Tokenizer::from_file(tok_path);
    const auto tv0 = Clock::now();
    auto vocab = std::make_shared<TokenVocabulary>(tok, int32_t(vocab_size), std::vector<int32_t>{1});
    const double vocab_secs = std::chrono::duration<double>(Clock::now() - tv0).count();
    std::cout << nlohmann::json{{"vocabulary_seconds", vocab_secs}}.dump() << "\n";
    std::ifstream in(suite_path);
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        const nlohmann::ordered_json item = nlohmann::ordered_json::parse(line);  // keeps property order
        const std::string name = item["name"], schema = item["schema"].dump();
        nlohmann::json out = {{"name", name}};
        try {
            std::vector<double> compile_times;
            std::optional<CompiledGrammar> compiled;
            for (int r = 0; r < compile_reps; ++r) {
                GrammarCompiler compiler(vocab);  // fresh: no cache hit
                const auto t0 = Clock::now();
                compiled = compiler.compile_json_schema(schema, {JsonWhitespace::kFlexible, -1, false});
                compile_times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
            }
            const CompiledGrammar& g = *compiled;
            std::sort(compile_times.begin(), compile_times.end());
            out["compile_seconds"] = compile_times[compile_times.size() / 2];
            out["compile_seconds_all"] = compile_times;
            out["states"] = g.num_states();
            std::vector<double> times;
            std::vector<uint64_t> mask(size_t(vocab->bitmask_words()));
            nlohmann::json seqs = nlohmann::json::array();
            for (int w = 0; w < walks; ++w) {
                std::mt19937_64 rng(1000 + uint64_t(w));
                GrammarMatcher m(g);
                std::vector<int32_t> seq;
                for (int s = 0; s < steps; ++s) {
                    const auto t1 = Clock::now();
                    const int64_t n = m.fill_next_token_bitmask(mask);
                    times.push_back(std::chrono::duration<double>(Clock::now() - t1).count());
                    if (n == 0) break;
                    // A random allowed token; EOS is taken only once the walk has had its steps
                    // (walks keep going, like a model that does not stop early).
                    std::vector<int32_t> allowed;
                    for (int32_t t = 0, nv = vocab->size(); t < nv; ++t)
                        if ((mask[size_t(t >> 6)] >> (t & 63)) & 1 && (t != 1 || n == 1)) allowed.push_back(t);
                    const int32_t pick = allowed[rng() % allowed.size()];
                    m.accept_token(pick);
                    seq.push_back(pick);
                    if (m.is_terminated()) break;
                }
                seqs.push_back(seq);
            }
            std::sort(times.begin(), times.end());
            out["mask_median_us"] = times[times.size() / 2] * 1e6;
            out["mask_p99_us"] = times[std::min(times.size() - 1, size_t(double(times.size()) * 0.99))] * 1e6;
            out["mask_mean_us"] = [&] {
                double s = 0;
                for (double t : times) s += t;
                return s / double(times.size()) * 1e6;
            }();
            out["num_masks"] = times.size();
            out["sequences"] = seqs;
        } catch (const GrammarError& e) {
            out["error"] = e.what();
        }
        std::cout << out.dump() << "\n" << std::flush;
    }
    return 0;
}
