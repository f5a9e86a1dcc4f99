// SPDX-License-Identifier: Apache-2.0
// Speculative-decoding speedup on the CPU (or, with --device cuda, one GPU): a random DeepSeek-V4 model
// whose MTP drafter (--family v4), a random DeepSeek-V4 model with a V4-Flash-0731-style DSpark drafter
// (--family v4-dspark), or a random DeepSeek-V4.1 model whose DSpark drafter (--family v41) is built to
// agree with the target, the engine with speculation off, with a fixed draft length, and with the confidence
// scheduler, across batch sizes, each run --repeat times. One JSON line per run on stdout, then one
// summary line per (batch, arm) with the medians and the load average before and after.
//
// The agreeing V4.1 model: make_dspark_agree_with_target (include/deepinfer/synthetic_v41.h); the
// agreeing 0731 model: the V4 shape below with a 3-stage DSpark drafter (Markov rank = hidden, the
// target's expert count, taps = the last three layers' outputs) through make_v4_dspark_agree_with_target
// (include/deepinfer/synthetic.h).
// The agreeing V4 model: every residual branch's output projection is zero (attention wo_b, routed and
// shared expert w2), so the target's streams stay the token's embedding (up to the mHC mixing of
// equal streams) and its next-token distribution depends on the current token only; the MTP block's
// branches are zeroed the same way, h_proj = 0, e_proj = identity (+ `--noise` x a random matrix),
// and it shares the target's hc_head and final norm, so its prediction for token i+2 from token i+1
// is (nearly) the target's. All layers still run at full cost: only the weights' values are special.
// --requests-per-slot R: R x batch requests through the batch's slots (continuous batching, as an offline job).
// --decode-spread S: each request's max_tokens drawn uniformly from [decode (1 - S), decode (1 + S)] (the same in every
// arm). 0 (default): every request generates --decode tokens, so without speculation a batch runs in lockstep (every
// wave of requests ends at one step and the next one prefills together), which no real job does.
// --trace PATH: the confidence scheduler's view of every step (EngineConfig::speculative_trace).
// --formats bf16 (default): bf16 linears and experts; published: FP8 linears (128 x 128 ue8m0 blocks) and FP4
// experts as in the real checkpoints (the fast GEMMs' formats on a GPU): zeroed tensors stay zero and e_proj's
// identity is written as FP8 (exact at --noise 0), so the drafters agree as with bf16.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "deepinfer/engine.h"
#include "engine/speculative/report.h"
#include "model/safetensors_patcher.h"
#include "deepinfer/parallel.h"
#include "deepinfer/safetensors.h"
#include "deepinfer/synthetic.h"
#include "deepinfer/synthetic_v41.h"

namespace di = deepinfer;

namespace {

std::string config_json(int64_t hidden, int64_t layers, int64_t vocab) {
    nlohmann::json c = {
        {"architectures", {"DeepseekV4ForCausalLM"}}, {"model_type", "deepseek_v4"}, {"dtype", "bfloat16"},
        {"vocab_size", vocab}, {"hidden_size", hidden}, {"num_hidden_layers", layers}, {"num_attention_heads", 8},
        {"num_key_value_heads", 1}, {"head_dim", 128}, {"qk_rope_head_dim", 32}, {"q_lora_rank", hidden / 2},
        {"o_lora_rank", hidden / 4}, {"o_groups", 2}, {"moe_intermediate_size", hidden / 2}, {"n_routed_experts", 16},
        {"num_experts_per_tok", 4}, {"n_shared_experts", 1}, {"num_hash_layers", 1}, {"scoring_func", "sqrtsoftplus"},
        {"routed_scaling_factor", 1.5}, {"norm_topk_prob", true}, {"sliding_window", 64}, {"index_head_dim", 64},
        {"index_n_heads", 8}, {"index_topk", 16}, {"hc_mult", 4}, {"hc_sinkhorn_iters", 20}, {"hc_eps", 1e-6},
        {"rms_norm_eps", 1e-6}, {"rope_theta", 10000.0}, {"compress_rope_theta", 160000.0}, {"max_position_embeddings", 4096},
        {"num_nextn_predict_layers", 1}, {"swiglu_limit", 10.0}, {"eos_token_id", 1}, {"bos_token_id", 0},
        {"tie_word_embeddings", false}, {"hidden_act", "silu"}};
    std::vector<int64_t> ratios;
    for (int64_t l = 0; l < layers; ++l) ratios.push_back(l < 2 ? 0 : (l % 2 ? 128 : 4));
    ratios.push_back(0);  // the MTP layer
    c["compress_ratios"] = ratios;
    return c.dump(2);
}


// The checkpoint formats (--formats): bf16 linears and experts, or the published FP8 linears (128 x 128
// blocks) and FP4 experts (the fast GEMMs' formats: the experts' cost at verify rows as in the real model).
void set_formats(di::SyntheticCheckpointOptions& o, bool published) { o.fp8_linears = o.fp4_experts = published; }

void write_agreeing_model(const std::string& dir, int64_t hidden, int64_t layers, int64_t vocab, double noise, bool published) {
    std::filesystem::create_directories(dir);
    di::SyntheticCheckpointOptions o;
    o.seed = 3;
    set_formats(o, published);
    di::write_synthetic_checkpoint(dir, config_json(hidden, layers, vocab), o);
    di::SafetensorsPatcher p(dir + "/model.safetensors");
    auto zero_branches = [&](const std::string& prefix) {
        p.zero(prefix + "attn.wo_b.weight");
        p.zero(prefix + "ffn.shared_experts.w2.weight");
        for (int e = 0; p.has(prefix + "ffn.experts." + std::to_string(e) + ".w2.weight"); ++e)
            p.zero(prefix + "ffn.experts." + std::to_string(e) + ".w2.weight");
    };
    for (int64_t l = 0; l < layers; ++l) zero_branches("layers." + std::to_string(l) + ".");
    zero_branches("mtp.0.");
    p.zero("mtp.0.h_proj.weight");
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> eye(size_t(hidden * hidden));
    for (int64_t i = 0; i < hidden; ++i)
        for (int64_t j = 0; j < hidden; ++j)
            eye[size_t(i * hidden + j)] = (i == j ? 1.0f : 0.0f) + float(noise) * nd(rng) / std::sqrt(float(hidden));
    p.write("mtp.0.e_proj.weight", eye);
    p.write("mtp.0.enorm.weight", std::vector<float>(size_t(hidden), 1.0f));
    p.copy("norm.weight", "mtp.0.norm.weight");
    for (const char* t : {"hc_head_fn", "hc_head_base", "hc_head_scale"}) p.copy(t, std::string("mtp.0.") + t);
}

void write_agreeing_v4_dspark_model(const std::string& dir, int64_t hidden, int64_t layers, int64_t vocab, double noise, bool published) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    nlohmann::json c = nlohmann::json::parse(config_json(hidden, layers, vocab));
    c["dspark_block_size"] = 5;
    c["dspark_noise_token_id"] = vocab - 1;
    c["dspark_markov_rank"] = hidden;
    di::SyntheticCheckpointOptions o;
    o.seed = 3;
    set_formats(o, published);
    o.dspark_stages = 3;
    di::write_synthetic_checkpoint(dir, c.dump(2), o);
    di::make_v4_dspark_agree_with_target(dir, noise);
}

// A V4.1 config of the given size with every layer kind (window-only, ratio-2 and ratio-1 Full + Reuse,
// Reindex, candidate stage), Engram at layers 1 and 2, and a 3-stage drafter tapping the last three
// layers whose Markov rank is the hidden size (make_dspark_agree_with_target needs it).
std::string v41_config_json(int64_t hidden, int64_t layers, int64_t vocab) {
    if (layers < 6) throw std::runtime_error("--family v41 needs --layers >= 6");
    nlohmann::ordered_json j = di::v41_flash_config();
    j.erase("vision_config");
    auto& t = j["text_config"];
    const int64_t a = (layers - 2) / 2, full1 = 2 + a;  // ratio-2 layers 2 .. 2+a-1, ratio-1 from full1
    std::vector<int64_t> ratios = {0, 0};
    for (int64_t l = 2; l < layers; ++l) ratios.push_back(l < full1 ? 2 : 1);
    ratios.insert(ratios.end(), 3, 0);
    std::vector<int64_t> index_sources = {2, full1};
    if (full1 + 2 < layers) index_sources.push_back(full1 + 2);
    t["vocab_size"] = vocab;
    t["hidden_size"] = hidden;
    t["num_hidden_layers"] = layers;
    t["num_attention_heads"] = 8;
    t["head_dim"] = 128;
    t["qk_rope_head_dim"] = 32;
    t["q_lora_rank"] = hidden / 2;
    t["o_groups"] = 2;
    t["o_lora_rank"] = hidden / 4;
    t["sliding_window"] = 64;
    t["compress_ratios"] = ratios;
    t["kv_source_layer_ids"] = {2, full1};
    t["index_source_layer_ids"] = index_sources;
    t["candidate_source_layer_id"] = full1;
    t["candidate_topk_blocks"] = 4;
    t["candidate_block_size"] = 8;
    t["index_topk"] = 16;
    t["index_n_heads"] = 8;
    t["index_head_dim"] = 64;
    t["n_routed_experts"] = 16;
    t["num_experts_per_tok"] = 4;
    t["moe_intermediate_size"] = hidden / 2;
    t["engram_layer_ids"] = {1, 2};
    t["engram_n_heads"] = 2;
    t["engram_head_dim"] = 32;
    t["engram_vocab_size"] = 64;
    t["max_position_embeddings"] = 4096;
    t["dspark_target_layer_ids"] = {layers - 3, layers - 2, layers - 1};
    t["dspark_markov_rank"] = hidden;
    t["dspark_n_routed_experts"] = 8;
    t["dspark_num_experts_per_tok"] = 2;
    t["dspark_noise_token_id"] = vocab - 1;
    di::set_v41_engram_rows(j);
    return j.dump(2);
}

void write_agreeing_v41_model(const std::string& dir, int64_t hidden, int64_t layers, int64_t vocab, double noise, bool published) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    di::SyntheticCheckpointOptions o;
    o.seed = 3;
    set_formats(o, published);
    di::write_synthetic_v41_checkpoint(dir, v41_config_json(hidden, layers, vocab), o);
    di::make_dspark_agree_with_target(dir, noise);
}

std::vector<double> load_average() {
    std::ifstream in("/proc/loadavg");
    double a = 0, b = 0, c = 0;
    in >> a >> b >> c;
    return {a, b, c};
}

// CPU seconds used by this process (all threads): on a shared machine a steadier measure of the work
// than wall time (run with --threads 1 so that no thread spins at a barrier).
double process_cpu_seconds() {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

}  // namespace

int main(int argc, char** argv) {
    std::map<std::string, std::string> a = {{"--family", "v4"}, {"--batches", "1,4,16,64"}, {"--prompt", "32"},
                                            {"--decode", "32"}, {"--hidden", "512"}, {"--layers", "8"},
                                            {"--vocab", "2048"}, {"--noise", "0.0"}, {"--k", "3"},
                                            {"--temperature", "0"}, {"--repeat", "1"}, {"--arms", "none,fixed,scheduler"},
                                            {"--tokenizer", "assets/tokenizer/deepseek-v4/tokenizer.json"}, {"--threads", "0"},
                                            {"--device", "cpu"}, {"--async", "0"}, {"--warmup", "0"}, {"--gemm", "reference"}, {"--max-batch-tokens", "4096"},
                                            {"--verify-graphs", "1"}, {"--top-p", "1"}, {"--host-sampling", "0"}, {"--formats", "bf16"}, {"--trace", ""}, {"--requests-per-slot", "1"}, {"--decode-spread", "0"},
                                            {"--dir", (std::filesystem::temp_directory_path() / "deepinfer-spec-bench").string()}};
    for (int i = 1; i + 1 < argc; i += 2) a[argv[i]] = argv[i + 1];
    const int64_t hidden = std::stoll(a["--hidden"]), layers = std::stoll(a["--layers"]), vocab = std::stoll(a["--vocab"]);
    const bool v41 = a["--family"] == "v41", v4_dspark = a["--family"] == "v4-dspark";
    if (a["--formats"] != "bf16" && a["--formats"] != "published") throw std::runtime_error("--formats must be bf16 or published");
    const bool published = a["--formats"] == "published";
    if (std::stoi(a["--threads"]) > 0) di::set_cpu_num_threads(std::stoi(a["--threads"]));
    if (!v41 && !v4_dspark && a["--family"] != "v4") throw std::runtime_error("--family must be v4, v4-dspark or v41");
    di::ModelOptions mo;
    if (v41) {
        write_agreeing_v41_model(a["--dir"], hidden, layers, vocab, std::stod(a["--noise"]), published);
        mo.tokenizer_json = a["--tokenizer"];  // the Engram token map (bf16 weights: exact numerics)
    } else if (v4_dspark) {
        write_agreeing_v4_dspark_model(a["--dir"], hidden, layers, vocab, std::stod(a["--noise"]), published);
    } else {
        write_agreeing_model(a["--dir"], hidden, layers, vocab, std::stod(a["--noise"]), published);
        mo.numerics_from_checkpoint = false;
        mo.numerics = di::Numerics::kExact;
    }
    // --device cuda: the GPU model's workspace is sized for the engine's limits below.
    mo.device = di::parse_device(a["--device"]);
    if (a["--gemm"] != "reference" && a["--gemm"] != "fast") throw std::runtime_error("--gemm must be reference or fast");
    mo.device_fast_gemm = a["--gemm"] == "fast";  // CUDA: tensor-core GEMMs
    mo.cuda_verify_graphs = a["--verify-graphs"] != "0";  // CUDA V4.1: steps of verify rows replay graphs
    int64_t max_batch = 1;
    {
        std::stringstream list(a["--batches"]);
        for (std::string item; std::getline(list, item, ',');) max_batch = std::max<int64_t>(max_batch, std::stoll(item));
    }
    const int64_t max_tokens = std::max<int64_t>(std::stoll(a["--max-batch-tokens"]), max_batch * 8);
    mo.max_batch_tokens = max_tokens;
    mo.max_num_seqs = max_batch;
    std::shared_ptr<const di::Model> model(di::Model::load(a["--dir"], mo));
    const char* method = v41 || v4_dspark ? "dspark" : "mtp";
    // Arms: none | fixed | scheduler; "-host": verify rows on the host from their logits (the engine's
    // speculative_device_verification off; same verdicts, the GPU backend's A/B).
    struct Arm { std::string name; std::string method; bool scheduler; bool host_verify; };
    std::vector<Arm> arms;
    {
        std::stringstream names(a["--arms"]);
        for (std::string n; std::getline(names, n, ',');) {
            const bool host = n.size() > 5 && n.substr(n.size() - 5) == "-host";
            const std::string base = host ? n.substr(0, n.size() - 5) : n;
            if (base == "none" && !host) arms.push_back({n, "none", false, false});
            else if (base == "fixed") arms.push_back({n, method, false, host});
            else if (base == "scheduler") arms.push_back({n, method, true, host});
            else throw std::runtime_error("unknown arm " + n);
        }
    }
    const int64_t repeat = std::stoll(a["--repeat"]);
    // --requests-per-slot R: R x batch requests through batch sequence slots (continuous batching refills a
    // slot as soon as its request ends, as in an offline job); 1: one closed batch, whose last steps run
    // while the batch drains (requests end at different steps with speculation), a cost an offline job
    // with more requests than slots pays once at its very end.
    const int64_t per_slot = std::stoll(a["--requests-per-slot"]);
    if (per_slot < 1) throw std::runtime_error("--requests-per-slot must be >= 1");
    const int64_t decode = std::stoll(a["--decode"]);
    const double spread = std::stod(a["--decode-spread"]);
    if (!(spread >= 0 && spread < 1)) throw std::runtime_error("--decode-spread must be in [0, 1)");
    // --trace PATH: the scheduler's view of every step of the timed speculative runs (JSON lines).
    std::ofstream trace;
    if (!a["--trace"].empty()) {
        trace.open(a["--trace"]);
        if (!trace) throw std::runtime_error("cannot write " + a["--trace"]);
    }
    std::stringstream list(a["--batches"]);
    for (std::string item; std::getline(list, item, ',');) {
        const int64_t batch = std::stoll(item);
        std::map<std::string, std::vector<double>> tok_s, tok_cpu_s, steps_of, accepted_len, plain_of;
        const std::vector<double> load_before = load_average();
        // Rounds interleave the arms, so slow phases of a shared machine hit every arm alike.
        // Warm-up rounds (first-use costs: CUDA graph captures, allocator growth) print but are not summarized.
        const int64_t warmup = std::stoll(a["--warmup"]);
        for (int64_t round = -warmup; round < repeat; ++round) {
            for (const Arm& arm : arms) {
                di::EngineConfig ec;
                ec.max_num_seqs = batch;
                ec.max_num_batched_tokens = max_tokens;
                ec.async_scheduling = a["--async"] == "1";
                ec.prefix_caching = false;
                ec.speculative_method = arm.method;
                ec.num_speculative_tokens = std::stoll(a["--k"]);
                ec.speculative_scheduler = arm.scheduler;
                ec.speculative_device_verification = !arm.host_verify;
                ec.device_sampling = a["--host-sampling"] == "0";
                if (trace && round >= 0 && arm.method != "none")
                    ec.speculative_trace = [&trace, &arm, batch, round](const di::SpeculativeTraceStep& t) {
                        nlohmann::json j = nlohmann::json::parse(di::speculative_trace_line(t));
                        j["arm"] = arm.name;
                        j["batch"] = batch;
                        j["round"] = round;
                        trace << j.dump() << "\n";
                    };
                di::Engine engine(model, nullptr, ec);
                std::mt19937 rng(static_cast<uint32_t>(batch));
                di::SamplingParams sp;
                sp.temperature = std::stod(a["--temperature"]);
                sp.top_p = std::stod(a["--top-p"]);
                sp.max_tokens = decode;
                sp.ignore_eos = true;
                for (int64_t r = 0; r < batch * per_slot; ++r) {
                    std::vector<int32_t> prompt(static_cast<size_t>(std::stoll(a["--prompt"])));
                    for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % uint32_t(vocab - 1));
                    if (spread > 0) {  // the same lengths in every arm (the stream is seeded by the batch)
                        const int64_t lo = std::max<int64_t>(1, std::llround(double(decode) * (1 - spread)));
                        const int64_t hi = std::max<int64_t>(lo, std::llround(double(decode) * (1 + spread)));
                        sp.max_tokens = lo + int64_t(rng() % uint64_t(hi - lo + 1));
                    }
                    std::string id = std::to_string(r);
                    id.insert(id.begin(), 'r');
                    sp.seed = uint64_t(r);
                    engine.add_request(std::move(id), std::move(prompt), sp);
                }
                const auto t0 = std::chrono::steady_clock::now();
                const double c0 = process_cpu_seconds();
                engine.run_until_done([](di::RequestOutput&&) {});
                const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                const double cpu = process_cpu_seconds() - c0;
                const di::EngineMetrics& m = engine.metrics();
                nlohmann::json r = {{"family", a["--family"]}, {"arm", arm.name}, {"batch", batch}, {"round", round},
                                    {"requests", batch * per_slot}, {"decode_spread", spread},
                                    {"k", ec.num_speculative_tokens}, {"temperature", sp.temperature},
                                    {"noise", std::stod(a["--noise"])}, {"hidden", hidden}, {"layers", layers},
                                    {"vocab", vocab}, {"generated_tokens", m.generated_tokens}, {"seconds", secs},
                                    {"generated_tok_s", double(m.generated_tokens) / secs}, {"cpu_s", cpu},
                                    {"generated_tok_per_cpu_s", double(m.generated_tokens) / cpu}, {"steps", m.steps},
                                    {"device_verified_rows", m.device_verified_rows}, {"device_sampled_tokens", m.device_sampled_tokens},
                                    {"top_p", sp.top_p}, {"host_sampling", !ec.device_sampling},
                                    {"forward_s", m.forward_seconds}, {"draft_s", m.draft_seconds},
                                    {"threads", di::cpu_num_threads()}, {"device", a["--device"]}, {"gemm", a["--gemm"]}, {"formats", a["--formats"]},
                                    {"verify_graphs", mo.cuda_verify_graphs},
                                    {"async", ec.async_scheduling}};
                if (round < 0) {
                    r["warmup"] = true;
                    std::printf("%s\n", r.dump().c_str());
                    continue;
                }
                tok_s[arm.name].push_back(double(m.generated_tokens) / secs);
                tok_cpu_s[arm.name].push_back(double(m.generated_tokens) / cpu);
                steps_of[arm.name].push_back(double(m.steps));
                if (m.spec_steps > 0) {
                    r["speculative"] = {{"mean_accepted_length", m.mean_accepted_length()},
                                        {"position_verified", m.spec_position_verified},
                                        {"position_accepted", m.spec_position_accepted},
                                        {"verify_tokens_per_step", double(m.spec_verify_tokens) / double(m.spec_steps)},
                                        {"mean_draft_budget", double(m.spec_budget_sum) / double(m.spec_steps)},
                                        {"plain_steps", m.spec_plain_steps}};
                    accepted_len[arm.name].push_back(m.mean_accepted_length());
                    plain_of[arm.name].push_back(double(m.spec_plain_steps));
                }
                std::printf("%s\n", r.dump().c_str());
                std::fflush(stdout);
            }
        }
        const std::vector<double> load_after = load_average();
        for (const Arm& arm : arms) {
            nlohmann::json s = {{"summary", true}, {"family", a["--family"]}, {"arm", arm.name}, {"batch", batch},
                                {"runs", repeat}, {"median_generated_tok_s", median(tok_s[arm.name])},
                                {"min_generated_tok_s", *std::min_element(tok_s[arm.name].begin(), tok_s[arm.name].end())},
                                {"max_generated_tok_s", *std::max_element(tok_s[arm.name].begin(), tok_s[arm.name].end())},
                                {"median_steps", median(steps_of[arm.name])},
                                {"median_generated_tok_per_cpu_s", median(tok_cpu_s[arm.name])},
                                {"cpu_speedup_vs_none", tok_cpu_s.count("none") ? median(tok_cpu_s[arm.name]) / median(tok_cpu_s["none"]) : 0.0},
                                {"speedup_vs_none", tok_s.count("none") ? median(tok_s[arm.name]) / median(tok_s["none"]) : 0.0},
                                {"loadavg_before", load_before}, {"loadavg_after", load_after}};
            if (!accepted_len[arm.name].empty()) s["median_mean_accepted_length"] = median(accepted_len[arm.name]);
            if (!plain_of[arm.name].empty()) s["median_plain_steps"] = median(plain_of[arm.name]);
            std::printf("%s\n", s.dump().c_str());
            std::fflush(stdout);
        }
    }
    return 0;
}
