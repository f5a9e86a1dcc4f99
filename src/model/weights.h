// SPDX-License-Identifier: Apache-2.0
// ModelWeights: every tensor of a DeepseekV4ForCausalLM checkpoint, organized per block. Large
// matrices stay views into the checkpoint mapping in their stored format (LinearWeight); vectors
// (norms, HC parameters, sinks, biases, ape) are copied to f32. Borrows the Checkpoint: it must
// outlive the weights.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "backends/cpu/linear.h"
#include "deepinfer/checkpoint.h"

namespace deepinfer {

using cpu::LinearWeight;

// An f32 copy of a small tensor.
struct Vec {
    std::vector<float> data;
    Shape shape;
    const float* ptr() const { return data.data(); }
    int64_t size() const { return static_cast<int64_t>(data.size()); }
};

struct HcWeights {
    Vec fn;     // [(2+hc)*hc, hc*D] (layers) or [hc, hc*D] (head)
    Vec base;   // [(2+hc)*hc] or [hc]
    Vec scale;  // [3] or [1]
};

struct CompressorWeights {
    LinearWeight wkv;    // [width, D]
    LinearWeight wgate;  // [width, D]
    Vec ape;             // [ratio, width]
    Vec norm;            // [head_dim]
    int64_t ratio = 0;
    int64_t head_dim = 0;  // d: output entry width
    bool overlap = false;  // width == 2*d (CSA)
};

struct IndexerWeights {
    LinearWeight wq_b;          // [index_n_heads*index_head_dim, q_lora_rank]
    LinearWeight weights_proj;  // [index_n_heads, D]
    CompressorWeights compressor;
};

struct AttentionWeights {
    Vec q_norm;            // [q_lora_rank]
    Vec kv_norm;           // [head_dim]
    LinearWeight wq_a;     // [q_lora_rank, D]
    LinearWeight wq_b;     // [H*head_dim, q_lora_rank]
    LinearWeight wkv;      // [head_dim, D]
    LinearWeight wo_a;     // [o_groups*o_lora_rank, H*head_dim/o_groups]
    LinearWeight wo_b;     // [D, o_groups*o_lora_rank]
    Vec sink;              // [H]
    std::optional<CompressorWeights> compressor;  // CSA and HCA
    std::optional<IndexerWeights> indexer;        // CSA
};

struct ExpertWeights {
    LinearWeight w1;  // gate [I, D]
    LinearWeight w3;  // up   [I, D]
    LinearWeight w2;  // down [D, I]
};

struct MoeWeights {
    LinearWeight gate;              // [E, D]
    std::optional<Vec> bias;        // [E] selection bias (score layers)
    std::vector<int32_t> tid2eid;   // [vocab, top_k] (hash layers), empty otherwise
    std::vector<ExpertWeights> experts;
    ExpertWeights shared;
};

struct LayerWeights {
    AttentionType attention_type = AttentionType::kSliding;
    MlpType mlp_type = MlpType::kMoe;
    int64_t compress_ratio = 0;
    Vec attn_norm, ffn_norm;  // [D]
    HcWeights hc_attn, hc_ffn;
    AttentionWeights attn;
    MoeWeights ffn;
};

struct MtpWeights {
    LinearWeight e_proj, h_proj;  // [D, D]
    Vec enorm, hnorm, norm;       // [D]
    HcWeights hc_head;
    LayerWeights block;           // sliding attention, score-routed MoE
};

// The DSpark drafter of DeepSeek-V4-Flash-0731 under `mtp.N.` (speculative-decoding.md §1.8): N stages
// with the tensor set of a sliding-window, score-routed layer (dspark_n_routed_experts experts), stage
// 0's context projection, and on the last stage the norm, the HC head, the Markov head (markov_w1 /
// markov_w2) and the confidence head. Shares the target's embed and head. No e_proj/h_proj/enorm/hnorm.
struct DSparkV4Weights {
    std::vector<LayerWeights> stages;  // mtp.0 .. mtp.N-1
    LinearWeight main_proj;            // [D, taps*D] (FP8 in the release)
    Vec main_norm;                     // [D]
    Vec norm;                          // [D] last stage
    HcWeights hc_head;                 // last stage: fn [hc, hc*D], base [hc], scale [1]
    LinearWeight markov_w1;            // [vocab, markov_rank] W1 (rows looked up)
    LinearWeight markov_w2;            // [vocab, markov_rank] W2 (bias = e · W2ᵀ)
    Vec confidence;                    // [1, D + markov_rank] confidence_head.proj (no bias)
};

struct ModelWeights {
    LinearWeight embed;  // [vocab, D]
    LinearWeight head;   // [vocab, D]
    Vec norm;            // [D]
    HcWeights hc_head;
    std::vector<LayerWeights> layers;
    // The checkpoint's drafter, told apart by tensor names (spec §0.2): `mtp.0.e_proj` = the preview's
    // MTP block(s), `mtp.0.main_proj` = 0731's DSpark; the count is that of the stored `mtp.N` blocks
    // (num_nextn_predict_layers is not trusted). Both empty when there are no mtp.* tensors.
    std::vector<MtpWeights> mtp;
    std::optional<DSparkV4Weights> dspark;
};

// Which drafter the `mtp.N` tensors of a checkpoint are (see ModelWeights::mtp); throws when mtp.0 is
// neither or both. `stages` receives the number of stored blocks.
enum class V4DrafterKind : uint8_t { kNone, kMtp, kDSpark };
V4DrafterKind detect_v4_drafter(const Checkpoint& checkpoint, int64_t* stages = nullptr);

// Loads (views) every weight; throws naming the first missing or malformed tensor.
ModelWeights load_model_weights(const Checkpoint& checkpoint, const ModelConfig& config);

}  // namespace deepinfer
