// SPDX-License-Identifier: Apache-2.0
// `deepinfer bench --synthetic v41-layers`: CPU prefill and decode time of one full-width
// DeepSeek-V4.1-Flash layer of each kind (spec deepseek-v41-model.md §1.3): window-only, window-only
// with Engram, ratio-2 Full, ratio-2 Reuse, ratio-1 Full (candidate source), ratio-1 Reindex,
// ratio-1 Reuse. One random checkpoint in the published formats holds the seven layers in that order;
// model k loads the first k of them (a config with num_hidden_layers = k over the same shards), and
// layer k's time is T(k) - T(k-1). Full width (hidden 5120, 64 heads x 512, q_lora 1280, index
// 32 x 128 top 512, experts 2304 wide top-6, Engram 8 heads x 256 per n-gram size) with three cuts that
// do not change the per-token work of a layer but keep the files within a 2-core CI-sized machine:
// 64 routed experts instead of 384 (the router's GEMV is 6x smaller; top-6 + shared are unchanged),
// Engram tables of ~2.4 M rows instead of 384 M (the lookup reads 24 rows per token either way), and a
// 1024-id vocabulary (so the LM head does not dominate).
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "bench_v41_layers.h"
#include "deepinfer/check.h"
#include "deepinfer/model_v41.h"
#include "deepinfer/parallel.h"
#include "deepinfer/synthetic_v41.h"

namespace deepinfer::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

const char* const kKinds[] = {"window", "window+engram", "full-r2", "reuse-r2", "full-r1", "reindex-r1", "reuse-r1"};
constexpr int64_t kLayers = 7;

// The first `n` layers of the seven-layer schedule as a V4.1 config (sources and Engram layers cut
// to the prefix).
nlohmann::ordered_json layers_config(int64_t n) {
    nlohmann::ordered_json j = v41_flash_config();
    auto& t = j["text_config"];
    const std::vector<int64_t> ratios = {0, 0, 2, 2, 1, 1, 1};
    std::vector<int64_t> r(ratios.begin(), ratios.begin() + n), kv, idx, engram;
    for (int64_t s : {2, 4}) if (s < n) kv.push_back(s);
    for (int64_t s : {2, 4, 5}) if (s < n) idx.push_back(s);
    if (n > 1) engram.push_back(1);
    t["vocab_size"] = 1024;
    t["num_hidden_layers"] = n;
    t["num_nextn_predict_layers"] = 0;
    t["compress_ratios"] = r;
    t["kv_source_layer_ids"] = kv;
    t["index_source_layer_ids"] = idx;
    t["candidate_source_layer_id"] = n > 4 ? 4 : -1;
    t["n_routed_experts"] = 64;
    t["engram_layer_ids"] = engram;
    t["engram_vocab_size"] = 100000;
    t["dspark_target_layer_ids"] = nlohmann::ordered_json::array();
    j.erase("vision_config");
    set_v41_engram_rows(j);
    return j;
}

struct Timing {
    double prefill_s = 0, decode_s = 0;
};

Timing time_model(const std::string& dir, const std::string& tokenizer, int64_t prefill, int64_t decode,
                  int64_t repeats, uint64_t seed) {
    const auto model = V41Model::load(dir, tokenizer);
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::vector<int32_t> ids(static_cast<size_t>(prefill));
    for (int32_t& t : ids) t = static_cast<int32_t>(rng() % 1024u);
    Timing best{1e30, 1e30};
    // Warm-up pass pages the weights in; then the best of `repeats` (the machine may be shared).
    for (int64_t rep = 0; rep <= repeats; ++rep) {
        V41Sequence seq;
        auto t0 = Clock::now();
        std::vector<float> logits = model->forward(ids, seq);
        const double p = seconds_since(t0);
        t0 = Clock::now();
        for (int64_t i = 0; i < decode; ++i) {
            const int32_t next = static_cast<int32_t>(rng() % 1024u);
            logits = model->forward(std::span<const int32_t>(&next, 1), seq);
        }
        const double d = seconds_since(t0);
        if (rep == 0) continue;
        best.prefill_s = std::min(best.prefill_s, p);
        best.decode_s = std::min(best.decode_s, d);
    }
    return best;
}

}  // namespace

int run_v41_layer_bench(const V41LayerBenchOptions& o) {
    const std::string base = o.dir.empty() ? (fs::temp_directory_path() / "deepinfer-bench-v41-layers").string() : o.dir;
    const std::string full = base + "/all";
    const std::string config = layers_config(kLayers).dump(2);
    std::string existing;
    if (std::ifstream in(full + "/config.json"); in) existing.assign(std::istreambuf_iterator<char>(in), {});
    if (existing != config || !fs::exists(full + "/model.safetensors.index.json")) {
        std::fprintf(stderr, "writing synthetic V4.1 checkpoint (7 full-width layers) to %s ...\n", full.c_str());
        const auto t0 = Clock::now();
        write_synthetic_v41_checkpoint(full, config,
                                       {.seed = o.seed, .residual_damping = 0.25, .include_drafter = false,
                                        .include_vision = false, .sharded = true});
        std::fprintf(stderr, "  done in %.1f s\n", seconds_since(t0));
    }
    double prev_prefill = 0, prev_decode = 0;
    for (int64_t n = 1; n <= kLayers; ++n) {
        // Model n: its own config.json over links to the seven-layer shards.
        const std::string dir = base + "/first" + std::to_string(n);
        fs::create_directories(dir);
        for (const auto& entry : fs::directory_iterator(full)) {
            const fs::path link = fs::path(dir) / entry.path().filename();
            if (entry.path().filename() == "config.json" || fs::is_symlink(link)) continue;
            fs::create_symlink(entry.path(), link);
        }
        std::ofstream(dir + "/config.json", std::ios::trunc) << layers_config(n).dump(2);
        const Timing t = time_model(dir, o.tokenizer, o.prefill, o.decode, o.repeats, o.seed);
        nlohmann::json r = {{"mode", "v41-layer"},
                            {"layer", n - 1},
                            {"kind", kKinds[n - 1]},
                            {"model_prefill_s", t.prefill_s},
                            {"model_decode_s", t.decode_s},
                            {"layer_prefill_s", t.prefill_s - prev_prefill},
                            {"layer_decode_s_per_token", o.decode ? (t.decode_s - prev_decode) / double(o.decode) : 0.0},
                            {"layer_prefill_tok_s", double(o.prefill) / (t.prefill_s - prev_prefill)},
                            {"prefill_tokens", o.prefill},
                            {"decode_steps", o.decode},
                            {"threads", cpu_num_threads()},
                            {"note", n == 1 ? "layer 0 includes the embedding and the 1024-row LM head" : ""}};
        prev_prefill = t.prefill_s;
        prev_decode = t.decode_s;
        const std::string line = r.dump() + "\n";
        std::fwrite(line.data(), 1, line.size(), stdout);
        std::fflush(stdout);
        if (!o.output.empty()) std::ofstream(o.output, std::ios::app) << line;
    }
    return 0;
}

}  // namespace deepinfer::cli
