// SPDX-License-Identifier: Apache-2.0
// Fixtures of the DeepSeek-V4-Flash-0731 DSpark tests (dspark_v4_test.cpp, dspark_v4_engine_test.cpp):
// tiny random V4 checkpoints in the published layout (the v4_tiny_a shape: sliding, CSA and HCA layers,
// hash-routed layers, window 16 so the drafter's rings wrap) with a 3-stage drafter whose MoE has its
// own expert count and a config that says num_nextn_predict_layers = 1 as the 0731 HF config does;
// written, loaded and removed once per process.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "deepinfer/check.h"
#include "engine/drafter_checks.h"
#include "deepinfer/drafter.h"
#include "deepinfer/engine.h"
#include "deepinfer/parallel.h"
#include "deepinfer/synthetic.h"
#include "engine/spec_test_util.h"
#include "model/dspark_v4.h"
#include "unit/fixtures.h"

namespace deepinfer::dspark_v4_test {

struct OneThread {
    int saved = cpu_num_threads();
    OneThread() { set_cpu_num_threads(1); }
    ~OneThread() { set_cpu_num_threads(saved); }
};

inline std::string temp_dir(const std::string& name) {
    return (std::filesystem::temp_directory_path() / ("deepinfer_dspark_v4_" + name + "_" + std::to_string(::getpid())))
        .string();
}

// The v4_tiny_a shape with 0731's DSpark keys (target layers: the default, the last three).
inline nlohmann::json tiny_config() {
    std::ifstream in(test::data_path("models/v4_tiny_a_mtp/config.json"));
    nlohmann::json j = nlohmann::json::parse(in);
    j["num_nextn_predict_layers"] = 1;  // vestigial in the 0731 HF config: 3 stages are stored
    j["dspark_block_size"] = 5;
    j["dspark_noise_token_id"] = int64_t(j["vocab_size"]) - 1;
    j["dspark_markov_rank"] = 16;
    j["dspark_n_routed_experts"] = 4;
    j["dspark_num_experts_per_tok"] = 2;
    return j;
}

// Official numerics quantize activations in blocks of 128: every quantized GEMM's input is a multiple.
inline nlohmann::json config_for(bool official) {
    nlohmann::json j = tiny_config();
    if (official) {
        j["hidden_size"] = 128;
        j["q_lora_rank"] = 128;
        j["o_lora_rank"] = 128;
        j["moe_intermediate_size"] = 128;
    }
    return j;
}

inline SyntheticCheckpointOptions drafter_options(uint64_t seed, bool official) {
    SyntheticCheckpointOptions o;
    o.seed = seed;
    o.fp8_linears = o.fp4_experts = official;
    o.residual_damping = 0.5;
    o.dspark_stages = 3;
    return o;
}

inline std::shared_ptr<const Model> load_and_remove(const std::string& dir) {
    auto m = std::shared_ptr<const Model>(Model::load(dir, {}));
    std::filesystem::remove_all(dir);
    return m;
}

// official: FP8 linears and FP4 experts (official numerics, the checkpoint's default), else bf16 (exact).
inline std::shared_ptr<const Model> tiny_model(bool official) {
    static std::map<bool, std::shared_ptr<const Model>> cache;
    auto& m = cache[official];
    if (!m) {
        const std::string dir = temp_dir(official ? "official" : "exact");
        write_synthetic_checkpoint(dir, config_for(official).dump(2), drafter_options(17, official));
        m = load_and_remove(dir);
    }
    return m;
}

inline std::shared_ptr<const Model> small_vocab_model() {
    static std::shared_ptr<const Model> m = [] {
        const std::string dir = temp_dir("v16");
        nlohmann::json j = tiny_config();
        j["vocab_size"] = 16;
        j["dspark_noise_token_id"] = 15;
        write_synthetic_checkpoint(dir, j.dump(2), drafter_options(37, false));
        return load_and_remove(dir);
    }();
    return m;
}

inline std::shared_ptr<const Model> agreeing_model() {
    static std::shared_ptr<const Model> m = [] {
        const std::string dir = temp_dir("agree");
        nlohmann::json j = tiny_config();
        j["dspark_markov_rank"] = j["hidden_size"];
        write_synthetic_checkpoint(dir, j.dump(2), drafter_options(23, false));
        make_v4_dspark_agree_with_target(dir);
        return load_and_remove(dir);
    }();
    return m;
}

inline const V4DSparkModel& dspark_of(const Model& model) {
    const auto* d = dynamic_cast<const V4DSparkDrafter*>(model.drafter());
    if (d == nullptr) throw std::runtime_error("no V4 DSpark drafter");
    return d->model();
}

using drafter_checks::attached;
using drafter_checks::expect_same_draft;
using drafter_checks::random_prompt;

}  // namespace deepinfer::dspark_v4_test
