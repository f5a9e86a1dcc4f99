// SPDX-License-Identifier: Apache-2.0
// GPU forward throughput of the CUDA backend on synthetic checkpoints at the real V4-Flash widths
// (FP8 linears, FP4 experts, DeepSeek's layout): prefill tokens/s of one sequence and decode tokens/s
// at several batch sizes, one JSON line each. A tokenizer-free binary, so it runs on the GPU machine
// with only libfmt/libgomp/libcudart beside it.
//   cuda_forward_bench [--experts 256] [--layers csa,hca] [--prefill 512] [--decode 16] [--batches 1,8,64] [--gemm fast]
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

#include "backends/cuda/model/cuda_model.h"
#include "deepinfer/model.h"
#include "deepinfer/synthetic.h"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string config(int64_t experts, const std::vector<int>& ratios) {
    std::vector<int> cr = ratios;
    cr.push_back(0);  // the MTP entry
    nlohmann::json j = {
        {"architectures", {"DeepseekV4ForCausalLM"}}, {"model_type", "deepseek_v4"}, {"vocab_size", 129280},
        {"hidden_size", 4096}, {"moe_intermediate_size", 2048}, {"num_hidden_layers", int(ratios.size())},
        {"num_attention_heads", 64}, {"num_key_value_heads", 1}, {"head_dim", 512}, {"qk_rope_head_dim", 64},
        {"q_lora_rank", 1024}, {"o_groups", 8}, {"o_lora_rank", 1024}, {"sliding_window", 128},
        {"compress_ratios", cr}, {"num_hash_layers", 0}, {"n_routed_experts", experts}, {"n_shared_experts", 1},
        {"num_experts_per_tok", 6}, {"scoring_func", "sqrtsoftplus"}, {"routed_scaling_factor", 1.5},
        {"swiglu_limit", 10.0}, {"rms_norm_eps", 1e-6}, {"hc_mult", 4}, {"hc_sinkhorn_iters", 20}, {"hc_eps", 1e-6},
        {"rope_theta", 10000}, {"compress_rope_theta", 160000},
        {"rope_scaling", {{"type", "yarn"}, {"factor", 16}, {"original_max_position_embeddings", 65536},
                          {"beta_fast", 32}, {"beta_slow", 1}}},
        {"index_n_heads", 64}, {"index_head_dim", 128}, {"index_topk", 512}, {"num_nextn_predict_layers", 0},
        {"max_position_embeddings", 1048576}, {"expert_dtype", "fp4"},
        {"quantization_config", {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {128, 128}},
                                 {"scale_fmt", "ue8m0"}, {"activation_scheme", "dynamic"}}}};
    return j.dump(2);
}

std::vector<int64_t> parse_list(const std::string& s) {
    std::vector<int64_t> v;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, ',');) v.push_back(std::stoll(item));
    return v;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace deepinfer;
    int64_t experts = 256, prefill = 512, decode = 16;
    std::string layers = "csa,hca", batches = "1,8,64", dir = "/tmp/deepinfer-cuda-bench", gemm = "reference";
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--experts") experts = std::stoll(v);
        else if (k == "--layers") layers = v;
        else if (k == "--prefill") prefill = std::stoll(v);
        else if (k == "--decode") decode = std::stoll(v);
        else if (k == "--batches") batches = v;
        else if (k == "--dir") dir = v;
        else if (k == "--gemm") gemm = v;  // reference | fast
        else {
            std::fprintf(stderr, "unknown option %s\n", k.c_str());
            return 2;
        }
    }
    std::vector<int> ratios;
    std::stringstream ls(layers);
    for (std::string item; std::getline(ls, item, ',');) ratios.push_back(item == "csa" ? 4 : item == "hca" ? 128 : 0);
    std::filesystem::create_directories(dir);
    auto t = Clock::now();
    write_synthetic_checkpoint(dir, config(experts, ratios), {.seed = 1, .residual_damping = 0.25});
    const double write_s = since(t);
    cuda::CudaModelOptions co;
    co.max_model_len = 8192;
    co.workspace_bytes = size_t{24} << 30;  // f32 activations of a 16k-row prefill batch
    co.gemm = gemm == "fast" ? cuda::GemmMode::kFast : cuda::GemmMode::kReference;
    t = Clock::now();
    // The CUDA loader directly (Model::load's V4.1 branch would need ICU, absent on the GPU machine).
    auto model = cuda::load_cuda_model(dir, {}, co);
    const double load_s = since(t);
    const int64_t V = model->info().vocab_size;
    std::mt19937 rng(1);
    auto prompt = [&](int64_t n) {
        std::vector<int32_t> p(static_cast<size_t>(n));
        for (int32_t& x : p) x = static_cast<int32_t>(rng() % uint32_t(V));
        return p;
    };
    {  // warm-up (module load, first touches)
        Sequence w = model->new_sequence();
        model->forward(w, prompt(16), false);
    }
    nlohmann::json base = {{"layers", layers}, {"experts", experts}, {"numerics", numerics_name(model->numerics())},
                           {"write_s", write_s}, {"load_s", load_s}, {"gemm", gemm}};
    {
        Sequence s = model->new_sequence();
        const auto ids = prompt(prefill);
        t = Clock::now();
        model->forward(s, ids, false);
        const double secs = since(t);
        nlohmann::json r = base;
        r["mode"] = "prefill";
        r["tokens"] = prefill;
        r["seconds"] = secs;
        r["tok_s"] = double(prefill) / secs;
        std::printf("%s\n", r.dump().c_str());
        std::fflush(stdout);
    }
    for (int64_t b : parse_list(batches)) {
        std::vector<Sequence> seqs;
        for (int64_t i = 0; i < b; ++i) seqs.push_back(model->new_sequence());
        std::vector<std::vector<int32_t>> prompts;
        for (int64_t i = 0; i < b; ++i) prompts.push_back(prompt(64));
        std::vector<SequenceChunk> chunks;
        for (int64_t i = 0; i < b; ++i) chunks.push_back({&seqs[size_t(i)], prompts[size_t(i)], false});
        model->forward_batch(chunks);
        std::vector<int32_t> next(static_cast<size_t>(b), 7);
        t = Clock::now();
        for (int64_t step = 0; step < decode; ++step) {
            for (int64_t i = 0; i < b; ++i) chunks[size_t(i)] = {&seqs[size_t(i)], std::span<const int32_t>(&next[size_t(i)], 1), false};
            auto out = model->forward_batch(chunks);
            for (int64_t i = 0; i < b; ++i)
                next[size_t(i)] = static_cast<int32_t>(std::max_element(out[size_t(i)].begin(), out[size_t(i)].end()) -
                                                       out[size_t(i)].begin());
        }
        const double secs = since(t);
        nlohmann::json r = base;
        r["mode"] = "decode";
        r["batch"] = b;
        r["steps"] = decode;
        r["seconds"] = secs;
        r["ms_per_step"] = 1e3 * secs / double(decode);
        r["tok_s"] = double(b * decode) / secs;
        std::printf("%s\n", r.dump().c_str());
        std::fflush(stdout);
    }
    std::filesystem::remove_all(dir);
    return 0;
}
