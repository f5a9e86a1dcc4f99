// SPDX-License-Identifier: Apache-2.0
// The tensors of a DeepseekV41ForCausalLM checkpoint (transformers' saved names `model.*` /
// `lm_head.weight`, or the published names `embed.weight`, `head.weight`, `layers.N.*`), organized
// per block. Matrices stay views into the mapped safetensors files in their stored format
// (cpu::LinearWeight); vectors are copied to f32. Owns the mappings.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/linear.h"
#include "deepinfer/model_config_v41.h"
#include "deepinfer/safetensors.h"

namespace deepinfer::v41 {

using cpu::LinearWeight;
using Vec = std::vector<float>;

struct HcSiteWeights {
    Vec fn;     // [(2+hc)*hc, hc*D]
    Vec base;   // [(2+hc)*hc]
    Vec scale;  // [3]
};

struct AttentionWeights {
    LinearWeight wq_a;  // [q_lora_rank, D]
    Vec q_norm;         // [q_lora_rank]
    LinearWeight wq_b;  // [H*head_dim, q_lora_rank]
    LinearWeight wkv;   // [head_dim, D]
    Vec kv_norm;        // [head_dim]
    LinearWeight wo_a;  // [o_groups*o_lora_rank, H*head_dim/o_groups]
    LinearWeight wo_b;  // [D, o_groups*o_lora_rank]
    Vec sink;           // [H]
    // KV source (Full layer): compressor.
    bool has_compressor = false;
    LinearWeight compressor_wkv;    // [head_dim, D]
    LinearWeight compressor_wgate;  // [head_dim, D], ratio > 1 only
    Vec compressor_norm;            // [head_dim]
    // Index source (Full or Reindex): indexer; index keys only on KV sources.
    bool has_indexer = false;
    LinearWeight indexer_wq_b;          // [index_n_heads*index_head_dim, q_lora_rank]
    LinearWeight indexer_weights_proj;  // [index_n_heads, D]
    bool has_index_keys = false;
    LinearWeight indexer_wk;  // [index_head_dim, head_dim]
    Vec indexer_k_norm;       // [index_head_dim]
};

struct ExpertWeights {
    LinearWeight w1, w3;  // [I, D]
    LinearWeight w2;      // [D, I]
};

struct MoeWeights {
    LinearWeight gate;  // [E, D]
    Vec bias;           // [E] selection bias (text tokens)
    Vec bias_vl;        // [E] selection bias (image-span tokens)
    std::vector<ExpertWeights> experts;
    ExpertWeights shared;
};

struct EngramWeights {
    LinearWeight table;  // [rows, engram_head_dim] (f32/bf16, or fp8 with per-row per-32 ue8m0 scales)
    LinearWeight wkv;    // [D*(hc+1), cols*engram_head_dim]
    Vec gate_weight;     // [hc, D] q_weight * k_weight (only the product is used)
};

struct LayerWeights {
    Vec attn_norm, ffn_norm;  // [D]
    HcSiteWeights hc_attn, hc_ffn;
    AttentionWeights attn;
    MoeWeights ffn;
    std::optional<EngramWeights> engram;
};

// The DSpark drafter stored under `mtp.N.` (speculative-decoding.md §1.8): N stages with the tensor set
// of a window-only layer (their own expert count), stage 0's context projection, the last stage's norm,
// Markov head and confidence head. Shares the target's embed and head.
struct DSparkWeights {
    std::vector<LayerWeights> stages;  // mtp.0 .. mtp.N-1
    LinearWeight main_proj;            // [D, taps*D] (FP8 in the release)
    Vec main_norm;                     // [D]
    Vec norm;                          // [D] last stage
    LinearWeight markov_embed;         // [vocab, markov_rank] W1 (rows looked up)
    LinearWeight markov_head;          // [vocab, markov_rank] W2 (bias = e · W2ᵀ)
    Vec confidence;                    // [D + markov_rank] confidence_head.proj (no bias)
};

class Weights {
public:
    // Opens `dir` (model.safetensors or model.safetensors.index.json + shards) and binds every tensor
    // the config needs; a missing tensor or a wrong shape is an error naming the tensor.
    Weights(const std::string& dir, const V41TextConfig& config);

    LinearWeight embed;  // [vocab, D] (rows dequantized on lookup)
    LinearWeight head;   // [vocab, D]
    Vec norm;            // [D]
    std::vector<LayerWeights> layers;
    // Bound when the checkpoint has `mtp.0.attn_norm.weight`; the stage count is that of the stored
    // blocks (num_nextn_predict_layers is not trusted, spec §1.2).
    std::optional<DSparkWeights> dspark;

private:
    LayerWeights bind_layer(const std::string& prefix, int64_t layer, int64_t routed_experts, bool backbone) const;
    DSparkWeights bind_dspark(int64_t stages) const;
    struct Entry {
        const SafetensorsFile* file;
        const SafetensorsTensorInfo* info;
    };
    const Entry& find(const std::string& name) const;
    bool has(const std::string& name) const { return tensors_.count(name) > 0; }
    TensorView view(const std::string& name, std::initializer_list<int64_t> shape) const;
    Vec vec(const std::string& name, std::initializer_list<int64_t> shape) const;
    LinearWeight linear(const std::string& name, int64_t out, int64_t in) const;

    std::string dir_;
    const V41TextConfig* config_ = nullptr;  // during construction
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::map<std::string, Entry> tensors_;  // canonical (published) name -> location
};

}  // namespace deepinfer::v41
