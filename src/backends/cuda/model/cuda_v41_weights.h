// SPDX-License-Identifier: Apache-2.0
// Device copies of a DeepSeek-V4.1 checkpoint's weights (v41::Weights): matrices in their stored
// format (FP8 + ue8m0 block scales, packed MXFP4 experts, bf16, f32), vectors as f32, routed experts
// also as device arrays of DeviceLinear for the grouped GEMM. The Engram tables stay in host memory
// (page-locked and mapped: the GPU gathers the rows a batch needs over the bus), so the largest
// tensors of the model do not take GPU memory. Owns every allocation.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/model/cuda_weights.h"
#include "model/v41/weights.h"

namespace deepinfer::cuda {

struct V41DeviceEngram {
    DeviceLinear table;                  // [rows, engram_head_dim], weight/scale in mapped host memory
    DeviceLinear wkv;                    // [(hc+1)*D, cols*engram_head_dim]
    const float* gate_weight = nullptr;  // [hc, D]
};

struct V41DeviceLayer {
    const float* attn_norm = nullptr;
    const float* ffn_norm = nullptr;
    DeviceHc hc_attn, hc_ffn;
    // Attention.
    DeviceLinear wq_a, wq_b, wkv, wo_a, wo_b;
    const DeviceLinear* wo_a_groups = nullptr;  // [o_groups] wo_a's row slices (device array) when wo_a is bf16
    const float* q_norm = nullptr;
    const float* kv_norm = nullptr;
    const float* sink = nullptr;
    bool has_compressor = false;
    DeviceLinear compressor_wkv, compressor_wgate;
    const float* compressor_norm = nullptr;
    bool has_indexer = false;
    DeviceLinear indexer_wq_b, indexer_weights_proj;
    bool has_index_keys = false;
    DeviceLinear indexer_wk;
    const float* indexer_k_norm = nullptr;
    // MoE.
    DeviceLinear gate;
    const float* bias = nullptr;
    const float* bias_vl = nullptr;  // [E] image-span rows' selection bias (bias's values without ffn.gate.bias_vl)
    DeviceExperts experts;
    DeviceLinear shared_w1, shared_w3, shared_w2;
    // Engram (engram layers only).
    bool has_engram = false;
    V41DeviceEngram engram;
};

// The DSpark drafter (v41::DSparkWeights): its stages are window-only layers with their own MoE.
struct V41DeviceDSpark {
    std::vector<V41DeviceLayer> stages;
    DeviceLinear main_proj;               // [D, taps*D]
    const float* main_norm = nullptr;     // [D]
    const float* norm = nullptr;          // [D] last stage
    DeviceLinear markov_embed;            // [vocab, rank] W1
    DeviceLinear markov_head;             // [vocab, rank] W2
    const float* confidence = nullptr;    // [D + rank]
};

struct V41DeviceWeights {
    DeviceLinear embed, head;
    const float* norm = nullptr;
    std::vector<V41DeviceLayer> layers;
    std::optional<V41DeviceDSpark> dspark;  // with_dspark and a checkpoint with the drafter
    size_t device_bytes = 0, host_bytes = 0;
    std::vector<std::unique_ptr<DeviceBuffer>> storage;  // device allocations
    std::vector<std::unique_ptr<PinnedBuffer>> pinned;   // Engram tables copied (when not shared)
    // Engram tables read in place from the checkpoint's mapping (page-locked, mapped to the device):
    // host_bytes counts none of them, and every process on the host shares one page-cache copy.
    std::vector<std::unique_ptr<HostRegistration>> registered;
    size_t shared_host_bytes = 0;
    // FP8 weights uploaded dequantized to bf16 (DenseFp8::kBf16), sorted: the reference act_quants their
    // inputs in official numerics, so the fast GEMMs do too.
    std::vector<const void*> bf16_from_fp8;
    bool from_fp8(const DeviceLinear& w) const;
    // DenseFp8::kBf16 with fp8_twins: those bf16 weights' FP8 forms as stored where fp8_twin_supported
    // (sorted by the bf16 weight's address), which decode-sized launches read instead
    // (FastLinearParams::fp8_twin: the same bits, half the bytes).
    std::vector<std::pair<const void*, DeviceLinear>> fp8_twins;
    const DeviceLinear* fp8_twin(const DeviceLinear& w) const;  // null: none
};

// Copies every weight the forward uses to the device. Engram tables stay in host memory: with
// share_engram and a device that maps read-only host memory they are registered in place in the
// checkpoint's mapping (w must then outlive the result), otherwise copied to pinned mapped buffers.
// The dense FP8 linears (the attention projections, shared experts, Engram wkv; 32x32 blocks) for the
// fast GEMM mode: kAsStored (the reference kernels); kBf16: those with power-of-two block scales
// uploaded dequantized to bf16 (bf16_weights.h, exact); kNative: kept FP8 where the device's fast GEMM
// runs them (fast_linear_supported: Hopper), else as kBf16; wo_a (a bf16 linear in the reference, no
// activation quantization) as kBf16 either way. fp8_twins (kBf16): each bf16 weight also kept in its FP8
// form where that pays at decode sizes (V41DeviceWeights::fp8_twins).
enum class DenseFp8 : uint8_t { kAsStored, kBf16, kNative };

// with_dspark: the DSpark drafter too, when the checkpoint has one (all of its experts).
V41DeviceWeights upload_v41_weights(const v41::Weights& w, const V41TextConfig& config, bool share_engram = true,
                                    ExpertRange experts = {}, DenseFp8 dense_fp8 = DenseFp8::kAsStored,
                                    bool with_dspark = false, bool fp8_twins = false);

}  // namespace deepinfer::cuda
