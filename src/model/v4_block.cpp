// SPDX-License-Identifier: Apache-2.0
// One DeepSeek-V4 block with its mHC (model/v4_block.h).
#include "model/v4_block.h"

#include "backends/cpu/hyper_connection.h"
#include "model/moe_block.h"

namespace deepinfer {

void run_v4_block(const BlockContext& ctx, const BlockContext& moe_ctx, const LayerWeights& lw, std::vector<float>& x,
                  std::span<const int32_t> tokens, const AttentionBody& attention) {
    const ModelConfig& c = ctx.config;
    const int64_t S = static_cast<int64_t>(tokens.size()), D = c.hidden_size, hc = c.hc_mult;
    const float eps = static_cast<float>(c.rms_norm_eps);
    const bool off = ctx.official();
    std::vector<float> post(size_t(S * hc)), comb(size_t(S * hc * hc)), a(size_t(S * D)), out(size_t(S * D)),
        y(size_t(S * hc * D));
    auto pre = [&](const HcWeights& w) {
        cpu::hc_pre({.x = x.data(), .fn = w.fn.ptr(), .base = w.base.ptr(), .scale = w.scale.ptr(), .num_tokens = S,
                     .hc = hc, .hidden = D, .sinkhorn_iters = c.hc_sinkhorn_iters, .norm_eps = eps,
                     .hc_eps = static_cast<float>(c.hc_eps), .post = post.data(), .comb = comb.data(),
                     .collapsed = a.data(), .round_bf16 = off});
    };
    auto norm = [&](const Vec& w) {
        for (int64_t t = 0; t < S; ++t) {
            cpu::rms_norm(a.data() + t * D, w.ptr(), eps, D, a.data() + t * D);
            if (off) cpu::round_bf16_inplace(a.data() + t * D, D);
        }
    };
    auto post_mix = [&] {
        cpu::hc_post({.out = out.data(), .x = x.data(), .post = post.data(), .comb = comb.data(), .num_tokens = S,
                      .hc = hc, .hidden = D, .y = y.data(), .round_bf16 = off});
        x.swap(y);
    };
    pre(lw.hc_attn);
    norm(lw.attn_norm);
    attention(a.data(), out.data());
    post_mix();
    pre(lw.hc_ffn);
    norm(lw.ffn_norm);
    moe_block(moe_ctx, {.weights = &lw.ffn, .hash_routing = lw.mlp_type == MlpType::kHashMoe, .x = a.data(),
                        .token_ids = tokens.data(), .num_tokens = S, .out = out.data()});
    post_mix();
}

}  // namespace deepinfer
