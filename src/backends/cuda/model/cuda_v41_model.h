// SPDX-License-Identifier: Apache-2.0
// The DeepSeek-V4.1 forward (model/v41, spec deepseek-v41-model.md) on one CUDA GPU behind the Model
// interface: weights on the device in their stored formats (Engram tables in mapped host memory),
// each sequence's CSA2 caches on the device in their compact QAT codes, the forward on the model's
// stream with scratch from a workspace arena sized at load; the Engram gather and projection run on
// a second stream, overlapped with the layers before the first Engram layer. Logits equal the CPU
// V41Model's bit for bit (same rounding points and per-element reduction order, batch-invariant).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backends/cuda/model/cuda_model.h"
#include "deepinfer/model.h"

namespace deepinfer::cuda {

// Loads a V4.1 checkpoint directory onto the GPU. `options.tokenizer_json` names the tokenizer the
// Engram token map is built from (required when the model has Engram layers). Numerics as
// V41Model::load. Bounded replay (ModelOptions::v41_bounded_replay; under expert parallelism too) and image
// spans run as on the CPU. CudaModelOptions::gemm = kFast: tensor-core GEMMs (FP8 32x32 linears as exact bf16 weights,
// or natively on Hopper with v41_fp8_native; see docs/architecture.md "V4.1 on the GPU").
std::unique_ptr<Model> load_cuda_v41_model(const std::string& checkpoint_dir, const ModelOptions& options,
                                           const CudaModelOptions& cuda_options = {});
// The longest sequence a model made by load_cuda_v41_model holds (throws for other models).
int64_t cuda_v41_model_max_len(const Model& model);

// V4.1's bounded replay (docs/v41-bounded-replay.md): whether a chunk of `rows` rows runs only its last `window` rows
// from the decoder on. Not for a chunk that wants every row's logits or has a verify draw (`drawn` 2, device_draws.h
// check_device_draws), nor for one of at most `window` rows.
inline bool v41_replays_chunk(bool all_logits, uint8_t drawn, int64_t rows, int64_t window) {
    return !all_logits && drawn != 2 && rows > window;
}

}  // namespace deepinfer::cuda
