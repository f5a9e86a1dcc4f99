// SPDX-License-Identifier: Apache-2.0
#include "backends/cuda/model/routed_experts.h"

#include "backends/cuda/gemm_fast.h"
#include "backends/cuda/model/expert_exchange.h"
#include "backends/cuda/ops.h"
#include "deepinfer/check.h"

namespace deepinfer::cuda {
namespace {

bool quantized(const DeviceLinear& w) { return w.kind == WeightKind::kFp8Block || w.kind == WeightKind::kFp4; }

bool fast_supported(const DeviceExperts& ex) {
    return fast_linear_supported(ex.shape_w1) && fast_linear_supported(ex.shape_w2) &&
           ex.shape_w1.kind != WeightKind::kBF16 && ex.shape_w2.kind != WeightKind::kBF16;
}

}  // namespace

float* routed_experts(const RoutedExpertsParams& p, DeviceArena& ws, Stream s) {
    DI_CHECK(p.experts && p.x && p.ids && p.weights, "routed_experts: missing input");
    const DeviceExperts& ex = *p.experts;
    const int64_t S = p.rows, D = p.hidden, K = p.top_k, E = p.experts_total, I = ex.shape_w1.out_features;
    const bool off = p.official, fast = p.fast && fast_supported(ex);
    // Fast GEMMs under official numerics with a finer act_quant than the kernels' 128 (V4.1: 32): the
    // reference's per-block quantization first, then the kernels' FP8 form per 128 of its result (the
    // same e4m3 codes wherever a block's scale is its 128-group's largest, else shifted by the scales'
    // distance, exact down to e4m3's normal range).
    const bool fine = fast && off && p.act_block < 128;
    const bool q_in = !fast && off && quantized(ex.shape_w1), q_mid = !fast && off && quantized(ex.shape_w2);
    // The experts' inputs, quantized once per row: FP8 + scales (fast GEMMs, which gather the rows) or
    // act_quant'ed f32 (official numerics on the reference kernels).
    uint8_t* xq = nullptr;
    float* xs = nullptr;
    const float* xin = p.x;
    if (fast) {
        const float* xf = p.x;
        if (fine) {
            float* aq = ws.alloc_n<float>(S * D);
            act_quant_dequant({.x = p.x, .out = aq, .rows = S, .cols = D, .block = p.act_block}, s);
            xf = aq;
        }
        xq = ws.alloc_n<uint8_t>(S * D);
        xs = ws.alloc_n<float>(S * (D / 128));
        act_quant_fp8({.x = xf, .x_ld = D, .rows = S, .cols = D, .q = xq, .scale = xs}, s);
    } else if (q_in) {
        float* aq = ws.alloc_n<float>(S * D);
        act_quant_dequant({.x = p.x, .out = aq, .rows = S, .cols = D, .block = p.act_block}, s);
        xin = aq;
    }
    // The pairs the experts held here run: this GPU's own rows, or under expert parallelism every
    // rank's rows (gathered), of which the pairs of another rank's experts are grouped last and skipped.
    ExpertExchange* ep = p.exchange;
    int64_t T = S, El = E;
    const int32_t* group_ids = p.ids;
    const float* t_wts = p.weights;
    if (ep) {
        DI_ICHECK(ep->rows(p.rank) == S);
        T = ep->total_rows();
        El = E / ep->ranks();
        if (fast) {
            auto* tq = ws.alloc_n<uint8_t>(T * D);
            auto* ts = ws.alloc_n<float>(T * (D / 128));
            ep->all_gather_rows(p.rank, xq, tq, size_t(D), s);
            ep->all_gather_rows(p.rank, xs, ts, size_t(D / 128) * sizeof(float), s);
            xq = tq;
            xs = ts;
        } else {
            auto* tx = ws.alloc_n<float>(T * D);
            ep->all_gather_rows(p.rank, xin, tx, size_t(D) * sizeof(float), s);
            xin = tx;
        }
        auto* t_ids = ws.alloc_n<int32_t>(T * K);
        auto* tw = ws.alloc_n<float>(T * K);
        ep->all_gather_rows(p.rank, p.ids, t_ids, size_t(K) * sizeof(int32_t), s);
        ep->all_gather_rows(p.rank, p.weights, tw, size_t(K) * sizeof(float), s);
        auto* local = ws.alloc_n<int32_t>(T * K);
        expert_local_ids({.ids = t_ids, .n = T * K, .first_expert = static_cast<int32_t>(p.rank * El),
                          .experts_per_rank = static_cast<int32_t>(El), .local_ids = local},
                         s);
        group_ids = local;
        t_wts = tw;
    }
    const float* row_weight = p.weight_before_w2 ? t_wts : nullptr;
    // Permutation: pairs grouped by expert (stable), then grouped GEMMs over all experts at once.
    const int64_t NP = T * K;
    int32_t* perm_src = ws.alloc_n<int32_t>(NP);
    int32_t* perm_slot = ws.alloc_n<int32_t>(NP);
    int32_t* perm_expert = ws.alloc_n<int32_t>(NP);
    int32_t* offsets = ws.alloc_n<int32_t>(El + 2);
    permute({.ids = group_ids, .rows = T, .top_k = K, .experts = ep ? El + 1 : El, .perm_src = perm_src,
             .perm_slot = perm_slot, .perm_expert = perm_expert, .expert_offsets = offsets},
            s);
    float* y_slot = ws.alloc_n<float>(NP * D);
    const float L = p.swiglu_limit;
    if (fast) {
        // Tensor-core grouped GEMMs, one launch per matrix over all experts (the GEMM gathers the
        // quantized rows), w2 writing each pair's row straight into slot order.
        int32_t* tiles = ws.alloc_n<int32_t>(El + 1);
        float* g = ws.alloc_n<float>(NP * I);
        float* up = ws.alloc_n<float>(NP * I);
        FastLinearParams f{.a = xq, .a_scale = xs, .a_row_src = perm_src, .weight = ex.shape_w1, .experts = ex.w1,
                           .expert_offsets = offsets, .num_experts = El, .tile_scratch = tiles, .y = g, .y_ld = I,
                           .rows = NP, .round_output_bf16 = off};
        fast_linear(f, s);
        f.experts = ex.w3;
        f.y = up;
        fast_linear(f, s);
        swiglu({.g = g, .u = up, .row_weight = row_weight, .row_weight_index = perm_slot, .rows = NP, .width = I,
                .limit = L, .round_bf16 = off},
               s);
        if (fine) act_quant_dequant({.x = g, .out = g, .rows = NP, .cols = I, .block = p.act_block}, s);
        uint8_t* gq = ws.alloc_n<uint8_t>(NP * I);
        float* gs = ws.alloc_n<float>(NP * (I / 128));
        act_quant_fp8({.x = g, .x_ld = I, .rows = NP, .cols = I, .q = gq, .scale = gs}, s);
        fast_linear({.a = gq, .a_scale = gs, .weight = ex.shape_w2, .experts = ex.w2, .expert_offsets = offsets,
                     .num_experts = El, .tile_scratch = tiles, .y_row = perm_slot, .y = y_slot, .y_ld = D, .rows = NP,
                     .round_output_bf16 = off},
                    s);
    } else {
        const int64_t skip = ep ? El : 0;  // another rank's pairs: left out of every grouped GEMM
        float* g = ws.alloc_n<float>(NP * I);
        float* up = ws.alloc_n<float>(NP * I);
        linear({.x = xin, .x_ld = D, .row_src = perm_src, .weight = ex.shape_w1, .experts = ex.w1, .row_expert = perm_expert,
                .num_experts = skip, .y = g, .y_ld = I, .rows = NP, .round_output_bf16 = off},
               s);
        linear({.x = xin, .x_ld = D, .row_src = perm_src, .weight = ex.shape_w1, .experts = ex.w3, .row_expert = perm_expert,
                .num_experts = skip, .y = up, .y_ld = I, .rows = NP, .round_output_bf16 = off},
               s);
        swiglu({.g = g, .u = up, .row_weight = row_weight, .row_weight_index = perm_slot, .rows = NP, .width = I,
                .limit = L, .round_bf16 = off},
               s);
        if (q_mid) act_quant_dequant({.x = g, .out = g, .rows = NP, .cols = I, .block = p.act_block}, s);
        float* y_perm = ws.alloc_n<float>(NP * D);
        linear({.x = g, .x_ld = I, .weight = ex.shape_w2, .experts = ex.w2, .row_expert = perm_expert,
                .num_experts = skip, .y = y_perm, .y_ld = D, .rows = NP, .round_output_bf16 = off},
               s);
        scatter_rows({.src = y_perm, .index = perm_slot, .dst = y_slot, .n = NP, .width = D}, s);
    }
    if (ep) {
        // Every rank returns each rank the outputs of that rank's pairs; each pair then takes its row
        // from the block of the rank holding its expert.
        const int64_t G = ep->ranks();
        float* back = ws.alloc_n<float>(G * S * K * D);
        ep->return_rows(p.rank, y_slot, back, size_t(D) * sizeof(float), K, s);
        int32_t* src_row = ws.alloc_n<int32_t>(S * K);
        expert_source_rows({.ids = p.ids, .n = S * K, .experts_per_rank = static_cast<int32_t>(El), .index = src_row}, s);
        y_slot = ws.alloc_n<float>(S * K * D);
        gather_rows({.src = back, .index = src_row, .dst = y_slot, .n = S * K, .width = D}, s);
    }
    return y_slot;
}

}  // namespace deepinfer::cuda
