// SPDX-License-Identifier: Apache-2.0
// CudaV41Model's forward: the step (chunks -> segments, a pure decode step padded to its graph
// bucket), the plan copied to the workspace with one transfer, compute() run eagerly or as the
// bucket's CUDA graph, device draws, and the copies back; compute() itself: Engram on the side
// stream, embedding, per layer Engram fusion -> attention site -> FFN site with the single-pass mHC,
// final collapse -> norm -> head (mirroring src/model/v41/forward.cpp).
#include <algorithm>
#include <cstring>

#include "backends/cuda/model/cuda_v41_impl.h"
#include "deepinfer/check.h"

namespace deepinfer::cuda {

CudaModelStats CudaV41Model::stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    CudaModelStats st = stats_;
    st.workspace_bytes = workspace_.capacity();
    st.workspace_high_water = workspace_.high_water();
    st.workspace_need_max = std::max(
        workspace_need(limits_.max_rows, limits_.max_rows, limits_.max_rows, max_len_, limits_.max_seqs),
        dspark_workspace_need(limits_.max_seqs));
    st.weight_device_bytes = weights_.device_bytes;
    st.state_page_bytes = layout_->page_bytes;
    st.state_page_tokens = layout_->page_tokens;
    st.state_ring_pages = layout_->ring_pages;
    st.state_pages = pool_->capacity_pages();
    st.state_pages_in_use = pool_->pages_in_use();
    st.state_pages_peak = pool_->peak_pages();
    bench_routing_.read(st, config_.text.n_routed_experts / (ep_ ? ep_->ranks() : 1), stream_.get());
    return st;
}

void CudaV41Model::reset_stats() const {
    std::lock_guard<std::mutex> lock(mutex_);
    stats_ = {};
    timer_.reset();
    bench_routing_.reset(stream_.get());
}

void CudaV41Model::set_even_routing(bool on) const {
    std::lock_guard<std::mutex> lock(mutex_);
    if (bench_routing_.set_even(on)) {  // they captured the other routing
        graphs_.clear();
        draft_graphs_.clear();
    }
}

void CudaV41Model::hc_site(const DeviceHc& hw, const float* x, int64_t rows, float* pre, float* post, float* comb,
                          const float* collapse_pre, float* collapsed, Stream s, bool keep) const {
    const V41TextConfig& c = config_.text;
    const int64_t hc = c.hc_mult, D = c.hidden_size;
    const float eps = static_cast<float>(c.rms_norm_eps), hc_eps = static_cast<float>(c.hc_eps);
    if (!fast_) {
        hc_mixes({.x = x, .fn = hw.fn, .base = hw.base, .scale = hw.scale, .rows = rows, .hc = hc, .hidden = D,
                  .sinkhorn_iters = c.hc_sinkhorn_iters, .norm_eps = eps, .hc_eps = hc_eps, .pre = pre, .post = post,
                  .comb = comb, .collapse_pre = collapse_pre, .collapsed = collapsed, .round_bf16 = official()},
                 s);
        return;
    }
    // The mixing logits x · fn and dot(x, x) as split-K partial planes (3xTF32 tensor-core MMAs), which
    // hc_pre sums in plane order, scales by the norm's factor (the reference: dot(x · r, fn); the same up to
    // rounding), and turns into pre, post, comb (the CPU's Sinkhorn order) and the collapse.
    const int64_t outputs = (2 + hc) * hc, flat = hc * D, splits = hc_mix_splits(flat);
    const size_t mark = workspace_.mark();
    float* partial = workspace_.alloc_n<float>(splits * rows * (outputs + 1));
    float* mix = workspace_.alloc_n<float>(rows * (outputs + 1));
    hc_mix_splitk({.x = x, .fn = hw.fn, .rows = rows, .outputs = outputs, .flat = flat, .partial = partial,
                   .partials_only = true},
                  s);
    hc_pre({.x = x, .fn = hw.fn, .base = hw.base, .scale = hw.scale, .rows = rows, .hc = hc, .hidden = D,
            .sinkhorn_iters = c.hc_sinkhorn_iters, .norm_eps = eps, .hc_eps = hc_eps, .post = post, .comb = comb,
            .collapsed = collapsed, .round_bf16 = official(), .mix = mix, .mix_given = true, .mix_partial = partial,
            .mix_splits = splits, .pre_out = pre, .collapse_pre = collapse_pre},
           s);
    if (!keep) workspace_.reset(mark);  // stream-ordered
}

float* CudaV41Model::compute(const Batch& b) const {
    const V41TextConfig& c = config_.text;
    const Stream s = stream_.get(), side = side_stream_.get();
    const int64_t S = b.rows, D = c.hidden_size, hc = c.hc_mult, V = c.vocab_size, L = c.num_hidden_layers;
    const float eps = static_cast<float>(c.rms_norm_eps);
    const bool off = official();

    // Engram first, on the side stream (forked from the main stream after the input copy, joined
    // before the first Engram layer; inside a graph capture the events make it a branch of the
    // graph): gather the table rows (mapped host memory) and project them, overlapped with the layers
    // before the first Engram layer.
    const int64_t n_engram = engram_layout_.num_layers(), cols = engram_layout_.num_cols();
    std::vector<float*> engram_kv(static_cast<size_t>(n_engram), nullptr);
    if (n_engram > 0) {
        engram_fork_.record(s);
        engram_fork_.wait(side);
        const int64_t* d_rows = b.at<int64_t>(b.engram_rows);
        for (int64_t l = 0; l < L; ++l) {
            const V41DeviceLayer& lw = weights_.layers[size_t(l)];
            if (!lw.has_engram) continue;
            const int64_t e = c.engram_index(l), in = cols * c.engram_head_dim;
            float* emb = workspace_.alloc_n<float>(S * in);
            engram_gather({.table = lw.engram.table, .rows = d_rows + e * S * cols, .tokens = S, .cols = cols, .out = emb},
                          side);
            engram_kv[size_t(e)] = workspace_.alloc_n<float>(S * (hc + 1) * D);
            project(lw.engram.wkv, emb, S, engram_kv[size_t(e)], side, Scratch::kKeep);
        }
        engram_ready_.record(side);
    }

    float* x = workspace_.alloc_n<float>(S * hc * D);
    float* x2 = workspace_.alloc_n<float>(S * hc * D);
    embed({.table = weights_.embed, .tokens = b.at<int32_t>(b.token_ids), .x = x, .rows = S, .hc = hc, .round_bf16 = off}, s);
    float* pre_mix = workspace_.alloc_n<float>(S * hc);
    copy_on_device(pre_mix, b.at<float>(b.pre_mix), size_t(S * hc) * sizeof(float), s);
    float* pre_a = workspace_.alloc_n<float>(S * hc);
    float* pre_f = workspace_.alloc_n<float>(S * hc);
    float* post = workspace_.alloc_n<float>(S * hc);
    float* comb = workspace_.alloc_n<float>(S * hc * hc);
    float* a = workspace_.alloc_n<float>(S * D);
    float* o = workspace_.alloc_n<float>(S * D);
    // The DSpark taps of attached segments' rows: [num_taps, taps * D] (cuda_v41_dspark.cpp).
    float* taps = b.num_taps > 0 ? workspace_.alloc_n<float>(b.num_taps * int64_t(c.dspark_target_layer_ids.size()) * D)
                                 : nullptr;
    bool waited = false;
    const Batch* lb = &b;  // the batch the layer runs (bounded replay: the tail from the decoder on)
    // Fast mode: `a` already holds the next site's collapse, written by the previous site's hc_post (its
    // coefficients are the site before's pre: the delayed pre-mix), unless Engram or a replay cut changes
    // the streams in between.
    bool a_collapsed = false;
    for (int64_t l = 0; l < L; ++l) {
        const V41DeviceLayer& lw = weights_.layers[size_t(l)];
        if (lw.has_engram) {
            if (!waited) engram_ready_.wait(s);
            waited = true;
            // Image-span rows: gate 0 (spec §5.4).
            engram_fuse({.kv = engram_kv[size_t(c.engram_index(l))], .gate_weight = lw.engram.gate_weight,
                         .gate_off = lb->any_image ? lb->at<uint8_t>(lb->image_rows) : nullptr, .streams = x,
                         .tokens = lb->rows, .hc = hc, .hidden = D, .eps = eps, .round_bf16 = off, .tree_sum = fast_},
                        s);
        }
        if (b.replay && l == b.replay->layer) lb = &replay_cut(b, x, pre_mix, engram_kv, waited);
        const int64_t SL = lb->rows;
        tap_layer(l, *lb, x, taps);  // the stream entering the layer (after its Engram)
        for (int site = 0; site < 2; ++site) {
            const DeviceHc& hw = site == 0 ? lw.hc_attn : lw.hc_ffn;
            // Where a already holds this site's collapse, the norm and the block need nothing of the mixes (pre, post,
            // comb: this site's hc_post reads them): the mixes run on the mHC stream (CudaModelOptions::
            // v41_hc_side_stream), forked here after the previous site's hc_post and joined before this site's; their
            // scratch stays allocated until then (below the site's own).
            const bool hc_side = fast_ && hc_side_stream_ && a_collapsed && SL <= kHcSideRows;
            const size_t site_mark = workspace_.mark();
            if (hc_side) {
                ++stats_.hc_side_stream_sites;
                hc_fork_.record(s);
                hc_fork_.wait(hc_stream_.get());
                hc_site(hw, x, SL, site == 0 ? pre_a : pre_f, post, comb, site == 0 ? pre_mix : pre_a, nullptr, hc_stream_.get(), true);
                hc_done_.record(hc_stream_.get());
            } else {
                hc_site(hw, x, SL, site == 0 ? pre_a : pre_f, post, comb, site == 0 ? pre_mix : pre_a, a_collapsed ? nullptr : a, s);
            }
            const size_t inner = workspace_.mark();
            // The norm also writes a's QAT bf16 form where the site's first projection reads it (the same bits as
            // act_quant_dequant then to_bf16 in that projection).
            const float* norm = site == 0 ? lw.attn_norm : lw.ffn_norm;
            uint16_t* a_quant = qat_form(site == 0 ? lw.wq_a : lw.shared_w1, SL, D, norm, a);
            rms_norm({.x = a, .weight = norm, .out = a, .rows = SL, .n = D, .eps = eps, .round_bf16 = off, .out_bf16_qat = a_quant,
                      .tree_sum = fast_},
                     s);
            if (site == 0) attention(l, *lb, a, o, a_quant);
            else moe(l, *lb, a, o, a_quant);
            workspace_.reset(inner);
            if (hc_side) {
                hc_done_.wait(s);  // (a capture must end joined)
                workspace_.reset(site_mark);
            }
            // The next site's collapse in this pass where its coefficients are known: the FFN site's (this
            // layer's attention pre) or the next layer's attention site's (this FFN pre), not across an
            // Engram layer or a replay cut.
            const float* next_pre = nullptr;
            if (fast_) {
                if (site == 0)
                    next_pre = pre_a;
                else if (l + 1 < L && !weights_.layers[size_t(l + 1)].has_engram && !(b.replay && l + 1 == b.replay->layer))
                    next_pre = pre_f;
            }
            hc_post({.out = o, .x = x, .post = post, .comb = comb, .y = x2, .rows = SL, .hc = hc, .hidden = D,
                     .round_bf16 = off, .mix_first = true, .collapse_pre = next_pre, .collapsed = next_pre ? a : nullptr},
                    s);
            a_collapsed = next_pre != nullptr;
            std::swap(x, x2);
        }
        std::swap(pre_mix, pre_f);
    }
    if (n_engram > 0 && !waited) engram_ready_.wait(s);  // join the side stream (a capture must end joined)
    write_context(b, taps);  // the drafter's context rows of the tapped rows

    // Final collapse with the last FFN site's pre, norm and head for the rows whose logits are wanted.
    const int64_t R = b.num_picked;
    if (R == 0) return nullptr;
    const int32_t* d_picked = b.at<int32_t>(b.picked);
    float* xs = workspace_.alloc_n<float>(R * hc * D);
    float* ps = workspace_.alloc_n<float>(R * hc);
    gather_rows({.src = x, .index = d_picked, .dst = xs, .n = R, .width = hc * D}, s);
    gather_rows({.src = pre_mix, .index = d_picked, .dst = ps, .n = R, .width = hc}, s);
    float* y = workspace_.alloc_n<float>(R * D);
    hc_collapse({.x = xs, .pre = ps, .out = y, .rows = R, .hc = hc, .hidden = D, .round_bf16 = off}, s);
    rms_norm({.x = y, .weight = weights_.norm, .out = y, .rows = R, .n = D, .eps = eps, .round_bf16 = off, .tree_sum = fast_},
             s);
    float* logits = workspace_.alloc_n<float>(R * V);
    if (!project_fast(weights_.head, y, D, R, logits, V, false, false, s, Scratch::kRelease))
        linear({.x = y, .x_ld = D, .weight = weights_.head, .y = logits, .y_ld = V, .rows = R}, s);
    return logits;
}

ForwardOutputs CudaV41Model::forward_sampled(std::span<const SequenceChunk> chunks, std::span<const uint8_t> want_logits,
                                             std::span<const DeviceDraw> draws) const {
    std::lock_guard<std::mutex> lock(mutex_);
    set_current_device(device_);
    const V41TextConfig& c = config_.text;
    const Stream s = stream_.get();
    const int64_t V = c.vocab_size;
    DI_CHECK(want_logits.empty() || want_logits.size() == chunks.size(), "forward_sampled: ", want_logits.size(),
             " logits flags for ", chunks.size(), " chunks");
    auto wants = [&](size_t i) { return want_logits.empty() || want_logits[i] != 0; };
    const std::vector<uint8_t> drawn = check_device_draws(draws, chunks);
    Batch b;
    bool decode = !chunks.empty(), short_chunks = !chunks.empty();
    for (size_t i = 0; i < chunks.size(); ++i) {
        const SequenceChunk& ch = chunks[i];
        DI_CHECK(ch.sequence != nullptr, "forward_batch: chunk without a sequence");
        const int64_t n = static_cast<int64_t>(ch.tokens.size());
        DI_CHECK(n > 0, "forward: chunk ", i, " has no tokens");
        DI_CHECK(ch.image_span.empty() || ch.image_span.size() == ch.tokens.size(), "image_span has ",
                 ch.image_span.size(), " flags for ", ch.tokens.size(), " tokens");
        auto* st = dynamic_cast<V41DeviceState*>(&ch.sequence->state());
        DI_CHECK(st != nullptr, "forward: the sequence was not created by this CUDA DeepSeek-V4.1 model");
        for (V41DeviceState* o : b.states) DI_CHECK(o != st, "forward: a sequence appears twice in a batch");
        const int64_t P0 = st->length;
        DI_CHECK(P0 + n <= max_len_, "sequence of ", P0 + n, " tokens exceeds the CUDA model's max_model_len ", max_len_);
        b.row_begin.push_back(static_cast<int64_t>(b.tokens.size()));
        for (int64_t t = 0; t < n; ++t) {
            const int32_t tok = ch.tokens[size_t(t)];
            DI_CHECK(tok >= 0 && tok < V, "token id ", tok, " at index ", t, " is outside [0, ", V, ")");
            b.tokens.push_back(tok);
            const uint8_t img = ch.image_span.empty() ? 0 : ch.image_span[size_t(t)];
            b.image.push_back(img);
            b.any_image = b.any_image || img != 0;
        }
        b.num_rows.push_back(n);
        b.first_position.push_back(P0);
        b.max_position = std::max(b.max_position, P0 + n - 1);
        b.max_rows = std::max(b.max_rows, n);
        b.states.push_back(st);
        // A pass without drafter taps (SequenceChunk::drafter_taps: speculation paused) keeps nothing for
        // the drafter, so it can replay a graph.
        const bool taps = st->dspark.has_value() && ch.drafter_taps;
        b.drafter_taps.push_back(taps);
        decode = decode && n == 1 && !(ch.all_logits && wants(i));
        short_chunks = short_chunks && n <= kGraphChunkRows;
    }
    const int64_t real_rows = static_cast<int64_t>(b.tokens.size());
    // The pages this forward writes: the sequences' own (copy-on-write), the entry pages of its positions.
    prepare_writes(b.states, b.num_rows);
    mark_replay(b, chunks, drawn);  // bounded replay: the chunks whose decoder runs their last W rows only
    // A pure decode step replays the CUDA graph of its (rows, context) bucket; padding rows decode
    // token 0 at position 0 of the scratch sequence (batch invariance: they change no other row).
    // Steps of short chunks (verify rows) too: every table is sized per row of the bucket (plan()).
    // Steps with image-span rows run eagerly (a graph's kernels read no image flags).
    const bool graph_step = !b.replay && !b.any_image && (decode || (verify_graphs_ && short_chunks));
    const int64_t bucket = graphs_.enabled() && graph_step ? graph_bucket(real_rows) : 0;
    b.graph = bucket > 0 && bucket <= limits_.max_rows;  // (with DSpark taps: every row taps, plan_taps)
    if (b.graph) {
        auto* pad = static_cast<V41DeviceState*>(&pad_.state());
        for (int64_t k = real_rows; k < bucket; ++k) {
            b.row_begin.push_back(k);
            b.tokens.push_back(0);
            b.image.push_back(0);
            b.num_rows.push_back(1);
            b.first_position.push_back(0);
            b.states.push_back(pad);
        }
        b.max_position = context_bucket(b.max_position + 1, max_len_) - 1;
    }
    const int64_t S = static_cast<int64_t>(b.tokens.size());
    b.rows = S;
    b.mask_ld = b.max_position + 1;
    // Rows of logits: every row of a graph step (in order); else the rows a chunk wants (all or its last)
    // and the last row of a chunk with draws (every row with verify draws). Chunks that want neither
    // (mid-prefill) skip the head.
    std::vector<int32_t> picked;
    std::vector<int64_t> first_pick(chunks.size(), -1), num_pick(chunks.size(), 0);
    for (size_t i = 0; i < chunks.size(); ++i) {
        const int64_t n = b.num_rows[i];
        if (b.graph || wants(i) || drawn[i]) {
            const int64_t from = (wants(i) && chunks[i].all_logits) || drawn[i] == 2 ? 0 : n - 1;
            first_pick[i] = static_cast<int64_t>(picked.size()) + (b.graph ? from : 0);
            num_pick[i] = n - from;
            for (int64_t r = b.graph ? 0 : from; r < n; ++r) picked.push_back(static_cast<int32_t>(b.row_begin[i] + r));
        }
    }
    if (b.graph)
        for (int64_t r = real_rows; r < S; ++r) picked.push_back(static_cast<int32_t>(r));
    if (b.replay)  // (the logits come from the tail's rows)
        for (int32_t& r : picked) r = b.replay->row_map[size_t(r)];
    b.num_picked = static_cast<int64_t>(picked.size());
    std::vector<int32_t> draw_rows;  // each draw samples its row's logits (by default its chunk's last)
    for (const DeviceDraw& d : draws)
        draw_rows.push_back(device_draw_logit_row(d, b.num_rows[size_t(d.chunk)], first_pick[size_t(d.chunk)],
                                                  num_pick[size_t(d.chunk)]));

    const size_t mark = workspace_.mark();
    // On an exception the streams are drained and the scratch returned, so the next forward starts clean.
    ArenaRollback release(workspace_, mark, stream_, {&side_stream_, &shared_stream_, &hc_stream_});  // (on an exception)

    // The scratch every layer reuses, then the plan: its tables point into that scratch, the
    // sequences' state and the pending rings; one transfer puts them in the workspace.
    timer_.start(s);
    b.ckv = workspace_.alloc_n<float>(S * c.head_dim);
    b.cg = workspace_.alloc_n<float>(S * c.head_dim);
    b.codes = workspace_.alloc_n<uint8_t>(S * formats_.window_bytes);
    input_.clear();
    b.picked = input_.add(picked);
    plan(b, input_);
    plan_taps(b, input_);
    if (b.replay) plan_replay(b, input_);
    const size_t in_bytes = input_.size();
    if (!pinned_in_ || pinned_in_->nbytes() < in_bytes) pinned_in_ = std::make_unique<PinnedBuffer>(in_bytes * 2);
    std::memcpy(pinned_in_->host(), input_.data(), in_bytes);
    auto* d_in = static_cast<uint8_t*>(workspace_.alloc(in_bytes));
    copy_to_device(d_in, pinned_in_->host(), in_bytes, s);
    b.in = d_in;
    b.topk = workspace_.alloc_n<int32_t>((S + 1) * c.index_topk);
    b.mask = workspace_.alloc_n<uint8_t>((S + 1) * b.mask_ld);
    if (b.replay) bind_replay(b);

    // A graph step: the captured work reads its inputs from the block above, at the same arena offset
    // in every step of the bucket, and allocates the same arena ranges: replaying it is the eager path.
    float* logits = b.graph ? graphs_.run({S, b.max_position + 1, b.num_taps > 0 ? 1 : 0}, workspace_, s, [&] { return compute(b); },
                                        stats_.graph_captures, stats_.graph_replays)
                            : compute(b);

    draws_.enqueue(logits, V, draws, draw_rows, workspace_, s);
    stats_.device_draws += static_cast<int64_t>(draws.size());
    ForwardOutputs out;
    out.logits.resize(chunks.size());
    for (size_t i = 0; i < chunks.size(); ++i) {
        if (!wants(i)) continue;
        out.logits[i].resize(static_cast<size_t>(num_pick[i] * V));
        copy_to_host(out.logits[i].data(), logits + first_pick[i] * V, out.logits[i].size() * sizeof(float), s);
    }
    timer_.end(s);
    stream_.synchronize();
    side_stream_.synchronize();
    timer_.account(stats_);
    out.tokens = draws_.tokens(draws.size());
    out.accepted = draws_.accepted(draws.size());
    {  // (before the arena is reused)
        DeviceDraws::Fallback fb = draws_.fallback(logits, V, draws, out.tokens, draw_rows, s);
        out.draw_logits = std::move(fb.logits);
        out.draw_probs = std::move(fb.probs);
    }
    release.disarm();
    workspace_.reset(mark);
    for (size_t i = 0; i < chunks.size(); ++i) b.states[i]->length += b.num_rows[i];
    return out;
}

}  // namespace deepinfer::cuda
