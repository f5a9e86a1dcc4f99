// SPDX-License-Identifier: Apache-2.0
// The host's share of a decode step at a real vocabulary: what the engine does on the CPU for each row it
// samples there (penalties, logprobs, grammar masks, device sampling off) or verifies (speculative rows
// whose drafts were sampled), at V4's 129,280 ids. Per workload and row count, three ways:
//   serial-1t  one row after another on one thread (the engine before session 24)
//   serial     one row after another, each row's blocked sums on the CPU's threads (sampler.cpp)
//   parallel   the rows on the CPU's threads, as Engine::Impl::sample_and_account runs them now
// One JSON line per (workload, rows, way): milliseconds per step (median of --repeat) and per row; exits
// 1 if a way draws other tokens than serial-1t.
//   host_sampling_bench [--vocab 129280] [--rows 1,16,64] [--repeat 5]
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/speculative/verify.h"

namespace di = deepinfer;

namespace {

struct Workload {
    std::string name;
    di::SamplingParams params;
    bool verify = false;  // a verify row with a sampled draft (its distribution given) instead of a draw
};

double now_ms() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
    int64_t V = 129280, repeat = 5;
    std::vector<int64_t> row_counts = {1, 16, 64};
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--vocab") V = std::stoll(v);
        else if (k == "--repeat") repeat = std::stoll(v);
        else if (k == "--rows") {
            row_counts.clear();
            std::stringstream ss(v);
            for (std::string x; std::getline(ss, x, ',');) row_counts.push_back(std::stoll(x));
        } else {
            std::fprintf(stderr, "unknown option %s\n", k.c_str());
            return 2;
        }
    }
    std::vector<Workload> loads(7);
    loads[0].name = "temperature 0.8";
    loads[0].params.temperature = 0.8;
    loads[1].name = "temperature 0.8, logprobs 5";
    loads[1].params.temperature = 0.8;
    loads[1].params.logprobs = 5;
    loads[2].name = "temperature 0.8, repetition penalty 1.1";
    loads[2].params.temperature = 0.8;
    loads[2].params.repetition_penalty = 1.1;
    loads[3].name = "verify a sampled draft, temperature 0.8";
    loads[3].params.temperature = 0.8;
    loads[3].verify = true;
    loads[4].name = "temperature 0.8, top_p 0.95";
    loads[4].params.temperature = 0.8;
    loads[4].params.top_p = 0.95;
    loads[5].name = "temperature 0.8, top_k 50";
    loads[5].params.temperature = 0.8;
    loads[5].params.top_k = 50;
    loads[6].name = "temperature 3.0, top_p 0.95 (flat: most ids kept)";
    loads[6].params.temperature = 3.0;
    loads[6].params.top_p = 0.95;
    const int64_t max_rows = *std::max_element(row_counts.begin(), row_counts.end());
    std::mt19937 rng(1);
    std::normal_distribution<float> n(0.0f, 3.0f);
    std::vector<std::vector<float>> logits(static_cast<size_t>(max_rows), std::vector<float>(static_cast<size_t>(V)));
    std::vector<std::vector<float>> draft(static_cast<size_t>(max_rows), std::vector<float>(static_cast<size_t>(V)));
    for (auto& row : logits)
        for (float& x : row) x = n(rng);
    for (auto& row : draft) {  // a distribution over the ids (the draft's probabilities)
        double s = 0;
        for (float& x : row) s += (x = std::exp(n(rng)));
        for (float& x : row) x = static_cast<float>(x / s);
    }
    std::vector<int32_t> prompt(512), generated(256);
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % uint32_t(V));
    for (int32_t& t : generated) t = static_cast<int32_t>(rng() % uint32_t(V));
    const int threads = omp_get_max_threads();

    for (const Workload& w : loads) {
        auto row = [&](int64_t r) {
            const di::SampleInput in{.logits = logits[size_t(r)], .params = &w.params, .prompt = prompt,
                                     .generated = generated, .seed = 7, .stream = uint64_t(r)};
            if (!w.verify) return di::sample(in).token;
            return di::verify_row({.sample = in, .draft = static_cast<int32_t>(r), .draft_probs = draft[size_t(r)]}).token;
        };
        for (const int64_t rows : row_counts) {
            std::vector<int32_t> first_way;  // the tokens of serial-1t: every way must draw them
            for (const std::string way : {"serial-1t", "serial", "parallel"}) {
                omp_set_num_threads(way == "serial-1t" ? 1 : threads);
                std::vector<double> ms;
                std::vector<int32_t> tokens(static_cast<size_t>(rows));
                for (int64_t k = 0; k < repeat + 1; ++k) {  // the first round warms the allocator
                    const double t0 = now_ms();
                    if (way == "parallel") {
#pragma omp parallel for schedule(dynamic, 1) if (rows > 1)  // (as the engine: one row keeps its sums parallel)
                        for (int64_t r = 0; r < rows; ++r) tokens[size_t(r)] = row(r);
                    } else {
                        for (int64_t r = 0; r < rows; ++r) tokens[size_t(r)] = row(r);
                    }
                    if (k > 0) ms.push_back(now_ms() - t0);
                }
                if (first_way.empty()) first_way = tokens;
                if (tokens != first_way) {
                    std::fprintf(stderr, "%s, %lld rows: %s drew other tokens than serial-1t\n", w.name.c_str(),
                                 static_cast<long long>(rows), way.c_str());
                    return 1;
                }
                std::sort(ms.begin(), ms.end());
                const double med = ms[ms.size() / 2];
                std::printf("{\"workload\":\"%s\",\"vocab\":%lld,\"rows\":%lld,\"way\":\"%s\",\"threads\":%d,"
                            "\"ms_per_step\":%.4f,\"ms_per_row\":%.4f,\"first_token\":%d}\n",
                            w.name.c_str(), static_cast<long long>(V), static_cast<long long>(rows), way.c_str(),
                            way == "serial-1t" ? 1 : threads, med, med / double(rows), tokens[0]);
                std::fflush(stdout);
            }
        }
    }
    return 0;
}
