// SPDX-License-Identifier: Apache-2.0
// The KV compressor of CSA/HCA layers and of the CSA indexer (spec §2.10): appends a chunk's
// projected rows to the open window and emits one finalized entry per completed window.
#pragma once

#include <cstdint>

#include "model/block_context.h"
#include "model/state.h"
#include "model/weights.h"

namespace deepinfer {

enum class CompressorQat : uint8_t { kNone, kFp8Kv, kHadamardFp4 };

struct CompressorUpdateParams {
    const CompressorWeights* weights = nullptr;
    CompressorState* state = nullptr;
    const float* a = nullptr;  // [num_tokens, D] attention input (after attn_norm)
    int64_t num_tokens = 0;
    int64_t first_position = 0;  // position of a's first row
    CompressorQat qat = CompressorQat::kNone;  // applied only in official numerics
};
// Emits every entry completed inside the chunk into state->entries.
void compressor_update(const BlockContext& ctx, const CompressorUpdateParams& p);

// Official QAT simulations (spec §2.7, §5.3), in place on one vector.
void fp8_simulate_nope(float* x, int64_t nope_dims);        // blocks of 64, e4m3 + ue8m0 scale
void hadamard_fp4_simulate(float* x, int64_t dim);          // Walsh-Hadamard /sqrt(dim), then FP4 per 32
void walsh_hadamard(float* x, int64_t dim);                 // natural order, scaled by 1/sqrt(dim)
void fp4_simulate(float* x, int64_t dim);                   // per 32: e2m1 with ue8m0 scale, bf16 result

}  // namespace deepinfer
