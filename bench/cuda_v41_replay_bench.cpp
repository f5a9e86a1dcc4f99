// SPDX-License-Identifier: Apache-2.0
// Single-chunk prefill time of the CUDA DeepSeek-V4.1 model with and without SWA bounded replay
// (ModelOptions::v41_bounded_replay, docs/v41-bounded-replay.md), one JSON line per prompt length.
// A random V4.1 checkpoint in the published formats (FP8 linears, MXFP4 experts, Engram at layers 1-2)
// with the release's proportions: 8 layers, the decoder (from the first ratio-1 KV source) the last 4
// (release: 20 of 40), sliding window 128, index top-512. Each prompt is prefilled in one chunk (last
// logits only) on a fresh sequence, exact and replay alternating; the median of --reps runs each.
// The ceiling of the speed-up is the share of layer-rows replay skips: L / (L_enc + L_dec * W / N)
// (the decoder's first layer's compressor over the skipped rows and the head not counted).
//   cuda_v41_replay_bench [--lengths 1024,4096,8192] [--reps 3] [--hidden 2048] [--gemm reference|fast]
//                         [--dir /tmp/v41-replay-bench] [--cpu-check 1] (the checkpoint on the CPU model: a config check)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/model/cuda_model.h"
#include "backends/cuda/model/cuda_v41_model.h"
#include "deepinfer/model.h"
#include "deepinfer/synthetic_v41.h"

namespace {

using deepinfer::bench::Clock;
using deepinfer::bench::since;
using deepinfer::bench::parse_list;

using namespace deepinfer;

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

constexpr int64_t kLayers = 8, kDecoderBegin = 4, kWindow = 128;

std::string config_json(int64_t hidden, int64_t vocab, int64_t max_len) {
    nlohmann::ordered_json j = v41_flash_config();
    j.erase("vision_config");
    auto& t = j["text_config"];
    t["vocab_size"] = vocab;
    t["hidden_size"] = hidden;
    t["num_hidden_layers"] = kLayers;
    t["num_attention_heads"] = 16;
    t["head_dim"] = 512;
    t["qk_rope_head_dim"] = 64;
    t["q_lora_rank"] = hidden / 2;
    t["o_groups"] = 4;
    t["o_lora_rank"] = hidden / 4;
    t["sliding_window"] = kWindow;
    // window-only x2, ratio-2 Full + Reuse, ratio-1 Full (the decoder's first: candidate source), Reuse,
    // Reindex, Reuse; then the drafter's three stages.
    t["compress_ratios"] = {0, 0, 2, 2, 1, 1, 1, 1, 0, 0, 0};
    t["kv_source_layer_ids"] = {2, kDecoderBegin};
    t["index_source_layer_ids"] = {2, kDecoderBegin, 6};
    t["candidate_source_layer_id"] = kDecoderBegin;
    t["index_topk"] = 512;
    t["index_n_heads"] = 16;
    t["index_head_dim"] = 128;
    t["n_routed_experts"] = 8;
    t["num_experts_per_tok"] = 4;
    t["moe_intermediate_size"] = hidden / 2;
    t["engram_layer_ids"] = {1, 2};
    t["engram_n_heads"] = 2;
    t["engram_head_dim"] = 32;
    t["engram_vocab_size"] = 64;
    t["max_position_embeddings"] = max_len;
    t["dspark_target_layer_ids"] = {5, 6, 7};
    t["dspark_markov_rank"] = hidden;
    t["dspark_n_routed_experts"] = 8;
    t["dspark_num_experts_per_tok"] = 2;
    t["dspark_noise_token_id"] = vocab - 1;
    set_v41_engram_rows(j);
    return j.dump(2);
}

}  // namespace

int main(int argc, char** argv) {
    std::string lengths = "1024,4096,8192", dir = "/tmp/v41-replay-bench";
    int64_t reps = 3, hidden = 2048;
    bool cpu_check = false, fast = false;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--lengths") lengths = v;
        else if (k == "--reps") reps = std::stoll(v);
        else if (k == "--hidden") hidden = std::stoll(v);
        else if (k == "--dir") dir = v;
        else if (k == "--gemm") fast = v == "fast";  // reference (default) | fast (tensor cores)
        else if (k == "--cpu-check") cpu_check = v == "1";  // the checkpoint on the CPU model instead (a config check)
        else {
            std::fprintf(stderr, "unknown option %s\n", k.c_str());
            return 2;
        }
    }
    if (!cpu_check && cuda::device_count() == 0) {
        std::fprintf(stderr, "no CUDA device\n");
        return 0;
    }
    const std::vector<int64_t> ns = parse_list(lengths);
    const int64_t max_n = *std::max_element(ns.begin(), ns.end()), vocab = 4096, max_len = max_n + 256;
    const auto t0 = Clock::now();
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    SyntheticCheckpointOptions so;
    so.seed = 5;
    so.residual_damping = 0.25;
    so.parallel = true;
    write_synthetic_v41_checkpoint(dir, config_json(hidden, vocab, max_len), so);
    const double write_s = since(t0);
    if (cpu_check) {
        for (bool replay : {false, true}) {
            ModelOptions mo;
            mo.tokenizer_json = DI_TOKENIZER_JSON;
            mo.v41_bounded_replay = replay;
            const auto m = Model::load(dir, mo);
            std::vector<int32_t> prompt(static_cast<size_t>(max_n));
            for (size_t k = 0; k < prompt.size(); ++k) prompt[k] = int32_t((k * 7919) % size_t(vocab - 1));
            Sequence s = m->new_sequence();
            const std::vector<float> l = m->forward(s, prompt, false);
            std::printf("cpu replay=%d: %zu logits, argmax %d, l[0] %g\n", int(replay), l.size(),
                        int(std::max_element(l.begin(), l.end()) - l.begin()), double(l[0]));
        }
        return 0;
    }
    auto load = [&](bool replay) {
        ModelOptions mo;
        mo.tokenizer_json = DI_TOKENIZER_JSON;
        mo.max_num_seqs = 4;
        mo.max_batch_tokens = max_n;
        mo.v41_bounded_replay = replay;
        cuda::CudaModelOptions co;
        co.max_model_len = max_len;
        co.gemm = fast ? cuda::GemmMode::kFast : cuda::GemmMode::kReference;
        return cuda::load_cuda_v41_model(dir, mo, co);
    };
    const auto exact = load(false), replay = load(true);
    std::mt19937 rng(1);
    for (int64_t n : ns) {
        std::vector<int32_t> prompt(static_cast<size_t>(n));
        for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % uint32_t(vocab - 1));
        auto prefill = [&](const Model& m) {
            Sequence s = m.new_sequence();
            const auto t1 = Clock::now();
            const std::vector<float> l = m.forward(s, prompt, false);  // (copies the logits back: synchronized)
            return std::make_pair(since(t1), l);
        };
        prefill(*exact);  // warm-up (first use of the shapes)
        prefill(*replay);
        std::vector<double> te, tr;
        std::vector<float> le, lr;
        for (int64_t r = 0; r < reps; ++r) {
            auto a = prefill(*exact);
            auto b = prefill(*replay);
            te.push_back(a.first * 1e3);
            tr.push_back(b.first * 1e3);
            le = a.second;
            lr = b.second;
        }
        float max_diff = 0, max_logit = 0;
        for (size_t k = 0; k < le.size(); ++k) {
            max_diff = std::max(max_diff, std::abs(le[k] - lr[k]));
            max_logit = std::max(max_logit, std::abs(le[k]));
        }
        const int32_t top_e = int32_t(std::max_element(le.begin(), le.end()) - le.begin());
        const int32_t top_r = int32_t(std::max_element(lr.begin(), lr.end()) - lr.begin());
        const double e = median(te) / 1e3, r = median(tr) / 1e3;
        const double dec = double(kLayers - kDecoderBegin), ceiling =
            double(kLayers) / (double(kDecoderBegin) + dec * double(std::min(n, kWindow)) / double(n));
        nlohmann::json j{{"device", cuda::device_description(0)}, {"gemm", fast ? "fast" : "reference"}, {"hidden", hidden}, {"layers", kLayers},
                         {"decoder_layers", kLayers - kDecoderBegin}, {"window", kWindow}, {"prompt_tokens", n},
                         {"reps", reps}, {"exact_ms", e * 1e3}, {"replay_ms", r * 1e3},
                         {"exact_tok_s", double(n) / e}, {"replay_tok_s", double(n) / r}, {"speedup", e / r},
                         {"speedup_ceiling", ceiling}, {"speedup_of_ceiling", (e / r) / ceiling},
                         {"exact_ms_all", te}, {"replay_ms_all", tr},
                         {"last_logits_max_rel_diff", max_logit > 0 ? max_diff / max_logit : 0.0f},
                         {"top1_equal", top_e == top_r}, {"checkpoint_write_s", write_s}};
        std::printf("%s\n", j.dump().c_str());
        std::fflush(stdout);
    }
    return 0;
}
