// SPDX-License-Identifier: Apache-2.0
// Encode throughput of deepinfer's tokenizer on a JSONL corpus (one JSON string per line):
// single-threaded (documents one after another) and batch (encode_batch on N threads). Prints one
// JSON object; bench/tokenizer_bench.py runs it next to Hugging Face tokenizers on the same corpus.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "deepinfer/parallel.h"
#include "deepinfer/tokenizer.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
    std::string tokenizer_path, corpus_path;
    int threads = 0, repeat = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string key = argv[i];
        if (key == "--tokenizer") tokenizer_path = argv[i + 1];
        else if (key == "--corpus") corpus_path = argv[i + 1];
        else if (key == "--threads") threads = std::stoi(argv[i + 1]);
        else if (key == "--repeat") repeat = std::stoi(argv[i + 1]);
    }
    if (tokenizer_path.empty() || corpus_path.empty()) {
        std::fprintf(stderr, "usage: tokenizer_bench --tokenizer FILE --corpus F.jsonl [--threads N] [--repeat R]\n");
        return 2;
    }
    try {
        const auto t_load = std::chrono::steady_clock::now();
        const deepinfer::Tokenizer tok = deepinfer::Tokenizer::from_file(tokenizer_path);
        const double load_s = seconds_since(t_load);
        std::vector<std::string> docs;
        size_t bytes = 0;
        std::ifstream in(corpus_path);
        for (std::string line; std::getline(in, line);) {
            if (line.empty()) continue;
            docs.push_back(nlohmann::json::parse(line).get<std::string>());
            bytes += docs.back().size();
        }
        deepinfer::set_cpu_num_threads(threads);
        size_t num_tokens = 0;
        double single_s = 1e30, batch_s = 1e30;
        for (int r = 0; r < repeat; ++r) {
            auto t0 = std::chrono::steady_clock::now();
            size_t n = 0;
            for (const auto& d : docs) n += tok.encode(d).size();
            single_s = std::min(single_s, seconds_since(t0));
            num_tokens = n;
            t0 = std::chrono::steady_clock::now();
            auto all = tok.encode_batch(docs);
            batch_s = std::min(batch_s, seconds_since(t0));
            size_t m = 0;
            for (const auto& v : all) m += v.size();
            if (m != n) {
                std::fprintf(stderr, "batch and single encodes disagree\n");
                return 1;
            }
        }
        nlohmann::json out = {{"docs", docs.size()},          {"bytes", bytes},
                              {"tokens", num_tokens},         {"threads", deepinfer::cpu_num_threads()},
                              {"load_s", load_s},             {"single_s", single_s},
                              {"batch_s", batch_s},           {"single_mb_s", bytes / single_s / 1e6},
                              {"batch_mb_s", bytes / batch_s / 1e6}};
        std::printf("%s\n", out.dump().c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
    return 0;
}
