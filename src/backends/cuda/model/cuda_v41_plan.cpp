// SPDX-License-Identifier: Apache-2.0
// The host half of a CudaV41Model forward: walks the batch's segments through the layers as
// src/model/v41/attention.cpp's SharedState does (what KV, index and candidate sources publish per
// segment) and writes every per-row table the layers' kernels read into the input block.
//
// Graph steps (decode rows or short chunks such as verify rows, padded to a bucket with one-row
// segments) size every table from the bucket, not from the positions or the chunks' composition (per
// segment tables hold a row's worth of segments), so one captured graph serves every step of its bucket: the
// compressor gets one group slot per row (slots of rows that complete no group pool their own row
// and store nothing: null destinations), the indexer one IndexRow per row (rows of segments that
// publish nothing score no entries and publish into a discarded top-k row), the candidate stage
// runs wherever a segment could need it, and widths come from the context bucket. Kernels compute
// each row alone, so the rows that exist get the eager path's values bit for bit.
#include <algorithm>

#include "backends/cuda/model/bf16_key_plan.h"
#include "backends/cuda/model/cuda_v41_impl.h"
#include "deepinfer/check.h"
#include "model/state.h"

namespace deepinfer::cuda {

namespace {
// The KV source every segment reads at the current layer: a property of the layer (the latest KV
// source before it), so a graph captured on one step pages the same layer's rows on every replay.
int64_t uniform_kv_source(const CudaV41Model::Batch& b) {
    const int64_t src = b.shared.empty() ? -1 : b.shared[0].kv_source;
    for (const CudaV41Model::Shared& sh : b.shared) DI_ICHECK(sh.kv_source == src);
    return src;
}
}  // namespace

std::vector<int64_t> CudaV41Model::engram_rows(const Batch& b) const {
    const V41TextConfig& c = config_.text;
    const int64_t N = c.engram_max_ngram_size, n_engram = engram_layout_.num_layers(), cols = engram_layout_.num_cols();
    const int64_t S = b.rows;
    std::vector<int64_t> rows(static_cast<size_t>(n_engram * S * cols));
    std::vector<int64_t> tokens(static_cast<size_t>(N)), r(static_cast<size_t>(cols)), history;
    for (size_t i = 0; i < b.states.size(); ++i) {
        V41DeviceState& st = *b.states[i];
        const int64_t n = b.num_rows[i], P0 = b.first_position[i], row0 = b.row_begin[i];
        const int64_t ring = static_cast<int64_t>(st.engram_history.size());
        const int64_t base = std::max<int64_t>(0, P0 - (N - 1));
        history.clear();
        for (int64_t q = base; q < P0; ++q) history.push_back(st.engram_history[size_t(q % ring)]);
        for (int64_t t = 0; t < n; ++t)
            history.push_back(b.any_image && b.image[size_t(row0 + t)]
                                  ? kEngramDead
                                  : token_map_.compressed_ids[size_t(b.tokens[size_t(row0 + t)])]);
        for (int64_t t = 0; t < n; ++t) {
            engram_lookback(history, P0 + t - base, engram_pad_, tokens);
            for (int64_t l = 0; l < n_engram; ++l) {
                engram_layout_.rows(l, tokens, r);
                for (int64_t col = 0; col < cols; ++col) {
                    DI_CHECK(r[size_t(col)] >= 0 && r[size_t(col)] < engram_layout_.num_rows(l), "engram row ",
                             r[size_t(col)], " out of range");
                    rows[size_t((l * S + row0 + t) * cols + col)] = r[size_t(col)];
                }
            }
        }
        for (int64_t t = std::max<int64_t>(0, n - ring); t < n; ++t)
            st.engram_history[size_t((P0 + t) % ring)] = history[size_t(P0 + t - base)];
    }
    return rows;
}

void CudaV41Model::plan(Batch& b, InputBlock& in) const {
    const V41TextConfig& c = config_.text;
    const int64_t S = b.rows, hc = c.hc_mult;
    std::vector<int32_t> positions, row_segment;
    for (size_t i = 0; i < b.states.size(); ++i)
        for (int64_t t = 0; t < b.num_rows[i]; ++t) {
            positions.push_back(static_cast<int32_t>(b.first_position[i] + t));
            row_segment.push_back(static_cast<int32_t>(i));
        }
    b.positions = in.add(positions);
    b.row_segment = in.add(row_segment);
    b.token_ids = in.add(b.tokens);
    if (b.any_image) b.image_rows = in.add(b.image);
    std::vector<float> one_hot(static_cast<size_t>(S * hc), 0.0f);
    for (int64_t t = 0; t < S; ++t) one_hot[size_t(t * hc)] = 1.0f;  // the first collapse reads stream 0
    b.pre_mix = in.add(one_hot);
    std::vector<uint8_t*> code_rows(static_cast<size_t>(S));
    for (int64_t t = 0; t < S; ++t) code_rows[size_t(t)] = b.codes + t * formats_.window_bytes;
    b.code_rows = in.add(code_rows);
    if (engram_layout_.num_layers() > 0) b.engram_rows = in.add(engram_rows(b));
    // Per segment a page table of its entry pages (prepare_writes made those of its positions).
    int64_t table_len = 1;
    if (b.graph) {
        table_len = std::max<int64_t>(1, layout_->entry_pages(b.max_position + 1));
    } else {
        for (const V41DeviceState* st : b.states) table_len = std::max(table_len, st->entries.size());
    }
    // (A graph step's segment tables hold one entry per row: at most that many segments.)
    const size_t table_segments = b.graph ? size_t(b.rows) : b.states.size();
    DI_ICHECK(table_segments >= b.states.size());
    std::vector<const uint8_t*> tables(table_segments * size_t(table_len), nullptr);
    for (size_t i = 0; i < b.states.size(); ++i) {
        const V41DeviceState& st = *b.states[i];
        DI_ICHECK(layout_->entry_pages(b.first_position[i] + b.num_rows[i]) <= std::min(table_len, st.entries.size()));
        for (int64_t k = 0; k < std::min(table_len, st.entries.size()); ++k)
            tables[i * size_t(table_len) + size_t(k)] = reinterpret_cast<const uint8_t*>(st.entries.page(k));
    }
    b.table_len = table_len;
    b.entry_tables = in.add(tables);
    b.shared.assign(b.states.size(), Shared{});
    b.layers.assign(size_t(c.num_hidden_layers), LayerPlan{});
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        if (b.replay && l == b.replay->layer) break;  // the decoder's layers: the tail's (plan_replay)
        const V41DeviceLayer& lw = weights_.layers[size_t(l)];
        if (c.compress_ratio(l) > 0) {
            if (lw.has_compressor) plan_compress(l, b, in);
            if (lw.has_indexer) plan_index(l, b, in);
        }
        plan_attention(l, b, in);
    }
}

void CudaV41Model::plan_compress(int64_t layer, Batch& b, InputBlock& in) const {
    const V41TextConfig& c = config_.text;
    const int64_t hd = c.head_dim, r = c.compress_ratio(layer);
    // The groups the chunk completes (group g = positions g*r .. g*r + r - 1, entry g), their rows.
    const int64_t pending_rows = r + kRingHeadroom;
    std::vector<const float*> kv_rows, gate_rows;
    std::vector<int32_t> group_pos;
    std::vector<uint8_t*> entry_dst, key_dst;
    std::vector<void*> ring_kv_dst, ring_gate_dst;
    const V41LayerLayout& y = layout_->layers[size_t(layer)];
    for (size_t i = 0; i < b.states.size(); ++i) {
        const V41DeviceState& st = *b.states[i];
        const int64_t P0 = b.first_position[i], n = b.num_rows[i], row0 = b.row_begin[i];
        auto* pkv = reinterpret_cast<float*>(st.ring(y.pending_kv));
        auto* pgate = reinterpret_cast<float*>(st.ring(y.pending_gate));
        for (int64_t t = 0; t < n; ++t) {
            const int64_t pos = P0 + t;
            if ((pos + 1) % r != 0) {
                if (b.graph) {  // a slot that pools this row and stores nothing
                    for (int64_t k = 0; k < r; ++k) {
                        kv_rows.push_back(b.ckv + (row0 + t) * hd);
                        if (r > 1) gate_rows.push_back(b.cg + (row0 + t) * hd);
                    }
                    group_pos.push_back(0);
                    entry_dst.push_back(nullptr);
                    key_dst.push_back(nullptr);
                }
                continue;
            }
            const int64_t g = pos / r;
            for (int64_t k = 0; k < r; ++k) {
                const int64_t q = g * r + k;
                kv_rows.push_back(q >= P0 ? b.ckv + (row0 + q - P0) * hd : pkv + (q % pending_rows) * hd);
                if (r > 1) gate_rows.push_back(q >= P0 ? b.cg + (row0 + q - P0) * hd : pgate + (q % pending_rows) * hd);
            }
            group_pos.push_back(static_cast<int32_t>(g * r));
            entry_dst.push_back(st.entry(layer, g));
            key_dst.push_back(st.index_key(layer, g));
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
    CompressPlan& p = b.layers[size_t(layer)].compress;
    p.groups = static_cast<int64_t>(group_pos.size());
    DI_ICHECK(!b.graph || p.groups == b.rows);
    p.kv_rows = in.add(kv_rows);
    p.gate_rows = in.add(gate_rows);
    p.group_pos = in.add(group_pos);
    p.entry_dst = in.add(entry_dst);
    p.key_dst = in.add(key_dst);
    p.ring_kv = in.add(ring_kv_dst);
    p.ring_gate = in.add(ring_gate_dst);
}

void CudaV41Model::plan_index(int64_t layer, Batch& b, InputBlock& in) const {
    const V41TextConfig& c = config_.text;
    const int64_t ratio = c.compress_ratio(layer);
    // The rows of the segments whose KV source has entries (the others publish nothing, as transformers).
    const bool candidate_source = layer == c.candidate_source_layer_id;
    const bool may_use = c.candidate_source_layer_id >= 0 && c.candidate_source_layer_id < layer;
    std::vector<IndexRow> rows;
    std::vector<int32_t> lengths;
    bool any_mask = false;
    int64_t max_entries = 0;
    for (size_t i = 0; i < b.states.size(); ++i) {
        Shared& sh = b.shared[i];
        const int64_t n = sh.kv_source < 0 ? 0 : (b.first_position[i] + b.num_rows[i]) / c.compress_ratio(sh.kv_source);
        if (n == 0) {
            if (b.graph)  // no entries: scores nothing, publishes into the discarded row
                for (int64_t t = 0; t < b.num_rows[i]; ++t) {
                    rows.push_back({static_cast<int32_t>(b.rows), 0, 0, -1, nullptr, static_cast<int32_t>(i)});
                    lengths.push_back(0);
                }
            continue;
        }
        const bool uses = may_use && sh.has_candidates && !candidate_source;
        if (candidate_source) {
            sh.has_candidates = true;
            sh.candidate_entries = n;
        }
        any_mask |= uses;
        const uint8_t* keys = b.states[i]->index_key(sh.kv_source, 0);
        for (int64_t t = 0; t < b.num_rows[i]; ++t) {
            const int64_t pos = b.first_position[i] + t;
            rows.push_back({static_cast<int32_t>(b.row_begin[i] + t), static_cast<int32_t>(n),
                            static_cast<int32_t>(std::min(n, (pos + 1) / ratio)),
                            uses ? static_cast<int32_t>(sh.candidate_entries) : -1, keys, static_cast<int32_t>(i)});
            lengths.push_back(static_cast<int32_t>(n));
        }
        max_entries = std::max(max_entries, n);
        sh.has_topk = true;
    }
    IndexPlan& p = b.layers[size_t(layer)].index;
    p.rows = static_cast<int64_t>(rows.size());
    p.candidates = candidate_source || any_mask;
    p.max_entries = max_entries;
    p.source = uniform_kv_source(b);
    if (b.graph) {
        DI_ICHECK(p.rows == b.rows);
        // Every segment's KV source is the same layer; its entries are below the context bucket.
        const int64_t src = b.shared.empty() ? -1 : b.shared[0].kv_source;
        p.max_entries = std::max<int64_t>(1, src < 0 ? 1 : (b.max_position + 1) / c.compress_ratio(src));
        DI_ICHECK(max_entries <= p.max_entries);
        p.candidates = candidate_source || may_use;
    }
    p.index_rows = in.add(rows);
    p.lengths = in.add(lengths);
}

void CudaV41Model::plan_attention(int64_t layer, Batch& b, InputBlock& in) const {
    const V41TextConfig& c = config_.text;
    const int64_t ratio = c.compress_ratio(layer), window_rows = c.sliding_window + kRingHeadroom;
    // Sink attention over the window and the published top-k of the segment's KV source.
    std::vector<SinkSegment> segs;
    std::vector<Bf16KeySegment> key_segs;
    std::vector<void*> ring_dst;
    for (size_t i = 0; i < b.states.size(); ++i) {
        const Shared& sh = b.shared[i];
        const V41DeviceState& st = *b.states[i];
        const int64_t P0 = b.first_position[i], n = b.num_rows[i];
        const int64_t entries = ratio > 0 && sh.kv_source >= 0 ? (P0 + n) / c.compress_ratio(sh.kv_source) : 0;
        const bool use_compressed = sh.has_topk && entries > 0;
        uint8_t* window = st.ring(layout_->layers[size_t(layer)].window);
        segs.push_back({b.row_begin[i], n, P0, window, use_compressed ? st.entry(sh.kv_source, 0) : nullptr, b.window_begin_of(i)});
        key_segs.push_back({P0, n, b.window_begin_of(i), use_compressed ? entries : 0});
        for (int64_t t = 0; t < n; ++t)
            ring_dst.push_back(t >= n - window_rows ? window + ((P0 + t) % window_rows) * formats_.window_bytes : nullptr);
    }
    if (b.graph) segs.resize(size_t(b.rows), segs.back());  // one entry per row (unused ones: no row names them)
    LayerPlan& p = b.layers[size_t(layer)];
    p.kv_source = ratio > 0 ? uniform_kv_source(b) : -1;
    p.sink_segments = in.add(segs);
    p.ring_dst = in.add(ring_dst);
    // Keys decoded once per layer where segments have many rows (eager forwards of the fast mode where the 64-head
    // kernel runs; graph steps are decode steps, whose rows each read their own keys once).
    p.bf16_key_rows = p.bf16_max_rows = 0;
    p.bf16_all = false;
    // (the launch's shape as attention() sets it, for the kernel choice; the top-k buffer comes after the plan, so
    // `selected` only says whether the layer has picks: its address is not read)
    static const int32_t kHasPicks = 0;
    const SinkAttentionParams shape{.rows = b.rows, .heads = c.num_attention_heads, .head_dim = c.head_dim,
                                    .window = c.sliding_window, .selected = ratio > 0 ? &kHasPicks : nullptr, .topk = c.index_topk,
                                    .official = true, .tensor_cores = true, .tc_split_rows = attention_split_rows_};
    if (fast_ && official() && !b.graph && bf16_key_rows_ > 0 && sink_attention_reads_bf16_keys(shape)) {
        const Bf16KeyPlan kp = plan_bf16_keys(key_segs, b.rows, c.sliding_window, ratio > 0 ? c.index_topk : 0, bf16_key_rows_);
        if (kp.any()) {
            p.bf16_keys = in.add(kp.keys);
            p.bf16_key_rows = kp.key_rows;
            p.bf16_max_rows = kp.max_rows;
            p.bf16_all = std::all_of(kp.keys.begin(), kp.keys.end(), [](const SinkBf16Keys& k) { return k.ring_row >= 0; });
        }
    }
}

PagedCacheRows CudaV41Model::paged_rows(const Batch& b, int64_t layer, bool keys) const {
    if (layer < 0) return {};
    const V41LayerLayout& y = layout_->layers[size_t(layer)];
    return {.tables = b.at<const uint8_t*>(b.entry_tables), .table_len = b.table_len, .per_page = y.entries_per_page,
            .offset = keys ? y.key_offset : y.entry_offset};
}

}  // namespace deepinfer::cuda
