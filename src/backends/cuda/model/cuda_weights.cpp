// SPDX-License-Identifier: Apache-2.0
// Uploads ModelWeights (views into the checkpoint mapping) to device memory, format unchanged.
#include "backends/cuda/model/cuda_weights.h"

#include <cstring>
#include <span>
#include <vector>

#include "backends/cuda/model/bf16_weights.h"
#include "deepinfer/check.h"

namespace deepinfer::cuda {
namespace {

class Uploader {
public:
    explicit Uploader(DeviceWeights& out) : out_(out) {}

    const void* bytes(const void* src, size_t n) {
        if (n == 0) return nullptr;
        auto buf = std::make_unique<DeviceBuffer>(n);
        buf->copy_from_host(src, n);
        out_.bytes += n;
        const void* p = buf->data();
        out_.storage.push_back(std::move(buf));
        return p;
    }
    const float* vec(const Vec& v) { return static_cast<const float*>(bytes(v.ptr(), v.data.size() * sizeof(float))); }

    DeviceLinear linear(const LinearWeight& w) {
        if (w.empty()) return {};
        DI_CHECK(w.weight.is_contiguous(), "weight ", w.weight.describe(), " is not contiguous");
        const void* wp = bytes(w.weight.data(), w.weight.nbytes());
        const void* sp = w.scale.empty() ? nullptr : bytes(w.scale.data(), w.scale.nbytes());
        return device_linear_like(w, wp, sp);
    }

    // An FP8 block-scaled weight with power-of-two scales uploaded dequantized to bf16 (exact,
    // bf16_weights.h); other formats unchanged.
    DeviceLinear linear_bf16(const LinearWeight& w) {
        if (!fp8_exact_in_bf16(w)) return linear(w);
        const DeviceLinear d = upload_fp8_as_bf16(w, out_.storage);
        out_.bytes += size_t(d.out_features * d.in_features * 2);
        return d;
    }

    // a's rows then b's in one allocation (weights, and scales for FP8 blocks), or {} where they cannot
    // share one: different formats, scale kinds, input widths or blocks, per-row FP4 scales aside, an FP8
    // a whose rows do not end on a scale block.
    DeviceLinear linear_pair(const LinearWeight& a, const LinearWeight& b) {
        if (a.empty() || b.empty() || a.format != b.format || a.in_features != b.in_features || a.block_rows != b.block_rows ||
            a.block_cols != b.block_cols || a.scale.empty() != b.scale.empty() || !a.weight.is_contiguous() ||
            !b.weight.is_contiguous())
            return {};
        if (!a.scale.empty() && (a.scale.dtype() != b.scale.dtype() || !a.scale.is_contiguous() || !b.scale.is_contiguous()))
            return {};
        if (a.format == cpu::WeightFormat::kFp8Block && a.out_features % a.block_rows != 0) return {};
        auto joined = [&](const void* pa, size_t na, const void* pb, size_t nb) -> const void* {
            std::vector<uint8_t> host(na + nb);
            std::memcpy(host.data(), pa, na);
            std::memcpy(host.data() + na, pb, nb);
            return bytes(host.data(), host.size());
        };
        const void* wp = joined(a.weight.data(), a.weight.nbytes(), b.weight.data(), b.weight.nbytes());
        const void* sp = a.scale.empty() ? nullptr : joined(a.scale.data(), a.scale.nbytes(), b.scale.data(), b.scale.nbytes());
        DeviceLinear d = device_linear_like(a, wp, sp);
        d.out_features = a.out_features + b.out_features;
        return d;
    }

    DeviceHc hc(const HcWeights& h) { return {vec(h.fn), vec(h.base), vec(h.scale)}; }

    DeviceCompressor compressor(const CompressorWeights& c) {
        DeviceCompressor d;
        d.wkv_gate = linear_pair(c.wkv, c.wgate);
        if (d.wkv_gate.weight) {
            d.wkv = d.wkv_gate.rows(0, c.wkv.out_features);
            d.wgate = d.wkv_gate.rows(c.wkv.out_features, d.wkv_gate.out_features);
        } else {
            d.wkv = linear(c.wkv);
            d.wgate = linear(c.wgate);
        }
        d.ape = vec(c.ape);
        d.norm = vec(c.norm);
        d.ratio = c.ratio;
        d.head_dim = c.head_dim;
        d.overlap = c.overlap;
        return d;
    }

    DeviceExperts experts(std::span<const ExpertWeights> es) {
        DeviceExperts d;
        if (es.empty()) return d;
        std::vector<DeviceLinear> w1, w3, w2;
        for (const ExpertWeights& e : es) {
            w1.push_back(linear(e.w1));
            w3.push_back(linear(e.w3));
            w2.push_back(linear(e.w2));
        }
        d.w1 = static_cast<const DeviceLinear*>(bytes(w1.data(), w1.size() * sizeof(DeviceLinear)));
        d.w3 = static_cast<const DeviceLinear*>(bytes(w3.data(), w3.size() * sizeof(DeviceLinear)));
        d.w2 = static_cast<const DeviceLinear*>(bytes(w2.data(), w2.size() * sizeof(DeviceLinear)));
        d.shape_w1 = w1[0];
        d.shape_w2 = w2[0];
        for (size_t e = 1; e < es.size(); ++e)
            DI_CHECK(w1[e].kind == w1[0].kind && w2[e].kind == w2[0].kind && w1[e].in_features == w1[0].in_features &&
                         w1[e].out_features == w1[0].out_features && w2[e].out_features == w2[0].out_features,
                     "routed experts must share shapes and formats (expert ", e, ")");
        return d;
    }

private:
    DeviceWeights& out_;
};

ScaleKind scale_kind_of(const TensorView& s) {
    if (s.empty()) return ScaleKind::kNone;
    switch (s.dtype()) {
        case DType::kF32: return ScaleKind::kF32;
        case DType::kBF16: return ScaleKind::kBF16;
        case DType::kF8E8M0: return ScaleKind::kE8M0;
        default: DI_THROW("unsupported scale dtype ", s.describe());
    }
}

}  // namespace

DeviceLinear device_linear_like(const LinearWeight& w, const void* weight, const void* scale) {
    DeviceLinear d;
    d.weight = weight;
    d.scale = scale;
    d.out_features = w.out_features;
    d.in_features = w.in_features;
    d.block_rows = w.block_rows;
    d.block_cols = w.block_cols;
    d.scale_kind = scale_kind_of(w.scale);
    switch (w.format) {
        case cpu::WeightFormat::kF32: d.kind = WeightKind::kF32; break;
        case cpu::WeightFormat::kBF16: d.kind = WeightKind::kBF16; break;
        case cpu::WeightFormat::kF16: d.kind = WeightKind::kF16; break;
        case cpu::WeightFormat::kFp8Block: d.kind = WeightKind::kFp8Block; break;
        case cpu::WeightFormat::kFp4: d.kind = WeightKind::kFp4; break;
    }
    return d;
}

namespace {

DeviceLayer upload_layer(Uploader& up, const LayerWeights& lw, const ModelConfig& config, ExpertRange experts,
                         bool wo_a_bf16, int64_t n_experts = -1) {
    if (n_experts < 0) n_experts = config.n_routed_experts;  // a DSpark stage has its own count
    DeviceLayer l;
    l.attention_type = lw.attention_type;
    l.mlp_type = lw.mlp_type;
    l.compress_ratio = lw.compress_ratio;
    l.attn_norm = up.vec(lw.attn_norm);
    l.ffn_norm = up.vec(lw.ffn_norm);
    l.hc_attn = up.hc(lw.hc_attn);
    l.hc_ffn = up.hc(lw.hc_ffn);
    const AttentionWeights& a = lw.attn;
    l.q_norm = up.vec(a.q_norm);
    l.kv_norm = up.vec(a.kv_norm);
    l.sink = up.vec(a.sink);
    l.wq_a = up.linear(a.wq_a);
    l.wq_b = up.linear(a.wq_b);
    l.wkv = up.linear(a.wkv);
    l.wo_a = wo_a_bf16 ? up.linear_bf16(a.wo_a) : up.linear(a.wo_a);
    if (wo_a_bf16 && l.wo_a.kind == WeightKind::kBF16 && config.o_groups > 0) {
        std::vector<DeviceLinear> groups;
        for (int64_t g = 0; g < config.o_groups; ++g)
            groups.push_back(l.wo_a.rows(g * config.o_lora_rank, (g + 1) * config.o_lora_rank));
        l.wo_a_groups = static_cast<const DeviceLinear*>(up.bytes(groups.data(), groups.size() * sizeof(DeviceLinear)));
    }
    l.wo_b = up.linear(a.wo_b);
    if (a.compressor) l.compressor = up.compressor(*a.compressor);
    if (a.indexer) {
        l.indexer_compressor = up.compressor(a.indexer->compressor);
        l.indexer_wq_b = up.linear(a.indexer->wq_b);
        l.indexer_weights_proj = up.linear(a.indexer->weights_proj);
    }
    l.gate = up.linear(lw.ffn.gate);
    if (lw.ffn.bias) l.gate_bias = up.vec(*lw.ffn.bias);
    if (!lw.ffn.tid2eid.empty())
        l.tid2eid = static_cast<const int32_t*>(up.bytes(lw.ffn.tid2eid.data(), lw.ffn.tid2eid.size() * sizeof(int32_t)));
    DI_CHECK(static_cast<int64_t>(lw.ffn.experts.size()) == n_experts, "layer has ", lw.ffn.experts.size(),
             " experts, config says ", n_experts);
    const int64_t e1 = experts.end < 0 ? n_experts : experts.end;
    DI_CHECK(experts.begin >= 0 && experts.begin < e1 && e1 <= n_experts, "expert range [", experts.begin, ", ", e1,
             ") of ", n_experts, " experts");
    l.experts = up.experts(std::span<const ExpertWeights>(lw.ffn.experts).subspan(
        size_t(experts.begin), size_t(e1 - experts.begin)));
    l.shared_w13 = up.linear_pair(lw.ffn.shared.w1, lw.ffn.shared.w3);
    if (l.shared_w13.weight) {
        const int64_t I = lw.ffn.shared.w1.out_features;
        l.shared_w1 = l.shared_w13.rows(0, I);
        l.shared_w3 = l.shared_w13.rows(I, l.shared_w13.out_features);
    } else {
        l.shared_w1 = up.linear(lw.ffn.shared.w1);
        l.shared_w3 = up.linear(lw.ffn.shared.w3);
    }
    l.shared_w2 = up.linear(lw.ffn.shared.w2);
    return l;
}

}  // namespace

DeviceWeights upload_weights(const ModelWeights& w, const ModelConfig& config, const UploadOptions& options) {
    DeviceWeights d;
    Uploader up(d);
    d.embed = up.linear(w.embed);
    d.head = up.linear(w.head);
    d.norm = up.vec(w.norm);
    d.hc_head = up.hc(w.hc_head);
    for (const LayerWeights& lw : w.layers)
        d.layers.push_back(upload_layer(up, lw, config, options.experts, options.wo_a_bf16));
    if (options.with_mtp && !w.mtp.empty()) {
        const MtpWeights& m = w.mtp.front();
        d.mtp = DeviceMtp{.e_proj = up.linear(m.e_proj), .h_proj = up.linear(m.h_proj), .enorm = up.vec(m.enorm),
                          .hnorm = up.vec(m.hnorm), .norm = up.vec(m.norm), .hc_head = up.hc(m.hc_head),
                          .block = upload_layer(up, m.block, config, {}, options.wo_a_bf16)};
    }
    if (options.with_dspark && w.dspark) {
        const DSparkV4Weights& ds = *w.dspark;
        DeviceDSpark dd;
        for (const LayerWeights& st : ds.stages)
            dd.stages.push_back(upload_layer(up, st, config, {}, options.wo_a_bf16, config.dspark_n_routed_experts));
        dd.main_proj = up.linear(ds.main_proj);
        dd.main_norm = up.vec(ds.main_norm);
        dd.norm = up.vec(ds.norm);
        dd.hc_head = up.hc(ds.hc_head);
        dd.markov_w1 = up.linear(ds.markov_w1);
        dd.markov_w2 = up.linear(ds.markov_w2);
        dd.confidence = up.vec(ds.confidence);
        d.dspark = std::move(dd);
    }
    return d;
}

}  // namespace deepinfer::cuda
