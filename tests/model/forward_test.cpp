// SPDX-License-Identifier: Apache-2.0
// The CPU forward against transformers 5.17 (tests/data/models, written by
// tools/reference/make_v4_models.py on an H200): exact-mode logits at every position within
// 1e-4 x max|logit|, greedy continuations identical, and chunked prefill / token-by-token decode
// bit-identical to one full forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "deepinfer/model.h"
#include "unit/fixtures.h"

namespace deepinfer {
namespace {

using nlohmann::json;

struct Reference {
    std::vector<std::vector<int32_t>> prompts, greedy;
};

Reference read_reference(const std::string& dir) {
    std::ifstream in(dir + "/ref.json");
    json j = json::parse(in);
    Reference r;
    for (const auto& p : j["prompts"]) r.prompts.push_back(p.get<std::vector<int32_t>>());
    for (const auto& g : j["greedy"]) r.greedy.push_back(g.get<std::vector<int32_t>>());
    return r;
}

std::vector<float> read_f32(const std::string& path) {
    std::ifstream in(path, std::ios::binary | std::ios::ate);
    EXPECT_TRUE(in.good()) << path;
    std::vector<float> v(static_cast<size_t>(in.tellg()) / 4);
    in.seekg(0);
    in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
    return v;
}

ModelOptions exact() {
    ModelOptions o;
    o.numerics_from_checkpoint = false;
    o.numerics = Numerics::kExact;
    return o;
}

std::vector<float> run_chunked(const Model& model, const std::vector<int32_t>& ids, size_t chunk) {
    Sequence seq = model.new_sequence();
    std::vector<float> out;
    for (size_t i = 0; i < ids.size(); i += chunk) {
        std::span<const int32_t> part(ids.data() + i, std::min(chunk, ids.size() - i));
        std::vector<float> l = model.forward(seq, part, true);
        out.insert(out.end(), l.begin(), l.end());
    }
    return out;
}

// The checkpoint under test (unsharded, sharded, or DeepSeek-named) and the directory of its references.
class ForwardReference : public ::testing::TestWithParam<const char*> {
protected:
    std::string checkpoint() const { return test::data_path(std::string("models/") + GetParam()); }
    Reference reference() const {
        std::string name = GetParam();
        name = name.substr(0, name.find("_sharded"));
        name = name.substr(0, name.find("_upstream"));
        ref_dir_ = test::data_path("models/" + name);
        return read_reference(ref_dir_);
    }
    mutable std::string ref_dir_;
};

TEST_P(ForwardReference, ExactLogitsMatchTransformersAtEveryPosition) {
    auto model = Model::load(checkpoint(), exact());
    const int64_t V = model->info().vocab_size;
    Reference ref = reference();
    ASSERT_GE(ref.prompts.size(), 2u);
    for (size_t i = 0; i < ref.prompts.size(); ++i) {
        std::vector<float> want = read_f32(ref_dir_ + "/ref_logits_" + std::to_string(i) + ".f32");
        ASSERT_EQ(want.size(), ref.prompts[i].size() * size_t(V));
        Sequence seq = model->new_sequence();
        std::vector<float> got = model->forward(seq, ref.prompts[i], true);
        ASSERT_EQ(got.size(), want.size());
        float max_logit = 0, max_err = 0;
        for (float w : want) max_logit = std::max(max_logit, std::fabs(w));
        for (size_t k = 0; k < got.size(); ++k) max_err = std::max(max_err, std::fabs(got[k] - want[k]));
        EXPECT_LE(max_err, 1e-4f * max_logit) << "prompt " << i << " (len " << ref.prompts[i].size() << ")";
        RecordProperty("max_err_prompt_" + std::to_string(i), std::to_string(max_err / max_logit));
    }
}

TEST_P(ForwardReference, GreedyContinuationsIdentical) {
    auto model = Model::load(checkpoint(), exact());
    const ModelInfo& c = model->info();
    Reference ref = reference();
    for (size_t i = 0; i < ref.prompts.size(); ++i) {
        Sequence seq = model->new_sequence();
        std::vector<float> logits = model->forward(seq, ref.prompts[i], false);
        std::vector<int32_t> got;
        while (got.size() < ref.greedy[i].size()) {
            int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
            got.push_back(next);
            if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), next) != c.eos_token_ids.end()) break;
            logits = model->forward(seq, std::span<const int32_t>(&got.back(), 1), false);
        }
        EXPECT_EQ(got, ref.greedy[i]) << "prompt " << i;
    }
}

TEST_P(ForwardReference, ChunkedPrefillAndDecodeEqualFullForward) {
    auto model = Model::load(checkpoint(), exact());
    Reference ref = reference();
    const std::vector<int32_t>& ids = ref.prompts[1];  // the long prompt: window full, both rates emit
    std::vector<float> full = run_chunked(*model, ids, ids.size());
    for (size_t chunk : {size_t(1), size_t(3), size_t(64), ids.size() - 1}) {
        std::vector<float> got = run_chunked(*model, ids, chunk);
        ASSERT_EQ(got.size(), full.size());
        EXPECT_TRUE(std::equal(got.begin(), got.end(), full.begin())) << "chunk " << chunk << " differs";
    }
}

TEST_P(ForwardReference, ExactVersusOfficialNumericsDiffer) {
    // The official mode must actually change the arithmetic (bf16 rounding points), yet stay close.
    const std::string dir = checkpoint();
    ModelOptions off;
    off.numerics_from_checkpoint = false;
    off.numerics = Numerics::kOfficial;
    auto a = Model::load(dir, exact());
    auto b = Model::load(dir, off);
    Reference ref = reference();
    Sequence sa = a->new_sequence(), sb = b->new_sequence();
    std::vector<float> la = a->forward(sa, ref.prompts[0], true), lb = b->forward(sb, ref.prompts[0], true);
    float max_diff = 0, max_logit = 0;
    for (size_t k = 0; k < la.size(); ++k) {
        max_diff = std::max(max_diff, std::fabs(la[k] - lb[k]));
        max_logit = std::max(max_logit, std::fabs(la[k]));
    }
    EXPECT_GT(max_diff, 0.0f);
    EXPECT_LT(max_diff, 0.5f * max_logit);
}

INSTANTIATE_TEST_SUITE_P(Tiny, ForwardReference,
                         ::testing::Values("v4_tiny_a", "v4_tiny_a_sharded", "v4_tiny_a_upstream", "v4_tiny_b",
                                           "v4_tiny_b_sharded", "v4_tiny_b_upstream"));

}  // namespace
}  // namespace deepinfer

// ---- MTP block: against a reference assembled from transformers' own modules -----------------
// (tools/reference/make_mtp_reference.py: enorm/hnorm/e_proj/h_proj around a DeepseekV4DecoderLayer,
// then HyperHead, norm and the LM head; state of position i paired with token i+1).
#include "model/forward.h"

namespace deepinfer {
namespace {

TEST(Mtp, BlockMatchesReferenceAndChunksEqual) {
    const std::string dir = test::data_path("models/v4_tiny_a_mtp");
    auto model = Model::load(dir, exact());
    auto* cpu = dynamic_cast<const CpuModel*>(model.get());  // the MTP block is V4's
    ASSERT_NE(cpu, nullptr);
    ASSERT_EQ(cpu->weights().mtp.size(), 1u);
    std::ifstream in(dir + "/mtp_ref.json");
    json ref = json::parse(in);
    std::vector<int32_t> ids = ref["prompt"].get<std::vector<int32_t>>();
    const int64_t S = static_cast<int64_t>(ids.size()), V = model->info().vocab_size;
    const int64_t row = cpu->config().hc_mult * cpu->config().hidden_size;
    std::vector<float> want = read_f32(dir + "/mtp_logits.f32");
    ASSERT_EQ(want.size(), size_t((S - 1) * V));

    Sequence seq = model->new_sequence();
    std::vector<float> streams = cpu->forward_streams(CpuModel::state_of(seq), ids);
    std::span<const int32_t> next(ids.data() + 1, size_t(S - 1));
    std::vector<float> got = cpu->forward_mtp(CpuModel::state_of(seq), 0, streams.data(), next, 0);
    ASSERT_EQ(got.size(), want.size());
    float max_logit = 0, max_err = 0;
    for (size_t k = 0; k < got.size(); ++k) {
        max_logit = std::max(max_logit, std::fabs(want[k]));
        max_err = std::max(max_err, std::fabs(got[k] - want[k]));
    }
    EXPECT_LE(max_err, 1e-4f * max_logit);

    // Token by token through the MTP block's own window state: identical to the chunk.
    Sequence seq2 = model->new_sequence();
    cpu->forward_streams(CpuModel::state_of(seq2), ids);
    for (int64_t i = 0; i + 1 < S; i += 37) {
        const int64_t n = std::min<int64_t>(37, S - 1 - i);
        std::vector<float> part = cpu->forward_mtp(CpuModel::state_of(seq2), 0, streams.data() + i * row,
                                                   std::span<const int32_t>(ids.data() + i + 1, size_t(n)), i);
        EXPECT_TRUE(std::equal(part.begin(), part.end(), got.begin() + i * V)) << "chunk at " << i;
    }
}

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

// Speculative decoding writes rows that may be rejected: after a verify pass of k draft tokens, the
// sequence is truncated to the accepted length and continues. Position-keyed rings with headroom make
// that exact without undoing anything (speculative-decoding.md §7.3).
TEST(SpeculativeRollback, TruncateAfterRejectedRowsEqualsStraightRun) {
    auto model = Model::load(test::data_path("models/v4_tiny_a"), exact());
    const std::vector<int32_t> ids = read_reference(test::data_path("models/v4_tiny_a")).prompts[1];
    const int64_t V = model->info().vocab_size;
    Sequence straight = model->new_sequence();
    const std::vector<float> want = model->forward(straight, ids, true);
    for (int64_t k : {1, 5, 16}) {
        Sequence seq = model->new_sequence();
        std::vector<float> got;
        size_t pos = 0;
        uint32_t salt = 1;
        while (pos < ids.size()) {
            // Verify pass: the true next token plus k-1 garbage drafts, then keep only the first.
            std::vector<int32_t> pass = {ids[pos]};
            for (int64_t j = 1; j < k && pos + size_t(j) < ids.size(); ++j)
                pass.push_back(static_cast<int32_t>((ids[pos + size_t(j)] + 7 * salt++) % V));
            std::vector<float> l = model->forward(seq, pass, true);
            got.insert(got.end(), l.begin(), l.begin() + V);
            seq.truncate(static_cast<int64_t>(pos) + 1);
            ++pos;
        }
        ASSERT_EQ(got.size(), want.size());
        EXPECT_TRUE(got == want) << "verify width " << k;
    }
}

}  // namespace
}  // namespace deepinfer
