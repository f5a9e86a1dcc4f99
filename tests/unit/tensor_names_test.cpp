// SPDX-License-Identifier: Apache-2.0
// transformers -> DeepSeek name mapping (spec §4.12), and DeepSeek names passing through unchanged.
#include <gtest/gtest.h>

#include "deepinfer/tensor_names.h"

namespace deepinfer {
namespace {

TEST(TensorNames, TransformersNamesMapToDeepSeek) {
    const std::pair<const char*, const char*> cases[] = {
        {"model.embed_tokens.weight", "embed.weight"},
        {"lm_head.weight", "head.weight"},
        {"model.norm.weight", "norm.weight"},
        {"model.hc_head.hc_fn", "hc_head_fn"},
        {"model.hc_head.hc_base", "hc_head_base"},
        {"model.hc_head.hc_scale", "hc_head_scale"},
        {"model.layers.3.input_layernorm.weight", "layers.3.attn_norm.weight"},
        {"model.layers.3.post_attention_layernorm.weight", "layers.3.ffn_norm.weight"},
        {"model.layers.12.attn_hc.fn", "layers.12.hc_attn_fn"},
        {"model.layers.12.ffn_hc.scale", "layers.12.hc_ffn_scale"},
        {"model.layers.0.self_attn.q_a_proj.weight", "layers.0.attn.wq_a.weight"},
        {"model.layers.0.self_attn.q_a_norm.weight", "layers.0.attn.q_norm.weight"},
        {"model.layers.0.self_attn.q_b_proj.weight", "layers.0.attn.wq_b.weight"},
        {"model.layers.0.self_attn.kv_proj.weight", "layers.0.attn.wkv.weight"},
        {"model.layers.0.self_attn.o_a_proj.weight", "layers.0.attn.wo_a.weight"},
        {"model.layers.0.self_attn.o_b_proj.weight_scale_inv", "layers.0.attn.wo_b.scale"},
        {"model.layers.0.self_attn.sinks", "layers.0.attn.attn_sink"},
        {"model.layers.2.self_attn.compressor.kv_proj.weight", "layers.2.attn.compressor.wkv.weight"},
        {"model.layers.2.self_attn.compressor.gate_proj.weight", "layers.2.attn.compressor.wgate.weight"},
        {"model.layers.2.self_attn.compressor.position_bias", "layers.2.attn.compressor.ape"},
        {"model.layers.2.self_attn.compressor.kv_norm.weight", "layers.2.attn.compressor.norm.weight"},
        {"model.layers.2.self_attn.compressor.indexer.kv_proj.weight", "layers.2.attn.indexer.compressor.wkv.weight"},
        {"model.layers.2.self_attn.compressor.indexer.position_bias", "layers.2.attn.indexer.compressor.ape"},
        {"model.layers.2.self_attn.compressor.indexer.q_b_proj.weight", "layers.2.attn.indexer.wq_b.weight"},
        {"model.layers.2.self_attn.compressor.indexer.scorer.weights_proj.weight",
         "layers.2.attn.indexer.weights_proj.weight"},
        {"model.layers.4.mlp.gate.weight", "layers.4.ffn.gate.weight"},
        {"model.layers.4.mlp.gate.e_score_correction_bias", "layers.4.ffn.gate.bias"},
        {"model.layers.1.mlp.gate.tid2eid", "layers.1.ffn.gate.tid2eid"},
        {"model.layers.4.mlp.shared_experts.gate_proj.weight", "layers.4.ffn.shared_experts.w1.weight"},
        {"model.layers.4.mlp.shared_experts.up_proj.weight", "layers.4.ffn.shared_experts.w3.weight"},
        {"model.layers.4.mlp.shared_experts.down_proj.weight", "layers.4.ffn.shared_experts.w2.weight"},
        {"model.layers.4.mlp.experts.gate_up_proj", "layers.4.ffn.experts.gate_up_proj"},
        {"model.layers.4.mlp.experts.down_proj", "layers.4.ffn.experts.down_proj"},
        {"model.layers.4.mlp.experts.7.gate_proj.weight", "layers.4.ffn.experts.7.w1.weight"},
        {"model.layers.4.attn.wq_a.weight", "layers.4.attn.wq_a.weight"},  // DeepSeek names under model.
    };
    for (const auto& [hf, ds] : cases) {
        NormalizedName n = normalize_tensor_name(hf);
        EXPECT_EQ(n.canonical, ds) << hf;
        EXPECT_TRUE(n.was_transformers) << hf;
    }
}

TEST(TensorNames, DeepSeekNamesAreCanonical) {
    for (const char* name : {"embed.weight", "head.weight", "hc_head_fn", "layers.7.attn.wq_b.scale",
                             "layers.2.attn.indexer.compressor.ape", "layers.9.ffn.experts.255.w2.weight",
                             "mtp.0.e_proj.weight", "mtp.0.ffn.gate.bias", "layers.0.hc_attn_fn"}) {
        NormalizedName n = normalize_tensor_name(name);
        EXPECT_EQ(n.canonical, name);
        EXPECT_TRUE(n.was_deepseek);
        EXPECT_FALSE(n.was_transformers);
    }
}

}  // namespace
}  // namespace deepinfer
