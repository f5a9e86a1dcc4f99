// SPDX-License-Identifier: Apache-2.0
// CudaV41Model's CSA2 attention of one layer on the device, mirroring src/model/v41/attention.cpp: Q
// and the window K=V (FP8 QAT, compact codes), the compressor of a KV source (groups completed by the
// chunk pooled, normed, index keys and entries stored in their compact codes), the indexer of an
// index source (scores, candidate blocks, top-k published per segment), sink attention over the
// window and the selected entries, the window ring update and the grouped output projection. The
// per-segment bookkeeping of what source layers publish and the row tables are the plan's
// (cuda_v41_plan.cpp); this file only enqueues kernels.
#include <algorithm>
#include <cmath>

#include "backends/cuda/gemm_fast.h"
#include "backends/cuda/model/cuda_v41_impl.h"
#include "backends/cuda/model/grouped_wo_a.h"
#include "deepinfer/check.h"
#include "model/state.h"

namespace deepinfer::cuda {

void CudaV41Model::compress(int64_t layer, const Batch& b, const float* a, InputForms* fa, Stream s, Scratch scratch) const {
    const V41TextConfig& c = config_.text;
    const V41DeviceLayer& lw = weights_.layers[size_t(layer)];
    const CompressPlan& p = b.layers[size_t(layer)].compress;
    if (!s.handle) s = stream_.get();
    const bool off = official();
    const int64_t S = b.rows, hd = c.head_dim, ID = c.index_head_dim, r = c.compress_ratio(layer), R = c.qk_rope_head_dim;
    const float eps = static_cast<float>(c.rms_norm_eps);
    // Ratio 2: fp32 projections (spec §3.4); ratio 1: a bf16 linear with a bf16 output.
    if (r > 1) {
        project_f32(lw.compressor_wkv, a, S, b.ckv, fa, s, scratch);
        project_f32(lw.compressor_wgate, a, S, b.cg, fa, s, scratch);
    } else {
        project_bf16(lw.compressor_wkv, a, S, b.ckv, fa, s, scratch);
    }
    // The groups the chunk completes (the plan's row pointers: this chunk's rows or the pending ring).
    const int64_t G = p.groups;
    if (G > 0) {
        float* latent = workspace_.alloc_n<float>(G * hd);
        compress_pool({.kv_rows = b.at<const float*>(p.kv_rows), .gate_rows = r > 1 ? b.at<const float*>(p.gate_rows) : nullptr,
                       .groups = G, .ratio = r, .width = hd, .out = latent, .round_bf16 = off},
                      s);
        rms_norm({.x = latent, .weight = lw.compressor_norm, .out = latent, .rows = G, .n = hd, .eps = eps, .round_bf16 = off,
                  .tree_sum = fast_},
                 s);
        const int32_t* d_pos = b.at<int32_t>(p.group_pos);
        if (lw.has_index_keys) {
            float* keys = workspace_.alloc_n<float>(G * ID);
            project_bf16(lw.indexer_wk, latent, G, keys, nullptr, s, scratch);
            rms_norm({.x = keys, .weight = lw.indexer_k_norm, .out = keys, .rows = G, .n = ID, .eps = eps, .round_bf16 = off,
                      .tree_sum = fast_},
                     s);
            rope_rows({.x = keys, .rows = G, .heads = 1, .dim = ID, .positions = d_pos, .cos_sin = rope_comp_, .rope_dim = R,
                       .round_rope_dims = off},
                      s);
            qat_rows({.x = keys, .rows = G, .n = ID, .block = V41CacheFormats::kKeyBlock, .format = formats_.key,
                      .fake_quant = false, .dst = b.at<uint8_t*>(p.key_dst)},
                     s);
        }
        rope_rows({.x = latent, .rows = G, .heads = 1, .dim = hd, .positions = d_pos, .cos_sin = rope_comp_, .rope_dim = R,
                   .round_rope_dims = off},
                  s);
        qat_rows({.x = latent, .rows = G, .n = hd, .block = V41CacheFormats::kEntryBlock, .format = formats_.entry,
                  .fake_quant = false, .dst = b.at<uint8_t*>(p.entry_dst)},
                 s);
    }
    if (r > 1) {  // after the pooling read the older rows
        copy_rows({.src = b.ckv, .dst = b.at<void*>(p.ring_kv), .rows = S, .row_bytes = hd * 4}, s);
        copy_rows({.src = b.cg, .dst = b.at<void*>(p.ring_gate), .rows = S, .row_bytes = hd * 4}, s);
    }
}

void CudaV41Model::index(int64_t layer, const Batch& b, const float* a, const float* qr, InputForms* fa, InputForms* fq,
                         const std::function<void()>* before_scores) const {
    const V41TextConfig& c = config_.text;
    const V41DeviceLayer& lw = weights_.layers[size_t(layer)];
    const IndexPlan& p = b.layers[size_t(layer)].index;
    const Stream s = stream_.get();
    const bool off = official();
    const int64_t S = b.rows, IH = c.index_n_heads, ID = c.index_head_dim;
    float* qi = workspace_.alloc_n<float>(S * IH * ID);
    float* hw = workspace_.alloc_n<float>(S * IH);
    project(lw.indexer_wq_b, qr, S, qi, {}, Scratch::kRelease, fq);
    project_bf16(lw.indexer_weights_proj, a, S, hw, fa);
    rope_rows({.x = qi, .rows = S, .heads = IH, .dim = ID, .positions = b.at<int32_t>(b.positions), .cos_sin = rope_comp_,
               .rope_dim = c.qk_rope_head_dim, .round_rope_dims = off},
              s);
    qat_rows({.x = qi, .rows = S * IH, .n = ID, .block = V41CacheFormats::kKeyBlock, .format = formats_.key}, s);
    if (before_scores) (*before_scores)();
    // The plan's rows: those of segments whose KV source has entries (graph steps: every row).
    if (p.rows == 0) return;
    const int64_t NR = p.rows, K = c.index_topk, max_entries = p.max_entries;
    const bool candidate_source = layer == c.candidate_source_layer_id;
    const IndexRow* d_rows = b.at<IndexRow>(p.index_rows);
    float* scores = workspace_.alloc_n<float>(NR * max_entries);
    index_scores({.rows = d_rows, .num_rows = NR, .max_entries = max_entries, .q = qi, .weights = hw, .heads = IH,
                  .head_dim = ID, .key_format = formats_.key, .key_block = V41CacheFormats::kKeyBlock, .official = off,
                  .tensor_cores = fast_, .paged_keys = paged_rows(b, p.source, true), .max_segment_rows = b.max_rows,
                  .scores = scores},
                 s);
    if (p.candidates) {
        const int64_t bs = c.candidate_block_size, keep = c.candidate_topk_blocks;
        float* block_scores = candidate_source ? workspace_.alloc_n<float>(NR * ((max_entries + bs - 1) / bs)) : nullptr;
        int32_t* block_picked = candidate_source ? workspace_.alloc_n<int32_t>(NR * keep) : nullptr;
        candidate_blocks({.rows = d_rows, .num_rows = NR, .scores = scores, .ld = max_entries, .mask = b.mask,
                          .mask_ld = b.mask_ld, .block_size = bs, .keep_blocks = keep, .build = candidate_source,
                          .block_scores = block_scores, .block_picked = block_picked},
                         s);
    }
    int32_t* picked = workspace_.alloc_n<int32_t>(NR * K);
    topk({.scores = scores, .ld = max_entries, .lengths = b.at<int32_t>(p.lengths), .n = max_entries, .rows = NR, .k = K,
          .out = picked},
         s);
    topk_publish({.rows = d_rows, .num_rows = NR, .picked = picked, .scores = scores, .ld = max_entries, .k = K, .out = b.topk},
                 s);
}

void CudaV41Model::attention(int64_t layer, const Batch& b, const float* a, float* out, uint16_t* a_quant) const {
    const V41TextConfig& c = config_.text;
    const V41DeviceLayer& lw = weights_.layers[size_t(layer)];
    const LayerPlan& plan = b.layers[size_t(layer)];
    const Stream s = stream_.get();
    const bool off = official();
    const int64_t S = b.rows, H = c.num_attention_heads, hd = c.head_dim, QL = c.q_lora_rank, R = c.qk_rope_head_dim;
    const int64_t ratio = c.compress_ratio(layer), W = c.sliding_window, window_rows = W + kRingHeadroom;
    const float eps = static_cast<float>(c.rms_norm_eps);
    const float* rope = ratio > 0 ? rope_comp_ : rope_main_;
    const int32_t* positions = b.at<int32_t>(b.positions);

    // Q and this pass's window K=V (RoPE, FP8 QAT; the compact codes kept for the ring).
    float* qr = workspace_.alloc_n<float>(S * QL);
    float* q = workspace_.alloc_n<float>(S * H * hd);
    // The fast mode's bf16 forms of a and of the normed qr, each made once for the projections that read it.
    // (a's QAT form from the site's norm when it made one; qr's from q_norm's pass where wq_b reads it)
    InputForms fa{.x = a, .rows = S, .cols = c.hidden_size, .quant = a_quant},
        fq{.x = qr, .rows = S, .cols = QL, .quant = qat_form(lw.wq_b, S, QL, lw.q_norm, qr)};
    project(lw.wq_a, a, S, qr, {}, Scratch::kRelease, &fa);
    // The window K=V path and the compressor (CudaModelOptions::v41_attention_side_stream): on the side stream, forked
    // here and joined before the indexer's scores (or the attention). Enqueued first, so their scratch (kept until the
    // layer's mark is released, after the join) lies below every allocation of the query path on this stream, which
    // releases its own as it goes. The forms of a they take are made before the fork (wq_a made the QAT one).
    const bool side = fast_ && attention_side_stream_ && ep_ == nullptr && replay_layer_ < 0;
    const Stream ks = side ? shared_stream_.get() : s;
    const Scratch kept = side ? Scratch::kKeepSplit : Scratch::kRelease;
    const bool compressing = ratio > 0 && lw.has_compressor;
    if (side) {
        auto bf16_fast = [&](const DeviceLinear& w) { return w.kind == WeightKind::kBF16 && fast_linear_supported(w); };
        if (bf16_fast(lw.wkv)) make_form(fa, off && weights_.from_fp8(lw.wkv), s);
        if (compressing && off && bf16_fast(lw.compressor_wkv)) make_form(fa, false, s);
        ++stats_.attention_side_stream_sites;
        attn_fork_.record(s);
        attn_fork_.wait(ks);
    }
    float* kv = workspace_.alloc_n<float>(S * hd);
    project(lw.wkv, a, S, kv, ks, kept, &fa);
    rms_norm({.x = kv, .weight = lw.kv_norm, .out = kv, .rows = S, .n = hd, .eps = eps, .round_bf16 = off, .tree_sum = fast_},
             ks);
    rope_rows({.x = kv, .rows = S, .heads = 1, .dim = hd, .positions = positions, .cos_sin = rope, .rope_dim = R,
               .round_rope_dims = off},
              ks);
    qat_rows({.x = kv, .rows = S, .n = hd, .block = V41CacheFormats::kWindowBlock, .format = formats_.window,
              .fake_quant = true, .dst = b.at<uint8_t*>(b.code_rows)},
             ks);
    if (compressing) compress(layer, b, a, &fa, ks, kept);
    bool joined = !side;
    if (side) attn_done_.record(ks);
    const std::function<void()> join = [&] {
        if (!joined) attn_done_.wait(s);  // (a capture must end joined)
        joined = true;
    };

    rms_norm({.x = qr, .weight = lw.q_norm, .out = qr, .rows = S, .n = QL, .eps = eps, .round_bf16 = off, .out_bf16_qat = fq.quant,
              .tree_sum = fast_},
             s);
    project(lw.wq_b, qr, S, q, {}, Scratch::kRelease, &fq);
    // The attention's launch (q and the outputs set below). Fast mode at prefill sizes, where the 64-head tensor-core
    // kernel runs (sink_attention_bf16_io): q in bf16 from the RoPE launch and the output in bf16, each group of wo_a's
    // input rows together ([G][S, gin]), so no f32 output and no conversions before wo_a's dense launches (the same
    // values: q's are bf16 in official numerics, the outputs bf16-rounded). The kernel choice depends on shapes only.
    const int64_t max_cand = std::min<int64_t>(W, b.max_position + 1) + (ratio > 0 ? c.index_topk : 0);
    const int64_t G = c.o_groups, gin = H * hd / G, OR = c.o_lora_rank;
    SinkAttentionParams ap{.segments = b.at<SinkSegment>(plan.sink_segments), .row_segment = b.at<int32_t>(b.row_segment),
                           .positions = positions, .rows = S, .heads = H, .head_dim = hd, .q = q, .sink = lw.sink,
                           .window = W, .window_rows = window_rows, .window_format = formats_.window,
                           .window_block = V41CacheFormats::kWindowBlock, .entry_format = formats_.entry,
                           .entry_block = V41CacheFormats::kEntryBlock, .selected = ratio > 0 ? b.topk : nullptr,
                           .topk = c.index_topk, .max_candidates = max_cand, .cos_sin = rope, .rope_dim = R,
                           .softmax_scale = 1.0f / std::sqrt(float(hd)), .official = off, .tensor_cores = fast_,
                           .tc_split_rows = attention_split_rows_, .paged_entries = paged_rows(b, plan.kv_source, false)};
    const bool bf16_io = bf16_attention_io_ && fast_ && off && S >= kWoADenseRows && G > 0 && H % G == 0 && lw.wo_a.kind == WeightKind::kBF16 &&
                         fast_linear_supported(lw.wo_a.rows(0, OR)) && sink_attention_bf16_io(ap);
    uint16_t* q16 = bf16_io ? workspace_.alloc_n<uint16_t>(S * H * hd) : nullptr;
    // (round_all: the rope dims rounded as round_rope_dims does, the others already bf16 from wq_b's rounded output)
    rope_rows({.x = q, .rows = S, .heads = H, .dim = hd, .positions = positions, .cos_sin = rope, .rope_dim = R,
               .round_rope_dims = off, .round_all = bf16_io, .out_bf16 = q16},
              s);
    if (ratio > 0 && lw.has_indexer) index(layer, b, a, qr, &fa, &fq, &join);
    join();

    // Sink attention over the window and the published top-k of the segment's KV source.
    ap.kv = kv;
    ap.scratch = workspace_.alloc_n<float>(S * H * max_cand);
    float* o = nullptr;
    uint16_t* o16 = nullptr;
    if (bf16_io) {
        ++stats_.attention_bf16_io_layers;
        ap.q = nullptr;  // (q16 holds q after RoPE; q itself was only read)
        ap.q_bf16 = q16;
        ap.out_bf16 = o16 = workspace_.alloc_n<uint16_t>(S * H * hd);
        ap.bf16_group_heads = H / G;
        ap.bf16_group_stride = S * gin;
    } else {
        ap.out = o = workspace_.alloc_n<float>(S * H * hd);
    }
    if (plan.bf16_key_rows > 0) {
        // The keys of the segments with many rows, decoded once (bf16_key_plan.h): the forward's rows (kv holds
        // their QAT values), then those segments' older window rows and entries.
        ++stats_.attention_bf16_key_layers;
        uint16_t* keys16 = workspace_.alloc_n<uint16_t>(plan.bf16_key_rows * hd);
        to_bf16({.x = kv, .x_ld = hd, .rows = S, .cols = hd, .out = keys16}, s);
        const SinkBf16Keys* bk = b.at<SinkBf16Keys>(plan.bf16_keys);
        key_rows_bf16({.segments = ap.segments, .keys = bk, .num_segments = static_cast<int64_t>(b.states.size()),
                       .max_rows = plan.bf16_max_rows, .head_dim = hd, .window_rows = window_rows, .window_format = formats_.window,
                       .window_block = V41CacheFormats::kWindowBlock, .entry_format = formats_.entry,
                       .entry_block = V41CacheFormats::kEntryBlock, .paged_entries = ap.paged_entries, .out = keys16},
                      s);
        ap.keys_bf16 = keys16;
        ap.bf16_keys = bk;
        ap.keys_bf16_all = plan.bf16_all;
    }
    sink_attention(ap, s);
    copy_rows({.src = b.codes, .dst = b.at<void*>(plan.ring_dst), .rows = S, .row_bytes = formats_.window_bytes}, s);

    // Grouped wo_a (a bf16 linear per group of the flattened heads; tensor cores in the fast mode), then wo_b.
    float* u = workspace_.alloc_n<float>(S * G * OR);
    if (bf16_io) {
        // One dense launch per group on its bf16 rows: project_fast's launch for the group without its conversion
        // (the same inputs, so the same bits).
        for (int64_t g = 0; g < G; ++g) {
            const DeviceLinear wg = lw.wo_a.rows(g * OR, (g + 1) * OR);
            const size_t mark = workspace_.mark();
            FastLinearParams f{.weight = wg, .y = u + g * OR, .y_ld = G * OR, .rows = S, .round_output_bf16 = off};
            f.a = o16 + g * S * gin;
            if (const int64_t n = fast_linear_split_floats(wg, S)) f.split_scratch = workspace_.alloc_n<float>(n);
            fast_linear(f, s);
            workspace_.reset(mark);  // stream-ordered
        }
        project(lw.wo_b, u, S, out);
        return;
    }
    if (fast_ && lw.wo_a_groups && S < kWoADenseRows && fast_linear_supported(lw.wo_a.rows(0, OR))) {
        // Below prefill sizes one grouped launch (grouped_wo_a.h, V4's form) instead of G conversions and G
        // launches: the per-group launches' bits.
        uint16_t* ob = workspace_.alloc_n<uint16_t>(S * H * hd);
        to_bf16({.x = o, .x_ld = H * hd, .rows = S, .cols = H * hd, .out = ob}, s);
        grouped_wo_a({.ob = ob, .wo_a = lw.wo_a, .groups = lw.wo_a_groups, .groups_n = G, .rows = S, .out_rank = OR, .u = u,
                      .round_bf16 = off},
                     workspace_, s);
        project(lw.wo_b, u, S, out);
        return;
    }
    for (int64_t g = 0; g < G; ++g) {
        const DeviceLinear wg = lw.wo_a.rows(g * OR, (g + 1) * OR);
        if (!project_fast(wg, o + g * gin, H * hd, S, u + g * OR, G * OR, false, off, s, Scratch::kRelease))
            linear({.x = o + g * gin, .x_ld = H * hd, .weight = wg, .y = u + g * OR, .y_ld = G * OR, .rows = S,
                    .round_output_bf16 = off},
                   s);
    }
    project(lw.wo_b, u, S, out);
}

}  // namespace deepinfer::cuda
