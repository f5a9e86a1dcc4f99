// SPDX-License-Identifier: Apache-2.0
// `deepinfer bench`: CPU prefill and decode throughput of a model (a checkpoint directory or a
// synthetic full-width V4-Flash layer), beside the CPU GEMM throughput measured in the same run.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>

#include "backends/cpu/linear.h"
#include "bench_v41_layers.h"
#include "commands.h"
#include "deepinfer/check.h"
#include "deepinfer/engine.h"
#include "deepinfer/model.h"
#include "deepinfer/model_config.h"
#include "deepinfer/parallel.h"
#include "deepinfer/synthetic.h"

namespace deepinfer::cli {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One full-width V4-Flash layer (spec §1.1 values), vocabulary cut to 1024 so the LM head does not
// dominate; kind: csa | hca | sliding.
std::string flash_layer_config(const std::string& kind) {
    const int ratio = kind == "csa" ? 4 : kind == "hca" ? 128 : 0;
    DI_CHECK(kind == "csa" || kind == "hca" || kind == "sliding", "--synthetic: unknown layer kind '", kind,
             "' (expected flash-csa, flash-hca or flash-sliding)");
    return v4_flash_config({.compress_ratios = {ratio}, .num_hash_layers = 0, .n_routed_experts = 256, .vocab_size = 1024});
}

// Multiply-adds per token of the layers' linears (attention, compressors, indexer, routed top-k
// experts and shared expert, router), from the config.
double active_flops_per_token(const ModelConfig& c) {
    const double D = double(c.hidden_size), H = double(c.num_attention_heads), Dh = double(c.head_dim);
    double total = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        double a = D * c.q_lora_rank + c.q_lora_rank * H * Dh + D * Dh + H * Dh * c.o_lora_rank +
                   double(c.o_groups * c.o_lora_rank) * D;
        if (c.layer_types[size_t(l)] == AttentionType::kCsa)
            a += 2 * D * 2 * Dh + 2 * D * 2 * c.index_head_dim + c.q_lora_rank * double(c.index_n_heads * c.index_head_dim) +
                 D * c.index_n_heads;
        if (c.layer_types[size_t(l)] == AttentionType::kHca) a += 2 * D * Dh;
        const double moe = double(c.num_experts_per_tok + c.n_shared_experts) * 3.0 * D * c.moe_intermediate_size +
                           D * c.n_routed_experts;
        total += a + moe;
    }
    return 2.0 * total;
}

}  // namespace

// f32 GEMM throughput of the CPU linear kernel at [tokens, 4096] x [4096, 4096]ᵀ (GFLOP/s).
double cpu_gemm_gflops(int64_t tokens) {
    const int64_t K = 4096, N = 4096;
    std::vector<float> w(size_t(N * K)), x(size_t(tokens * K)), y(size_t(tokens * N));
    std::mt19937 rng(1);
    std::normal_distribution<float> nd;
    for (float& v : w) v = nd(rng);
    for (float& v : x) v = nd(rng);
    cpu::LinearWeight lw = cpu::make_linear_weight(TensorView(w.data(), DType::kF32, {N, K}), {}, N, K);
    auto run = [&] {
        cpu::linear({.x = TensorView(x.data(), DType::kF32, {tokens, K}), .weight = &lw,
                     .y = TensorView(y.data(), DType::kF32, {tokens, N})});
    };
    run();
    int iters = 0;
    auto t0 = Clock::now();
    while (seconds_since(t0) < 1.0 || iters < 2) {
        run();
        ++iters;
    }
    return 2.0 * double(tokens) * double(K) * double(N) * iters / seconds_since(t0) / 1e9;
}

Command register_bench(CLI::App& app) {
    struct Options {
        std::string model, synthetic, numerics, dir, output, device = "cpu";
        int64_t prefill = 128, decode = 16, warmup = 1, gpus = 1;
        std::string engine_batches;  // "1,8,64,256": offline engine throughput at these batch sizes
        bool no_async = false, async = false;
        uint64_t seed = 1;
        std::string speculative = "none";
        int64_t num_speculative_tokens = 3;
        bool spec_scheduler = false;
        double temperature = 0.8;
    };
    auto o = std::make_shared<Options>();
    CLI::App* sub = app.add_subcommand("bench", "CPU prefill/decode throughput beside measured GEMM throughput");
    auto* src = sub->add_option_group("source");
    src->add_option("--model", o->model, "Checkpoint directory");
    src->add_option("--synthetic", o->synthetic,
                    "flash-csa | flash-hca | flash-sliding: one full-width V4-Flash layer; v41-layers: one "
                    "full-width V4.1-Flash layer of each kind");
    src->require_option(1);
    sub->add_option("--synthetic-dir", o->dir, "Where the synthetic checkpoint is written (reused if present)");
    sub->add_option("--prefill", o->prefill, "Prompt tokens")->check(CLI::Range(1, 1 << 20));
    sub->add_option("--decode", o->decode, "Decode steps")->check(CLI::Range(0, 1 << 20));
    sub->add_option("--numerics", o->numerics, "exact | official");
    sub->add_option("--device", o->device, "cpu | cuda")->capture_default_str();
    sub->add_option("--gpus-per-replica", o->gpus, "With --device cuda: GPUs the model spans (expert parallelism)")
        ->capture_default_str()
        ->check(CLI::Range(1, 64));
    sub->add_option("--output", o->output, "Append the JSON result line to this file");
    sub->add_option("--engine-batches", o->engine_batches,
                    "Offline engine mode: comma-separated batch sizes (requests of --prefill prompt tokens and "
                    "--decode new tokens each)");
    sub->add_flag("--no-async", o->no_async, "Engine mode: synchronous scheduling (the default)");
    sub->add_flag("--async", o->async, "Engine mode: asynchronous scheduling");
    sub->add_option("--speculative", o->speculative, "Engine mode: none | mtp | dspark | auto")->capture_default_str();
    sub->add_option("--num-speculative-tokens", o->num_speculative_tokens, "Engine mode: drafts per step")
        ->capture_default_str();
    sub->add_flag("--spec-scheduler", o->spec_scheduler, "Engine mode: confidence-scheduled verify lengths");
    sub->add_option("--temperature", o->temperature, "Engine mode: sampling temperature")->capture_default_str();
    sub->add_option("--warmup", o->warmup, "Untimed prefill+decode passes first (pages the weights in)")
        ->check(CLI::Range(0, 100));
    return [sub, o]() -> int {
        if (!sub->parsed()) return -1;
        std::string dir = o->model;
        if (o->synthetic == "v41-layers")
            return run_v41_layer_bench({.dir = o->dir, .tokenizer = DI_ASSETS_DIR "/tokenizer/deepseek-v4/tokenizer.json",
                                        .output = o->output, .prefill = o->prefill, .decode = o->decode,
                                        .seed = o->seed});
        if (!o->synthetic.empty()) {
            const std::string kind = o->synthetic.rfind("flash-", 0) == 0 ? o->synthetic.substr(6) : o->synthetic;
            const std::string config = flash_layer_config(kind);
            dir = o->dir.empty() ? (std::filesystem::temp_directory_path() / ("deepinfer-bench-" + o->synthetic)).string()
                                 : o->dir;
            std::string existing;
            if (std::ifstream in(dir + "/config.json"); in) existing.assign(std::istreambuf_iterator<char>(in), {});
            if (existing != config || !std::filesystem::exists(dir + "/model.safetensors")) {
                std::fprintf(stderr, "writing synthetic checkpoint to %s ...\n", dir.c_str());
                auto t0 = Clock::now();
                write_synthetic_checkpoint(dir, config, {.seed = o->seed, .residual_damping = 0.25});
                std::fprintf(stderr, "  done in %.1f s\n", seconds_since(t0));
            }
        }
        ModelOptions mo;
        if (!o->numerics.empty()) {
            mo.numerics_from_checkpoint = false;
            mo.numerics = parse_numerics(o->numerics);
        }
        mo.device = parse_device(o->device);
        DI_CHECK(o->gpus == 1 || mo.device == Device::kCuda, "--gpus-per-replica ", o->gpus, " needs --device cuda");
        mo.gpus = o->gpus;
        // The GPU workspace is sized for the largest step this run makes.
        mo.max_batch_tokens = std::max<int64_t>(2048, o->prefill);
        if (!o->engine_batches.empty()) {
            std::stringstream list(o->engine_batches);
            int64_t most = 1;
            for (std::string item; std::getline(list, item, ',');) most = std::max<int64_t>(most, std::stoll(item));
            mo.max_num_seqs = most;
            mo.max_batch_tokens = std::max(mo.max_batch_tokens, most);
        }
        auto t_load = Clock::now();
        auto model = Model::load(dir, mo);
        const double load_s = seconds_since(t_load);
        const ModelConfig c = load_model_config(dir + "/config.json");
        std::mt19937 rng(static_cast<uint32_t>(o->seed));
        if (!o->engine_batches.empty()) {
            std::shared_ptr<const Model> shared(std::move(model));
            std::stringstream list(o->engine_batches);
            for (std::string item; std::getline(list, item, ',');) {
                const int64_t batch = std::stoll(item);
                EngineConfig ec;
                ec.max_num_seqs = batch;
                ec.max_num_batched_tokens = std::max<int64_t>(2048, batch);
                ec.async_scheduling = o->async && !o->no_async;
                ec.prefix_caching = false;
                ec.speculative_method = o->speculative;
                ec.num_speculative_tokens = o->num_speculative_tokens;
                ec.speculative_scheduler = o->spec_scheduler;
                Engine engine(shared, nullptr, ec);
                SamplingParams sp;
                sp.temperature = o->temperature;
                sp.max_tokens = o->decode;
                sp.ignore_eos = true;
                for (int64_t r = 0; r < batch; ++r) {
                    std::vector<int32_t> prompt(static_cast<size_t>(o->prefill));
                    for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % uint32_t(c.vocab_size));
                    engine.add_request("r" + std::to_string(r), std::move(prompt), sp);
                }
                auto t0 = Clock::now();
                engine.run_until_done([](RequestOutput&&) {});
                const double secs = seconds_since(t0);
                const EngineMetrics& m = engine.metrics();
                nlohmann::json r = {{"mode", "engine"}, {"model", dir}, {"device", o->device}, {"gpus", o->gpus}, {"batch", batch}, {"async", ec.async_scheduling},
                                    {"prompt_tokens", m.prompt_tokens}, {"generated_tokens", m.generated_tokens},
                                    {"seconds", secs}, {"generated_tok_s", double(m.generated_tokens) / secs},
                                    {"total_tok_s", double(m.generated_tokens + m.prompt_tokens) / secs},
                                    {"steps", m.steps}, {"forward_s", m.forward_seconds}, {"step_s", m.step_seconds},
                                    {"outside_forward_share", !ec.async_scheduling ? nlohmann::json(1.0 - m.forward_seconds / m.step_seconds)
                                                                          : nlohmann::json(nullptr)},
                                    {"threads", cpu_num_threads()}};
                if (m.spec_steps > 0) {
                    r["speculative"] = {{"method", ec.speculative_method}, {"k", ec.num_speculative_tokens},
                                        {"scheduler", ec.speculative_scheduler},
                                        {"mean_accepted_length", m.mean_accepted_length()},
                                        {"position_verified", m.spec_position_verified},
                                        {"position_accepted", m.spec_position_accepted},
                                        {"verify_tokens_per_step", double(m.spec_verify_tokens) / double(m.spec_steps)},
                                        {"mean_draft_budget", double(m.spec_budget_sum) / double(m.spec_steps)},
                                        {"draft_s", m.draft_seconds}};
                }
                std::string line = r.dump() + "\n";
                std::fwrite(line.data(), 1, line.size(), stdout);
                if (!o->output.empty()) std::ofstream(o->output, std::ios::app) << line;
            }
            return 0;
        }
        std::vector<int32_t> ids(static_cast<size_t>(o->prefill));
        for (int32_t& t : ids) t = static_cast<int32_t>(rng() % uint32_t(c.vocab_size));
        for (int64_t w = 0; w < o->warmup; ++w) {
            Sequence warm = model->new_sequence();
            std::vector<float> l = model->forward(warm, ids, false);
            for (int64_t i = 0; i < std::min<int64_t>(o->decode, 2); ++i) {
                int32_t next = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
                l = model->forward(warm, std::span<const int32_t>(&next, 1), false);
            }
        }
        Sequence seq = model->new_sequence();
        auto t0 = Clock::now();
        std::vector<float> logits = model->forward(seq, ids, false);
        const double prefill_s = seconds_since(t0);
        t0 = Clock::now();
        for (int64_t i = 0; i < o->decode; ++i) {
            int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
            logits = model->forward(seq, std::span<const int32_t>(&next, 1), false);
        }
        const double decode_s = seconds_since(t0);
        const double flops = active_flops_per_token(c);
        const double g_prefill = cpu_gemm_gflops(std::min<int64_t>(o->prefill, 256));
        const double g_decode = cpu_gemm_gflops(1);
        nlohmann::json r = {
            {"model", o->synthetic.empty() ? o->model : o->synthetic}, {"device", o->device}, {"gpus", o->gpus},
            {"numerics", numerics_name(model->numerics())},
            {"threads", cpu_num_threads()}, {"layers", c.num_hidden_layers}, {"hidden_size", c.hidden_size},
            {"load_s", load_s}, {"prefill_tokens", o->prefill}, {"prefill_s", prefill_s},
            {"prefill_tok_s", double(o->prefill) / prefill_s}, {"decode_steps", o->decode}, {"decode_s", decode_s},
            {"decode_tok_s", o->decode ? double(o->decode) / decode_s : 0.0},
            {"linear_gflop_per_token", flops / 1e9},
            {"prefill_gflop_s", flops * double(o->prefill) / prefill_s / 1e9},
            {"decode_gflop_s", o->decode ? flops * double(o->decode) / decode_s / 1e9 : 0.0},
            {"cpu_gemm_f32_gflop_s_prefill_shape", g_prefill}, {"cpu_gemm_f32_gflop_s_decode_shape", g_decode},
            {"state_bytes", seq.state_bytes()}};
        std::string line = r.dump() + "\n";
        std::fwrite(line.data(), 1, line.size(), stdout);
        if (!o->output.empty()) {
            std::ofstream out(o->output, std::ios::app);
            out << line;
        }
        return 0;
    };
}

}  // namespace deepinfer::cli
