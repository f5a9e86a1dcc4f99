// SPDX-License-Identifier: Apache-2.0
// GPU forward throughput of the CUDA backend on synthetic checkpoints at the real V4-Flash widths
// (FP8 linears, FP4 experts, DeepSeek's layout): prefill tokens/s of one sequence and decode tokens/s
// at several batch sizes, one JSON line each. A tokenizer-free binary, so it runs on the GPU machine
// with only libfmt/libgomp/libcudart beside it.
//   cuda_forward_bench [--experts 256] [--layers csa,hca] [--prefill 512] [--decode 16] [--batches 1,8,64] [--gemm fast]
//                      [--decode-warmup 0] (untimed decode steps before the timed ones: the graph capture out of the times)
//                      [--pdl 1] (0: no programmatic dependent launch, ModelOptions::cuda_pdl)
//                      [--gpus 1,2] [--context 64] [--model DIR] [--max-len 8192] [--profile 1]
//                      [--ep-dispatch auto,all_gather,routed] [--ep-routed-min-rows 64]
// --profile 1: cudaProfilerStart/Stop around the timed prefill and decode loops only (ncu/nsys with
// capture from the API), so warm-up and context prefill stay out of a profile.
// --layers flash: the published V4-Flash schedule (43 layers: 2 sliding, 20 x CSA+HCA, 1 CSA; the first
// 3 hash-routed), ~157 GB in the published formats: the checkpoint is written by all cores.
// --context: the prompt tokens of each decode sequence (prefilled first, not timed). --model: an
// existing checkpoint instead of a freshly written one (kept afterwards).
// --gpus: one run per GPU count (2+: expert parallelism, cuda_ep_model.h; engine mode: the first count);
// --ep-dispatch: one run per MoE dispatch form at each count > 1 (expert_exchange.h); decode lines
// then report the routed layers and the rows / expert outputs sent as fractions of the all-gather's.
// prefill runs one sequence
// per GPU (each of --prefill tokens), decode batches spread over the GPUs; tok/s per GPU reported.
// Engine mode (--engine-batches 1,32,256): the offline engine on the GPU, decode steps of B requests
// under four runtimes (host sampling + synchronous + no graphs = the first CUDA backend; device
// sampling; + async scheduling; + CUDA graphs): wall ms per decode step and, from CUDA events, the
// GPU's span per step and the idle gap between steps (the GPU idle fraction).
//   cuda_forward_bench --engine-batches 1,32,256 [--engine-prompt 32] [--engine-tokens 9] [--gemm fast] [--model DIR]
#include <cuda_profiler_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "backends/cuda/ep/cuda_ep_model.h"
#include "backends/cuda/model/cuda_model.h"
#include "deepinfer/engine.h"
#include "deepinfer/model.h"
#include "deepinfer/synthetic.h"
#include "expert_load_fields.h"

namespace {

using deepinfer::bench::Clock;
using deepinfer::bench::since;
using deepinfer::bench::parse_list;

std::string config(int64_t experts, const std::vector<int>& ratios, int hash_layers) {
    return deepinfer::v4_flash_config({.compress_ratios = ratios, .num_hash_layers = hash_layers, .n_routed_experts = experts});
}

// The CUDA models whose stats describe `model`: itself, or the ranks of an expert-parallel model
// (rank 0's span stands for the step: the ranks run in step).
std::vector<const deepinfer::Model*> stat_models(const deepinfer::Model& model) {
    if (deepinfer::cuda::is_cuda_ep_model(model)) return deepinfer::cuda::cuda_ep_ranks(model);
    return {&model};
}

struct Runtime {
    const char* name;
    bool device_sampling, async, graphs;
};

// Decode steps of `batch` requests through the engine: prefill first (not measured), then every step
// until all finish. One JSON line.
nlohmann::json engine_decode(const std::shared_ptr<const deepinfer::Model>& model, const Runtime& rt, int64_t batch,
                             int64_t prompt_len, int64_t tokens, const nlohmann::json& base) {
    using namespace deepinfer;
    EngineConfig ec;
    ec.max_num_seqs = 256;
    ec.max_num_batched_tokens = 2048;
    ec.max_prefill_chunk = prompt_len;
    ec.prefix_caching = false;
    ec.async_scheduling = rt.async;
    ec.device_sampling = rt.device_sampling;
    ec.state_memory_bytes = uint64_t{64} << 30;
    Engine engine(model, nullptr, ec);
    std::mt19937 rng(static_cast<uint32_t>(batch));
    const int64_t V = model->info().vocab_size;
    for (int64_t i = 0; i < batch; ++i) {
        std::vector<int32_t> p(static_cast<size_t>(prompt_len));
        for (int32_t& x : p) x = static_cast<int32_t>(rng() % uint32_t(V));
        SamplingParams sp;
        sp.temperature = 0.8;
        sp.top_k = 50;
        sp.max_tokens = tokens;
        sp.ignore_eos = true;
        sp.seed = uint64_t(i);
        std::string id = std::to_string(i);
        id.insert(0, 1, 'r');  // (not "r" + ...: GCC 12's -Wrestrict false positive at -O3)
        engine.add_request(std::move(id), std::move(p), sp);
    }
    // Prefill (every request has its first token), then measure the decode steps.
    while (engine.metrics().generated_tokens < batch) engine.step();
    for (const Model* m : stat_models(*model)) cuda::reset_cuda_model_stats(*m);
    const int64_t steps0 = engine.metrics().steps, gen0 = engine.metrics().generated_tokens;
    const auto t = Clock::now();
    while (engine.has_unfinished()) engine.step();
    const double secs = since(t);
    const cuda::CudaModelStats st = cuda::cuda_model_stats(*stat_models(*model)[0]);
    const int64_t steps = engine.metrics().steps - steps0;
    nlohmann::json r = base;
    r["mode"] = "engine_decode";
    r["runtime"] = rt.name;
    r["device_sampling"] = rt.device_sampling;
    r["async"] = rt.async;
    r["cuda_graphs"] = rt.graphs;
    r["batch"] = batch;
    r["prompt"] = prompt_len;
    r["decode_steps"] = steps;
    r["forwards"] = st.forwards;
    r["graph_replays"] = st.graph_replays;
    r["device_draws"] = st.device_draws;
    r["ms_per_step"] = 1e3 * secs / double(std::max<int64_t>(steps, 1));
    r["gpu_ms_per_step"] = 1e3 * st.gpu_seconds / double(std::max<int64_t>(st.forwards, 1));
    r["gap_ms_per_step"] = 1e3 * st.gap_seconds / double(std::max<int64_t>(st.forwards - 1, 1));
    r["gpu_idle_fraction"] = st.gap_seconds / std::max(st.gap_seconds + st.gpu_seconds, 1e-12);
    r["tok_s"] = double(engine.metrics().generated_tokens - gen0) / secs;
    r["gpus"] = int64_t(stat_models(*model).size());
    r["tok_s_per_gpu"] = r["tok_s"].get<double>() / double(stat_models(*model).size());
    return r;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace deepinfer;
    int64_t experts = 256, prefill = 512, decode = 16, decode_warmup = 0;
    std::string layers = "csa,hca", batches = "1,8,64", dir = "/tmp/deepinfer-cuda-bench", engine_batches, gemm = "reference";
    std::string gpus_list = "1", ep_dispatch_list = "auto";
    int64_t ep_routed_min_rows = cuda::CudaModelOptions{}.ep_routed_min_rows;
    bool keep = false, max_len_given = false, profile = false, expert_stats = false, pdl = true;
    std::string routing_list = "model";
    int64_t engine_prompt = 32, engine_tokens = 9, context = 64, max_len = 8192;
    std::string model_dir;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--experts") experts = std::stoll(v);
        else if (k == "--layers") layers = v;
        else if (k == "--prefill") prefill = std::stoll(v);
        else if (k == "--decode") decode = std::stoll(v);
        else if (k == "--decode-warmup") decode_warmup = std::stoll(v);  // untimed decode steps first (graph capture)
        else if (k == "--pdl") pdl = v != "0";  // programmatic dependent launch (ModelOptions::cuda_pdl)
        else if (k == "--batches") batches = v;
        else if (k == "--dir") dir = v;
        else if (k == "--gemm") gemm = v;  // reference | fast
        else if (k == "--gpus") gpus_list = v;
        else if (k == "--ep-dispatch") ep_dispatch_list = v;  // auto,all_gather,routed: one run each (2+ GPUs)
        else if (k == "--ep-routed-min-rows") ep_routed_min_rows = std::stoll(v);
        else if (k == "--context") context = std::stoll(v);
        else if (k == "--max-len") max_len = std::stoll(v), max_len_given = true;
        else if (k == "--keep") keep = v == "1";
        else if (k == "--profile") profile = v == "1";  // profiler capture only around the timed prefill/decode  // keep the written checkpoint (for a later --model run)
        else if (k == "--engine-batches") engine_batches = v;
        else if (k == "--expert-stats") expert_stats = v == "1";  // experts_touched_frac, expert_max_over_mean per line
        else if (k == "--routing") routing_list = v;  // model,even: one run each (even: CudaModelOptions::even_routing)
        else if (k == "--model") model_dir = v;
        else if (k == "--engine-prompt") engine_prompt = std::stoll(v);
        else if (k == "--engine-tokens") engine_tokens = std::stoll(v);
        else {
            std::fprintf(stderr, "unknown option %s\n", k.c_str());
            return 2;
        }
    }
    std::vector<int> ratios;
    int hash_layers = 0;
    if (layers == "flash") {
        ratios = {0, 0};
        for (int i = 0; i < 20; ++i) ratios.insert(ratios.end(), {4, 128});
        ratios.push_back(4);
        hash_layers = 3;
    } else {
        std::stringstream ls(layers);
        for (std::string item; std::getline(ls, item, ',');) ratios.push_back(item == "csa" ? 4 : item == "hca" ? 128 : 0);
    }
    std::filesystem::create_directories(dir);
    auto t = Clock::now();
    if (model_dir.empty()) write_synthetic_checkpoint(dir, config(experts, ratios, hash_layers),
                                                        {.seed = 1, .residual_damping = 0.25, .parallel = true});
    else dir = model_dir;  // an existing checkpoint (e.g. a tiny fixture: launch-bound steps)
    const double write_s = since(t);
    if (!engine_batches.empty()) {
        // Two models of one checkpoint: CUDA graphs on and off; the workspace sized from the engine's
        // limits (2048 tokens, 256 sequences) at max_model_len 1024.
        // --gpus G (one count) > 1: one expert-parallel model (no CUDA graphs on its ranks), the
        // runtimes without graphs only.
        const int64_t G = parse_list(gpus_list).front();
        std::shared_ptr<const Model> models[2];
        double load_s = 0;
        for (int g = 0; g < 2; ++g) {
            ModelOptions mo;
            mo.cuda_pdl = pdl;
            mo.cuda_graphs = g == 1;
            mo.max_batch_tokens = 2048;
            mo.max_num_seqs = 256;
            cuda::CudaModelOptions co;
            co.max_model_len = max_len_given ? max_len : 1024;
            co.gemm = gemm == "fast" ? cuda::GemmMode::kFast : cuda::GemmMode::kReference;
            t = Clock::now();
            if (G == 1) {
                models[g] = cuda::load_cuda_model(dir, mo, co);
            } else {
                std::vector<int> devices;
                for (int d = 0; d < int(G); ++d) devices.push_back(d);
                models[g] = g == 0 ? std::shared_ptr<const Model>(cuda::load_cuda_ep_model(dir, mo, co, devices)) : models[0];
            }
            load_s = g == 0 || G == 1 ? since(t) : load_s;
        }
        nlohmann::json base = {{"model", model_dir.empty() ? "synthetic" : model_dir}, {"layers", layers}, {"experts", experts},
                               {"numerics", numerics_name(models[0]->numerics())},
                               {"write_s", write_s}, {"load_s", load_s},
                               {"workspace_bytes", cuda::cuda_model_stats(*stat_models(*models[0])[0]).workspace_bytes}};
        const Runtime runtimes[] = {{"host_sampling_sync", false, false, false},
                                    {"device_sampling_sync", true, false, false},
                                    {"device_sampling_async", true, true, false},
                                    {"device_sampling_async_graphs", true, true, true},
                                    {"device_sampling_sync_graphs", true, false, true}};
        for (int64_t b : parse_list(engine_batches)) {
            engine_decode(models[1], runtimes[3], std::min<int64_t>(b, 4), 8, 3, base);  // warm-up (module load, captures)
            for (const Runtime& rt : runtimes) {
                if (G > 1 && rt.graphs) continue;
                const nlohmann::json r = engine_decode(models[rt.graphs ? 1 : 0], rt, b, engine_prompt, engine_tokens, base);
                std::printf("%s\n", r.dump().c_str());
                std::fflush(stdout);
            }
        }
        if (model_dir.empty()) std::filesystem::remove_all(dir);
        return 0;
    }
    cuda::CudaModelOptions co;
    co.max_model_len = max_len;
    co.gemm = gemm == "fast" ? cuda::GemmMode::kFast : cuda::GemmMode::kReference;
    std::vector<std::string> dispatches;
    {
        std::stringstream ds(ep_dispatch_list);
        for (std::string item; std::getline(ds, item, ',');) dispatches.push_back(item);
    }
    std::vector<std::string> routings;
    {
        std::stringstream rs(routing_list);
        for (std::string item; std::getline(rs, item, ',');) routings.push_back(item);
    }
    co.expert_load_stats = expert_stats;
    for (int64_t G : parse_list(gpus_list)) {
        for (size_t ri = 0; ri < routings.size(); ++ri)
        for (size_t di = 0; di < (G > 1 ? dispatches.size() : 1); ++di) {
            if (routings[ri] != "model" && routings[ri] != "even") {
                std::fprintf(stderr, "--routing: model or even, not %s\n", routings[ri].c_str());
                return 2;
            }
            co.even_routing = routings[ri] == "even";
            co.ep_dispatch = cuda::parse_ep_dispatch(dispatches[di].c_str());
            co.ep_routed_min_rows = ep_routed_min_rows;
            // The workspace: from the limits (every row of the largest batch or prefill, max_model_len).
            ModelOptions mo;
            mo.cuda_pdl = pdl;
            mo.max_batch_tokens = std::max<int64_t>({prefill, context, 512}) * G;  // one prefill sequence per GPU at a time
            mo.max_num_seqs = 512;
            t = Clock::now();
            // The CUDA loaders directly (Model::load's V4.1 branch would need ICU, absent on the GPU machine).
            std::vector<int> devices;
            for (int g = 0; g < int(G); ++g) devices.push_back(g);
            std::unique_ptr<Model> model = G == 1 ? cuda::load_cuda_model(dir, mo, co) : cuda::load_cuda_ep_model(dir, mo, co, devices);
            const double load_s = since(t);
            const int64_t V = model->info().vocab_size;
            std::mt19937 rng(1);
            auto prompt = [&](int64_t n) {
                std::vector<int32_t> p(static_cast<size_t>(n));
                for (int32_t& x : p) x = static_cast<int32_t>(rng() % uint32_t(V));
                return p;
            };
            {  // warm-up (module load, first touches, NCCL connections)
                std::vector<Sequence> w;
                for (int64_t g = 0; g < G; ++g) w.push_back(model->new_sequence());
                std::vector<std::vector<int32_t>> ps;
                for (int64_t g = 0; g < G; ++g) ps.push_back(prompt(16));
                std::vector<SequenceChunk> chunks;
                for (int64_t g = 0; g < G; ++g) chunks.push_back({&w[size_t(g)], ps[size_t(g)], false});
                model->forward_batch(chunks);
            }
            nlohmann::json base = {{"layers", layers}, {"experts", experts}, {"numerics", numerics_name(model->numerics())},
                                   {"write_s", write_s}, {"load_s", load_s}, {"gemm", gemm}, {"pdl", pdl}, {"gpus", G},
                                   {"routing", routings[ri]}};
            if (G > 1) base["ep_dispatch"] = cuda::ep_dispatch_name(co.ep_dispatch);
            if (prefill > 0) {
                std::vector<Sequence> seqs;
                std::vector<std::vector<int32_t>> ps;
                std::vector<SequenceChunk> chunks;
                for (int64_t g = 0; g < G; ++g) {
                    seqs.push_back(model->new_sequence());
                    ps.push_back(prompt(prefill));
                }
                for (int64_t g = 0; g < G; ++g) chunks.push_back({&seqs[size_t(g)], ps[size_t(g)], false});
                for (const Model* m : stat_models(*model)) cuda::reset_cuda_model_stats(*m);
                if (profile) cudaProfilerStart();
                t = Clock::now();
                model->forward_batch(chunks);
                const double secs = since(t);
                if (profile) cudaProfilerStop();
                nlohmann::json r = base;
                r["mode"] = "prefill";
                r["sequences"] = G;
                r["tokens"] = prefill * G;
                r["seconds"] = secs;
                r["tok_s"] = double(prefill * G) / secs;
                r["tok_s_per_gpu"] = double(prefill) / secs;
                bench::add_expert_load_fields(r, stat_models(*model));
                std::printf("%s\n", r.dump().c_str());
                std::fflush(stdout);
            }
            for (int64_t b : parse_list(batches)) {
                std::vector<Sequence> seqs;
                for (int64_t i = 0; i < b; ++i) seqs.push_back(model->new_sequence());
                std::vector<std::vector<int32_t>> prompts;
                for (int64_t i = 0; i < b; ++i) prompts.push_back(prompt(context));
                std::vector<SequenceChunk> chunks;
                for (int64_t i = 0; i < b; ++i) chunks.push_back({&seqs[size_t(i)], prompts[size_t(i)], false});
                // Prefill in groups within the workspace's row limit (not timed).
                const size_t group = size_t(std::max<int64_t>(1, mo.max_batch_tokens / std::max<int64_t>(context, 1)));
                const std::vector<uint8_t> none(group, 0);
                for (size_t at = 0; at < chunks.size(); at += group) {
                    const size_t n = std::min(group, chunks.size() - at);
                    model->forward_sampled(std::span<const SequenceChunk>(chunks).subspan(at, n),
                                           std::span<const uint8_t>(none).first(n), {});
                }
                std::vector<int32_t> next(static_cast<size_t>(b), 7);
                const std::vector<uint8_t> no_logits(static_cast<size_t>(b), 0);
                std::vector<DeviceDraw> draws(static_cast<size_t>(b));
                for (int64_t i = 0; i < b; ++i) draws[size_t(i)] = {.chunk = int32_t(i), .temperature = 0.0};
                auto decode_step = [&] {
                    for (int64_t i = 0; i < b; ++i) chunks[size_t(i)] = {&seqs[size_t(i)], std::span<const int32_t>(&next[size_t(i)], 1), false};
                    // Greedy tokens drawn on the GPU: no logits cross to the host (as in the engine).
                    const ForwardOutputs out = model->forward_sampled(chunks, no_logits, draws);
                    for (int64_t i = 0; i < b; ++i) next[size_t(i)] = out.tokens[size_t(i)];
                };
                for (int64_t step = 0; step < decode_warmup; ++step) decode_step();  // (captures the step's graph)
                if (G > 1) cuda::reset_cuda_ep_exchange_stats(*model);
                for (const Model* m : stat_models(*model)) cuda::reset_cuda_model_stats(*m);
                if (profile) cudaProfilerStart();
                t = Clock::now();
                for (int64_t step = 0; step < decode; ++step) decode_step();
                const double secs = since(t);
                if (profile) cudaProfilerStop();
                nlohmann::json r = base;
                r["mode"] = "decode";
                r["batch"] = b;
                r["context"] = context;
                r["steps"] = decode;
                r["decode_warmup"] = decode_warmup;
                r["seconds"] = secs;
                r["ms_per_step"] = 1e3 * secs / double(decode);
                r["tok_s"] = double(b * decode) / secs;
                r["tok_s_per_gpu"] = double(b * decode) / secs / double(G);
                bench::add_expert_load_fields(r, stat_models(*model));
                if (G > 1) {  // what the MoE exchange moved, against the all-gather's volume
                    const cuda::EpExchangeStats st = cuda::cuda_ep_exchange_stats(*model);
                    r["ep_layers_routed"] = st.layers_routed;
                    r["ep_rows_sent_frac"] = st.rows_broadcast ? double(st.rows_sent) / double(st.rows_broadcast) : 0.0;
                    r["ep_pairs_returned_frac"] = st.slots_all_gather ? double(st.pairs_returned) / double(st.slots_all_gather) : 0.0;
                }
                std::printf("%s\n", r.dump().c_str());
                std::fflush(stdout);
            }
        }
    }
    if (model_dir.empty() && !keep) std::filesystem::remove_all(dir);
    return 0;
}
