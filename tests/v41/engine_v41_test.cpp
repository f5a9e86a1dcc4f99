// SPDX-License-Identifier: Apache-2.0
// DeepSeek-V4.1 behind the Model interface (tests/data/v41/v41_tiny_a: every layer kind, Engram at
// two layers) and the built-in default model: Model::load recognizes it; forward_batch gives each chunk the logits of running it
// alone; paged state (snapshots share pages, copy-on-write) and truncate for speculative rollback are
// exact; the engine's tokens and logprobs for a request do not depend on its neighbours, chunking,
// prefix caching, async scheduling or preemption.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <nlohmann/json.hpp>
#include <random>

#include "deepinfer/check.h"
#include "deepinfer/embedded.h"
#include "deepinfer/engine.h"
#include "deepinfer/engram.h"
#include "deepinfer/model.h"
#include "deepinfer/model_v41.h"
#include "engine/engine_run.h"
#include "model/paged_rows.h"
#include "model/state.h"

namespace deepinfer {
namespace {

const std::string kDir = std::string(DI_V41_DATA_DIR) + "/v41_tiny_a";

std::shared_ptr<const Model> tiny() {
    static std::shared_ptr<const Model> m = [] {
        ModelOptions o;
        o.tokenizer_json = DI_TOKENIZER_JSON;
        return std::shared_ptr<const Model>(Model::load(kDir, o));
    }();
    return m;
}

std::vector<int32_t> random_prompt(std::mt19937& rng, int64_t len, int64_t vocab) {
    std::vector<int32_t> p(static_cast<size_t>(len));
    for (int32_t& t : p) t = static_cast<int32_t>(rng() % uint32_t(vocab));
    return p;
}

nlohmann::json reference() {
    std::ifstream in(kDir + "/ref.json");
    return nlohmann::json::parse(in);
}

TEST(V41Model, LoadsThroughModelInterface) {
    auto model = tiny();
    EXPECT_EQ(model->info().family, "deepseek_v41");
    EXPECT_EQ(model->info().vocab_size, 512);
    EXPECT_EQ(model->info().eos_token_ids, std::vector<int64_t>{1});
    EXPECT_NE(dynamic_cast<const V41Model*>(model.get()), nullptr);
    // The interface's logits equal V41Model's own forward (transformers-checked in forward_v41_test).
    const std::vector<int32_t> prompt = reference()["prompts"][0].get<std::vector<int32_t>>();
    Sequence seq = model->new_sequence();
    EXPECT_EQ(model->forward(seq, prompt, true), dynamic_cast<const V41Model&>(*model).forward(prompt));
    EXPECT_EQ(seq.num_tokens(), int64_t(prompt.size()));
}

TEST(V41Model, BatchInvariantLogits) {
    auto model = tiny();
    const int64_t V = model->info().vocab_size;
    std::mt19937 rng(41);
    const std::vector<int32_t> target = reference()["prompts"][1].get<std::vector<int32_t>>();
    Sequence alone = model->new_sequence();
    const std::vector<float> want = model->forward(alone, target, true);
    // A later decode step of the target alone.
    const int32_t next = 17;
    const std::vector<float> want_next = model->forward(alone, std::span<const int32_t>(&next, 1), false);
    for (int neighbours : {7, 23}) {
        std::vector<std::vector<int32_t>> prompts;
        for (int i = 0; i < neighbours; ++i) prompts.push_back(random_prompt(rng, 1 + rng() % 30, V));
        std::vector<Sequence> seqs;
        for (int i = 0; i <= neighbours; ++i) seqs.push_back(model->new_sequence());
        // Neighbours that already hold state (decode-like single tokens next to the prefill).
        for (int i = 0; i < neighbours; i += 2) model->forward(seqs[size_t(i)], prompts[size_t(i)], false);
        const int mid = neighbours / 2;
        std::vector<SequenceChunk> chunks;
        for (int i = 0; i <= neighbours; ++i) {
            if (i == mid) chunks.push_back({&seqs[size_t(i)], target, true});
            else chunks.push_back({&seqs[size_t(i)], prompts[size_t(i < mid ? i : i - 1)], i % 3 == 0});
        }
        std::vector<std::vector<float>> got = model->forward_batch(chunks);
        EXPECT_TRUE(got[size_t(mid)] == want) << neighbours << " neighbours";
        chunks.clear();
        for (int i = 0; i <= neighbours; ++i)
            chunks.push_back({&seqs[size_t(i)], i == mid ? std::span<const int32_t>(&next, 1)
                                                         : std::span<const int32_t>(prompts[size_t(i < mid ? i : i - 1)]).first(1),
                              false});
        got = model->forward_batch(chunks);
        EXPECT_TRUE(got[size_t(mid)] == want_next) << neighbours << " neighbours, decode step";
    }
}

// The image-span seam through the interface equals V41Model's own image path.
TEST(V41Model, ImageSpanThroughInterface) {
    auto model = tiny();
    const std::vector<int32_t> prompt = reference()["prompts"][0].get<std::vector<int32_t>>();
    std::vector<uint8_t> image(prompt.size(), 0);
    for (size_t t = 4; t < 9; ++t) image[t] = 1;
    V41Sequence own;
    const std::vector<float> want = dynamic_cast<const V41Model&>(*model).forward(prompt, own, nullptr, image);
    Sequence a = model->new_sequence(), b = model->new_sequence();
    std::vector<SequenceChunk> chunks = {{&a, prompt, true, image}, {&b, prompt, true}};
    std::vector<std::vector<float>> got = model->forward_batch(chunks);
    EXPECT_EQ(got[0], want);
    EXPECT_NE(got[0], got[1]);
}

// Paged state: a snapshot shares every page until one side writes; continuing the copy and the
// original gives the same logits as an uninterrupted sequence; state_bytes equals the estimate.
TEST(V41Model, PagedStateSnapshotsAndAccounting) {
    auto model = tiny();
    const std::vector<int32_t> prompt = reference()["prompts"][1].get<std::vector<int32_t>>();
    const std::span<const int32_t> head(prompt.data(), 64), tail(prompt.data() + 64, prompt.size() - 64);
    auto pool = std::make_shared<StatePool>(8 << 20, 1024);
    Sequence straight = model->new_sequence(pool);
    const std::vector<float> want = model->forward(straight, prompt, true);
    EXPECT_EQ(straight.state_bytes(), model->estimate_state_bytes(int64_t(prompt.size()), 1024));

    Sequence seq = model->new_sequence(pool);
    model->forward(seq, head, false);
    const uint64_t pages_before = pool->pages_in_use();
    Sequence snap = seq.fork();
    EXPECT_EQ(pool->pages_in_use(), pages_before);          // a fork copies no page
    // Only the Engram history ring (max n-gram 4: 3 + headroom ids) is the copy's own.
    EXPECT_EQ(snap.state().unshared_bytes(), size_t(3 + kRingHeadroom) * sizeof(int64_t));
    const std::vector<float> rest = model->forward(seq, tail, true);
    const std::vector<float> rest_snap = model->forward(snap, tail, true);
    EXPECT_TRUE(rest == rest_snap);
    EXPECT_TRUE(std::equal(rest.begin(), rest.end(), want.begin() + 64 * 512));
}

// Speculative rollback: verify passes of 1, 5 and 16 rows with rejected drafts, then truncate to the
// accepted length; the logits of the accepted tokens equal the straight run bit for bit.
TEST(V41Model, TruncateAfterRejectedRowsEqualsStraightRun) {
    auto model = tiny();
    const std::vector<int32_t> ids = reference()["prompts"][0].get<std::vector<int32_t>>();
    const int64_t V = model->info().vocab_size;
    Sequence straight = model->new_sequence();
    const std::vector<float> want = model->forward(straight, ids, true);
    for (int64_t k : {1, 5, 16}) {
        Sequence seq = model->new_sequence();
        std::vector<float> got;
        size_t pos = 0;
        uint32_t salt = 1;
        while (pos < ids.size()) {
            // The true next token (or the first 3 of the prompt at once) plus k - 1 garbage drafts.
            const size_t take = pos == 0 ? 3 : 1;
            std::vector<int32_t> pass(ids.begin() + long(pos), ids.begin() + long(pos + take));
            for (int64_t j = 1; j < k; ++j) pass.push_back(static_cast<int32_t>((7 * salt++ + 3 * j) % V));
            std::vector<float> l = model->forward(seq, pass, true);
            got.insert(got.end(), l.begin(), l.begin() + long(take) * V);
            seq.truncate(int64_t(pos + take));
            pos += take;
        }
        ASSERT_EQ(got.size(), want.size());
        EXPECT_TRUE(got == want) << "verify width " << k;
    }
}

using RunResult = test::EngineRunResult;

RunResult run(const EngineConfig& cfg, const std::vector<std::pair<std::string, std::vector<int32_t>>>& reqs,
              const SamplingParams& sp) {
    return test::run_requests(tiny(), cfg, reqs, sp);
}

using test::expect_same_outputs;

TEST(V41Engine, SameTokensAloneAndInAnyBatchChunkingCacheAndScheduling) {
    const int64_t V = tiny()->info().vocab_size;
    std::mt19937 rng(12);
    const std::vector<int32_t> shared = random_prompt(rng, 32, V);  // a common "system prompt"
    auto with_prefix = [&](int64_t extra) {
        std::vector<int32_t> p = shared;
        std::vector<int32_t> tail = random_prompt(rng, extra, V);
        p.insert(p.end(), tail.begin(), tail.end());
        return p;
    };
    const std::vector<int32_t> target = with_prefix(13);
    SamplingParams sp;
    sp.temperature = 0.9;
    sp.top_p = 0.95;
    sp.max_tokens = 8;
    sp.logprobs = 3;
    sp.ignore_eos = true;
    EngineConfig base;
    base.prefix_block = 16;
    const RequestOutput alone = run(base, {{"target", target}}, sp).outputs.at("target");
    ASSERT_EQ(alone.completions[0].token_ids.size(), 8u);
    for (int neighbours : {7, 20}) {
        std::vector<std::pair<std::string, std::vector<int32_t>>> reqs;
        for (int i = 0; i < neighbours; ++i)
            reqs.emplace_back("n" + std::to_string(i), i % 2 ? with_prefix(1 + rng() % 20) : random_prompt(rng, 3 + rng() % 40, V));
        reqs.insert(reqs.begin() + neighbours / 2, {"target", target});
        std::vector<std::pair<std::string, EngineConfig>> variants;
        EngineConfig c = base;
        variants.emplace_back("default", c);
        c.max_prefill_chunk = 5;
        c.max_num_batched_tokens = 48;
        variants.emplace_back("chunk 5, budget 48", c);
        c = base;
        c.prefix_caching = false;
        variants.emplace_back("no prefix cache", c);
        c = base;
        c.async_scheduling = true;
        c.max_num_seqs = 6;
        variants.emplace_back("async, 6 seqs", c);
        c = base;
        c.state_memory_bytes = 400 << 10;  // tight: forces preemption and recompute
        c.state_page_bytes = 1024;
        c.prefix_cache_fraction = 0.1;
        variants.emplace_back("tight memory", c);
        for (const auto& [name, cfg] : variants) {
            RunResult r = run(cfg, reqs, sp);
            const std::string what = name + ", " + std::to_string(neighbours) + " neighbours";
            expect_same_outputs(r.outputs.at("target"), alone, what);
            EXPECT_EQ(r.outputs.size(), size_t(neighbours + 1)) << what;
            EXPECT_GT(r.metrics.pool_pages_peak, 0u) << what;
            EXPECT_LE(r.metrics.pool_pages_peak * r.metrics.pool_page_bytes, cfg.state_memory_bytes) << what;
            if (name == "async, 6 seqs") {
                EXPECT_GT(r.metrics.prefix_hit_rate(), 0.0) << what;  // later admissions reuse the shared prefix
            }
            if (name == "no prefix cache") {
                EXPECT_EQ(r.metrics.prefix_cache_hit_tokens, 0) << what;
            }
            if (name == "tight memory" && neighbours == 20) {
                EXPECT_GT(r.metrics.preemptions, 0) << what;
            }
        }
    }
}

}  // namespace
}  // namespace deepinfer

namespace deepinfer {
namespace {

// The built-in default (embedded:v41) is a V4.1 model that exercises every layer kind, both
// compressor ratios and Engram at two layers, with the real vocabulary; its Engram token map comes
// from the bundled DeepSeek-V4 tokenizer and passes the published size and SHA-256 check at load.
TEST(Embedded, DefaultIsATinyV41ModelOfEveryLayerKind) {
    const std::string cache = (std::filesystem::temp_directory_path() / "deepinfer_test_embedded").string();
    const V41ModelConfig c = parse_v41_model_config(embedded_model_config());
    const V41TextConfig& t = c.text;
    EXPECT_EQ(t.vocab_size, 129280);
    std::set<CsaMode> modes;
    std::set<int64_t> ratios;
    for (int64_t l = 0; l < t.num_hidden_layers; ++l) {
        modes.insert(t.csa_mode(l));
        ratios.insert(t.compress_ratio(l));
    }
    EXPECT_EQ(modes, (std::set<CsaMode>{CsaMode::kWindowOnly, CsaMode::kFull, CsaMode::kReindex, CsaMode::kReuse}));
    EXPECT_EQ(ratios, (std::set<int64_t>{0, 1, 2}));
    EXPECT_EQ(t.engram_layer_ids.size(), 2u);
    EXPECT_EQ(t.engram_compressed_vocab_size, kV41EngramCompressedVocabSize);
    ModelOptions o;
    o.tokenizer_json = DI_TOKENIZER_JSON;
    auto model = Model::load(ensure_embedded_model(cache), o);
    EXPECT_EQ(model->info().family, "deepseek_v41");
    Sequence seq = model->new_sequence();
    const std::vector<int32_t> ids = {0, 128803, 19923, 128804};
    const std::vector<float> logits = model->forward(seq, ids, false);
    ASSERT_EQ(logits.size(), size_t(129280));
    for (float v : logits) ASSERT_TRUE(std::isfinite(v));
    // embedded:v4 remains available.
    EXPECT_NE(embedded_model_config(kEmbeddedV4).find("\"deepseek_v4\""), std::string::npos);
    EXPECT_NE(embedded_model_dir_name(kEmbeddedV4), embedded_model_dir_name());
    EXPECT_THROW(embedded_model_config("embedded:v5"), Error);
}

}  // namespace
}  // namespace deepinfer
