// SPDX-License-Identifier: Apache-2.0
// The V4.1 CPU forward (exact numerics) against transformers' DeepseekV41 on the tiny fixtures of
// tests/data/v41 (tools/reference/make_v41_models.py): logits at every position within
// 1e-4 x max|logit|, the 16-token greedy continuations identical, every index source's top-k set
// identical at every position, and the KV sources' compressed entries and index keys (after RoPE and
// FP4 / MXFP4 QAT) equal to the reference's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "deepinfer/model_v41.h"
#include "deepinfer/safetensors.h"

namespace deepinfer {
namespace {

const std::string kV41Data = DI_V41_DATA_DIR;

std::vector<float> read_f32(const std::string& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    EXPECT_TRUE(in.good()) << path;
    std::vector<float> v(static_cast<size_t>(in.tellg()) / 4);
    in.seekg(0);
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
    return v;
}

class V41Forward : public ::testing::TestWithParam<std::string> {};

TEST_P(V41Forward, MatchesTransformers) {
    const std::string dir = kV41Data + "/" + GetParam();
    const auto model = V41Model::load(dir, DI_TOKENIZER_JSON);
    const int64_t V = model->config().text.vocab_size;
    std::ifstream in(dir + "/ref.json");
    const nlohmann::json ref = nlohmann::json::parse(in);
    for (size_t i = 0; i < ref["prompts"].size(); ++i) {
        const std::vector<int32_t> prompt = ref["prompts"][i].get<std::vector<int32_t>>();
        const std::vector<float> want = read_f32(dir + "/ref_logits_" + std::to_string(i) + ".f32");
        V41ForwardTrace trace;
        const std::vector<float> got = model->forward(prompt, &trace);
        SafetensorsFile ref_trace(dir + "/ref_trace_" + std::to_string(i) + ".safetensors");
        for (const auto& [layer, topk] : trace.indexer_topk) {
            const SafetensorsTensorInfo* info = ref_trace.find("layers." + std::to_string(layer) + ".indexer_topk");
            ASSERT_NE(info, nullptr) << layer;
            const TensorView v = ref_trace.view(*info);
            ASSERT_EQ(size_t(v.numel()), topk.size());
            EXPECT_TRUE(std::equal(topk.begin(), topk.end(), v.data_as<const int32_t>()))
                << GetParam() << " prompt " << i << ": layer " << layer << " top-k differs";
        }
        if (i == 0) {
            for (const auto* cache : {&trace.compressed_kv, &trace.index_keys}) {
                for (const auto& [layer, values] : *cache) {
                    const std::string name = "layers." + std::to_string(layer) +
                                             (cache == &trace.compressed_kv ? ".compressed_kv" : ".index_keys");
                    const SafetensorsTensorInfo* info = ref_trace.find(name);
                    ASSERT_NE(info, nullptr) << name;
                    const TensorView v = ref_trace.view(*info);
                    ASSERT_EQ(size_t(v.numel()), values.size()) << name;
                    float err = 0;
                    for (size_t k = 0; k < values.size(); ++k)
                        err = std::max(err, std::fabs(values[k] - v.data_as<const float>()[k]));
                    EXPECT_LE(err, 1e-5f) << name;
                }
            }
        }
        ASSERT_EQ(got.size(), want.size());
        float max_err = 0, max_logit = 0;
        for (size_t k = 0; k < got.size(); ++k) {
            max_err = std::max(max_err, std::fabs(got[k] - want[k]));
            max_logit = std::max(max_logit, std::fabs(want[k]));
        }
        EXPECT_LE(max_err, 1e-4f * max_logit) << GetParam() << " prompt " << i;
        std::printf("[ %s prompt %zu ] len %zu: max |err| %.3g, max |logit| %.3g (rel %.3g)\n", GetParam().c_str(), i,
                    prompt.size(), double(max_err), double(max_logit), double(max_err / max_logit));
    }
    // Greedy continuation of the shortest prompt by repeated full forwards.
    std::vector<int32_t> ids = ref["prompts"][0].get<std::vector<int32_t>>();
    const std::vector<int32_t> greedy = ref["greedy"][0].get<std::vector<int32_t>>();
    std::vector<int32_t> got;
    for (size_t step = 0; step < greedy.size(); ++step) {
        const std::vector<float> logits = model->forward(ids);
        const float* last = logits.data() + (ids.size() - 1) * size_t(V);
        const int32_t next = int32_t(std::max_element(last, last + V) - last);
        got.push_back(next);
        ids.push_back(next);
    }
    EXPECT_EQ(got, greedy);
}

// Chunked prefill (chunk boundaries inside ratio-2 groups, shorter and longer than the window) and
// token-by-token decode give the same logits as one forward, bit for bit; decoding the greedy
// continuation reproduces transformers' generate() logits.
TEST_P(V41Forward, ChunkedPrefillAndDecodeEqualOneForward) {
    const std::string dir = kV41Data + "/" + GetParam();
    const auto model = V41Model::load(dir, DI_TOKENIZER_JSON);
    const size_t V = size_t(model->config().text.vocab_size);
    std::ifstream in(dir + "/ref.json");
    const nlohmann::json ref = nlohmann::json::parse(in);
    const std::vector<int32_t> prompt = ref["prompts"][1].get<std::vector<int32_t>>();
    const std::vector<float> full = model->forward(prompt);
    for (const std::vector<size_t>& chunks : {std::vector<size_t>{13, 24}, std::vector<size_t>{1, 2, 3, 5, 7}, std::vector<size_t>{50}}) {
        V41Sequence seq;
        std::vector<float> got;
        size_t pos = 0;
        for (size_t k = 0; pos < prompt.size(); ++k) {
            // the listed chunk sizes, then single tokens (decode) for the last 9, the rest in one chunk
            size_t n = k < chunks.size() ? chunks[k] : (prompt.size() - pos > 9 ? prompt.size() - pos - 9 : 1);
            n = std::min(n, prompt.size() - pos);
            const std::vector<float> part =
                model->forward(std::span<const int32_t>(prompt.data() + pos, n), seq);
            got.insert(got.end(), part.begin(), part.end());
            pos += n;
        }
        EXPECT_EQ(seq.num_tokens(), int64_t(prompt.size()));
        ASSERT_EQ(got.size(), full.size());
        size_t mismatches = 0;
        for (size_t k = 0; k < got.size(); ++k) mismatches += got[k] != full[k];
        EXPECT_EQ(mismatches, 0u) << GetParam() << ": chunks starting " << chunks[0];
    }
    // Decode the greedy continuation of prompt 0 against generate()'s logits.
    const std::vector<int32_t> p0 = ref["prompts"][0].get<std::vector<int32_t>>();
    const std::vector<int32_t> greedy = ref["greedy"][0].get<std::vector<int32_t>>();
    const std::vector<float> want = read_f32(dir + "/ref_decode_logits_0.f32");
    V41Sequence seq;
    std::vector<float> rows = model->forward(p0, seq);
    rows.erase(rows.begin(), rows.end() - V);  // the prefill's last position scores greedy[0]
    for (size_t j = 0; j + 1 < greedy.size(); ++j) {
        const std::vector<float> r = model->forward(std::span<const int32_t>(&greedy[j], 1), seq);
        rows.insert(rows.end(), r.begin(), r.end());
    }
    ASSERT_EQ(rows.size(), want.size());
    float max_err = 0, max_logit = 0;
    for (size_t k = 0; k < rows.size(); ++k) {
        max_err = std::max(max_err, std::fabs(rows[k] - want[k]));
        max_logit = std::max(max_logit, std::fabs(want[k]));
    }
    EXPECT_LE(max_err, 1e-4f * max_logit) << GetParam();
    std::printf("[ %s decode ] 16 steps: max |err| %.3g vs generate(), max |logit| %.3g\n", GetParam().c_str(),
                double(max_err), double(max_logit));
}

// Image-span positions (the vision seam): chunking still gives identical results, the flagged
// positions change the logits (bias_vl routing, Engram gate 0, DEAD n-gram history), and positions
// before the span are untouched.
TEST(V41Forward, ImageSpanSeam) {
    const auto model = V41Model::load(kV41Data + "/v41_tiny_a", DI_TOKENIZER_JSON);
    const size_t V = size_t(model->config().text.vocab_size);
    std::ifstream in(kV41Data + "/v41_tiny_a/ref.json");
    const std::vector<int32_t> prompt = nlohmann::json::parse(in)["prompts"][0].get<std::vector<int32_t>>();
    std::vector<uint8_t> image(prompt.size(), 0);
    for (size_t t = 10; t < 15; ++t) image[t] = 1;
    V41Sequence whole;
    const std::vector<float> with_image = model->forward(prompt, whole, nullptr, image);
    V41Sequence chunked;
    std::vector<float> got = model->forward(std::span<const int32_t>(prompt.data(), 12), chunked, nullptr,
                                            std::span<const uint8_t>(image.data(), 12));
    const std::vector<float> rest = model->forward(std::span<const int32_t>(prompt.data() + 12, prompt.size() - 12),
                                                   chunked, nullptr,
                                                   std::span<const uint8_t>(image.data() + 12, prompt.size() - 12));
    got.insert(got.end(), rest.begin(), rest.end());
    EXPECT_EQ(got, with_image);
    const std::vector<float> text_only = model->forward(prompt);
    EXPECT_TRUE(std::equal(text_only.begin(), text_only.begin() + 10 * V, with_image.begin()));
    EXPECT_FALSE(std::equal(text_only.begin() + 10 * V, text_only.begin() + 11 * V, with_image.begin() + 10 * V));
    V41Sequence bad;
    EXPECT_ANY_THROW(model->forward(prompt, bad, nullptr, std::span<const uint8_t>(image.data(), 3)));
}

// The same weights under the published names with a composite (text_config) config.json give the
// same logits bit for bit.
TEST(V41Forward, PublishedLayoutEqualsTransformersLayout) {
    const auto hf = V41Model::load(kV41Data + "/v41_tiny_b", DI_TOKENIZER_JSON);
    const auto upstream = V41Model::load(kV41Data + "/v41_tiny_b_upstream", DI_TOKENIZER_JSON);
    EXPECT_EQ(hf->config().model_type, "deepseek_v41_text");
    EXPECT_EQ(upstream->config().model_type, "deepseek_v41");
    std::ifstream in(kV41Data + "/v41_tiny_b/ref.json");
    const std::vector<int32_t> prompt = nlohmann::json::parse(in)["prompts"][0].get<std::vector<int32_t>>();
    EXPECT_EQ(hf->forward(prompt), upstream->forward(prompt));
}

INSTANTIATE_TEST_SUITE_P(V41, V41Forward, ::testing::Values("v41_tiny_a", "v41_tiny_b"));

}  // namespace
}  // namespace deepinfer
