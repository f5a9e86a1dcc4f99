// SPDX-License-Identifier: Apache-2.0
// Device copies of a DeepSeek-V4 checkpoint's weights, organized like ModelWeights: matrices in their
// stored format (FP8 + block scales, packed FP4 + ue8m0 scales, bf16, f32), vectors as f32, routed
// experts also as device arrays of DeviceLinear for the grouped GEMM. Owns the device memory.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "model/weights.h"

namespace deepinfer::cuda {

struct DeviceCompressor {
    DeviceLinear wkv, wgate;
    // wkv's rows then wgate's in one allocation (wkv and wgate are then its row slices), so that one GEMM
    // computes both; empty where they cannot share one (Uploader::linear_pair).
    DeviceLinear wkv_gate;
    const float* ape = nullptr;   // [ratio, width]
    const float* norm = nullptr;  // [head_dim]
    int64_t ratio = 0, head_dim = 0;
    bool overlap = false;
};

struct DeviceHc {
    const float* fn = nullptr;
    const float* base = nullptr;
    const float* scale = nullptr;
};

struct DeviceExperts {
    const DeviceLinear* w1 = nullptr;  // [E] device array
    const DeviceLinear* w3 = nullptr;
    const DeviceLinear* w2 = nullptr;
    DeviceLinear shape_w1, shape_w2;  // expert 0 (shapes and formats)
};

struct DeviceLayer {
    AttentionType attention_type = AttentionType::kSliding;
    MlpType mlp_type = MlpType::kMoe;
    int64_t compress_ratio = 0;
    const float* attn_norm = nullptr;
    const float* ffn_norm = nullptr;
    DeviceHc hc_attn, hc_ffn;
    const float* q_norm = nullptr;
    const float* kv_norm = nullptr;
    const float* sink = nullptr;
    DeviceLinear wq_a, wq_b, wkv, wo_a, wo_b;
    // [o_groups] device array of wo_a's row slices, one per output group (the grouped tensor-core
    // launch); null unless wo_a was uploaded as bf16 for the fast GEMMs.
    const DeviceLinear* wo_a_groups = nullptr;
    std::optional<DeviceCompressor> compressor, indexer_compressor;
    DeviceLinear indexer_wq_b, indexer_weights_proj;
    DeviceLinear gate;
    const float* gate_bias = nullptr;
    const int32_t* tid2eid = nullptr;
    DeviceExperts experts;
    DeviceLinear shared_w1, shared_w3, shared_w2;
    // The shared expert's w1 and w3 in one allocation, rows [0, I) of w1 then [I, 2I) of w3 (shared_w1 and
    // shared_w3 are then its row slices), so that one GEMM computes both; empty where their formats differ
    // or an FP8 w1 does not end on a scale block.
    DeviceLinear shared_w13;
};

// The V4-Flash preview's MTP block (speculative-decoding.md §5): its own input projections and norms,
// a sliding-window layer, and its own HC head and final norm (embedding and LM head are the target's).
struct DeviceMtp {
    DeviceLinear e_proj, h_proj;  // [D, D]
    const float* enorm = nullptr;
    const float* hnorm = nullptr;
    const float* norm = nullptr;
    DeviceHc hc_head;
    DeviceLayer block;
};

// The V4-Flash-0731 DSpark drafter (DSparkV4Weights): its stages are sliding-window layers with their
// own score-routed MoE; the last stage's HC head collapses the streams.
struct DeviceDSpark {
    std::vector<DeviceLayer> stages;
    DeviceLinear main_proj;             // [D, taps*D]
    const float* main_norm = nullptr;   // [D]
    const float* norm = nullptr;        // [D] last stage
    DeviceHc hc_head;                   // last stage
    DeviceLinear markov_w1, markov_w2;  // [vocab, rank]
    const float* confidence = nullptr;  // [D + rank]
};

struct DeviceWeights {
    DeviceLinear embed, head;
    const float* norm = nullptr;
    DeviceHc hc_head;
    std::vector<DeviceLayer> layers;
    std::optional<DeviceMtp> mtp;  // the first MTP block, when the checkpoint has one and it was asked for
    std::optional<DeviceDSpark> dspark;  // the 0731 DSpark drafter, when stored and asked for
    size_t bytes = 0;
    std::vector<std::unique_ptr<DeviceBuffer>> storage;  // owns every allocation above
};

// The routed experts a device holds: [begin, end) of every layer (expert parallelism gives each GPU
// a slice; end < 0: all of them).
struct ExpertRange {
    int64_t begin = 0, end = -1;
};

// Copies every weight the forward uses to the device (synchronously); of the routed experts, those
// of `upload.experts` only (DeviceExperts then index them from 0); the MTP block (all its experts) when
// `with_mtp` and the checkpoint has one.
// What the upload may convert for the kernels that will use the weights.
struct UploadOptions {
    ExpertRange experts;
    // wo_a stored as FP8 with power-of-two block scales is uploaded dequantized to bf16 (exact: e4m3 times a
    // power of two has 4 significant bits), as the reference does at load, for the tensor-core bf16 GEMM.
    bool wo_a_bf16 = false;
    bool with_mtp = false;  // also the first MTP block (speculative decoding, cuda_mtp.cpp)
    bool with_dspark = false;  // also the 0731 DSpark drafter (cuda_dspark_v4.cpp)
};

DeviceWeights upload_weights(const ModelWeights& w, const ModelConfig& config, const UploadOptions& options = {});

// The device form of a CPU LinearWeight whose tensors already live in device memory.
DeviceLinear device_linear_like(const LinearWeight& w, const void* weight, const void* scale);

}  // namespace deepinfer::cuda
