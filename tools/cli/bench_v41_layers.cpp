// SPDX-License-Identifier: Apache-2.0
// `deepinfer bench --synthetic v41-layers`: CPU prefill and decode time of one full-width
// DeepSeek-V4.1-Flash layer of each kind (spec deepseek-v41-model.md §1.3): window-only, window-only
// with Engram, ratio-2 Full, ratio-2 Reuse, ratio-1 Full (candidate source), ratio-1 Reindex,
// ratio-1 Reuse. One random checkpoint in the published formats holds the seven layers in that order;
// each layer's wall time comes from the forward's trace (V41ForwardTrace::layer_seconds). Full width (hidden 5120, 64 heads x 512, q_lora 1280, index
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
#include "deepinfer/model_config_v41.h"
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

// Per-layer seconds of a prefill of `prefill` tokens and of `decode` single-token steps after it, the
// best of `repeats` runs after one warm-up run (which pages the weights in).
// Multiply-adds per token of layer `l`'s linears (attention projections, compressor, indexer, Engram,
// router, the top-k routed experts and the shared expert), from the config.
double layer_macs_per_token(const V41TextConfig& c, int64_t l) {
    const double D = double(c.hidden_size), Q = double(c.q_lora_rank), HD = double(c.num_attention_heads * c.head_dim);
    const double Dh = double(c.head_dim), IQ = double(c.index_n_heads * c.index_head_dim);
    double m = D * Q + Q * HD + D * Dh + HD * double(c.o_lora_rank) + double(c.o_groups * c.o_lora_rank) * D;
    if (c.is_kv_source(l)) {
        const int64_t r = c.compress_ratio(l);
        m += D * Dh * (r > 1 ? 2.0 : 1.0) + Dh * double(c.index_head_dim) / double(r);
    }
    if (c.is_index_source(l)) m += Q * IQ + D * double(c.index_n_heads);
    if (c.engram_index(l) >= 0)
        m += double((c.hc_mult + 1) * c.hidden_size) * double(c.engram_num_hash_cols() * c.engram_head_dim);
    m += double(c.num_experts_per_tok + c.n_shared_experts) * 3.0 * D * double(c.moe_intermediate_size) +
         D * double(c.n_routed_experts);
    return m;
}

struct Timing {
    std::vector<double> prefill_s, decode_s;  // [layers]
    double prefill_total_s = 1e30, decode_total_s = 1e30;
};

Timing time_layers(const std::string& dir, const std::string& tokenizer, int64_t prefill, int64_t decode,
                   int64_t repeats, uint64_t seed, Numerics numerics) {
    ModelOptions mo;
    mo.tokenizer_json = tokenizer;
    mo.numerics_from_checkpoint = false;
    mo.numerics = numerics;
    const auto model = V41Model::load(dir, mo);
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::vector<int32_t> ids(static_cast<size_t>(prefill));
    for (int32_t& t : ids) t = static_cast<int32_t>(rng() % 1024u);
    Timing best;
    best.prefill_s.assign(kLayers, 1e30);
    best.decode_s.assign(kLayers, 1e30);
    for (int64_t rep = 0; rep <= repeats; ++rep) {
        V41Sequence seq;
        V41ForwardTrace trace;
        auto t0 = Clock::now();
        model->forward(ids, seq, &trace);
        const double p = seconds_since(t0);
        std::vector<double> dec(kLayers, 0.0);
        t0 = Clock::now();
        for (int64_t i = 0; i < decode; ++i) {
            const int32_t next = static_cast<int32_t>(rng() % 1024u);
            V41ForwardTrace step;
            model->forward(std::span<const int32_t>(&next, 1), seq, &step);
            for (const auto& [l, s] : step.layer_seconds) dec[size_t(l)] += s;
        }
        const double d = seconds_since(t0);
        if (rep == 0) continue;
        best.prefill_total_s = std::min(best.prefill_total_s, p);
        best.decode_total_s = std::min(best.decode_total_s, d);
        for (const auto& [l, s] : trace.layer_seconds) best.prefill_s[size_t(l)] = std::min(best.prefill_s[size_t(l)], s);
        for (int64_t l = 0; l < kLayers; ++l) best.decode_s[size_t(l)] = std::min(best.decode_s[size_t(l)], dec[size_t(l)]);
    }
    return best;
}

// The machine's 1-minute load average (the benchmark may share its cores).
double load_average() {
    double l = -1;
    if (std::ifstream in("/proc/loadavg"); in) in >> l;
    return l;
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
    const V41TextConfig tc = parse_v41_model_config(config).text;
    const double gemm_prefill = cpu_gemm_gflops(std::min<int64_t>(o.prefill, 256)), gemm_decode = cpu_gemm_gflops(1);
    for (Numerics numerics : {Numerics::kOfficial}) {  // the numerics of FP8/FP4 checkpoints
        const Timing t = time_layers(full, o.tokenizer, o.prefill, o.decode, o.repeats, o.seed, numerics);
        for (int64_t l = 0; l < kLayers; ++l) {
            const double p = t.prefill_s[size_t(l)], d = o.decode ? t.decode_s[size_t(l)] / double(o.decode) : 0.0;
            nlohmann::json r = {{"mode", "v41-layer"},
                                {"layer", l},
                                {"kind", kKinds[l]},
                                {"numerics", numerics_name(numerics)},
                                {"prefill_tokens", o.prefill},
                                {"layer_prefill_s", p},
                                {"layer_prefill_tok_s", double(o.prefill) / p},
                                {"decode_steps", o.decode},
                                {"layer_decode_s_per_token", d},
                                {"layer_decode_tok_s", d > 0 ? 1.0 / d : 0.0},
                                {"linear_gflop_per_token", 2.0 * layer_macs_per_token(tc, l) / 1e9},
                                {"prefill_gflop_s", 2.0 * layer_macs_per_token(tc, l) * double(o.prefill) / p / 1e9},
                                {"decode_gflop_s", d > 0 ? 2.0 * layer_macs_per_token(tc, l) / d / 1e9 : 0.0},
                                {"cpu_gemm_f32_gflop_s_prefill_shape", gemm_prefill},
                                {"cpu_gemm_f32_gflop_s_decode_shape", gemm_decode},
                                {"load_average_1m", load_average()},
                                {"model_prefill_s", t.prefill_total_s},
                                {"model_decode_s", t.decode_total_s},
                                {"threads", cpu_num_threads()}};
            const std::string line = r.dump() + "\n";
            std::fwrite(line.data(), 1, line.size(), stdout);
            std::fflush(stdout);
            if (!o.output.empty()) std::ofstream(o.output, std::ios::app) << line;
        }
    }
    return 0;
}

}  // namespace deepinfer::cli
