// SPDX-License-Identifier: Apache-2.0
// DSpark drafting on the GPU for DeepSeek-V4.1, mirroring src/model/v41/dspark.cpp
// (dspark_block_forward) and src/model/dspark_common.cpp (dspark_markov_draft) step by step with the
// same rounding points: the blocks [anchor, noise x (γ-1)] of every request at positions P .. P+γ-1
// run through the stages in one pass of R·γ rows (single-pass mHC from the one-hot pre-mix, the
// stage's DSparkAttention over its context ring and the whole block, the stage's MoE), collapse with
// the last FFN pre-mix, norm and the target's head (U); then the Markov head drafts left to right on
// the device (rows sorted by draft count so the requests still drafting are a prefix): bias =
// W1[x_{k-1}]·W2ᵀ, logits = U_{k-1} + bias and the confidence head (dspark_markov_step), the draft by
// draft_sample (argmax, or inverse CDF of softmax(l / T) with the request's uniform). Tokens and
// confidences come back in pinned copies, the distributions of sampled drafts stay in a device buffer
// (copied to the host only when asked, DraftRequest::host_probs); nothing is written to the sequences'
// state.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "backends/cuda/model/cuda_v41_impl.h"
#include "deepinfer/check.h"
#include "backends/cuda/model/device_drafts.h"
#include "backends/cuda/model/draft_graphs.h"
#include "backends/cuda/model/dspark_markov.h"
#include "model/dspark_common.h"

namespace deepinfer::cuda {

void CudaV41Model::dspark_stage_attention(const V41DeviceLayer& lw, int64_t requests, const int32_t* positions,
                                          const int32_t* anchor_positions, const uint8_t* const* rings, const float* a,
                                          float* out) const {
    const V41TextConfig& c = config_.text;
    const Stream s = stream_.get();
    const bool off = official();
    const int64_t G = c.dspark_block_size, S = requests * G, H = c.num_attention_heads, hd = c.head_dim;
    const int64_t QL = c.q_lora_rank, R = c.qk_rope_head_dim, W = c.sliding_window;
    const float eps = static_cast<float>(c.rms_norm_eps);
    // Queries and the block's own K=V rows (window-only layer: the main RoPE set), as the target's attention.
    float* qr = workspace_.alloc_n<float>(S * QL);
    float* q = workspace_.alloc_n<float>(S * H * hd);
    project(lw.wq_a, a, S, qr);
    rms_norm({.x = qr, .weight = lw.q_norm, .out = qr, .rows = S, .n = QL, .eps = eps, .round_bf16 = off}, s);
    project(lw.wq_b, qr, S, q);
    rope_rows({.x = q, .rows = S, .heads = H, .dim = hd, .positions = positions, .cos_sin = rope_main_, .rope_dim = R,
               .round_rope_dims = off},
              s);
    float* kv = workspace_.alloc_n<float>(S * hd);
    project(lw.wkv, a, S, kv);
    rms_norm({.x = kv, .weight = lw.kv_norm, .out = kv, .rows = S, .n = hd, .eps = eps, .round_bf16 = off}, s);
    rope_rows({.x = kv, .rows = S, .heads = 1, .dim = hd, .positions = positions, .cos_sin = rope_main_, .rope_dim = R,
               .round_rope_dims = off},
              s);
    qat_rows({.x = kv, .rows = S, .n = hd, .block = V41CacheFormats::kWindowBlock, .format = formats_.window,
              .fake_quant = true, .dst = nullptr},
             s);
    float* scratch = workspace_.alloc_n<float>(S * H * (W + G));
    float* o = workspace_.alloc_n<float>(S * H * hd);
    dspark_attention({.q = q, .block_kv = kv, .rings = rings, .anchor_positions = anchor_positions, .requests = requests,
                      .block = G, .heads = H, .head_dim = hd, .window = W, .window_rows = dspark_ring_rows(),
                      .ring_format = formats_.window, .ring_block = V41CacheFormats::kWindowBlock, .sink = lw.sink,
                      .scratch = scratch, .cos_sin = rope_main_, .rope_dim = R,
                      .softmax_scale = 1.0f / std::sqrt(float(hd)), .official = off, .out = o},
                     s);
    // Grouped wo_a, then wo_b (the target's epilogue).
    const int64_t Go = c.o_groups, gin = H * hd / Go, OR = c.o_lora_rank;
    float* u = workspace_.alloc_n<float>(S * Go * OR);
    for (int64_t g = 0; g < Go; ++g) {
        const DeviceLinear wg = lw.wo_a.rows(g * OR, (g + 1) * OR);
        if (!project_fast(wg, o + g * gin, H * hd, S, u + g * OR, Go * OR, false, off, s, Scratch::kRelease))
            linear({.x = o + g * gin, .x_ld = H * hd, .weight = wg, .y = u + g * OR, .y_ld = Go * OR, .rows = S,
                    .round_output_bf16 = off},
                   s);
    }
    project(lw.wo_b, u, S, out);
}

std::vector<Draft> CudaV41Model::dspark_draft(std::span<const DraftRequest> requests) const {
    std::lock_guard<std::mutex> lock(mutex_);
    set_current_device(device_);
    const V41TextConfig& c = config_.text;
    const V41DeviceDSpark& ds = *weights_.dspark;
    const Stream s = stream_.get();
    const bool off = official();
    const int64_t G = c.dspark_block_size, V = c.vocab_size, D = c.hidden_size, hc = c.hc_mult;
    const int64_t rank = c.dspark_markov_rank, R = static_cast<int64_t>(requests.size());
    const float eps = static_cast<float>(c.rms_norm_eps);
    check_dspark_requests(requests, G, V);
    std::vector<Draft> out(requests.size());
    if (R == 0) return out;
    DI_CHECK(R <= std::max<int64_t>(limits_.max_seqs, 1), "DSpark drafting: ", R, " requests, the workspace holds ",
             limits_.max_seqs);
    // Requests sorted by draft count (descending): those still drafting at step k are a prefix.
    std::vector<int64_t> order(static_cast<size_t>(R));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t x, int64_t y) { return requests[size_t(x)].num_drafts > requests[size_t(y)].num_drafts; });
    const DraftProbs probs_mode = draft_probs_mode(requests);
    // A call replays the CUDA graph of its request bucket and sampling (draft_graphs.h): the slots past
    // the requests draft token 0 at position 0 from the first request's rings, and every Markov step
    // runs every slot (rows compute alone: the requests' drafts are the eager ones).
    const DraftGraphShape shape = draft_graph_shape(draft_graphs_.enabled(), R, limits_.max_seqs);
    const int64_t Rs = shape.slots, S = Rs * G;
    std::vector<int32_t> tokens, positions, anchors, anchor_pos, sampled;
    std::vector<float> one_hot(static_cast<size_t>(S * hc), 0.0f);
    std::vector<const uint8_t*> rings(static_cast<size_t>(dspark_stages_ * Rs));
    std::vector<double> temps, uniforms(static_cast<size_t>(S), 0.0);
    for (int64_t a = 0; a < Rs; ++a) {
        const DraftRequest& r = requests[size_t(order[size_t(std::min(a, R - 1))])];
        auto* st = dynamic_cast<V41DeviceState*>(&r.sequence->state());
        DI_CHECK(st != nullptr && st->dspark,
                 "DSpark drafting: the sequence is not attached to this model's drafter");
        DI_CHECK(st->length > 0, "DSpark drafting: the sequence has not run its prompt");
        const bool pad = a >= R;
        const int64_t P = pad ? 0 : st->length;
        const int32_t anchor = pad ? 0 : r.anchor;
        for (int64_t k = 0; k < G; ++k) {
            tokens.push_back(k == 0 ? anchor : static_cast<int32_t>(c.dspark_noise_token_id));
            positions.push_back(static_cast<int32_t>(P + k));
            one_hot[size_t((a * G + k) * hc)] = 1.0f;  // the identity pre-mix: stream 0
        }
        anchors.push_back(anchor);
        anchor_pos.push_back(static_cast<int32_t>(P));
        for (int64_t st_i = 0; st_i < dspark_stages_; ++st_i)
            rings[size_t(st_i * Rs + a)] = st->dspark_ring(st_i);
        const bool smp = !pad && !r.uniforms.empty() && r.temperature > 0;
        sampled.push_back(smp ? 1 : 0);
        temps.push_back(pad ? 0.0 : r.temperature);
        if (!pad)
            for (size_t k = 0; k < r.uniforms.size(); ++k) uniforms[size_t(a * G) + k] = r.uniforms[k];
    }
    const std::vector<int64_t> active = shape.active(requests, order, G);
    // Inputs: one block, one copy (the forward's staging buffers: drafting holds the model's lock).
    input_.clear();
    const size_t o_tokens = input_.add(tokens), o_pos = input_.add(positions), o_pre = input_.add(one_hot);
    const size_t o_anchor = input_.add(anchors), o_apos = input_.add(anchor_pos), o_rings = input_.add(rings);
    const size_t o_sampled = input_.add(sampled), o_temp = input_.add(temps), o_unif = input_.add(uniforms);
    const size_t in_bytes = input_.size();
    if (!pinned_in_ || pinned_in_->nbytes() < in_bytes) pinned_in_ = std::make_unique<PinnedBuffer>(in_bytes * 2);
    std::memcpy(pinned_in_->host(), input_.data(), in_bytes);
    // A graph copies its results to pinned memory that never moves (draft_graphs.h), eager calls to the
    // staging buffers.
    // Sampled drafts' distributions: the persistent device buffer (Draft::device_probs), copied to the host
    // only when some sampled request reads them there (DraftRequest::host_probs).
    const DraftBuffers hb = draft_graphs_.buffers(shape, probs_mode, G, V, limits_.max_seqs, pinned_out_, pinned_probs_);

    const size_t mark = workspace_.mark();
    ArenaRollback release(workspace_, mark, stream_, {&shared_stream_});  // (on an exception)
    auto* d_in = static_cast<uint8_t*>(workspace_.alloc(in_bytes));
    copy_to_device(d_in, pinned_in_->host(), in_bytes, s);
    auto at = [&](size_t off_) { return d_in + off_; };
    const auto* d_tokens = reinterpret_cast<const int32_t*>(at(o_tokens));
    const auto* d_pos = reinterpret_cast<const int32_t*>(at(o_pos));
    const auto* d_anchor = reinterpret_cast<const int32_t*>(at(o_anchor));
    const auto* d_apos = reinterpret_cast<const int32_t*>(at(o_apos));
    const auto* d_rings = reinterpret_cast<const uint8_t* const*>(at(o_rings));
    const auto* d_sampled = reinterpret_cast<const int32_t*>(at(o_sampled));
    const auto* d_temp = reinterpret_cast<const double*>(at(o_temp));
    const auto* d_unif = reinterpret_cast<const double*>(at(o_unif));

    auto compute = [&] {
        // The stages over every block row (dspark_block_forward).
        float* x = workspace_.alloc_n<float>(S * hc * D);
        float* x2 = workspace_.alloc_n<float>(S * hc * D);
        embed({.table = weights_.embed, .tokens = d_tokens, .x = x, .rows = S, .hc = hc, .round_bf16 = off}, s);
        float* pre_mix = workspace_.alloc_n<float>(S * hc);
        copy_on_device(pre_mix, at(o_pre), size_t(S * hc) * sizeof(float), s);
        float* pre_a = workspace_.alloc_n<float>(S * hc);
        float* pre_f = workspace_.alloc_n<float>(S * hc);
        float* post = workspace_.alloc_n<float>(S * hc);
        float* comb = workspace_.alloc_n<float>(S * hc * hc);
        float* an = workspace_.alloc_n<float>(S * D);
        float* o = workspace_.alloc_n<float>(S * D);
        for (int64_t st = 0; st < dspark_stages_; ++st) {
            const V41DeviceLayer& lw = ds.stages[size_t(st)];
            for (int site = 0; site < 2; ++site) {
                const DeviceHc& hw = site == 0 ? lw.hc_attn : lw.hc_ffn;
                hc_site(hw, x, S, site == 0 ? pre_a : pre_f, post, comb, site == 0 ? pre_mix : pre_a, an, s);
                rms_norm({.x = an, .weight = site == 0 ? lw.attn_norm : lw.ffn_norm, .out = an, .rows = S, .n = D, .eps = eps,
                          .round_bf16 = off},
                         s);
                const size_t inner = workspace_.mark();
                if (site == 0)
                    dspark_stage_attention(lw, Rs, d_pos, d_apos, d_rings + st * Rs, an, o);
                else  // drafts are text: no image mask (bias_vl unused)
                    moe_rows(lw, c.dspark_n_routed_experts, c.dspark_num_experts_per_tok, S, an, o, nullptr);
                workspace_.reset(inner);
                hc_post({.out = o, .x = x, .post = post, .comb = comb, .y = x2, .rows = S, .hc = hc, .hidden = D,
                         .round_bf16 = off, .mix_first = true},
                        s);
                std::swap(x, x2);
            }
            std::swap(pre_mix, pre_f);
        }
        // Collapse with the last FFN pre-mix (no HC head on V4.1's drafter), norm, the target's head.
        float* y = workspace_.alloc_n<float>(S * D);
        float* yn = workspace_.alloc_n<float>(S * D);
        hc_collapse({.x = x, .pre = pre_mix, .out = y, .rows = S, .hc = hc, .hidden = D, .round_bf16 = off}, s);
        rms_norm({.x = y, .weight = ds.norm, .out = yn, .rows = S, .n = D, .eps = eps, .round_bf16 = off}, s);
        float* U = workspace_.alloc_n<float>(S * V);
        if (!project_fast(weights_.head, yn, D, S, U, V, false, false, s, Scratch::kRelease))
            linear({.x = yn, .x_ld = D, .weight = weights_.head, .y = U, .y_ld = V, .rows = S}, s);

        // The Markov head, left to right (dspark_markov.h).
        const DSparkMarkovParams mp{.embed = &ds.markov_embed, .head = &ds.markov_head, .confidence = ds.confidence, .U = U, .y = y,
                                    .anchors = d_anchor, .temperature = d_temp, .sampled = d_sampled, .uniforms = d_unif,
                                    .active = active, .requests = Rs, .block = G, .vocab = V, .hidden = D, .rank = rank,
                                    .host_out = hb.out, .device_probs = hb.device_probs,
                                    .host_probs = hb.host_probs, .fast = fast_};
        dspark_markov_draft(mp, workspace_, s);
    };
    if (shape.graph)
        draft_graphs_.run(Rs, G, probs_mode, workspace_, s, compute, stats_.draft_graph_captures, stats_.draft_graph_replays);
    else
        compute();
    stream_.synchronize();
    release.disarm();
    workspace_.reset(mark);
    unpack_device_drafts(hb.out, hb.host_probs, hb.device_probs, G, V, Rs, order, requests, sampled, out);
    return out;
}

}  // namespace deepinfer::cuda
