// SPDX-License-Identifier: Apache-2.0
// CudaV41Model's CSA2 attention of one layer, mirroring src/model/v41/attention.cpp: Q and the window
// K=V (FP8 QAT, compact codes), the compressor of a KV source (groups completed by the chunk pooled,
// normed, index keys and entries stored in their compact codes), the indexer of an index source
// (scores, candidate blocks, top-k published per segment), sink attention over the window and the
// selected entries, the window ring update and the grouped output projection. The per-segment
// bookkeeping of what source layers publish (model/v41/attention.h SharedState) runs on the host.
#include <algorithm>
#include <cmath>

#include "backends/cuda/model/cuda_v41_impl.h"
#include "deepinfer/check.h"
#include "model/state.h"

namespace deepinfer::cuda {

void CudaV41Model::compress(int64_t layer, Batch& b, const float* a) const {
    const V41TextConfig& c = config_.text;
    const V41DeviceLayer& lw = weights_.layers[size_t(layer)];
    const Stream s = stream_.get();
    const bool off = official();
    const int64_t S = b.rows, hd = c.head_dim, ID = c.index_head_dim, r = c.compress_ratio(layer), R = c.qk_rope_head_dim;
    const float eps = static_cast<float>(c.rms_norm_eps);
    // Ratio 2: fp32 projections (spec §3.4); ratio 1: a bf16 linear with a bf16 output.
    float* ckv = workspace_.alloc_n<float>(S * hd);
    float* cg = nullptr;
    if (r > 1) {
        cg = workspace_.alloc_n<float>(S * hd);
        linear({.x = a, .x_ld = c.hidden_size, .weight = lw.compressor_wkv, .y = ckv, .y_ld = hd, .rows = S}, s);
        linear({.x = a, .x_ld = c.hidden_size, .weight = lw.compressor_wgate, .y = cg, .y_ld = hd, .rows = S}, s);
    } else {
        project_bf16(lw.compressor_wkv, a, S, ckv);
    }
    // The groups the chunk completes (group g = positions g*r .. g*r + r - 1, entry g), their rows.
    const int64_t pending_rows = r + kRingHeadroom;
    std::vector<const float*> kv_rows, gate_rows;
    std::vector<int32_t> group_pos;
    std::vector<uint8_t*> entry_dst, key_dst;
    std::vector<void*> ring_kv_dst, ring_gate_dst;
    for (size_t i = 0; i < b.states.size(); ++i) {
        const V41LayerBuffers& st = b.states[i]->layers[size_t(layer)];
        const int64_t P0 = b.first_position[i], n = b.num_rows[i], row0 = b.row_begin[i];
        auto* pkv = st.pending_kv ? static_cast<float*>(st.pending_kv->data()) : nullptr;
        auto* pgate = st.pending_gate ? static_cast<float*>(st.pending_gate->data()) : nullptr;
        for (int64_t t = 0; t < n; ++t) {
            const int64_t pos = P0 + t;
            if ((pos + 1) % r != 0) continue;
            const int64_t g = pos / r;
            for (int64_t k = 0; k < r; ++k) {
                const int64_t q = g * r + k;
                kv_rows.push_back(q >= P0 ? ckv + (row0 + q - P0) * hd : pkv + (q % pending_rows) * hd);
                if (r > 1) gate_rows.push_back(q >= P0 ? cg + (row0 + q - P0) * hd : pgate + (q % pending_rows) * hd);
            }
            group_pos.push_back(static_cast<int32_t>(g * r));
            entry_dst.push_back(static_cast<uint8_t*>(st.entries->data()) + g * formats_.entry_bytes);
            key_dst.push_back(static_cast<uint8_t*>(st.index_keys->data()) + g * formats_.key_bytes);
        }
        if (r > 1)
            for (int64_t t = 0; t < n; ++t) {
                const bool keep = t >= n - pending_rows;  // the ring keeps the segment's last rows
                const int64_t slot = (P0 + t) % pending_rows;
                ring_kv_dst.push_back(keep ? pkv + slot * hd : nullptr);
                ring_gate_dst.push_back(keep ? pgate + slot * hd : nullptr);
            }
        b.shared[i].kv_source = layer;
    }
    const int64_t G = static_cast<int64_t>(group_pos.size());
    if (G > 0) {
        float* latent = workspace_.alloc_n<float>(G * hd);
        compress_pool({.kv_rows = upload(kv_rows), .gate_rows = r > 1 ? upload(gate_rows) : nullptr, .groups = G,
                       .ratio = r, .width = hd, .out = latent, .round_bf16 = off},
                      s);
        rms_norm({.x = latent, .weight = lw.compressor_norm, .out = latent, .rows = G, .n = hd, .eps = eps, .round_bf16 = off}, s);
        const int32_t* d_pos = upload(group_pos);
        if (lw.has_index_keys) {
            float* keys = workspace_.alloc_n<float>(G * ID);
            project_bf16(lw.indexer_wk, latent, G, keys);
            rms_norm({.x = keys, .weight = lw.indexer_k_norm, .out = keys, .rows = G, .n = ID, .eps = eps, .round_bf16 = off}, s);
            rope_rows({.x = keys, .rows = G, .heads = 1, .dim = ID, .positions = d_pos, .cos_sin = rope_comp_, .rope_dim = R,
                       .round_rope_dims = off},
                      s);
            qat_rows({.x = keys, .rows = G, .n = ID, .block = V41CacheFormats::kKeyBlock, .format = formats_.key,
                      .fake_quant = false, .dst = upload(key_dst)},
                     s);
        }
        rope_rows({.x = latent, .rows = G, .heads = 1, .dim = hd, .positions = d_pos, .cos_sin = rope_comp_, .rope_dim = R,
                   .round_rope_dims = off},
                  s);
        qat_rows({.x = latent, .rows = G, .n = hd, .block = V41CacheFormats::kEntryBlock, .format = formats_.entry,
                  .fake_quant = false, .dst = upload(entry_dst)},
                 s);
    }
    if (r > 1) {  // after the pooling read the older rows
        copy_rows({.src = ckv, .dst = reinterpret_cast<void* const*>(upload(ring_kv_dst)), .rows = S, .row_bytes = hd * 4}, s);
        copy_rows({.src = cg, .dst = reinterpret_cast<void* const*>(upload(ring_gate_dst)), .rows = S, .row_bytes = hd * 4}, s);
    }
}

void CudaV41Model::index(int64_t layer, Batch& b, const float* a, const float* qr) const {
    const V41TextConfig& c = config_.text;
    const V41DeviceLayer& lw = weights_.layers[size_t(layer)];
    const Stream s = stream_.get();
    const bool off = official();
    const int64_t S = b.rows, IH = c.index_n_heads, ID = c.index_head_dim, ratio = c.compress_ratio(layer);
    float* qi = workspace_.alloc_n<float>(S * IH * ID);
    float* hw = workspace_.alloc_n<float>(S * IH);
    project(lw.indexer_wq_b, qr, S, qi);
    project_bf16(lw.indexer_weights_proj, a, S, hw);
    rope_rows({.x = qi, .rows = S, .heads = IH, .dim = ID, .positions = b.positions, .cos_sin = rope_comp_,
               .rope_dim = c.qk_rope_head_dim, .round_rope_dims = off},
              s);
    qat_rows({.x = qi, .rows = S * IH, .n = ID, .block = V41CacheFormats::kKeyBlock, .format = formats_.key}, s);
    // The rows of the segments whose KV source has entries (the others publish nothing, as transformers).
    const bool candidate_source = layer == c.candidate_source_layer_id;
    std::vector<IndexRow> rows;
    std::vector<int32_t> lengths;
    std::vector<size_t> publishing;
    bool any_mask = false;
    int64_t max_entries = 0;
    for (size_t i = 0; i < b.states.size(); ++i) {
        Shared& sh = b.shared[i];
        if (sh.kv_source < 0) continue;
        const int64_t n = (b.first_position[i] + b.num_rows[i]) / c.compress_ratio(sh.kv_source);
        if (n == 0) continue;
        const bool uses = c.candidate_source_layer_id >= 0 && c.candidate_source_layer_id < layer && sh.has_candidates &&
                          !candidate_source;
        if (candidate_source) {
            sh.has_candidates = true;
            sh.candidate_entries = n;
        }
        any_mask |= uses;
        const auto* keys = static_cast<const uint8_t*>(b.states[i]->layers[size_t(sh.kv_source)].index_keys->data());
        for (int64_t t = 0; t < b.num_rows[i]; ++t) {
            const int64_t pos = b.first_position[i] + t;
            rows.push_back({static_cast<int32_t>(b.row_begin[i] + t), static_cast<int32_t>(n),
                            static_cast<int32_t>(std::min(n, (pos + 1) / ratio)),
                            uses ? static_cast<int32_t>(sh.candidate_entries) : -1, keys});
            lengths.push_back(static_cast<int32_t>(n));
        }
        max_entries = std::max(max_entries, n);
        publishing.push_back(i);
    }
    if (rows.empty()) return;
    const int64_t NR = static_cast<int64_t>(rows.size()), K = c.index_topk;
    const IndexRow* d_rows = upload(rows);
    float* scores = workspace_.alloc_n<float>(NR * max_entries);
    index_scores({.rows = d_rows, .num_rows = NR, .max_entries = max_entries, .q = qi, .weights = hw, .heads = IH,
                  .head_dim = ID, .key_format = formats_.key, .key_block = V41CacheFormats::kKeyBlock, .official = off,
                  .scores = scores},
                 s);
    if (candidate_source || any_mask) {
        const int64_t bs = c.candidate_block_size, keep = c.candidate_topk_blocks;
        float* block_scores = candidate_source ? workspace_.alloc_n<float>(NR * ((max_entries + bs - 1) / bs)) : nullptr;
        int32_t* block_picked = candidate_source ? workspace_.alloc_n<int32_t>(NR * keep) : nullptr;
        candidate_blocks({.rows = d_rows, .num_rows = NR, .scores = scores, .ld = max_entries, .mask = b.mask,
                          .mask_ld = b.mask_ld, .block_size = bs, .keep_blocks = keep, .build = candidate_source,
                          .block_scores = block_scores, .block_picked = block_picked},
                         s);
    }
    int32_t* picked = workspace_.alloc_n<int32_t>(NR * K);
    topk({.scores = scores, .ld = max_entries, .lengths = upload(lengths), .n = max_entries, .rows = NR, .k = K, .out = picked},
         s);
    topk_publish({.rows = d_rows, .num_rows = NR, .picked = picked, .scores = scores, .ld = max_entries, .k = K, .out = b.topk},
                 s);
    for (size_t i : publishing) b.shared[i].has_topk = true;
}

void CudaV41Model::attention(int64_t layer, Batch& b, const float* a, float* out) const {
    const V41TextConfig& c = config_.text;
    const V41DeviceLayer& lw = weights_.layers[size_t(layer)];
    const Stream s = stream_.get();
    const bool off = official();
    const int64_t S = b.rows, H = c.num_attention_heads, hd = c.head_dim, QL = c.q_lora_rank, R = c.qk_rope_head_dim;
    const int64_t ratio = c.compress_ratio(layer), W = c.sliding_window, window_rows = W + kRingHeadroom;
    const float eps = static_cast<float>(c.rms_norm_eps);
    const float* rope = ratio > 0 ? rope_comp_ : rope_main_;

    // Q and this pass's window K=V (RoPE, FP8 QAT; the compact codes kept for the ring).
    float* qr = workspace_.alloc_n<float>(S * QL);
    float* q = workspace_.alloc_n<float>(S * H * hd);
    project(lw.wq_a, a, S, qr);
    rms_norm({.x = qr, .weight = lw.q_norm, .out = qr, .rows = S, .n = QL, .eps = eps, .round_bf16 = off}, s);
    project(lw.wq_b, qr, S, q);
    rope_rows({.x = q, .rows = S, .heads = H, .dim = hd, .positions = b.positions, .cos_sin = rope, .rope_dim = R,
               .round_rope_dims = off},
              s);
    float* kv = workspace_.alloc_n<float>(S * hd);
    project(lw.wkv, a, S, kv);
    rms_norm({.x = kv, .weight = lw.kv_norm, .out = kv, .rows = S, .n = hd, .eps = eps, .round_bf16 = off}, s);
    rope_rows({.x = kv, .rows = S, .heads = 1, .dim = hd, .positions = b.positions, .cos_sin = rope, .rope_dim = R,
               .round_rope_dims = off},
              s);
    auto* codes = workspace_.alloc_n<uint8_t>(S * formats_.window_bytes);
    std::vector<uint8_t*> code_rows(static_cast<size_t>(S));
    for (int64_t t = 0; t < S; ++t) code_rows[size_t(t)] = codes + t * formats_.window_bytes;
    qat_rows({.x = kv, .rows = S, .n = hd, .block = V41CacheFormats::kWindowBlock, .format = formats_.window,
              .fake_quant = true, .dst = upload(code_rows)},
             s);

    if (ratio > 0) {
        if (lw.has_compressor) compress(layer, b, a);
        if (lw.has_indexer) index(layer, b, a, qr);
    }

    // Sink attention over the window and the published top-k of the segment's KV source.
    std::vector<SinkSegment> segs;
    std::vector<void*> ring_dst;
    for (size_t i = 0; i < b.states.size(); ++i) {
        const Shared& sh = b.shared[i];
        const int64_t P0 = b.first_position[i], n = b.num_rows[i];
        const bool use_compressed = ratio > 0 && sh.kv_source >= 0 && sh.has_topk &&
                                    (P0 + n) / c.compress_ratio(sh.kv_source) > 0;
        auto* window = static_cast<uint8_t*>(b.states[i]->layers[size_t(layer)].window->data());
        segs.push_back({b.row_begin[i], n, P0, window,
                        use_compressed ? static_cast<const uint8_t*>(b.states[i]->layers[size_t(sh.kv_source)].entries->data())
                                       : nullptr});
        for (int64_t t = 0; t < n; ++t)
            ring_dst.push_back(t >= n - window_rows ? window + ((P0 + t) % window_rows) * formats_.window_bytes : nullptr);
    }
    const int64_t max_cand = std::min<int64_t>(W, b.max_position + 1) + (ratio > 0 ? c.index_topk : 0);
    float* scratch = workspace_.alloc_n<float>(S * H * max_cand);
    float* o = workspace_.alloc_n<float>(S * H * hd);
    sink_attention({.segments = upload(segs), .row_segment = b.row_segment, .positions = b.positions, .rows = S, .heads = H,
                    .head_dim = hd, .q = q, .kv = kv, .sink = lw.sink, .window = W, .window_rows = window_rows,
                    .window_format = formats_.window, .window_block = V41CacheFormats::kWindowBlock,
                    .entry_format = formats_.entry, .entry_block = V41CacheFormats::kEntryBlock,
                    .selected = ratio > 0 ? b.topk : nullptr, .topk = c.index_topk, .max_candidates = max_cand,
                    .scratch = scratch, .cos_sin = rope, .rope_dim = R, .softmax_scale = 1.0f / std::sqrt(float(hd)),
                    .official = off, .out = o},
                   s);
    copy_rows({.src = codes, .dst = upload(ring_dst), .rows = S, .row_bytes = formats_.window_bytes}, s);

    // Grouped wo_a (a bf16 linear per group of the flattened heads), then wo_b.
    const int64_t G = c.o_groups, gin = H * hd / G, OR = c.o_lora_rank;
    float* u = workspace_.alloc_n<float>(S * G * OR);
    for (int64_t g = 0; g < G; ++g)
        linear({.x = o + g * gin, .x_ld = H * hd, .weight = lw.wo_a.rows(g * OR, (g + 1) * OR), .y = u + g * OR,
                .y_ld = G * OR, .rows = S, .round_output_bf16 = off},
               s);
    project(lw.wo_b, u, S, out);
}

}  // namespace deepinfer::cuda
