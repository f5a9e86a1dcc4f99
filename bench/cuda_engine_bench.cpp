// SPDX-License-Identifier: Apache-2.0
// The offline engine end to end on a full-width DeepSeek-V4-Flash-shaped model (random weights in the
// published FP8/FP4 formats) on the GPU (issue 9 item 3; issue 12 with --gpus 2):
//  - prefill: `--prefill-requests` requests of `--prefill-prompt` distinct random tokens, one token each,
//    every step filled with up to `--batch-tokens` prompt tokens per GPU: prompt tokens per second;
//  - decode: for each batch size B, B requests of `--context` prompt tokens (a shared prefix served
//    from the prefix cache plus `--tail` distinct tokens each, so the contexts are distinct but their
//    prefill costs B x tail tokens); once every request has its first token, `--decode` steps of the
//    whole batch are timed (device sampling, async scheduling, CUDA graphs on one GPU): ms per step,
//    tokens/s, the GPU's busy span per step and its idle fraction (CUDA events).
// One JSON line per measurement; `layers` and the model's bytes let a report scale to 43 layers.
// --family v41: the default model, DeepSeek-V4.1-Flash, at full width: --layers v41:N, the published
// schedule's layer kinds in proportion (v41_flash_layers, synthetic_v41.h; 12 layers: 2 window-only, 5 at
// ratio 2, 5 at ratio 1; 40 published), with the Engram tables cut to a 100,000-entry n-gram vocabulary
// (~0.6 GB instead of ~98 GB per Engram layer: host memory; a token gathers a few rows either way), no
// drafter or vision tower. ~7.3 GB per layer (the 384 FP4 experts): 12 layers fit one H200.
//   cuda_engine_bench [--family v4 | v41] [--layers flash:N | flash | csa,hca,... | v41:N] [--dir D | --model D] [--keep 1] [--gemm fast | fast-fp8]
//                     [--prefill-prompt 8192] [--prefill-requests 4] [--context 4096] [--tail 64]
//                     [--batches 1,32,128,256,512] [--decode 16] [--batch-tokens 8192] [--gpus 1] [--prefixes G] [--digest 1]
//                     [--fp8-twins 0|1] [--attn-split-rows N] [--shared-stream 0|1] [--bf16-keys N] [--attn-stream 0|1] [--hc-stream 0|1]
// --fp8-twins 0: V4.1's bf16 dense linears without their FP8 twins (CudaModelOptions::v41_fp8_twins).
// --attn-split-rows N: V4.1's attention launches of up to N rows in the split form (CudaModelOptions::
// v41_attention_split_rows; 0: never; default the option's).
// --shared-stream 0: V4.1's shared expert after the routed experts on the model's stream, not on its own
// (CudaModelOptions::v41_shared_expert_stream).
// --bf16-keys N: V4.1's attention keys pre-decoded to bf16 rows for segments with many rows, up to N decoded rows
// per layer (CudaModelOptions::v41_bf16_key_rows; 0: never).
// --attn-stream 0: V4.1's window K=V path and compressor on the model's stream, not beside the query path
// (CudaModelOptions::v41_attention_side_stream).
// --hc-stream 0: V4.1's mHC mixes of a site before its norm and block on the model's stream, not beside them
// (CudaModelOptions::v41_hc_side_stream).
// --profile prefill | decode | 1 (both): cudaProfilerStart/Stop around the prefill's first step and / or one
// decode step per batch after the timed ones (ncu / nsys capturing from the API; the warm-up left out).
// --digest 1: every request also asks for its sampled tokens' logprobs (so it is sampled on the host), runs
// to its last token after the timing, and each line gets `digest`: an FNV-1a hash of every finished
// request's id, token ids and logprob bits in finishing order; two builds whose kernels give the same bits
// print the same digests (a check of a change meant to keep every bit; the timings of such a run are not
// comparable with the device-sampling runs').
// --prefixes: distinct shared prefixes (default: one per GPU), the requests spread over them in turn.
// --routing model,even: the decode batches once per routing, in turn (the prefill with the first);
// `even`: every MoE layer spreads its rows evenly over the experts (set_cuda_even_routing), as a
// trained model's balanced router does, instead of the random router's choice. Every line reports
// the expert load it saw (experts_touched_frac, expert_max_over_mean).
// The shared prefix makes the decode steps read the same compressed entries for all B sequences of a
// batch from HBM or L2; at 4K contexts those reads are a few percent of the weight bytes of a step
// (the report says so beside the numbers).
#include <cuda_profiler_api.h>

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
#include "core/fnv1a.h"
#include "backends/cuda/ep/cuda_ep_model.h"
#include "backends/cuda/model/cuda_model.h"
#include "backends/cuda/model/cuda_v41_model.h"
#include "deepinfer/engine.h"
#include "deepinfer/model.h"
#include "deepinfer/synthetic.h"
#include "deepinfer/synthetic_v41.h"
#include "expert_load_fields.h"

namespace {

using deepinfer::bench::Clock;
using deepinfer::bench::since;
using deepinfer::bench::parse_list;

using namespace deepinfer;

// Compression ratio per layer: "flash" (the published 43), "flash:N" (its first N), or a list of
// csa|hca|swa. Sets the hash-routed layer count of the published schedule (its first 3).
std::vector<int> layer_ratios(const std::string& layers, int& hash_layers) {
    std::vector<int> flash = {0, 0};
    for (int i = 0; i < 20; ++i) flash.insert(flash.end(), {4, 128});
    flash.push_back(4);
    hash_layers = 0;
    if (layers == "flash" || layers.rfind("flash:", 0) == 0) {
        const size_t n = layers == "flash" ? flash.size() : size_t(std::stoll(layers.substr(6)));
        DI_CHECK(n >= 1 && n <= flash.size(), "--layers flash:N needs 1 <= N <= 43");
        flash.resize(n);
        hash_layers = int(std::min<size_t>(3, n));
        return flash;
    }
    std::vector<int> ratios;
    std::stringstream ls(layers);
    for (std::string item; std::getline(ls, item, ',');) ratios.push_back(item == "csa" ? 4 : item == "hca" ? 128 : 0);
    return ratios;
}

std::vector<const Model*> stat_models(const Model& model) {
    if (cuda::is_cuda_ep_model(model)) return cuda::cuda_ep_ranks(model);
    return {&model};
}

struct Bench {
    std::shared_ptr<const Model> model;
    EngineConfig ec;
    nlohmann::json base;
    std::mt19937 rng{1};
    bool profile_prefill = false, profile_decode = false;
    bool digest = false;
    uint64_t hash = 0;
    // (a step's finished requests into the digest; nothing without --digest, inside the timed loops too)
    void absorb(const std::vector<RequestOutput>& outs) {
        if (!digest) return;
        for (const RequestOutput& o : outs) {
            hash = fnv1a(hash, o.request_id.data(), o.request_id.size());
            for (const CompletionOutput& c : o.completions) {
                hash = fnv1a(hash, c.token_ids.data(), c.token_ids.size() * sizeof(int32_t));
                for (const TokenLogprob& l : c.logprobs) hash = fnv1a(hash, &l.logprob, sizeof(l.logprob));
            }
        }
    }
    // One engine step inside the profiler's capture (--profile).
    void profiled_step(Engine& engine) const {
        cudaProfilerStart();
        engine.step();
        cudaProfilerStop();
    }

    std::vector<int32_t> tokens(int64_t n) {
        const uint32_t V = uint32_t(model->info().vocab_size);
        std::vector<int32_t> p(static_cast<size_t>(n));
        for (int32_t& x : p) x = static_cast<int32_t>(rng() % V);
        return p;
    }
    SamplingParams sampling(int64_t max_tokens, uint64_t seed) const {
        SamplingParams sp;
        sp.temperature = 0.8;
        sp.top_k = 50;
        sp.max_tokens = max_tokens;
        sp.ignore_eos = true;
        sp.seed = seed;
        if (digest) sp.logprobs = 0;
        return sp;
    }
    static std::string id(const char* kind, int64_t i) {
        std::string s(kind);
        s.append(std::to_string(i));
        return s;
    }
    void reset_stats() {
        for (const Model* m : stat_models(*model)) cuda::reset_cuda_model_stats(*m);
    }
    void gpu_fields(nlohmann::json& r) const {
        const cuda::CudaModelStats st = cuda::cuda_model_stats(*stat_models(*model)[0]);
        r["forwards"] = st.forwards;
        r["graph_replays"] = st.graph_replays;
        r["gpu_ms_per_forward"] = 1e3 * st.gpu_seconds / double(std::max<int64_t>(st.forwards, 1));
        r["gpu_idle_fraction"] = st.gap_seconds / std::max(st.gap_seconds + st.gpu_seconds, 1e-12);
        // The device page pool of sequence state (the CUDA models keep their pages there, not in the engine's host
        // pool): pages in all and the most in use since load (batches run in ascending order: up to this row).
        r["device_state_pages"] = st.state_pages;
        r["device_state_pages_peak"] = st.state_pages_peak;
    }

    nlohmann::json prefill(int64_t requests, int64_t prompt_len) {
        Engine engine(model, nullptr, ec);
        for (int64_t i = 0; i < requests; ++i) engine.add_request(id("p", i), tokens(prompt_len), sampling(1, uint64_t(i)));
        reset_stats();
        hash = kFnv1aBasis;
        const auto t = Clock::now();
        if (profile_prefill && engine.has_unfinished()) profiled_step(engine);
        while (engine.has_unfinished()) absorb(engine.step());
        const double secs = since(t);
        nlohmann::json r = base;
        r["mode"] = "engine_prefill";
        if (profile_prefill) r["profiled"] = true;  // (the timing includes the profiler's capture of the first step)
        r["requests"] = requests;
        r["prompt"] = prompt_len;
        r["steps"] = engine.metrics().steps;
        r["seconds"] = secs;
        r["tok_s"] = double(requests * prompt_len) / secs;
        r["tok_s_per_gpu"] = r["tok_s"].get<double>() / double(stat_models(*model).size());
        gpu_fields(r);
        bench::add_expert_load_fields(r, stat_models(*model));
        if (digest) r["digest"] = hex16(hash);
        return r;
    }

    nlohmann::json decode(int64_t batch, int64_t context, int64_t tail, int64_t steps, int64_t num_prefixes) {
        Engine engine(model, nullptr, ec);
        hash = kFnv1aBasis;
        // The shared prefixes first, together (under expert parallelism each lands on its own GPU, and
        // the requests forked from it stay there), so their states are in the prefix cache.
        std::vector<std::vector<int32_t>> prefixes;
        for (int64_t k = 0; k < num_prefixes; ++k) {
            prefixes.push_back(tokens(context - tail));
            engine.add_request(id("warm", k), prefixes.back(), sampling(1, uint64_t(k)));
        }
        while (engine.has_unfinished()) absorb(engine.step());
        for (int64_t i = 0; i < batch; ++i) {
            std::vector<int32_t> p = prefixes[size_t(i % num_prefixes)];
            const std::vector<int32_t> t = tokens(tail);
            p.insert(p.end(), t.begin(), t.end());
            // (room for more tokens than timed: every timed step decodes the whole batch)
            engine.add_request(id("d", i), std::move(p), sampling(1 + 2 * steps + 8, uint64_t(i)));
        }
        // Until every request has its first token (prefill of the tails; the engine counts a prompt's tokens
        // when its first token comes: all generated tokens together reach the batch size while the last
        // tails still wait, which put up to half of b512's timed steps in prefill), then one more step (under
        // asynchronous scheduling the step planned before the last first tokens came lacks their rows), then
        // `steps` timed decode steps of the whole batch (the requests still running are dropped with the engine).
        const int64_t prompts0 = engine.metrics().prompt_tokens;
        while (engine.metrics().prompt_tokens < prompts0 + batch * context && engine.has_unfinished()) absorb(engine.step());
        if (engine.has_unfinished()) absorb(engine.step());
        reset_stats();
        const int64_t steps0 = engine.metrics().steps, gen0 = engine.metrics().generated_tokens;
        const int64_t preempt0 = engine.metrics().preemptions;
        const auto t = Clock::now();
        for (int64_t k = 0; k < steps && engine.has_unfinished(); ++k) absorb(engine.step());
        const double secs = since(t);
        const int64_t n = engine.metrics().steps - steps0, gen = engine.metrics().generated_tokens - gen0;
        if (profile_decode && engine.has_unfinished()) profiled_step(engine);  // (after the timing)
        nlohmann::json r = base;
        r["mode"] = "engine_decode";
        r["batch"] = batch;
        r["context"] = context;
        r["shared_prefix"] = context - tail;
        r["prefixes"] = num_prefixes;
        r["prefix_hit_tokens"] = engine.metrics().prefix_cache_hit_tokens;
        r["decode_steps"] = n;
        r["tokens"] = gen;
        // Rows of the whole batch in every timed step: tokens == batch x decode_steps (report_engine.py checks it).
        r["full_batch_steps"] = gen == batch * n;
        // Sequences preempted inside the timed steps (state pool full: their rows leave the batch and come
        // back by recomputing, so a step then is not one decode step of the whole batch), and the engine's host
        // pool's peak use against its capacity (0 with the CUDA models: gpu_fields has their device pool's).
        r["preemptions"] = engine.metrics().preemptions - preempt0;
        r["preemptions_before"] = preempt0;
        r["pool_pages_peak"] = engine.metrics().pool_pages_peak;
        r["pool_pages_capacity"] = engine.metrics().pool_pages_capacity;
        r["seconds"] = secs;
        r["ms_per_step"] = 1e3 * secs / double(std::max<int64_t>(n, 1));
        r["tok_s"] = double(gen) / secs;
        r["tok_s_per_gpu"] = r["tok_s"].get<double>() / double(stat_models(*model).size());
        gpu_fields(r);
        bench::add_expert_load_fields(r, stat_models(*model));
        if (digest) {
            while (engine.has_unfinished()) absorb(engine.step());  // (after the timing: every request's last token)
            r["digest"] = hex16(hash);
        }
        return r;
    }
};

}  // namespace

int main(int argc, char** argv) {
    std::string layers, dir = "/tmp/deepinfer-engine-bench", model_dir, gemm = "fast", batches = "1,32,128,256,512";
    std::string routing = "model", family = "v4";
    int64_t prefill_prompt = 8192, prefill_requests = 4, context = 4096, tail = 64, decode = 16, batch_tokens = 8192, gpus = 1, prefixes = 0;
    bool keep = false, digest = false, fp8_twins = true, shared_stream = cuda::CudaModelOptions{}.v41_shared_expert_stream;
    int64_t attn_split_rows = cuda::CudaModelOptions{}.v41_attention_split_rows;
    int64_t bf16_keys = cuda::CudaModelOptions{}.v41_bf16_key_rows;
    bool attn_stream = cuda::CudaModelOptions{}.v41_attention_side_stream;
    bool hc_stream = cuda::CudaModelOptions{}.v41_hc_side_stream;
    std::string profile;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--layers") layers = v;
        else if (k == "--family") family = v;
        else if (k == "--dir") dir = v;
        else if (k == "--model") model_dir = v;
        else if (k == "--keep") keep = v == "1";
        else if (k == "--gemm") gemm = v;
        else if (k == "--prefill-prompt") prefill_prompt = std::stoll(v);
        else if (k == "--prefill-requests") prefill_requests = std::stoll(v);
        else if (k == "--context") context = std::stoll(v);
        else if (k == "--tail") tail = std::stoll(v);
        else if (k == "--batches") batches = v;
        else if (k == "--decode") decode = std::stoll(v);
        else if (k == "--batch-tokens") batch_tokens = std::stoll(v);
        else if (k == "--gpus") gpus = std::stoll(v);
        else if (k == "--prefixes") prefixes = std::stoll(v);
        else if (k == "--routing") routing = v;  // model,even: a decode sweep each
        else if (k == "--profile") profile = v;
        else if (k == "--digest") digest = v == "1";
        else if (k == "--fp8-twins") fp8_twins = v == "1";
        else if (k == "--attn-split-rows") attn_split_rows = std::stoll(v);
        else if (k == "--shared-stream") shared_stream = v == "1";
        else if (k == "--bf16-keys") bf16_keys = std::stoll(v);
        else if (k == "--attn-stream") attn_stream = v == "1";
        else if (k == "--hc-stream") hc_stream = v == "1";
        else {
            std::fprintf(stderr, "unknown option %s\n", k.c_str());
            return 2;
        }
    }
    try {
        const std::vector<int64_t> bs = parse_list(batches);
        const int64_t max_batch = bs.empty() ? 1 : *std::max_element(bs.begin(), bs.end());
        DI_CHECK(tail >= 1 && tail < context && (context - tail) % 64 == 0,
                 "--context minus --tail must be a positive multiple of the prefix block (64)");
        DI_CHECK(family == "v4" || family == "v41", "--family: v4 or v41, not ", family);
        const bool v41 = family == "v41";
        if (layers.empty()) layers = v41 ? "v41:12" : "flash:4";
        DI_CHECK(!v41 || layers.rfind("v41:", 0) == 0, "--family v41 takes --layers v41:N");
        int hash_layers = 0;
        std::vector<int> ratios;
        std::string v41_config;
        nlohmann::json schedule;  // (V4.1: the layer kinds, for the report's floors)
        if (v41) {
            nlohmann::ordered_json cfg = v41_flash_layers(std::stoll(layers.substr(4)));
            cfg["text_config"]["engram_vocab_size"] = 100000;
            cfg.erase("vision_config");
            set_v41_engram_rows(cfg);
            const auto& tc = cfg["text_config"];
            for (int64_t r : tc["compress_ratios"].get<std::vector<int64_t>>()) ratios.push_back(int(r));
            schedule = {{"ratios", ratios}, {"kv_sources", tc["kv_source_layer_ids"]},
                        {"index_sources", tc["index_source_layer_ids"]}, {"engram", tc["engram_layer_ids"]}};
            v41_config = cfg.dump(2);
        } else {
            ratios = layer_ratios(layers, hash_layers);
        }
        auto t = Clock::now();
        if (model_dir.empty()) {
            std::filesystem::create_directories(dir);
            if (v41)
                write_synthetic_v41_checkpoint(dir, v41_config,
                                               {.seed = 1, .residual_damping = 0.25, .include_drafter = false,
                                                .include_vision = false, .sharded = true, .parallel = true});
            else
                write_synthetic_checkpoint(dir, v4_flash_config({.compress_ratios = ratios, .num_hash_layers = hash_layers}),
                                           {.seed = 1, .residual_damping = 0.25, .parallel = true});
        } else {
            dir = model_dir;
        }
        const double write_s = since(t);
        uint64_t checkpoint_bytes = 0, engram_bytes = 0;  // (V4.1: the Engram tables' shards apart)
        for (const auto& e : std::filesystem::directory_iterator(dir)) {
            if (e.path().extension() != ".safetensors") continue;
            checkpoint_bytes += e.file_size();
            if (e.path().filename().string().find("engram") != std::string::npos) engram_bytes += e.file_size();
        }

        ModelOptions mo;
        mo.tokenizer_json = DI_TOKENIZER_JSON;  // (V4.1: the Engram token map)
        mo.max_batch_tokens = batch_tokens;
        mo.max_num_seqs = std::max<int64_t>(max_batch, 1);
        mo.cuda_graphs = gpus == 1;
        cuda::CudaModelOptions co;
        co.max_model_len = std::max(prefill_prompt, context) + decode + 64;
        DI_CHECK(gemm == "fast" || gemm == "fast-fp8" || gemm == "reference", "--gemm: reference, fast or fast-fp8, not ", gemm);
        co.gemm = gemm == "reference" ? cuda::GemmMode::kReference : cuda::GemmMode::kFast;
        co.v41_fp8_native = gemm == "fast-fp8";  // V4.1's dense FP8 linears stay FP8 (Hopper)
        co.v41_fp8_twins = fp8_twins;            // (the bf16 form's FP8 twins for decode-sized launches)
        co.v41_attention_split_rows = attn_split_rows;
        co.v41_shared_expert_stream = shared_stream;
        co.v41_bf16_key_rows = bf16_keys;
        co.v41_attention_side_stream = attn_stream;
        co.v41_hc_side_stream = hc_stream;
        std::vector<std::string> routings;
        {
            std::stringstream rs(routing);
            for (std::string item; std::getline(rs, item, ',');) {
                DI_CHECK(item == "model" || item == "even", "--routing: model or even, not ", item);
                routings.push_back(item);
            }
        }
        DI_CHECK(!routings.empty(), "--routing: model, even or both");
        co.even_routing = routings[0] == "even";
        co.expert_load_stats = true;  // one single-block kernel per MoE layer
        t = Clock::now();
        Bench b;
        DI_CHECK(!v41 || gpus == 1, "--family v41 runs on one GPU");
        if (v41) {
            b.model = cuda::load_cuda_v41_model(dir, mo, co);
        } else if (gpus == 1) {
            b.model = cuda::load_cuda_model(dir, mo, co);
        } else {
            std::vector<int> devices;
            for (int g = 0; g < int(gpus); ++g) devices.push_back(g);
            b.model = cuda::load_cuda_ep_model(dir, mo, co, devices);
        }
        const double load_s = since(t);
        b.ec.max_num_seqs = mo.max_num_seqs;
        b.ec.max_num_batched_tokens = batch_tokens * gpus;  // the engine gives each GPU batch_tokens (placement groups)
        b.ec.max_prefill_chunk = batch_tokens;
        b.ec.prefix_caching = true;
        b.ec.async_scheduling = true;
        b.ec.device_sampling = true;
        b.ec.state_memory_bytes = uint64_t{1} << 40;  // the model's own device pool bounds it (state_limit)
        const cuda::CudaModelStats st0 = cuda::cuda_model_stats(*stat_models(*b.model)[0]);
        b.base = {{"family", family}, {"layers", layers}, {"num_layers", ratios.size()}, {"gemm", gemm}, {"gpus", gpus}, {"routing", routings[0]},
                  {"numerics", numerics_name(b.model->numerics())}, {"checkpoint_bytes", checkpoint_bytes},
                  {"write_s", write_s}, {"load_s", load_s}, {"workspace_bytes", st0.workspace_bytes},
                  {"state_capacity_bytes", b.model->state_capacity_bytes()},
                  {"weight_device_bytes", st0.weight_device_bytes}, {"ratios", ratios}};
        if (v41) {
            b.base["schedule"] = schedule;
            b.base["engram_table_bytes"] = engram_bytes;
            b.base["fp8_twins"] = fp8_twins;
            b.base["attn_split_rows"] = attn_split_rows;
            b.base["shared_stream"] = shared_stream;
            b.base["bf16_keys"] = bf16_keys;
            b.base["attn_stream"] = attn_stream;
            b.base["hc_stream"] = hc_stream;
        }
        // Warm-up: module load, graph captures of the small buckets.
        if (prefixes <= 0) prefixes = gpus;
        b.decode(2, 128, 64, 2, 1);
        b.profile_prefill = profile == "prefill" || profile == "1";
        b.profile_decode = profile == "decode" || profile == "1";
        b.digest = digest;
        if (prefill_requests > 0) std::printf("%s\n", b.prefill(prefill_requests, prefill_prompt).dump().c_str());
        std::fflush(stdout);
        for (const std::string& r : routings) {
            for (const Model* m : stat_models(*b.model)) cuda::set_cuda_even_routing(*m, r == "even");
            b.base["routing"] = r;
            for (int64_t batch : bs) {
                std::printf("%s\n", b.decode(batch, context, tail, decode, std::min(prefixes, batch)).dump().c_str());
                std::fflush(stdout);
            }
        }
        b.model.reset();
        if (model_dir.empty() && !keep) std::filesystem::remove_all(dir);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "cuda_engine_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}
