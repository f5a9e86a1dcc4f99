// SPDX-License-Identifier: Apache-2.0
// CudaV41Model's decoder SWA bounded replay (ModelOptions::v41_bounded_replay, docs/v41-bounded-replay.md,
// spec deepseek-v41-model.md §2.3), mirroring src/model/v41/forward.cpp: a chunk of more than W tokens
// that wants logits for its last token only runs the encoder on every row; at the decoder's first layer
// (a ratio-1 KV and index source) the rows before its last W run that layer's compressor and index keys
// only (the `head`), so the decoder's compressed KV and index keys hold every entry as on the exact path;
// the decoder's layers then run the `tail` batch: the last W rows of replayed segments, with their window
// keys truncated to those rows (SinkSegment::window_begin), and every row of the other segments. DSpark
// taps of a replayed segment keep its kept rows only (the decoder's target layers have no others).
//
// Every kernel computes its rows alone, so the other segments of a batch get the values they get
// without a replayed neighbour: their rows are only moved (compacted) at the cut. The cut copies rows
// per segment (host-issued copies: a replaying step never runs as a CUDA graph).
#include <algorithm>

#include "backends/cuda/model/cuda_v41_impl.h"
#include "backends/cuda/model/cuda_v41_model.h"
#include "backends/cuda/model/device_draws.h"
#include "deepinfer/check.h"

namespace deepinfer::cuda {

// (Under expert parallelism the driver sets every rank's tail counts before the forward: replay_tail_rows.)
int64_t CudaV41Model::replay_layer(const V41TextConfig& c, const ModelOptions& options, const std::string& dir) {
    if (!options.v41_bounded_replay) return -1;
    int64_t first = -1;  // the decoder's first layer, as the CPU model finds it
    for (int64_t l = 0; l < c.num_hidden_layers && first < 0; ++l)
        if (c.compress_ratio(l) == 1 && c.is_kv_source(l)) first = l;
    DI_CHECK(first >= 0 && c.is_index_source(first), dir,
             ": bounded replay needs a decoder whose first layer is a ratio-1 KV and index source; this config has none");
    return first;
}

void CudaV41Model::mark_replay(Batch& b, std::span<const SequenceChunk> chunks, std::span<const uint8_t> drawn) const {
    b.replay.reset();
    if (replay_layer_ < 0) return;
    const int64_t W = config_.text.sliding_window;
    std::vector<uint8_t> on(chunks.size(), 0);
    bool any = false;
    for (size_t i = 0; i < chunks.size(); ++i) {
        // (as the CPU: a chunk that wants every row's logits runs the exact path; so do verify draws)
        on[i] = v41_replays_chunk(chunks[i].all_logits, drawn.empty() ? 0 : drawn[i], b.num_rows[i], W);
        any |= on[i] != 0;
    }
    if (!any) return;
    auto r = std::make_shared<Replay>();
    r->layer = replay_layer_;
    r->replayed = on;
    Batch& h = r->head;
    Batch& t = r->tail;
    r->row_map.assign(size_t(b.row_begin.empty() ? 0 : b.row_begin.back() + b.num_rows.back()), -1);
    for (size_t i = 0; i < b.states.size(); ++i) {
        const int64_t n = b.num_rows[i], skip = on[i] ? n - W : 0;
        if (on[i]) {
            h.states.push_back(b.states[i]);
            h.row_begin.push_back(h.rows);
            h.num_rows.push_back(skip);
            h.first_position.push_back(b.first_position[i]);
            h.rows += skip;
            h.max_rows = std::max(h.max_rows, skip);
        }
        t.states.push_back(b.states[i]);
        t.row_begin.push_back(t.rows);
        t.num_rows.push_back(n - skip);
        t.first_position.push_back(b.first_position[i] + skip);
        t.window_begin.push_back(on[i] ? b.first_position[i] + skip : 0);
        for (int64_t k = skip; k < n; ++k) r->row_map[size_t(b.row_begin[i] + k)] = static_cast<int32_t>(t.rows + k - skip);
        t.rows += n - skip;
        t.max_rows = std::max(t.max_rows, n - skip);
    }
    h.max_position = t.max_position = b.max_position;
    t.drafter_taps = b.drafter_taps;
    // Expert parallelism: the driver set every rank's tail count from the same chunks (replay_tail_rows).
    DI_CHECK(ep_ == nullptr || ep_->rows(static_cast<int>(ep_rank_), true) == t.rows, "bounded replay: rank ", ep_rank_,
             "'s tail runs ", t.rows, " rows, the expert exchange counts ", ep_ ? ep_->rows(static_cast<int>(ep_rank_), true) : 0);
    b.replay = std::move(r);
}

int64_t CudaV41Model::replay_tail_rows(std::span<const SequenceChunk> chunks, std::span<const DeviceDraw> draws) const {
    const int64_t W = config_.text.sliding_window;
    const std::vector<uint8_t> drawn = replay_layer_ >= 0 ? check_device_draws(draws, chunks) : std::vector<uint8_t>{};
    int64_t n = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
        const int64_t rows = static_cast<int64_t>(chunks[i].tokens.size());
        n += replay_layer_ >= 0 && v41_replays_chunk(chunks[i].all_logits, drawn[i], rows, W) ? W : rows;
    }
    return n;
}

void CudaV41Model::plan_replay(Batch& b, InputBlock& in) const {
    const V41TextConfig& c = config_.text;
    Replay& r = *b.replay;
    const int64_t cut = r.layer, L = c.num_hidden_layers;
    Batch& h = r.head;
    Batch& t = r.tail;
    for (Batch* x : {&h, &t}) {  // the scratch and the logits rows are the batch's
        x->ckv = b.ckv;
        x->cg = b.cg;
        x->codes = b.codes;
        x->mask_ld = b.mask_ld;
        x->num_picked = b.num_picked;
        x->picked = b.picked;
        x->table_len = b.table_len;
        x->layers.assign(size_t(L), LayerPlan{});
    }
    // The head: the decoder's first layer's compressor (and index keys) over the dropped rows.
    h.shared.assign(h.states.size(), Shared{});
    h.entry_tables = b.entry_tables;  // (unused by the compressor: it writes through entry pointers)
    plan_compress(cut, h, in);

    // The tail: its row tables, the segments' shared state after the encoder (replayed segments' top-k
    // and candidates were for the dropped rows: the decoder's first layer publishes new ones).
    std::vector<int32_t> positions, row_segment;
    for (size_t i = 0; i < t.states.size(); ++i)
        for (int64_t k = 0; k < t.num_rows[i]; ++k) {
            positions.push_back(static_cast<int32_t>(t.first_position[i] + k));
            row_segment.push_back(static_cast<int32_t>(i));
        }
    t.positions = in.add(positions);
    t.row_segment = in.add(row_segment);
    std::vector<uint8_t*> code_rows(static_cast<size_t>(t.rows));
    for (int64_t k = 0; k < t.rows; ++k) code_rows[size_t(k)] = t.codes + k * formats_.window_bytes;
    t.code_rows = in.add(code_rows);
    if (b.any_image) {  // the kept rows' image-span flags (the decoder's routers and Engram read them)
        for (size_t i = 0; i < t.states.size(); ++i) {
            const int64_t end = b.row_begin[i] + b.num_rows[i];
            t.image.insert(t.image.end(), b.image.begin() + (end - t.num_rows[i]), b.image.begin() + end);
        }
        t.any_image = true;
        t.image_rows = in.add(t.image);
    }
    t.entry_tables = b.entry_tables;  // (per segment: the same segments in the same order)
    t.shared = b.shared;
    for (size_t i = 0; i < t.states.size(); ++i)
        if (r.replayed[i]) {
            t.shared[i].has_topk = false;
            t.shared[i].has_candidates = false;
            t.shared[i].candidate_entries = 0;
        }
    for (int64_t l = cut; l < L; ++l) {
        const V41DeviceLayer& lw = weights_.layers[size_t(l)];
        if (c.compress_ratio(l) > 0) {
            if (lw.has_compressor) plan_compress(l, t, in);
            if (lw.has_indexer) plan_index(l, t, in);
        }
        if (l == cut)  // the decoder's first layer publishes every segment's top-k (the old rows are stale)
            for (const Shared& sh : t.shared) DI_ICHECK(sh.has_topk);
        plan_attention(l, t, in);
    }
    // DSpark taps (plan_taps: an attached segment's last ring-many rows, W + headroom): rows the decoder
    // drops have no taps of its target layers, so they write no context rows (as the CPU drops them);
    // the kept ones tap the encoder's target layers on the batch's rows, the decoder's on the tail's.
    if (b.num_taps > 0) {
        const int64_t M = b.num_taps;
        const auto* src = reinterpret_cast<const int32_t*>(in.data() + b.tap_src);
        const auto* pos = reinterpret_cast<const int32_t*>(in.data() + b.tap_pos);
        const auto* dst = reinterpret_cast<uint8_t* const*>(in.data() + b.tap_dst);
        std::vector<int32_t> kept_src, kept_pos, tail_src;
        std::vector<int64_t> kept;
        for (int64_t k = 0; k < M; ++k) {
            if (r.row_map[size_t(src[k])] < 0) continue;
            kept.push_back(k);
            kept_src.push_back(src[k]);
            kept_pos.push_back(pos[k]);
            tail_src.push_back(r.row_map[size_t(src[k])]);
        }
        std::vector<uint8_t*> kept_dst;  // [stages, kept]
        for (int64_t st = 0; st < dspark_stages_; ++st)
            for (int64_t k : kept) kept_dst.push_back(dst[st * M + k]);
        b.num_taps = static_cast<int64_t>(kept.size());
        if (b.num_taps > 0) {  // (the tables above are read before `in` grows)
            b.tap_src = in.add(kept_src);
            b.tap_pos = in.add(kept_pos);
            b.tap_dst = in.add(kept_dst);
            t.tap_src = in.add(tail_src);
        }
    }
    t.num_taps = b.num_taps;
    t.tap_pos = b.tap_pos;
    t.tap_dst = b.tap_dst;
}

void CudaV41Model::bind_replay(Batch& b) const {
    for (Batch* x : {&b.replay->head, &b.replay->tail}) {
        x->in = b.in;
        x->topk = b.topk;  // (the decoder's first layer republishes every segment's rows)
        x->mask = b.mask;  // (compacted at the cut where candidates carry over)
    }
}

const CudaV41Model::Batch& CudaV41Model::replay_cut(const Batch& b, float* x, float* pre_mix,
                                                    std::span<float* const> engram_kv, bool& waited) const {
    const V41TextConfig& c = config_.text;
    const Replay& r = *b.replay;
    const Batch& h = r.head;
    const Batch& t = r.tail;
    const V41DeviceLayer& lw = weights_.layers[size_t(r.layer)];
    const Stream s = stream_.get();
    const bool off = official();
    const int64_t D = c.hidden_size, hc = c.hc_mult, H = h.rows;
    const float eps = static_cast<float>(c.rms_norm_eps);

    // The head rows: attn_norm(collapse(X, pre)) as the layer's attention site computes it, then the
    // compressor and index keys alone.
    const size_t mark = workspace_.mark();
    float* xh = workspace_.alloc_n<float>(H * hc * D);
    float* ph = workspace_.alloc_n<float>(H * hc);
    for (size_t i = 0, k = 0; i < b.states.size(); ++i) {
        if (!r.replayed[i]) continue;
        const int64_t from = b.row_begin[i], to = h.row_begin[k], n = h.num_rows[k];
        copy_on_device(xh + to * hc * D, x + from * hc * D, size_t(n * hc * D) * sizeof(float), s);
        copy_on_device(ph + to * hc, pre_mix + from * hc, size_t(n * hc) * sizeof(float), s);
        ++k;
    }
    float* pre = workspace_.alloc_n<float>(H * hc);
    float* post = workspace_.alloc_n<float>(H * hc);
    float* comb = workspace_.alloc_n<float>(H * hc * hc);
    float* ah = workspace_.alloc_n<float>(H * D);
    const DeviceHc& hw = lw.hc_attn;
    hc_site(hw, xh, H, pre, post, comb, ph, ah, s);
    rms_norm({.x = ah, .weight = lw.attn_norm, .out = ah, .rows = H, .n = D, .eps = eps, .round_bf16 = off}, s);
    compress(r.layer, h, ah);
    workspace_.reset(mark);

    // The kept rows, compacted in place (through a scratch copy): each segment's rows move to its tail rows.
    auto compact = [&](void* buf, int64_t row_bytes) {
        const size_t inner = workspace_.mark();
        auto* tmp = static_cast<uint8_t*>(workspace_.alloc(size_t(std::max<int64_t>(1, t.rows * row_bytes))));
        auto* base = static_cast<uint8_t*>(buf);
        for (size_t i = 0; i < b.states.size(); ++i) {
            const int64_t skip = b.num_rows[i] - t.num_rows[i];
            copy_on_device(tmp + t.row_begin[i] * row_bytes, base + (b.row_begin[i] + skip) * row_bytes,
                           size_t(t.num_rows[i] * row_bytes), s);
        }
        copy_on_device(base, tmp, size_t(t.rows * row_bytes), s);
        workspace_.reset(inner);
    };
    compact(x, hc * D * int64_t(sizeof(float)));
    compact(pre_mix, hc * int64_t(sizeof(float)));
    // The Engram projections of later Engram layers (made on the side stream for every row).
    for (int64_t l = r.layer + 1; l < c.num_hidden_layers; ++l) {
        if (!weights_.layers[size_t(l)].has_engram) continue;
        if (!waited) engram_ready_.wait(s);
        waited = true;
        compact(engram_kv[size_t(c.engram_index(l))], (hc + 1) * D * int64_t(sizeof(float)));
    }
    // Candidate masks the encoder built (the other segments read theirs in the decoder).
    if (c.candidate_source_layer_id >= 0 && c.candidate_source_layer_id < r.layer) compact(b.mask, b.mask_ld);
    return t;
}

}  // namespace deepinfer::cuda
