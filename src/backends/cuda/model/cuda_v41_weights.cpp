// SPDX-License-Identifier: Apache-2.0
// Uploads v41::Weights (views into the checkpoint mapping) to device memory, format unchanged.
#include "backends/cuda/model/cuda_v41_weights.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <unistd.h>
#include <utility>

#include "backends/cuda/gemm_fast.h"
#include "backends/cuda/model/bf16_weights.h"
#include "deepinfer/check.h"

namespace deepinfer::cuda {
namespace {

class Uploader {
public:
    Uploader(V41DeviceWeights& out, DenseFp8 dense_fp8, bool fp8_twins)
        : out_(out), dense_fp8_(dense_fp8), fp8_twins_(fp8_twins) {}

    // A dense linear of the fast GEMM mode: FP8 kept (kNative, where the device's fast GEMM takes it)
    // or, with power-of-two scales, dequantized to bf16.
    // bf16_only: a linear the reference runs in bf16 without quantizing its activations (wo_a), which
    // the FP8 kernels cannot: bf16 in both fast forms.
    DeviceLinear dense(const v41::LinearWeight& w, bool bf16_only = false) {
        if (dense_fp8_ == DenseFp8::kAsStored || !fp8_exact_in_bf16(w)) return linear(w);
        if (dense_fp8_ == DenseFp8::kNative && !bf16_only && fast_linear_supported(device_linear_like(w, nullptr, nullptr)))
            return linear(w);
        DeviceLinear d = upload_fp8_as_bf16(w, out_.storage);
        out_.device_bytes += size_t(d.out_features * d.in_features * 2);
        out_.bf16_from_fp8.push_back(d.weight);
        if (fp8_twins_ && !bf16_only && fp8_twin_supported(device_linear_like(w, nullptr, nullptr)))
            out_.fp8_twins.emplace_back(d.weight, linear(w));
        return d;
    }

    const void* bytes(const void* src, size_t n) {
        if (n == 0) return nullptr;
        auto buf = std::make_unique<DeviceBuffer>(n);
        buf->copy_from_host(src, n);
        out_.device_bytes += n;
        const void* p = buf->data();
        out_.storage.push_back(std::move(buf));
        return p;
    }
    const void* pinned(const void* src, size_t n) {
        if (n == 0) return nullptr;
        auto buf = std::make_unique<PinnedBuffer>(n);
        std::memcpy(buf->host(), src, n);
        out_.host_bytes += n;
        const void* p = buf->device_pointer();
        out_.pinned.push_back(std::move(buf));
        return p;
    }
    const float* vec(const v41::Vec& v) { return static_cast<const float*>(bytes(v.data(), v.size() * sizeof(float))); }

    DeviceLinear linear(const v41::LinearWeight& w, bool host = false) {
        if (w.empty()) return {};
        DI_CHECK(w.weight.is_contiguous() && (w.scale.empty() || w.scale.is_contiguous()), "weight ", w.weight.describe(),
                 " is not contiguous");
        auto put = [&](const TensorView& t) { return host ? pinned(t.data(), t.nbytes()) : bytes(t.data(), t.nbytes()); };
        const void* wp = put(w.weight);
        const void* sp = w.scale.empty() ? nullptr : put(w.scale);
        return device_linear_like(w, wp, sp);
    }

    DeviceHc hc(const v41::HcSiteWeights& h) { return {vec(h.fn), vec(h.base), vec(h.scale)}; }

    DeviceExperts experts(std::span<const v41::ExpertWeights> es) {
        DeviceExperts d;
        if (es.empty()) return d;
        std::vector<DeviceLinear> w1, w3, w2;
        for (const v41::ExpertWeights& e : es) {
            w1.push_back(linear(e.w1));
            w3.push_back(linear(e.w3));
            w2.push_back(linear(e.w2));
        }
        for (size_t e = 1; e < es.size(); ++e)
            DI_CHECK(w1[e].kind == w1[0].kind && w2[e].kind == w2[0].kind && w1[e].in_features == w1[0].in_features &&
                         w1[e].out_features == w1[0].out_features && w2[e].out_features == w2[0].out_features,
                     "routed experts must share shapes and formats (expert ", e, ")");
        d.w1 = static_cast<const DeviceLinear*>(bytes(w1.data(), w1.size() * sizeof(DeviceLinear)));
        d.w3 = static_cast<const DeviceLinear*>(bytes(w3.data(), w3.size() * sizeof(DeviceLinear)));
        d.w2 = static_cast<const DeviceLinear*>(bytes(w2.data(), w2.size() * sizeof(DeviceLinear)));
        d.shape_w1 = w1[0];
        d.shape_w2 = w2[0];
        return d;
    }

private:
    V41DeviceWeights& out_;
    DenseFp8 dense_fp8_;
    bool fp8_twins_;
};

// Page-locks the Engram tables (weights and scales) where they lie in the checkpoint's mapping: the
// tensors' page ranges, sorted and merged (two tensors may share a page; a page may be registered once).
void register_engram_tables(const v41::Weights& w, V41DeviceWeights& d) {
    const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
    std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
    size_t bytes = 0;
    for (const v41::LayerWeights& lw : w.layers) {
        if (!lw.engram) continue;
        for (const TensorView* t : {&lw.engram->table.weight, &lw.engram->table.scale}) {
            if (t->empty()) continue;
            const uintptr_t lo = uintptr_t(t->data());
            ranges.emplace_back(lo / page * page, (lo + t->nbytes() + page - 1) / page * page);
            bytes += t->nbytes();
        }
    }
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<uintptr_t, uintptr_t>> merged;
    for (const auto& r : ranges) {
        if (!merged.empty() && r.first <= merged.back().second)
            merged.back().second = std::max(merged.back().second, r.second);
        else
            merged.push_back(r);
    }
    for (const auto& [lo, hi] : merged)
        d.registered.push_back(std::make_unique<HostRegistration>(reinterpret_cast<const void*>(lo), size_t(hi - lo)));
    d.shared_host_bytes = bytes;
}

// One block: a target layer, or a DSpark stage (window-only, `n_experts` routed experts of its own).
V41DeviceLayer upload_layer(Uploader& up, const v41::LayerWeights& lw, int64_t n_experts, ExpertRange experts,
                            bool share, int64_t o_groups) {
    V41DeviceLayer l;
    l.attn_norm = up.vec(lw.attn_norm);
    l.ffn_norm = up.vec(lw.ffn_norm);
    l.hc_attn = up.hc(lw.hc_attn);
    l.hc_ffn = up.hc(lw.hc_ffn);
    const v41::AttentionWeights& a = lw.attn;
    l.wq_a = up.dense(a.wq_a);
    l.wq_b = up.dense(a.wq_b);
    l.wkv = up.dense(a.wkv);
    l.wo_a = up.dense(a.wo_a, /*bf16_only=*/true);
    if (l.wo_a.kind == WeightKind::kBF16 && o_groups > 0 && l.wo_a.out_features % o_groups == 0) {
        // Its groups' row slices as a device array: the fast mode's one grouped launch (CudaV41Model::attention).
        const int64_t rows = l.wo_a.out_features / o_groups;
        std::vector<DeviceLinear> groups;
        for (int64_t g = 0; g < o_groups; ++g) groups.push_back(l.wo_a.rows(g * rows, (g + 1) * rows));
        l.wo_a_groups = static_cast<const DeviceLinear*>(up.bytes(groups.data(), groups.size() * sizeof(DeviceLinear)));
    }
    l.wo_b = up.dense(a.wo_b);
    l.q_norm = up.vec(a.q_norm);
    l.kv_norm = up.vec(a.kv_norm);
    l.sink = up.vec(a.sink);
    l.has_compressor = a.has_compressor;
    if (a.has_compressor) {
        l.compressor_wkv = up.linear(a.compressor_wkv);
        l.compressor_wgate = up.linear(a.compressor_wgate);
        l.compressor_norm = up.vec(a.compressor_norm);
    }
    l.has_indexer = a.has_indexer;
    if (a.has_indexer) {
        l.indexer_wq_b = up.dense(a.indexer_wq_b);
        l.indexer_weights_proj = up.linear(a.indexer_weights_proj);
        l.has_index_keys = a.has_index_keys;
        if (a.has_index_keys) {
            l.indexer_wk = up.linear(a.indexer_wk);
            l.indexer_k_norm = up.vec(a.indexer_k_norm);
        }
    }
    const v41::MoeWeights& m = lw.ffn;
    DI_CHECK(static_cast<int64_t>(m.experts.size()) == n_experts, "layer has ", m.experts.size(),
             " experts, config says ", n_experts);
    l.gate = up.linear(m.gate);
    l.bias = up.vec(m.bias);
    l.bias_vl = up.vec(m.bias_vl);
    const int64_t e1 = experts.end < 0 ? n_experts : experts.end;
    DI_CHECK(experts.begin >= 0 && experts.begin < e1 && e1 <= n_experts, "expert range [", experts.begin,
             ", ", e1, ") of ", n_experts, " experts");
    l.experts = up.experts(std::span<const v41::ExpertWeights>(m.experts).subspan(size_t(experts.begin),
                                                                                 size_t(e1 - experts.begin)));
    l.shared_w1 = up.dense(m.shared.w1);
    l.shared_w3 = up.dense(m.shared.w3);
    l.shared_w2 = up.dense(m.shared.w2);
    if (lw.engram) {
        l.has_engram = true;
        if (!share) l.engram.table = up.linear(lw.engram->table, /*host=*/true);
        l.engram.wkv = up.dense(lw.engram->wkv);
        l.engram.gate_weight = up.vec(lw.engram->gate_weight);
    }
    return l;
}

}  // namespace

bool V41DeviceWeights::from_fp8(const DeviceLinear& w) const {
    return std::binary_search(bf16_from_fp8.begin(), bf16_from_fp8.end(), w.weight);
}

const DeviceLinear* V41DeviceWeights::fp8_twin(const DeviceLinear& w) const {
    const auto it = std::lower_bound(fp8_twins.begin(), fp8_twins.end(), w.weight,
                                     [](const std::pair<const void*, DeviceLinear>& t, const void* p) { return t.first < p; });
    return it != fp8_twins.end() && it->first == w.weight ? &it->second : nullptr;
}

V41DeviceWeights upload_v41_weights(const v41::Weights& w, const V41TextConfig& c, bool share_engram,
                                    ExpertRange experts, DenseFp8 dense_fp8, bool with_dspark, bool fp8_twins) {
    V41DeviceWeights d;
    // Registration comes after every copy: cudaMemcpy from host memory that straddles a registered range
    // (a neighbouring tensor on a shared page) is refused by the runtime.
    const bool share = share_engram && HostRegistration::read_only_supported();
    Uploader up(d, dense_fp8, fp8_twins && dense_fp8 == DenseFp8::kBf16);
    d.embed = up.linear(w.embed);
    d.head = up.linear(w.head);
    d.norm = up.vec(w.norm);
    for (const v41::LayerWeights& lw : w.layers)
        d.layers.push_back(upload_layer(up, lw, c.n_routed_experts, experts, share, c.o_groups));
    if (with_dspark && w.dspark) {
        const v41::DSparkWeights& ds = *w.dspark;
        V41DeviceDSpark dd;
        for (const v41::LayerWeights& st : ds.stages)
            dd.stages.push_back(upload_layer(up, st, c.dspark_n_routed_experts, {}, share, c.o_groups));
        dd.main_proj = up.dense(ds.main_proj);
        dd.main_norm = up.vec(ds.main_norm);
        dd.norm = up.vec(ds.norm);
        dd.markov_embed = up.linear(ds.markov_embed);
        dd.markov_head = up.linear(ds.markov_head);
        dd.confidence = up.vec(ds.confidence);
        d.dspark = std::move(dd);
    }
    std::sort(d.bf16_from_fp8.begin(), d.bf16_from_fp8.end());
    std::sort(d.fp8_twins.begin(), d.fp8_twins.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    if (share) {
        register_engram_tables(w, d);
        auto in_place = [&](const TensorView& t) -> const void* {
            if (t.empty()) return nullptr;
            for (const auto& r : d.registered)
                if (r->contains(t.data(), t.nbytes())) return r->device_pointer(t.data());
            DI_CHECK(false, "Engram tensor ", t.describe(), " outside the registered ranges");
            return nullptr;
        };
        for (size_t i = 0; i < w.layers.size(); ++i) {
            if (!w.layers[i].engram) continue;
            const v41::LinearWeight& t = w.layers[i].engram->table;
            d.layers[i].engram.table = device_linear_like(t, in_place(t.weight), in_place(t.scale));
        }
    }
    return d;
}

}  // namespace deepinfer::cuda
