// SPDX-License-Identifier: Apache-2.0
// DSpark drafting on the GPU for DeepSeek-V4-Flash-0731, mirroring src/model/dspark_v4.cpp
// (v4_dspark_block_forward) and src/model/dspark_common.cpp (dspark_markov_draft) with the same
// rounding points: the blocks [anchor, noise x (γ-1)] of every request at positions P .. P+γ-1 run as
// R·γ rows through the stages (V4 blocks: per-sub-block mHC from the stage's own hc_attn/hc_ffn; the
// target's attention prologue, DSparkAttention in the target kernel's sum-then-divide form over the
// stage's context ring and the whole block, the target's epilogue and output projection; the stage's
// own score-routed MoE), the last stage's HC head collapses them, norm and the target's head give U;
// then the Markov head drafts left to right on the device as for V4.1 (cuda_v41_dspark_draft.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backends/cuda/model/cuda_model_impl.h"
#include "backends/cuda/model/device_drafts.h"
#include "backends/cuda/model/draft_graphs.h"
#include "backends/cuda/model/grouped_wo_a.h"
#include "backends/cuda/model/dspark_markov.h"
#include "model/dspark_common.h"

namespace deepinfer::cuda::v4 {

std::vector<Draft> CudaModel::dspark_draft(std::span<const DraftRequest> requests) const {
    std::lock_guard<std::mutex> lock(mutex_);
    set_current_device(device_);
    const ModelConfig& c = config_;
    const DeviceDSpark& ds = *weights_.dspark;
    const Stream s = stream_.get();
    const bool off = official();
    const int64_t G = c.dspark_block_size, V = c.vocab_size, D = c.hidden_size, hc = c.hc_mult;
    const int64_t H = c.num_attention_heads, Dh = c.head_dim, QL = c.q_lora_rank, Rr = c.qk_rope_head_dim;
    const int64_t W = c.sliding_window, NS = static_cast<int64_t>(ds.stages.size());
    const int64_t rank = c.dspark_markov_rank, R = static_cast<int64_t>(requests.size());
    const float eps = static_cast<float>(c.rms_norm_eps);
    check_dspark_requests(requests, G, V);
    std::vector<Draft> out(requests.size());
    if (R == 0) return out;
    DI_CHECK(R <= std::max<int64_t>(max_seqs_, 1), "DSpark drafting: ", R, " requests, the workspace holds ", max_seqs_);
    // Requests sorted by draft count (descending): those still drafting at step k are a prefix.
    std::vector<int64_t> order(static_cast<size_t>(R));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t x, int64_t y) { return requests[size_t(x)].num_drafts > requests[size_t(y)].num_drafts; });
    const DraftProbs probs_mode = draft_probs_mode(requests);
    // A call replays the CUDA graph of its request bucket and sampling (draft_graphs.h): the slots past
    // the requests draft token 0 at position 0 from the first request's rings, and every Markov step
    // runs every slot (rows compute alone: the requests' drafts are the eager ones).
    const DraftGraphShape shape = draft_graph_shape(draft_graphs_.enabled(), R, max_seqs_);
    const int64_t Rs = shape.slots, S = Rs * G;
    std::vector<int32_t> tokens, positions, anchors, anchor_pos, sampled;
    std::vector<const uint8_t*> rings(static_cast<size_t>(NS * Rs));
    std::vector<double> temps, uniforms(static_cast<size_t>(S), 0.0);
    for (int64_t a = 0; a < Rs; ++a) {
        const DraftRequest& r = requests[size_t(order[size_t(std::min(a, R - 1))])];
        auto* st = dynamic_cast<DeviceSequenceState*>(&r.sequence->state());
        DI_CHECK(st != nullptr && st->dspark,
                 "DSpark drafting: the sequence is not attached to this model's drafter");
        DI_CHECK(st->length > 0, "DSpark drafting: the sequence has not run its prompt");
        const bool pad = a >= R;
        const int64_t P = pad ? 0 : st->length;
        const int32_t anchor = pad ? 0 : r.anchor;
        for (int64_t k = 0; k < G; ++k) {
            tokens.push_back(k == 0 ? anchor : static_cast<int32_t>(c.dspark_noise_token_id));
            positions.push_back(static_cast<int32_t>(P + k));
        }
        anchors.push_back(anchor);
        anchor_pos.push_back(static_cast<int32_t>(P));
        for (int64_t i = 0; i < NS; ++i)
            rings[size_t(i * Rs + a)] = reinterpret_cast<const uint8_t*>(st->dspark_ring(int64_t(i)));
        const bool smp = !pad && !r.uniforms.empty() && r.temperature > 0;
        sampled.push_back(smp ? 1 : 0);
        temps.push_back(pad ? 0.0 : r.temperature);
        if (!pad)
            for (size_t k = 0; k < r.uniforms.size(); ++k) uniforms[size_t(a * G) + k] = r.uniforms[k];
    }
    const std::vector<int64_t> active = shape.active(requests, order, G);
    // Inputs: one pinned block, one copy.
    size_t bytes = 0;
    auto place = [&](size_t n) {
        const size_t at = bytes;
        bytes = align256(bytes + n);
        return at;
    };
    const size_t o_tok = place(size_t(S) * 4), o_pos = place(size_t(S) * 4), o_anchor = place(size_t(Rs) * 4);
    const size_t o_apos = place(size_t(Rs) * 4), o_rings = place(rings.size() * sizeof(void*));
    const size_t o_sampled = place(size_t(Rs) * 4), o_temp = place(size_t(Rs) * 8), o_unif = place(size_t(S) * 8);
    if (!pinned_in_ || pinned_in_->nbytes() < bytes) pinned_in_ = std::make_unique<PinnedBuffer>(bytes * 2);
    auto* pin = static_cast<uint8_t*>(pinned_in_->host());
    std::memcpy(pin + o_tok, tokens.data(), size_t(S) * 4);
    std::memcpy(pin + o_pos, positions.data(), size_t(S) * 4);
    std::memcpy(pin + o_anchor, anchors.data(), size_t(Rs) * 4);
    std::memcpy(pin + o_apos, anchor_pos.data(), size_t(Rs) * 4);
    std::memcpy(pin + o_rings, rings.data(), rings.size() * sizeof(void*));
    std::memcpy(pin + o_sampled, sampled.data(), size_t(Rs) * 4);
    std::memcpy(pin + o_temp, temps.data(), size_t(Rs) * 8);
    std::memcpy(pin + o_unif, uniforms.data(), size_t(S) * 8);
    // A graph copies its results to pinned memory that never moves (draft_graphs.h), eager calls to the
    // staging buffers.
    // Sampled drafts' distributions: the persistent device buffer (Draft::device_probs), copied to the host
    // only when some sampled request reads them there (DraftRequest::host_probs).
    const DraftBuffers hb = draft_graphs_.buffers(shape, probs_mode, G, V, max_seqs_, pinned_out_, pinned_probs_);

    const size_t mark = workspace_->mark();
    ArenaRollback release(*workspace_, mark, stream_);  // (on an exception)
    auto* d_in = static_cast<uint8_t*>(workspace_->alloc(bytes));
    copy_to_device(d_in, pin, bytes, s);
    const auto* d_tok = reinterpret_cast<const int32_t*>(d_in + o_tok);
    const auto* d_pos = reinterpret_cast<const int32_t*>(d_in + o_pos);
    const auto* d_anchor = reinterpret_cast<const int32_t*>(d_in + o_anchor);
    const auto* d_apos = reinterpret_cast<const int32_t*>(d_in + o_apos);
    const auto* d_rings = reinterpret_cast<const uint8_t* const*>(d_in + o_rings);
    const auto* d_sampled = reinterpret_cast<const int32_t*>(d_in + o_sampled);
    const auto* d_temp = reinterpret_cast<const double*>(d_in + o_temp);
    const auto* d_unif = reinterpret_cast<const double*>(d_in + o_unif);

    auto compute = [&] {
        // The stages (run_v4_block with DSparkAttention).
        float* x = workspace_->alloc_n<float>(S * hc * D);
        float* y2 = workspace_->alloc_n<float>(S * hc * D);
        embed({.table = weights_.embed, .tokens = d_tok, .x = x, .rows = S, .hc = hc, .round_bf16 = off}, s);
        float* post = workspace_->alloc_n<float>(S * hc);
        float* comb = workspace_->alloc_n<float>(S * hc * hc);
        float* a = workspace_->alloc_n<float>(S * D);
        float* o_out = workspace_->alloc_n<float>(S * D);
        float* mix = workspace_->alloc_n<float>(S * ((2 + hc) * hc + 1));
        auto pre = [&](const DeviceHc& w, const float* norm) {
            const bool given = hc_mix_fast(w, x, S, (2 + hc) * hc, mix);  // (the fast mode's split-K mixing, as run_layer)
            hc_pre({.x = x, .fn = w.fn, .base = w.base, .scale = w.scale, .rows = S, .hc = hc, .hidden = D,
                    .sinkhorn_iters = c.hc_sinkhorn_iters, .norm_eps = eps, .hc_eps = static_cast<float>(c.hc_eps),
                    .post = post, .comb = comb, .collapsed = a, .round_bf16 = off, .mix = mix, .mix_given = given},
                   s);
            rms_norm({.x = a, .weight = norm, .out = a, .rows = S, .n = D, .eps = eps, .round_bf16 = off}, s);
    };
    auto post_mix = [&] {
        hc_post({.out = o_out, .x = x, .post = post, .comb = comb, .y = y2, .rows = S, .hc = hc, .hidden = D,
                 .round_bf16 = off},
                s);
        std::swap(x, y2);
    };
    for (int64_t st = 0; st < NS; ++st) {
        const DeviceLayer& lw = ds.stages[size_t(st)];
        pre(lw.hc_attn, lw.attn_norm);
        {
            const size_t inner = workspace_->mark();
            // The target's attention prologue (attention_queries, attention_kv_rows) at P + k.
            float* qr = workspace_->alloc_n<float>(S * QL);
            float* q = workspace_->alloc_n<float>(S * H * Dh);
            project(lw.wq_a, a, S, qr);
            rms_norm({.x = qr, .weight = lw.q_norm, .out = qr, .rows = S, .n = QL, .eps = eps, .round_bf16 = off}, s);
            project(lw.wq_b, qr, S, q);
            rope_rows({.x = q, .rows = S, .heads = H, .dim = Dh, .positions = d_pos, .cos_sin = rope_main_, .rope_dim = Rr,
                       .head_norm = off ? HeadNorm::kBf16Arith : HeadNorm::kF32, .eps = eps, .round_rope_dims = off,
                       .tree_sum = fast_},
                      s);
            float* kv = workspace_->alloc_n<float>(S * Dh);
            project(lw.wkv, a, S, kv);
            rms_norm({.x = kv, .weight = lw.kv_norm, .out = kv, .rows = S, .n = Dh, .eps = eps, .round_bf16 = off}, s);
            rope_rows({.x = kv, .rows = S, .heads = 1, .dim = Dh, .positions = d_pos, .cos_sin = rope_main_,
                       .rope_dim = Rr, .round_rope_dims = off, .qat = off ? Qat::kFp8Nope : Qat::kNone},
                      s);
            float* scratch = workspace_->alloc_n<float>(S * H * (W + G));
            float* o = workspace_->alloc_n<float>(S * H * Dh);
            dspark_attention({.q = q, .block_kv = kv, .rings = d_rings + st * Rs, .anchor_positions = d_apos, .requests = Rs,
                              .block = G, .heads = H, .head_dim = Dh, .window = W, .window_rows = dspark_ring_rows(),
                              .ring_format = CacheFormat::kF32, .ring_block = 32, .sink = lw.sink, .scratch = scratch,
                              .cos_sin = rope_main_, .rope_dim = Rr,
                              .softmax_scale = 1.0f / std::sqrt(static_cast<float>(Dh)), .official = off,
                              .sum_then_divide = true, .out = o},
                             s);
            // The target's grouped wo_a, then wo_b (attention_output).
            const int64_t Go = c.o_groups, OL = c.o_lora_rank, GW = H * Dh / Go;
            float* u = workspace_->alloc_n<float>(S * Go * OL);
            if (fast_ && lw.wo_a_groups && fast_linear_supported(lw.wo_a.rows(0, OL))) {
                uint16_t* ob = workspace_->alloc_n<uint16_t>(S * H * Dh);
                to_bf16({.x = o, .x_ld = GW, .rows = S * Go, .cols = GW, .out = ob}, s);
                grouped_wo_a({.ob = ob, .wo_a = lw.wo_a, .groups = lw.wo_a_groups, .groups_n = Go, .rows = S, .out_rank = OL,
                              .u = u, .round_bf16 = off},
                             *workspace_, s);
            } else {
                for (int64_t g = 0; g < Go; ++g)
                    linear({.x = o + g * GW, .x_ld = H * Dh, .weight = lw.wo_a.rows(g * OL, (g + 1) * OL), .y = u + g * OL,
                            .y_ld = Go * OL, .rows = S, .round_output_bf16 = off},
                           s);
            }
            project(lw.wo_b, u, S, o_out);
            workspace_->reset(inner);
        }
        post_mix();
        pre(lw.hc_ffn, lw.ffn_norm);
        {
            const size_t inner = workspace_->mark();
            moe_rows(lw, S, d_tok, c.dspark_n_routed_experts, c.dspark_num_experts_per_tok, a, o_out, nullptr);
            workspace_->reset(inner);
        }
        post_mix();
    }
    // Collapse with the last stage's HC head, norm, the target's head.
    float* y = workspace_->alloc_n<float>(S * D);
    float* yn = workspace_->alloc_n<float>(S * D);
    float* hmix = workspace_->alloc_n<float>(S * (hc + 1));
    const bool given = hc_mix_fast(ds.hc_head, x, S, hc, hmix);
    hc_head({.x = x, .fn = ds.hc_head.fn, .base = ds.hc_head.base, .scale = ds.hc_head.scale, .rows = S, .hc = hc,
             .hidden = D, .norm_eps = eps, .hc_eps = static_cast<float>(c.hc_eps), .y = y, .round_bf16 = off, .mix = hmix,
             .mix_given = given},
            s);
    rms_norm({.x = y, .weight = ds.norm, .out = yn, .rows = S, .n = D, .eps = eps, .round_bf16 = off}, s);
    float* U = workspace_->alloc_n<float>(S * V);
    if (!project_fast(weights_.head, yn, S, U, false))
        linear({.x = yn, .x_ld = D, .weight = weights_.head, .y = U, .y_ld = V, .rows = S}, s);

    // The Markov head, left to right (dspark_markov.h).
    const DSparkMarkovParams mp{.embed = &ds.markov_w1, .head = &ds.markov_w2, .confidence = ds.confidence, .U = U, .y = y,
                                .anchors = d_anchor, .temperature = d_temp, .sampled = d_sampled, .uniforms = d_unif,
                                .active = active, .requests = Rs, .block = G, .vocab = V, .hidden = D, .rank = rank,
                                .host_out = hb.out, .device_probs = hb.device_probs,
                                .host_probs = hb.host_probs, .fast = fast_};
    dspark_markov_draft(mp, *workspace_, s);
    };
    if (shape.graph)
        draft_graphs_.run(Rs, G, probs_mode, *workspace_, s, compute, stats_.draft_graph_captures, stats_.draft_graph_replays);
    else
        compute();
    stream_.synchronize();
    release.disarm();
    workspace_->reset(mark);
    unpack_device_drafts(hb.out, hb.host_probs, hb.device_probs, G, V, Rs, order, requests, sampled, out);
    return out;
}

size_t CudaModel::dspark_workspace_need(int64_t Rq) const {
    if (!weights_.dspark) return 0;
    const ModelConfig& c = config_;
    const int64_t G = c.dspark_block_size, R = std::max<int64_t>(Rq, 1), S = R * G, Dm = c.hidden_size, hc = c.hc_mult;
    const int64_t V = c.vocab_size, H = c.num_attention_heads, Dh = c.head_dim, QL = c.q_lora_rank;
    const int64_t Go = c.o_groups, OL = c.o_lora_rank, W = c.sliding_window, rank = c.dspark_markov_rank;
    const int64_t E = c.dspark_n_routed_experts, K = c.dspark_num_experts_per_tok;
    const int64_t NS = static_cast<int64_t>(weights_.dspark->stages.size()), NT = S * K;
    auto bytes = [](int64_t n) { return align256(static_cast<size_t>(std::max<int64_t>(n, 0))) + 256; };
    size_t total = 3 * bytes(S * 8) + 4 * bytes(R * 8) + bytes(NS * R * 8);  // inputs
    total += 2 * bytes(S * hc * Dm * 4) + bytes(S * hc * 4) + bytes(S * hc * hc * 4) + 2 * bytes(S * Dm * 4) +
             bytes(S * ((2 + hc) * hc + 1) * 4);
    size_t at = bytes(S * QL * 4) + bytes(S * H * Dh * 4) + bytes(S * Dh * 4) + bytes(S * H * (W + G) * 4) +
                bytes(S * H * Dh * 4) + bytes(S * Go * OL * 4) + bytes(S * std::max({Dm, QL, Go * OL}) * 4);
    if (fast_) at += bytes(S * H * Dh * 2) + 2 * bytes((Go + 1) * 4) + bytes(Go * S * 4) + bytes(S * std::max({Dm, QL, Go * OL}) * 2);
    const DeviceLayer& l0 = weights_.dspark->stages.front();
    const int64_t I = l0.experts.shape_w1.out_features, SI = l0.shared_w1.out_features;
    size_t mo = 2 * bytes(S * E * 4) + 2 * bytes(S * K * 4) + 3 * bytes(NT * 4) + bytes((E + 2) * 4) + bytes(S * Dm * 4) +
                2 * bytes(NT * I * 4) + 2 * bytes(NT * Dm * 4) + 2 * bytes(S * SI * 4) + bytes(S * Dm * 4) +
                bytes(S * std::max(Dm, SI) * 4);
    if (fast_) mo += bytes(NT * I) + bytes(NT * (I / 128 + 1) * 4) + bytes(S * Dm) + bytes(S * (Dm / 128 + 1) * 4) + bytes((E + 1) * 4);
    const size_t mixing = fast_ ? bytes(hc_mix_splits(hc * Dm) * S * ((2 + hc) * hc + 1) * 4) : 0;  // released before
    total += std::max({at, mo, mixing}) + 1024;
    if (fast_) total += bytes(fast_linear_split_floats_bound(S * std::max<int64_t>(Go, 1)) * 4);  // split-K partials (grouped wo_a: S·Go)
    total += 2 * bytes(S * Dm * 4) + bytes(S * (hc + 1) * 4) + bytes(S * V * 4) + bytes(S * Dm * 4);  // collapse, head
    total += dspark_markov_workspace(R, G, V, rank, dspark_markov_fast_bias(weights_.dspark->markov_w2, fast_));  // Markov steps
    return total;
}

}  // namespace deepinfer::cuda::v4
