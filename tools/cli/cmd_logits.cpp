// SPDX-License-Identifier: Apache-2.0
// `deepinfer logits` and `deepinfer generate`: one sequence through the CPU model.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>

#include "commands.h"
#include "deepinfer/check.h"
#include "deepinfer/model.h"

namespace deepinfer::cli {
namespace {

std::vector<int32_t> parse_ids(const std::string& text) {
    std::vector<int32_t> ids;
    size_t i = 0;
    while (i < text.size()) {
        size_t j = text.find(',', i);
        if (j == std::string::npos) j = text.size();
        std::string tok = text.substr(i, j - i);
        DI_CHECK(!tok.empty(), "--ids: empty entry at character ", i);
        size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(tok, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        DI_CHECK(used == tok.size() && v >= 0 && v <= INT32_MAX, "--ids: '", tok, "' at character ", i,
                 " is not a token id");
        ids.push_back(static_cast<int32_t>(v));
        i = j + 1;
    }
    DI_CHECK(!ids.empty(), "--ids: no token ids");
    return ids;
}

// --numerics, --tokenizer (V4.1's Engram token map; default: the checkpoint's tokenizer.json,
// else the bundled one) and --device.
ModelOptions model_options(const std::string& numerics, const std::string& tokenizer, const std::string& device) {
    ModelOptions o;
    o.tokenizer_json = tokenizer;
    o.device = parse_device(device);
    if (!numerics.empty()) {
        o.numerics_from_checkpoint = false;
        o.numerics = parse_numerics(numerics);
    }
    return o;
}

}  // namespace

Command register_logits(CLI::App& app) {
    struct Options {
        std::string model, ids, output, numerics, tokenizer, device = "cpu";
        int64_t chunk = 0;
    };
    auto o = std::make_shared<Options>();
    CLI::App* sub = app.add_subcommand("logits", "Write float32 logits [num_ids, vocab_size] for every position");
    sub->add_option("--model", o->model, "Checkpoint directory")->required();
    sub->add_option("--ids", o->ids, "Comma-separated token ids")->required();
    sub->add_option("--output", o->output, "Output file (little-endian float32, no header)")->required();
    sub->add_option("--numerics", o->numerics, "exact | official (default: official for FP8/FP4 checkpoints)");
    sub->add_option("--chunk", o->chunk, "Prefill chunk size (0 = all at once)");
    sub->add_option("--device", o->device, "cpu | cuda (DeepSeek-V4)")->capture_default_str();
    sub->add_option("--tokenizer", o->tokenizer, "V4.1: tokenizer.json for the Engram token map (default: the bundled one)");
    return [sub, o]() -> int {
        if (!sub->parsed()) return -1;
        std::vector<int32_t> ids = parse_ids(o->ids);
        std::vector<float> logits;
        const size_t chunk = o->chunk > 0 ? static_cast<size_t>(o->chunk) : ids.size();
        {
            auto model = Model::load(o->model, model_options(o->numerics, o->tokenizer, o->device));
            Sequence seq = model->new_sequence();
            for (size_t i = 0; i < ids.size(); i += chunk) {
                std::span<const int32_t> part(ids.data() + i, std::min(chunk, ids.size() - i));
                std::vector<float> l = model->forward(seq, part, /*all_logits=*/true);
                logits.insert(logits.end(), l.begin(), l.end());
            }
        }
        std::ofstream out(o->output, std::ios::binary | std::ios::trunc);
        DI_CHECK(out.good(), o->output, ": cannot open for writing");
        out.write(reinterpret_cast<const char*>(logits.data()), static_cast<std::streamsize>(logits.size() * 4));
        DI_CHECK(out.good(), o->output, ": write failed");
        return 0;
    };
}

Command register_generate(CLI::App& app) {
    struct Options {
        std::string model, ids, numerics, tokenizer, device = "cpu";
        int64_t max_tokens = 16;
        double temperature = 0.0;
        uint64_t seed = 0;
        bool ignore_eos = false, bounded_replay = false;
    };
    auto o = std::make_shared<Options>();
    CLI::App* sub = app.add_subcommand("generate", "Continue a token sequence; prints {\"token_ids\": [...]}");
    sub->add_option("--model", o->model, "Checkpoint directory")->required();
    sub->add_option("--ids", o->ids, "Comma-separated prompt token ids")->required();
    sub->add_option("--max-tokens", o->max_tokens, "Tokens to generate")->required()->check(CLI::Range(1, 1 << 20));
    sub->add_option("--temperature", o->temperature, "0 = greedy")->check(CLI::Range(0.0, 100.0));
    sub->add_option("--seed", o->seed, "Random seed for sampling");
    sub->add_option("--numerics", o->numerics, "exact | official");
    sub->add_flag("--ignore-eos", o->ignore_eos, "Do not stop at the end-of-sequence token");
    sub->add_option("--device", o->device, "cpu | cuda (DeepSeek-V4)")->capture_default_str();
    sub->add_option("--tokenizer", o->tokenizer, "V4.1: tokenizer.json for the Engram token map (default: the bundled one)");
    sub->add_flag("--bounded-replay", o->bounded_replay,
                  "V4.1: approximate SWA bounded-replay prefill (docs/v41-bounded-replay.md; off: the exact path)");
    return [sub, o]() -> int {
        if (!sub->parsed()) return -1;
        std::vector<int32_t> ids = parse_ids(o->ids);
        ModelOptions mo = model_options(o->numerics, o->tokenizer, o->device);
        mo.v41_bounded_replay = o->bounded_replay;
        auto model = Model::load(o->model, mo);
        const std::vector<int64_t>& eos_ids = model->info().eos_token_ids;
        Sequence seq = model->new_sequence();
        auto step = [&](std::span<const int32_t> t) { return model->forward(seq, t, /*all_logits=*/false); };
        std::mt19937_64 rng(o->seed);
        std::vector<int32_t> generated;
        std::vector<float> logits = step(ids);
        const int64_t vocab = static_cast<int64_t>(logits.size());
        for (int64_t n = 0; n < o->max_tokens; ++n) {
            int32_t next = 0;
            if (o->temperature <= 0.0) {
                // Greedy; ties go to the lowest id.
                for (int64_t v = 1; v < vocab; ++v)
                    if (logits[size_t(v)] > logits[size_t(next)]) next = static_cast<int32_t>(v);
            } else {
                double mx = -INFINITY;
                for (float l : logits) mx = std::max(mx, double(l));
                std::vector<double> p(logits.size());
                double sum = 0;
                for (size_t v = 0; v < logits.size(); ++v) sum += (p[v] = std::exp((logits[v] - mx) / o->temperature));
                double r = std::uniform_real_distribution<double>(0.0, sum)(rng);
                size_t v = 0;
                for (; v + 1 < p.size() && r >= p[v]; ++v) r -= p[v];
                next = static_cast<int32_t>(v);
            }
            generated.push_back(next);
            const bool eos = std::find(eos_ids.begin(), eos_ids.end(), next) != eos_ids.end();
            if ((eos && !o->ignore_eos) || n + 1 == o->max_tokens) break;
            logits = step(std::span<const int32_t>(&generated.back(), 1));
        }
        std::string out = "{\"token_ids\": [";
        for (size_t i = 0; i < generated.size(); ++i) out += (i ? ", " : "") + std::to_string(generated[i]);
        out += "]}\n";
        std::fwrite(out.data(), 1, out.size(), stdout);
        return 0;
    };
}

}  // namespace deepinfer::cli
