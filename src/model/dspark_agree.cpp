// SPDX-License-Identifier: Apache-2.0
// The agreeing-drafter rewrite (model/dspark_agree.h), in place on a safetensors file (SafetensorsPatcher):
// bf16 or the published formats (FP8 linears, FP4 experts: only zeroed; the tensors rewritten with values
// are bf16 in both).
#include "model/dspark_agree.h"

#include <cmath>
#include <random>

#include "deepinfer/check.h"
#include "deepinfer/safetensors.h"
#include "model/safetensors_patcher.h"

namespace deepinfer {

void make_dspark_agree(const std::string& path, const DSparkAgreeLayout& l, double noise, uint64_t seed) {
    const int64_t D = l.hidden, V = l.vocab;
    DI_CHECK(l.rank == D, path, ": an agreeing DSpark drafter needs dspark_markov_rank == hidden_size (", l.rank,
             " vs ", D, ")");
    DI_CHECK(l.noise_token >= 0 && l.noise_token < V, path, ": noise token ", l.noise_token, " outside the vocabulary");
    SafetensorsPatcher p(path);
    for (const auto& [prefix, experts] : l.blocks) {
        p.zero(prefix + "attn.wo_b.weight");
        p.zero(prefix + "ffn.shared_experts.w2.weight");
        for (int64_t e = 0; e < experts; ++e) p.zero(prefix + "ffn.experts." + std::to_string(e) + ".w2.weight");
        if (p.has(prefix + "engram.wkv.weight")) p.zero(prefix + "engram.wkv.weight");
    }
    std::vector<float> embed = p.read_bf16("embed.weight");
    const std::vector<float> norm = p.read_bf16("norm.weight");
    // n(x) = norm ⊙ rmsnorm(embed[x]), from the embedding before the noise row is cleared.
    std::vector<float> W1(static_cast<size_t>(V * D));
    std::mt19937_64 rng(seed);
    std::normal_distribution<double> nd(0.0, 1.0);
    for (int64_t x = 0; x < V; ++x) {
        const float* e = embed.data() + x * D;
        double ss = 0;
        for (int64_t d = 0; d < D; ++d) ss += double(e[d]) * e[d];
        const double inv = 1.0 / std::sqrt(ss / double(D) + l.rms_norm_eps);
        double nn = 0;
        for (int64_t d = 0; d < D; ++d) nn += std::pow(double(norm[size_t(d)]) * e[d] * inv, 2);
        const double rms = std::sqrt(nn / double(D));
        for (int64_t d = 0; d < D; ++d)
            W1[size_t(x * D + d)] = float(double(norm[size_t(d)]) * e[d] * inv + noise * rms * nd(rng));
    }
    std::fill_n(embed.begin() + l.noise_token * D, D, 0.0f);
    p.write("embed.weight", embed);
    p.write(l.last_norm, norm);
    p.write(l.markov_embed, W1);
    p.write(l.markov_head, p.read_bf16("head.weight"));
    p.zero(l.confidence);
}

DSparkAgreeLayout dspark_agree_layout(const std::string& path, const DSparkAgreeShape& shape,
                                      const std::string& markov_embed, const std::string& markov_head) {
    DSparkAgreeLayout l;
    l.hidden = shape.hidden;
    l.vocab = shape.vocab;
    l.rank = shape.rank;
    l.noise_token = shape.noise_token;
    l.rms_norm_eps = shape.rms_norm_eps;
    for (int64_t i = 0; i < shape.layers; ++i) l.blocks.emplace_back("layers." + std::to_string(i) + ".", shape.experts);
    const SafetensorsFile file(path);
    int64_t stages = 0;
    for (; file.find("mtp." + std::to_string(stages) + ".attn_norm.weight"); ++stages)
        l.blocks.emplace_back("mtp." + std::to_string(stages) + ".", shape.stage_experts);
    DI_CHECK(stages > 0, path, ": the checkpoint has no DSpark drafter");
    const std::string last = "mtp." + std::to_string(stages - 1) + ".";
    l.last_norm = last + "norm.weight";
    l.markov_embed = last + markov_embed;
    l.markov_head = last + markov_head;
    l.confidence = last + "confidence_head.proj.weight";
    return l;
}

}  // namespace deepinfer
