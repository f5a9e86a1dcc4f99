// SPDX-License-Identifier: Apache-2.0
// Builds ModelWeights from a Checkpoint (canonical DeepSeek names; transformers' merged experts
// are sliced per expert without copying).
#include "model/weights.h"

#include <cstring>
#include <string>

#include "deepinfer/check.h"
#include "deepinfer/dequant.h"

namespace deepinfer {
namespace {

class Loader {
public:
    Loader(const Checkpoint& ckpt, const ModelConfig& c) : ckpt_(ckpt), c_(c) {}

    const CheckpointTensor& tensor(const std::string& name) const {
        const CheckpointTensor* t = ckpt_.find(name);
        DI_CHECK(t != nullptr, ckpt_.path(), ": missing tensor '", name, "'");
        return *t;
    }
    bool has(const std::string& name) const { return ckpt_.find(name) != nullptr; }

    Vec vec(const std::string& name, Shape shape) const {
        const CheckpointTensor& t = tensor(name);
        TensorView v = ckpt_.view(t);
        DI_CHECK(v.shape() == shape, ckpt_.path(), ": tensor '", t.stored_name, "' is ", v.describe(), ", expected ",
                 shape.str());
        Vec out;
        out.shape = shape;
        out.data.resize(static_cast<size_t>(shape.numel()));
        convert_float(v, TensorView(out.data.data(), DType::kF32, shape));
        return out;
    }

    LinearWeight linear(const std::string& name, int64_t out, int64_t in) const {
        const CheckpointTensor& t = tensor(name + ".weight");
        TensorView scale;
        if (const CheckpointTensor* s = ckpt_.find(name + ".scale")) scale = ckpt_.view(*s);
        try {
            return cpu::make_linear_weight(ckpt_.view(t), scale, out, in, c_.quantization.weight_block_rows,
                                           c_.quantization.weight_block_cols);
        } catch (const Error& e) {
            DI_THROW(ckpt_.path(), ": tensor '", t.stored_name, "': ", e.message());
        }
    }

    HcWeights hc_weights(const std::string& prefix, int64_t outputs, bool head) const {
        const int64_t flat = c_.hc_mult * c_.hidden_size;
        HcWeights w;
        w.fn = vec(prefix + "_fn", {outputs, flat});
        w.base = vec(prefix + "_base", {outputs});
        w.scale = vec(prefix + "_scale", {head ? 1 : 3});
        return w;
    }

    CompressorWeights compressor(const std::string& p, int64_t ratio, int64_t d, bool overlap) const {
        CompressorWeights w;
        const int64_t width = overlap ? 2 * d : d;
        w.wkv = linear(p + "wkv", width, c_.hidden_size);
        w.wgate = linear(p + "wgate", width, c_.hidden_size);
        w.ape = vec(p + "ape", {ratio, width});
        w.norm = vec(p + "norm.weight", {d});
        w.ratio = ratio;
        w.head_dim = d;
        w.overlap = overlap;
        return w;
    }

    MoeWeights moe(const std::string& p, bool hash) const {
        const int64_t E = c_.n_routed_experts, I = c_.moe_intermediate_size, D = c_.hidden_size;
        MoeWeights w;
        w.gate = linear(p + "gate", E, D);
        if (hash) {
            const CheckpointTensor& t = tensor(p + "gate.tid2eid");
            TensorView v = ckpt_.view(t);
            const int64_t K = c_.num_experts_per_tok;
            DI_CHECK(v.shape() == Shape({c_.vocab_size, K}) && (v.dtype() == DType::kI64 || v.dtype() == DType::kI32),
                     ckpt_.path(), ": tensor '", t.stored_name, "' is ", v.describe(), ", expected i64[", c_.vocab_size,
                     ", ", K, "]");
            w.tid2eid.resize(static_cast<size_t>(v.numel()));
            const auto* base = static_cast<const uint8_t*>(v.data());
            for (int64_t i = 0; i < v.numel(); ++i) {
                int64_t e = 0;
                if (v.dtype() == DType::kI64) std::memcpy(&e, base + 8 * i, 8);
                else {
                    int32_t e32;
                    std::memcpy(&e32, base + 4 * i, 4);
                    e = e32;
                }
                DI_CHECK(e >= 0 && e < E, ckpt_.path(), ": tensor '", t.stored_name, "' row ", i / K,
                         " names expert ", e, ", outside [0, ", E, ")");
                w.tid2eid[size_t(i)] = static_cast<int32_t>(e);
            }
        } else {
            w.bias = vec(p + "gate.bias", {E});
        }
        w.shared = {linear(p + "shared_experts.w1", I, D), linear(p + "shared_experts.w3", I, D),
                    linear(p + "shared_experts.w2", D, I)};
        w.experts.reserve(static_cast<size_t>(E));
        if (has(p + "experts.gate_up_proj")) {
            // transformers' merged layout: gate_up_proj [E, 2I, D] (w1 rows then w3 rows), down_proj [E, D, I].
            const CheckpointTensor& gu = tensor(p + "experts.gate_up_proj");
            const CheckpointTensor& dn = tensor(p + "experts.down_proj");
            TensorView guv = ckpt_.view(gu), dnv = ckpt_.view(dn);
            DI_CHECK(guv.shape() == Shape({E, 2 * I, D}), ckpt_.path(), ": '", gu.stored_name, "' is ", guv.describe());
            DI_CHECK(dnv.shape() == Shape({E, D, I}), ckpt_.path(), ": '", dn.stored_name, "' is ", dnv.describe());
            LinearWeight gate_up = cpu::make_linear_weight(
                TensorView(guv.data(), guv.dtype(), {E * 2 * I, D}), {}, E * 2 * I, D);
            LinearWeight down = cpu::make_linear_weight(TensorView(dnv.data(), dnv.dtype(), {E * D, I}), {}, E * D, I);
            for (int64_t e = 0; e < E; ++e)
                w.experts.push_back({gate_up.rows(e * 2 * I, e * 2 * I + I), gate_up.rows(e * 2 * I + I, (e + 1) * 2 * I),
                                     down.rows(e * D, (e + 1) * D)});
        } else {
            for (int64_t e = 0; e < E; ++e) {
                const std::string ep = p + "experts." + std::to_string(e) + ".";
                w.experts.push_back({linear(ep + "w1", I, D), linear(ep + "w3", I, D), linear(ep + "w2", D, I)});
            }
        }
        return w;
    }

    LayerWeights layer(const std::string& p, AttentionType type, MlpType mlp, int64_t ratio) const {
        const int64_t D = c_.hidden_size, H = c_.num_attention_heads, Dh = c_.head_dim, hc = c_.hc_mult;
        LayerWeights w;
        w.attention_type = type;
        w.mlp_type = mlp;
        w.compress_ratio = ratio;
        w.attn_norm = vec(p + "attn_norm.weight", {D});
        w.ffn_norm = vec(p + "ffn_norm.weight", {D});
        w.hc_attn = hc_weights(p + "hc_attn", (2 + hc) * hc, false);
        w.hc_ffn = hc_weights(p + "hc_ffn", (2 + hc) * hc, false);
        AttentionWeights& a = w.attn;
        a.q_norm = vec(p + "attn.q_norm.weight", {c_.q_lora_rank});
        a.kv_norm = vec(p + "attn.kv_norm.weight", {Dh});
        a.wq_a = linear(p + "attn.wq_a", c_.q_lora_rank, D);
        a.wq_b = linear(p + "attn.wq_b", H * Dh, c_.q_lora_rank);
        a.wkv = linear(p + "attn.wkv", Dh, D);
        a.wo_a = linear(p + "attn.wo_a", c_.o_groups * c_.o_lora_rank, H * Dh / c_.o_groups);
        a.wo_b = linear(p + "attn.wo_b", D, c_.o_groups * c_.o_lora_rank);
        a.sink = vec(p + "attn.attn_sink", {H});
        if (type != AttentionType::kSliding) {
            const bool csa = type == AttentionType::kCsa;
            a.compressor = compressor(p + "attn.compressor.", ratio, Dh, csa);
            if (csa) {
                IndexerWeights ix;
                ix.wq_b = linear(p + "attn.indexer.wq_b", c_.index_n_heads * c_.index_head_dim, c_.q_lora_rank);
                ix.weights_proj = linear(p + "attn.indexer.weights_proj", c_.index_n_heads, D);
                ix.compressor = compressor(p + "attn.indexer.compressor.", ratio, c_.index_head_dim, true);
                a.indexer = std::move(ix);
            }
        }
        w.ffn = moe(p + "ffn.", mlp == MlpType::kHashMoe);
        return w;
    }

private:
    const Checkpoint& ckpt_;
    const ModelConfig& c_;
};

DSparkV4Weights load_dspark(const Checkpoint& ckpt, const ModelConfig& c, int64_t stages) {
    const int64_t D = c.hidden_size, V = c.vocab_size, r = c.dspark_markov_rank;
    const int64_t taps = static_cast<int64_t>(c.dspark_target_layer_ids.size());
    DI_CHECK(taps > 0, ckpt.path(), ": the checkpoint has a DSpark drafter but dspark_target_layer_ids is empty");
    DI_CHECK(c.dspark_noise_token_id >= 0 && c.dspark_noise_token_id < V, ckpt.path(),
             ": the DSpark drafter's dspark_noise_token_id ", c.dspark_noise_token_id, " is outside the vocabulary [0, ",
             V, ") (set the config key)");
    ModelConfig sc = c;  // the stages' MoE has the drafter's own expert counts
    sc.n_routed_experts = c.dspark_n_routed_experts;
    sc.num_experts_per_tok = c.dspark_num_experts_per_tok;
    const Loader ld(ckpt, c), stage_ld(ckpt, sc);
    DSparkV4Weights d;
    for (int64_t s = 0; s < stages; ++s)
        d.stages.push_back(stage_ld.layer("mtp." + std::to_string(s) + ".", AttentionType::kSliding, MlpType::kMoe, 0));
    const std::string last = "mtp." + std::to_string(stages - 1) + ".";
    d.main_proj = ld.linear("mtp.0.main_proj", D, taps * D);
    d.main_norm = ld.vec("mtp.0.main_norm.weight", {D});
    d.norm = ld.vec(last + "norm.weight", {D});
    d.hc_head = ld.hc_weights(last + "hc_head", c.hc_mult, true);
    d.markov_w1 = ld.linear(last + "markov_head.markov_w1", V, r);
    d.markov_w2 = ld.linear(last + "markov_head.markov_w2", V, r);
    d.confidence = ld.vec(last + "confidence_head.proj.weight", {1, D + r});
    return d;
}

}  // namespace

V4DrafterKind detect_v4_drafter(const Checkpoint& ckpt, int64_t* stages) {
    int64_t n = 0;
    while (ckpt.find("mtp." + std::to_string(n) + ".attn_norm.weight")) ++n;
    if (stages) *stages = n;
    bool any = n > 0;
    for (const CheckpointTensor& t : ckpt.tensors()) any |= t.name.rfind("mtp.", 0) == 0;
    if (!any) return V4DrafterKind::kNone;
    const bool mtp = ckpt.find("mtp.0.e_proj.weight") != nullptr;
    const bool dspark = ckpt.find("mtp.0.main_proj.weight") != nullptr;
    DI_CHECK(n > 0, ckpt.path(), ": the checkpoint has mtp.* tensors but no mtp.0.attn_norm.weight (a drafter block "
             "without its layer tensors)");
    DI_CHECK(!(mtp && dspark), ckpt.path(), ": mtp.0 has both e_proj (an MTP block) and main_proj (a DSpark drafter)");
    DI_CHECK(mtp || dspark, ckpt.path(), ": mtp.0 is neither an MTP block (no mtp.0.e_proj.weight) nor a DSpark "
             "drafter (no mtp.0.main_proj.weight)");
    return mtp ? V4DrafterKind::kMtp : V4DrafterKind::kDSpark;
}

ModelWeights load_model_weights(const Checkpoint& ckpt, const ModelConfig& c) {
    Loader ld(ckpt, c);
    ModelWeights w;
    w.embed = ld.linear("embed", c.vocab_size, c.hidden_size);
    w.head = ld.linear("head", c.vocab_size, c.hidden_size);
    w.norm = ld.vec("norm.weight", {c.hidden_size});
    w.hc_head = ld.hc_weights("hc_head", c.hc_mult, true);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
        w.layers.push_back(ld.layer("layers." + std::to_string(l) + ".", c.layer_types[size_t(l)],
                                    c.mlp_layer_types[size_t(l)], c.compress_ratio(l)));
    int64_t blocks = 0;
    switch (detect_v4_drafter(ckpt, &blocks)) {
        case V4DrafterKind::kNone: break;
        case V4DrafterKind::kMtp:
            for (int64_t m = 0; m < blocks; ++m) {
                const std::string p = "mtp." + std::to_string(m) + ".";
                MtpWeights mw;
                mw.e_proj = ld.linear(p + "e_proj", c.hidden_size, c.hidden_size);
                mw.h_proj = ld.linear(p + "h_proj", c.hidden_size, c.hidden_size);
                mw.enorm = ld.vec(p + "enorm.weight", {c.hidden_size});
                mw.hnorm = ld.vec(p + "hnorm.weight", {c.hidden_size});
                mw.norm = ld.vec(p + "norm.weight", {c.hidden_size});
                mw.hc_head = ld.hc_weights(p + "hc_head", c.hc_mult, true);
                mw.block = ld.layer(p, AttentionType::kSliding, MlpType::kMoe, 0);
                w.mtp.push_back(std::move(mw));
            }
            break;
        case V4DrafterKind::kDSpark: w.dspark = load_dspark(ckpt, c, blocks); break;
    }
    return w;
}

}  // namespace deepinfer
