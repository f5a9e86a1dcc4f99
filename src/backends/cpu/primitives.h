// SPDX-License-Identifier: Apache-2.0
// Small per-row CPU primitives of the DeepSeek-V4 forward: RMS norms, interleaved RoPE tables,
// bf16 rounding, activation helpers. All f32 in, f32 out; reductions in a fixed order (dot()).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "deepinfer/float_formats.h"
#include "deepinfer/model_config.h"

namespace deepinfer::cpu {

// out = x · rsqrt(mean(x²) + eps) [· weight]. `weight` may be null (unweighted). out may alias x.
void rms_norm(const float* x, const float* weight, float eps, int64_t n, float* out);

// Unweighted RMS norm in bf16 arithmetic, as DeepSeek's official code normalizes each query head:
// squares rounded to bf16, mean rounded to bf16, + eps in bf16, rsqrt rounded to bf16, product rounded.
void rms_norm_bf16_arith(float* x, float eps, int64_t n);

inline float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }
void round_bf16_inplace(float* x, int64_t n);

// exp and log1p of an f32, computed in double and rounded once: correctly rounded except in vanishingly
// rare cases, identical across libm versions, and identical to the CUDA backend's (which computes the
// same). glibc's expf (0.502 ulp) and log1pf (~1 ulp) differ from a GPU's in the last bit now and then,
// and the official numerics' bf16 rounding points amplify such bits.
inline float exp_f32(float x) { return static_cast<float>(std::exp(static_cast<double>(x))); }
inline float log1p_f32(float x) { return static_cast<float>(std::log1p(static_cast<double>(x))); }

inline float silu(float x) { return x / (1.0f + exp_f32(-x)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + exp_f32(-x)); }
// PyTorch's softplus (threshold 20: x > 20 returns x).
inline float softplus(float x) { return x > 20.0f ? x : log1p_f32(exp_f32(x)); }

// Interleaved RoPE on the trailing `rope_dim` dims of a vector: pairs (2i, 2i+1) of the rope slice.
class RopeTable {
public:
    RopeTable() = default;
    // inv_freq as transformers computes it (default or YaRN; no magnitude scaling).
    RopeTable(const RopeParams& params, int64_t rope_dim);
    int64_t rope_dim() const { return rope_dim_; }
    const std::vector<float>& inv_freq() const { return inv_freq_; }
    // Rotates x[dim - rope_dim .. dim) in place at `position`; `inverse` rotates by -angle.
    void apply(float* x, int64_t dim, int64_t position, bool inverse = false) const;

private:
    int64_t rope_dim_ = 0;
    std::vector<float> inv_freq_;  // [rope_dim / 2]
};

}  // namespace deepinfer::cpu
