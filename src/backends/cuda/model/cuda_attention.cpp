// SPDX-License-Identifier: Apache-2.0
// CudaModel::attention: V4's attention sub-block on the CUDA ops, mirroring src/model/attention_block.cpp
// and compressor.cpp step by step with the same rounding points (Q and KV paths, the compressors, the
// lightning indexer, the sparse sink attention, the grouped output projection).
#include <cmath>

#include "backends/cuda/model/cuda_model_impl.h"
#include "backends/cuda/model/grouped_wo_a.h"

namespace deepinfer::cuda::v4 {
void CudaModel::attention(const DeviceLayer& lw, const Batch& b, const float* a, float* out, const ConvertedInput* made) const {
    const ModelConfig& c = config_;
    const Stream s = stream_.get();
    const bool off = official();
    const int64_t S = b.rows, H = c.num_attention_heads, Dh = c.head_dim, QL = c.q_lora_rank;
    const int64_t R = c.qk_rope_head_dim;
    const float eps = static_cast<float>(c.rms_norm_eps);
    const bool compressed = lw.attention_type != AttentionType::kSliding;
    const float* rope = compressed ? rope_comp_ : rope_main_;

    // The grouped output projection on tensor cores (then the attention writes its output in bf16 only),
    // and q in bf16 for the tensor-core attention (official numerics: q holds bf16 values): the RoPE
    // kernel writes half the bytes and the attention reads half. Then q16 takes the place of the f32
    // attention output, which is not written.
    const int64_t G = c.o_groups, OL = c.o_lora_rank, GW = H * Dh / G;
    const bool tensor_cores = fast_ && lw.wo_a_groups && fast_linear_supported(lw.wo_a.rows(0, OL));
    const bool bf16_q = tensor_cores && off && sparse_attention_tensor_cores_fit(Dh);

    // The fast GEMMs' forms of a and qr, each converted once for all the projections that read them.
    ConvertedInput ca = made && made->x == a ? *made : ConvertedInput{.x = a, .rows = S, .cols = c.hidden_size};
    // Q path: qr = q_norm(wq_a a); q = head_norm(wq_b qr); RoPE.
    float* qr = workspace_->alloc_n<float>(S * QL);
    float* q = workspace_->alloc_n<float>(S * H * Dh);
    uint16_t* q16 = bf16_q ? workspace_->alloc_n<uint16_t>(S * H * Dh) : nullptr;
    ConvertedInput cqr{.x = qr, .rows = S, .cols = QL};
    project(lw.wq_a, a, S, qr, &ca);
    rms_norm_forms(lw.q_norm, qr, S, QL, cqr, fast_fp8_block(lw.wq_b), false);  // (+ wq_b's FP8 input)
    project(lw.wq_b, qr, S, q, &cqr);
    rope_rows({.x = q, .rows = S, .heads = H, .dim = Dh, .positions = b.positions, .cos_sin = rope, .rope_dim = R,
               .head_norm = off ? HeadNorm::kBf16Arith : HeadNorm::kF32, .eps = eps, .round_rope_dims = off,
               .tree_sum = fast_, .out_bf16 = q16},
              s);
    // KV path: kv = kv_norm(wkv a); RoPE; FP8 simulation of the nope dims.
    float* kv = workspace_->alloc_n<float>(S * Dh);
    project(lw.wkv, a, S, kv, &ca);
    rope_rows({.x = kv, .rows = S, .heads = 1, .dim = Dh, .positions = b.positions, .cos_sin = rope, .rope_dim = R,
               .head_norm = HeadNorm::kF32, .eps = eps, .head_norm_weight = lw.kv_norm, .head_norm_round_bf16 = off,
               .round_rope_dims = off, .qat = off ? Qat::kFp8Nope : Qat::kNone},
              s);  // (kv_norm: the weighted head norm of the same launch)

    // Compressors: project, pool completed windows (the gate rows plus ape as read), then keep the chunk's rows
    // in the rings (the gate rows plus ape).
    auto run_compressor = [&](const DeviceCompressor& cw, bool indexer, Qat qat) {
        const int64_t width = cw.overlap ? 2 * cw.head_dim : cw.head_dim;
        const int64_t ring = (cw.overlap ? 2 : 1) * cw.ratio + kRingHeadroom;
        // wkv and wgate as one GEMM where they share an allocation (DeviceCompressor::wkv_gate) and run as a
        // bf16 tensor-core GEMM: kv and gate are then the halves of each row of [S, 2·width], and the launch
        // takes wkv's split-K chunks, so each half has the bits of its own GEMM.
        float* ckv = workspace_->alloc_n<float>(S * 2 * width);
        float* cg = nullptr;
        int64_t ld = width;
        const DeviceLinear& wj = cw.wkv_gate;
        if (off && wj.weight && wj.kind == WeightKind::kBF16 && fast_linear_k_chunks(cw.wkv) == fast_linear_k_chunks(cw.wgate) &&
            project_fast(wj, a, S, ckv, false, &ca, fast_linear_k_chunks(cw.wkv))) {
            cg = ckv + width;
            ld = 2 * width;
        } else {
            cg = ckv + S * width;
            project_f32(cw.wkv, a, S, ckv, &ca);
            project_f32(cw.wgate, a, S, cg, &ca);
        }
        // Graphs: a decode row completes at most one window, a short chunk ceil(kGraphChunkRows / ratio).
        int64_t max_windows = !b.graph ? 0 : b.short_chunks ? (kGraphChunkRows + cw.ratio - 1) / cw.ratio : 1;
        for (int64_t i = 0; i < b.num_segments && !b.graph; ++i) {
            const int64_t P0 = b.first_position[size_t(i)], n = b.num_rows[size_t(i)];
            max_windows = std::max(max_windows, (P0 + n) / cw.ratio - (P0 + cw.ratio) / cw.ratio + 1);
        }
        compressor({.segments = b.segments, .num_segments = b.num_segments, .max_windows = max_windows,
                    .indexer = indexer, .kv = ckv, .gate = cg, .ld = ld, .ape = cw.ape, .ratio = cw.ratio, .head_dim = cw.head_dim,
                    .ring_rows = ring, .overlap = cw.overlap, .norm = cw.norm, .eps = eps, .cos_sin = rope_comp_,
                    .rope_dim = R, .official = off, .qat = qat},
                   s);
        // This chunk's kv and gate rows into the rings, one launch; the gate rows with their ape (the
        // compressor above added it as it read them).
        ring_write({.segments = b.segments, .num_segments = b.num_segments, .max_rows = b.max_rows,
                    .ring = indexer ? RingKind::kIdxKv : RingKind::kCompKv, .src = ckv, .width = width, .ring_rows = ring,
                    .src_ld = ld, .ring2 = indexer ? RingKind::kIdxGate : RingKind::kCompGate, .src2 = cg, .add2 = cw.ape,
                    .add2_ratio = cw.ratio},
                   s);
    };
    if (lw.compressor) run_compressor(*lw.compressor, false, Qat::kFp8Nope);

    // Lightning indexer (CSA): queries, head weights, scores over visible keys, top-k.
    int32_t* selected = nullptr;
    const int64_t m = lw.compress_ratio;
    if (lw.indexer_compressor) {
        run_compressor(*lw.indexer_compressor, true, Qat::kHadamardFp4);
        const int64_t IH = c.index_n_heads, ID = c.index_head_dim;
        float* qi = workspace_->alloc_n<float>(S * IH * ID);
        float* hw = workspace_->alloc_n<float>(S * IH);
        project(lw.indexer_wq_b, qr, S, qi, &cqr);
        project(lw.indexer_weights_proj, a, S, hw, &ca);
        rope_rows({.x = qi, .rows = S, .heads = IH, .dim = ID, .positions = b.positions, .cos_sin = rope_comp_,
                   .rope_dim = R, .qat = off ? Qat::kHadamardFp4 : Qat::kNone},
                  s);
        const int64_t max_visible = (b.max_position + 1) / m;
        float* scores = workspace_->alloc_n<float>(S * std::max<int64_t>(max_visible, 1));
        selected = workspace_->alloc_n<int32_t>(S * c.index_topk);
        int32_t* counts = workspace_->alloc_n<int32_t>(S);
        indexer_topk({.segments = b.segments, .row_segment = b.row_segment, .positions = b.positions, .rows = S,
                      .q = qi, .weights = hw, .heads = IH, .head_dim = ID, .ratio = m, .topk = c.index_topk,
                      .max_visible = max_visible, .scores = scores, .selected = selected, .num_selected = counts,
                      .official = off, .tensor_cores = fast_, .max_segment_rows = b.max_rows},
                     s);
    }

    // Sparse sink attention over window + compressed candidates, inverse RoPE.
    int64_t max_cand = std::min<int64_t>(c.sliding_window, b.max_position + 1);
    if (lw.attention_type == AttentionType::kHca) max_cand += (b.max_position + 1) / m;
    if (lw.attention_type == AttentionType::kCsa) max_cand += std::min<int64_t>(c.index_topk, (b.max_position + 1) / m);
    float* attn_scratch = workspace_->alloc_n<float>(S * H * max_cand);
    float* o = bf16_q ? nullptr : workspace_->alloc_n<float>(S * H * Dh);
    // The grouped output projection's input: with tensor cores, o in bf16 straight from the attention kernel
    // (its outputs are bf16-rounded: the same values as converting o), each group's rows together at
    // prefill sizes ([G][S, GW]: one dense launch per group), else as [S, H·Dh] (one grouped launch); the
    // f32 o is then not written.
    const bool dense_wo_a = tensor_cores && S >= kWoADenseRows && fast_dense_ws_available();
    uint16_t* ob = tensor_cores ? workspace_->alloc_n<uint16_t>(S * H * Dh) : nullptr;
    const AttentionKind kind = lw.attention_type == AttentionType::kCsa   ? AttentionKind::kCsa
                               : lw.attention_type == AttentionType::kHca ? AttentionKind::kHca
                                                                           : AttentionKind::kSliding;
    sparse_attention({.segments = b.segments, .row_segment = b.row_segment, .positions = b.positions, .rows = S,
                      .heads = H, .head_dim = Dh, .q = bf16_q ? nullptr : q, .q_bf16 = q16, .kv = kv, .sink = lw.sink, .window = c.sliding_window,
                      .window_rows = c.sliding_window + kRingHeadroom, .kind = kind, .ratio = m, .selected = selected,
                      .topk = c.index_topk, .max_candidates = max_cand, .scratch = attn_scratch, .cos_sin = rope,
                      .rope_dim = R, .softmax_scale = 1.0f / std::sqrt(static_cast<float>(Dh)), .official = off,
                      .tensor_cores = fast_, .out = o, .out_bf16 = ob, .bf16_group_heads = dense_wo_a ? H / G : 0,
                      .bf16_group_stride = dense_wo_a ? S * GW : 0, .f32_unused = tensor_cores},
                     s);
    ring_write({.segments = b.segments, .num_segments = b.num_segments, .max_rows = b.max_rows,
                .ring = RingKind::kWindow, .src = kv, .width = Dh, .ring_rows = c.sliding_window + kRingHeadroom},
               s);

    // Grouped output projection: wo_a per group of the flattened heads (bf16 GEMM), then wo_b.
    float* u = workspace_->alloc_n<float>(S * G * OL);
    if (dense_wo_a) {
        // Prefill sizes: each group's rows in bf16 together ([S, GW], group after group), then one dense
        // launch per group (the warp-specialized kernel: 8 launches of >= 128 output tiles each). Every form
        // of the fast GEMM computes an element with the same instructions and additions, so these bits are
        // the grouped launch's below (tests/ops/gemm_fast_cuda_test.cpp, GroupedWoAEqualsDenseLaunchPerGroup).
        for (int64_t g = 0; g < G; ++g) {
            fast_linear({.a = ob + g * S * GW, .weight = lw.wo_a.rows(g * OL, (g + 1) * OL), .y = u + g * OL, .y_ld = G * OL,
                         .rows = S, .round_output_bf16 = off},
                        s);
        }
    } else if (tensor_cores) {
        // Tensor cores, as the reference's bf16 einsum: one grouped launch over wo_a's G row slices.
        grouped_wo_a({.ob = ob, .wo_a = lw.wo_a, .groups = lw.wo_a_groups, .groups_n = G, .rows = S, .out_rank = OL, .u = u,
                      .round_bf16 = off},
                     *workspace_, s);
    } else {
        for (int64_t g = 0; g < G; ++g)
            linear({.x = o + g * GW, .x_ld = H * Dh, .weight = lw.wo_a.rows(g * OL, (g + 1) * OL), .y = u + g * OL,
                    .y_ld = G * OL, .rows = S, .round_output_bf16 = off},
                   s);
    }
    project(lw.wo_b, u, S, out);
}

}  // namespace deepinfer::cuda::v4
