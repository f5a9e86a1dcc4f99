// SPDX-License-Identifier: Apache-2.0
// v41_flash_layers: the release's config cut to N layers for full-width benchmarks keeps the published
// schedule's layer kinds in proportion, parses as a V4.1 config, and at 40 layers is the release's schedule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "deepinfer/check.h"
#include "deepinfer/model_config_v41.h"
#include "deepinfer/synthetic_v41.h"

namespace deepinfer {
namespace {

V41TextConfig parsed(const nlohmann::ordered_json& j) { return parse_v41_model_config(j.dump(), "cut.json").text; }

TEST(V41FlashLayers, FortyLayersAreTheReleasedSchedule) {
    const V41TextConfig cut = parsed(v41_flash_layers(40)), rel = parsed(v41_flash_config());
    ASSERT_EQ(cut.num_hidden_layers, 40);
    for (int64_t l = 0; l < 40; ++l) {
        EXPECT_EQ(cut.compress_ratio(l), rel.compress_ratio(l)) << "layer " << l;
        EXPECT_EQ(cut.csa_mode(l), rel.csa_mode(l)) << "layer " << l;
        EXPECT_EQ(cut.engram_index(l), rel.engram_index(l)) << "layer " << l;
    }
    EXPECT_EQ(cut.kv_source_layer_ids, rel.kv_source_layer_ids);
    EXPECT_EQ(cut.index_source_layer_ids, rel.index_source_layer_ids);
    EXPECT_EQ(cut.candidate_source_layer_id, rel.candidate_source_layer_id);
    EXPECT_EQ(cut.engram_layer_ids, rel.engram_layer_ids);
    EXPECT_EQ(cut.engram_num_embeddings, rel.engram_num_embeddings);
    EXPECT_EQ(cut.hidden_size, rel.hidden_size);
    EXPECT_EQ(cut.n_routed_experts, rel.n_routed_experts);
    EXPECT_EQ(cut.num_nextn_predict_layers, 0);
}

TEST(V41FlashLayers, CutsKeepTheKindsInProportion) {
    for (int64_t n = 4; n <= 40; ++n) {
        const V41TextConfig c = parsed(v41_flash_layers(n));
        ASSERT_EQ(c.num_hidden_layers, n);
        int64_t r0 = 0, r2 = 0, r1 = 0;
        for (int64_t l = 0; l < n; ++l) (c.compress_ratio(l) == 0 ? r0 : c.compress_ratio(l) == 2 ? r2 : r1)++;
        EXPECT_EQ(r0, 2) << n;
        EXPECT_GE(r2, 1) << n;
        // the ratio-2 : ratio-1 split within one layer of 18 : 20
        EXPECT_LE(std::abs(double(r2) - double(n - 2) * 18.0 / 38.0), 1.0) << n;
        EXPECT_EQ(c.engram_layer_ids.front(), 1) << n;
        EXPECT_EQ(c.kv_source_layer_ids.front(), 2) << n;
    }
    // 12 layers (cuda_engine_bench --family v41's default): 2 window-only, 5 + 5.
    const V41TextConfig c = parsed(v41_flash_layers(12));
    EXPECT_EQ(c.kv_source_layer_ids, (std::vector<int64_t>{2, 7}));
    EXPECT_EQ(c.index_source_layer_ids, (std::vector<int64_t>{2, 7, 11}));
    EXPECT_EQ(c.candidate_source_layer_id, 7);
    EXPECT_EQ(c.engram_layer_ids, (std::vector<int64_t>{1}));
}

TEST(V41FlashLayers, RejectsCutsOutsideTheRange) {
    EXPECT_THROW(v41_flash_layers(3), Error);
    EXPECT_THROW(v41_flash_layers(41), Error);
}

}  // namespace
}  // namespace deepinfer
