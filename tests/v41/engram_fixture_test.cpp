// SPDX-License-Identifier: Apache-2.0
// Engram row ids against transformers' DeepseekV41NgramHashState on the tiny V4.1 fixtures
// (tests/data/v41/v41_tiny_{a,b}, tools/reference/make_v41_models.py): the config parses (transformers'
// flat saved form), the prime layout reproduces engram_num_embeddings, and the rows computed from the
// ICU token map + PCG64 multipliers equal the recorded `engram_hash_ids` of prompt 0 at every position.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "deepinfer/engram.h"
#include "deepinfer/model_config_v41.h"
#include "deepinfer/safetensors.h"

namespace deepinfer {
namespace {

const std::string kV41Data = DI_V41_DATA_DIR;

const EngramTokenMap& token_map() {
    static const EngramTokenMap map = load_engram_token_map(DI_TOKENIZER_JSON);
    return map;
}

class EngramFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(EngramFixture, RowIdsMatchTransformers) {
    const std::string dir = kV41Data + "/" + GetParam();
    const V41ModelConfig config = load_v41_model_config(dir + "/config.json");
    const V41TextConfig& t = config.text;
    ASSERT_FALSE(t.engram_layer_ids.empty());

    const EngramTokenMap& map = token_map();
    ASSERT_NO_THROW(verify_engram_token_map(map, t.engram_compressed_vocab_size, kV41EngramTokenMapSha256, dir));
    const EngramLayout layout = EngramLayout::build(t.engram_layer_ids, t.engram_vocab_size, t.engram_max_ngram_size,
                                                    t.engram_n_heads, t.engram_compressed_vocab_size);
    ASSERT_NO_THROW(layout.check_num_embeddings(t.engram_num_embeddings, dir));

    std::ifstream in(dir + "/ref.json");
    const nlohmann::json ref = nlohmann::json::parse(in);
    const std::vector<int64_t> prompt = ref["prompts"][0].get<std::vector<int64_t>>();
    SafetensorsFile trace(dir + "/ref_trace_0.safetensors");
    const SafetensorsTensorInfo* info = trace.find("engram_hash_ids");
    ASSERT_NE(info, nullptr);
    const TensorView want = trace.view(*info);  // [len, engram layers, cols] i64
    ASSERT_EQ(want.dim(0), static_cast<int64_t>(prompt.size()));
    ASSERT_EQ(want.dim(1), layout.num_layers());
    ASSERT_EQ(want.dim(2), layout.num_cols());

    std::vector<int64_t> history;
    for (int64_t id : prompt) history.push_back(map.compressed_ids.at(size_t(id)));
    const int64_t pad = map.compressed_ids.at(size_t(t.engram_pad_id));
    std::vector<int64_t> tokens(size_t(layout.max_ngram_size())), rows(size_t(layout.num_cols()));
    int64_t mismatches = 0;
    for (int64_t p = 0; p < int64_t(prompt.size()); ++p) {
        engram_lookback(history, p, pad, tokens);
        for (int64_t l = 0; l < layout.num_layers(); ++l) {
            layout.rows(l, tokens, rows);
            for (int64_t c = 0; c < layout.num_cols(); ++c) {
                const int64_t w = want.data_as<const int64_t>()[(p * layout.num_layers() + l) * layout.num_cols() + c];
                if (rows[size_t(c)] != w && mismatches++ < 5)
                    ADD_FAILURE() << "position " << p << " layer " << l << " column " << c << ": " << rows[size_t(c)]
                                  << " != " << w;
            }
        }
    }
    EXPECT_EQ(mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(V41, EngramFixture, ::testing::Values("v41_tiny_a", "v41_tiny_b"));

}  // namespace
}  // namespace deepinfer
