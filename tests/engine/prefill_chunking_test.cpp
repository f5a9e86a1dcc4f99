// SPDX-License-Identifier: Apache-2.0
// Prefill chunks with the prefix cache on: whole chunks, ended only where a held prompt diverges
// from another (share_points.h), so prompts prefill in few steps and shared prefixes still hit.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "deepinfer/engine.h"
#include "engine/share_points.h"
#include "engine/tiny_engine_model.h"

namespace deepinfer {
namespace {

TEST(SharePoints, WhereAHeldPromptPartsFromAnother) {
    SharePoints s(4);
    const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    const std::vector<int32_t> b = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 99, 98};  // parts from a after 10 tokens
    const std::vector<int32_t> c = {1, 2, 3, 4, 5, 77};                      // parts from a and b after 5
    const auto ha = s.block_hashes(a), hb = s.block_hashes(b), hc = s.block_hashes(c);
    ASSERT_EQ(ha.size(), 4u);
    ASSERT_EQ(hc.size(), 1u);
    EXPECT_EQ(ha[1], hb[1]);
    EXPECT_NE(ha[2], hb[2]);
    s.add(ha);
    EXPECT_EQ(s.next_share_point(ha, 0, 100), 0);  // alone: nobody to meet
    s.add(hb);
    EXPECT_EQ(s.next_share_point(ha, 0, 100), 8);  // 10 shared tokens: 2 whole blocks
    EXPECT_EQ(s.next_share_point(hb, 0, 100), 8);
    EXPECT_EQ(s.next_share_point(ha, 8, 100), 0);  // past it: no other point
    EXPECT_EQ(s.next_share_point(ha, 0, 7), 4);    // capped by max_len: the last whole block there
    s.add(hc);
    EXPECT_EQ(s.next_share_point(ha, 0, 100), 4);  // c parts after the first block, b after the second
    EXPECT_EQ(s.next_share_point(ha, 4, 100), 8);
    EXPECT_EQ(s.next_share_point(ha, 5, 100), 8);
    EXPECT_EQ(s.next_share_point(hc, 0, 100), 4);
    s.add(ha);                                     // a twice: all of it is shared
    EXPECT_EQ(s.next_share_point(ha, 8, 16), 16);
    EXPECT_EQ(s.next_share_point(ha, 8, 15), 12);  // (the engine passes prompt length - 1)
    s.remove(hb);
    s.remove(hc);
    s.remove(ha);
    EXPECT_EQ(s.next_share_point(ha, 0, 100), 0);
    s.remove(ha);
    s.remove(ha);  // removing what is not held is harmless
    s.add(ha);
    EXPECT_EQ(s.next_share_point(ha, 0, 100), 0);
}

std::shared_ptr<const Model> tiny_model() { return test::tiny_engine_model(); }

std::vector<int32_t> random_prompt(std::mt19937& rng, int64_t len) {
    std::vector<int32_t> p(static_cast<size_t>(len));
    for (int32_t& t : p) t = static_cast<int32_t>(rng() % uint32_t(tiny_model()->info().vocab_size));
    return p;
}

struct Outcome {
    std::map<std::string, std::vector<int32_t>> tokens;
    EngineMetrics metrics;
};

Outcome run(const EngineConfig& cfg, const std::vector<std::pair<std::string, std::vector<int32_t>>>& reqs) {
    Engine engine(tiny_model(), nullptr, cfg);
    SamplingParams sp;
    sp.temperature = 0;
    sp.max_tokens = 3;
    sp.ignore_eos = true;
    for (const auto& [id, p] : reqs) engine.add_request(id, p, sp);
    Outcome r;
    engine.run_until_done([&](RequestOutput&& o) { r.tokens[o.request_id] = o.completions.at(0).token_ids; });
    r.metrics = engine.metrics();
    return r;
}

TEST(EnginePrefill, ChunksEndOnlyWhereHeldPromptsDiverge) {
    std::mt19937 rng(5);
    EngineConfig cfg;
    cfg.max_prefill_chunk = 512;
    cfg.max_num_batched_tokens = 512;
    cfg.prefix_block = 16;
    cfg.max_num_seqs = 1;  // one at a time: a later request finds the earlier one's snapshots
    // A prompt alone prefills in one chunk (it used to end a chunk on every 16-token block: 19 steps).
    const Outcome alone = run(cfg, {{"a", random_prompt(rng, 300)}});
    EXPECT_EQ(alone.metrics.steps, 3);  // 1 prefill step + 2 decode steps
    // Two prompts sharing 100 tokens: the first one's chunk ends at 96 (the whole blocks they share),
    // where the second one then starts from the cached state; a third repeats the first prompt.
    const std::vector<int32_t> shared = random_prompt(rng, 100);
    std::vector<std::pair<std::string, std::vector<int32_t>>> reqs;
    for (const char* id : {"b", "c"}) {
        std::vector<int32_t> p = shared;
        const std::vector<int32_t> tail = random_prompt(rng, 150);
        p.insert(p.end(), tail.begin(), tail.end());
        reqs.emplace_back(id, p);
    }
    reqs.emplace_back("d", reqs[0].second);  // d repeats b's prompt: it shares all but its last block
    const Outcome cached = run(cfg, reqs);
    // b: chunks [0, 96) (c parts), [96, 240) (d parts: its last whole block below 250), [240, 250),
    // then 2 decode steps; c from 96 and d from 240: one chunk and 2 decode steps each.
    EXPECT_EQ(cached.metrics.prefix_cache_hit_tokens, 96 + 240);
    EXPECT_EQ(cached.metrics.steps, 5 + 3 + 3);
    EngineConfig off = cfg;
    off.prefix_caching = false;
    const Outcome plain = run(off, reqs);
    EXPECT_EQ(plain.metrics.prefix_cache_hit_tokens, 0);
    EXPECT_EQ(plain.metrics.steps, 3 * 3);
    for (const auto& [id, t] : plain.tokens) EXPECT_EQ(cached.tokens.at(id), t) << id;  // same tokens either way
}

}  // namespace
}  // namespace deepinfer
