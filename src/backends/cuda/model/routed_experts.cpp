// SPDX-License-Identifier: Apache-2.0
#include "backends/cuda/model/routed_experts.h"

#include <vector>

#include "backends/cuda/ep/dispatch_plan.h"
#include "backends/cuda/ep/ep_dispatch_ops.h"
#include "backends/cuda/gemm_fast.h"
#include "backends/cuda/model/expert_exchange.h"
#include "backends/cuda/ops.h"
#include "deepinfer/check.h"

namespace deepinfer::cuda {
namespace {

bool quantized(const DeviceLinear& w) { return w.kind == WeightKind::kFp8Block || w.kind == WeightKind::kFp4; }

bool fast_supported(const DeviceExperts& ex) {
    return fast_linear_supported(ex.shape_w1) && fast_linear_supported(ex.shape_w2) &&
           ex.shape_w1.kind != WeightKind::kBF16 && ex.shape_w2.kind != WeightKind::kBF16 &&
           fast_activation_block(ex.shape_w1) == 128 && fast_activation_block(ex.shape_w2) == 128;  // grouped: per 128
}

// The rows the experts here see: FP8 + scales (fast GEMMs) or f32, with each row's global expert ids
// and routing weights.
struct ExpertRows {
    int64_t rows = 0;
    const uint8_t* xq = nullptr;
    const float* xs = nullptr;
    const float* x = nullptr;
    const int32_t* ids = nullptr;
    const float* weights = nullptr;
};

// How one call runs, shared by the steps below.
struct Setup {
    int64_t D = 0, K = 0, E = 0, I = 0;
    bool off = false, fast = false, fine = false, q_mid = false;
};

// Runs the experts held here on the pairs of `in`. One GPU: all experts, outputs in slot order
// [rows · K, D]. Expert parallelism: this rank's `local` experts from `first` (the pairs of other
// ranks' experts are grouped last and skipped); outputs at slot order too (slot_map null), or at
// row slot_map[slot] (the routed dispatch's compact index; `mapped` local pairs).
void run_experts(const RoutedExpertsParams& p, const Setup& u, const ExpertRows& in, bool ep, int64_t first, int64_t local,
                 const int32_t* slot_map, int64_t mapped, float* y, DeviceArena& ws, Stream s) {
    const DeviceExperts& ex = *p.experts;
    const int64_t T = in.rows, D = u.D, K = u.K, I = u.I, NP = T * K;
    if (T == 0) return;
    const int32_t* group_ids = in.ids;
    if (ep) {
        auto* l = ws.alloc_n<int32_t>(NP);
        expert_local_ids({.ids = in.ids, .n = NP, .first_expert = static_cast<int32_t>(first),
                          .experts_per_rank = static_cast<int32_t>(local), .local_ids = l},
                         s);
        group_ids = l;
    }
    const float* row_weight = p.weight_before_w2 ? in.weights : nullptr;
    // Permutation: pairs grouped by expert (stable), then grouped GEMMs over all experts at once.
    int32_t* perm_src = ws.alloc_n<int32_t>(NP);
    int32_t* perm_slot = ws.alloc_n<int32_t>(NP);
    int32_t* perm_expert = ws.alloc_n<int32_t>(NP);
    int32_t* offsets = ws.alloc_n<int32_t>(local + 2);
    permute({.ids = group_ids, .rows = T, .top_k = K, .experts = ep ? local + 1 : local, .perm_src = perm_src,
             .perm_slot = perm_slot, .perm_expert = perm_expert, .expert_offsets = offsets},
            s);
    if (p.expert_load) expert_load_accumulate({.expert_offsets = offsets, .experts = local, .acc = p.expert_load}, s);
    // Each permuted pair's output row: its slot, or the slot's compact index.
    const int32_t* out_row = perm_slot;
    int64_t scattered = NP;
    if (slot_map) {
        auto* o = ws.alloc_n<int32_t>(NP);
        ep_compose({.index = perm_slot, .map = slot_map, .out = o, .n = NP}, s);
        out_row = o;
        scattered = mapped;  // the local pairs come first in the permutation
    }
    const float L = p.swiglu_limit;
    const bool off = u.off;
    if (u.fast) {
        // Tensor-core grouped GEMMs, one launch per matrix over all experts (the GEMM gathers the
        // quantized rows), w2 writing each pair's row straight to its output row.
        int32_t* tiles = ws.alloc_n<int32_t>(local + 1);
        float* g = ws.alloc_n<float>(NP * I);
        float* up = ws.alloc_n<float>(NP * I);
        FastLinearParams f{.a = in.xq, .a_scale = in.xs, .a_row_src = perm_src, .weight = ex.shape_w1, .experts = ex.w1,
                           .expert_offsets = offsets, .num_experts = local, .tile_scratch = tiles, .y = g, .y_ld = I,
                           .rows = NP, .round_output_bf16 = off};
        int tile_rows = 0;  // the tile table built for w1 and w3, kept for w2 where its tiles match
        f.tile_rows_out = &tile_rows;
        f.experts2 = ex.w3;  // w1 and w3 in one launch where the kernel allows (FastLinearParams::experts2)
        f.y2 = up;
        fast_linear(f, s);
        uint8_t* gq = ws.alloc_n<uint8_t>(NP * I);
        float* gs = ws.alloc_n<float>(NP * (I / 128));
        if (u.fine && p.act_block != 32) {  // the fine-grained activation QAT between SwiGLU and the quantization
            swiglu({.g = g, .u = up, .row_weight = row_weight, .row_weight_index = perm_slot, .rows = NP, .width = I,
                    .limit = L, .round_bf16 = off},
                   s);
            if (fused_qat_block_ok(p.act_block)) {
                act_quant_fp8({.x = g, .x_ld = I, .rows = NP, .cols = I, .q = gq, .scale = gs, .pre_block = p.act_block}, s);
            } else {
                act_quant_dequant({.x = g, .out = g, .rows = NP, .cols = I, .block = p.act_block}, s);
                act_quant_fp8({.x = g, .x_ld = I, .rows = NP, .cols = I, .q = gq, .scale = gs}, s);
            }
        } else {  // SwiGLU quantized for w2 in one pass (the same codes and scales; V4.1's QAT per 32 in it)
            swiglu({.g = g, .u = up, .row_weight = row_weight, .row_weight_index = perm_slot, .rows = NP, .width = I,
                    .limit = L, .round_bf16 = off, .q = gq, .q_scale = gs, .fine_block = u.fine ? p.act_block : 0},
                   s);
        }
        FastLinearParams f2{.a = gq, .a_scale = gs, .weight = ex.shape_w2, .experts = ex.w2, .expert_offsets = offsets,
                            .num_experts = local, .tile_scratch = tiles, .y_row = out_row, .y = y, .y_ld = D, .rows = NP,
                            .round_output_bf16 = off};
        f2.tile_rows_given = tile_rows;
        fast_linear(f2, s);
    } else {
        const int64_t skip = ep ? local : 0;  // another rank's pairs: left out of every grouped GEMM
        float* g = ws.alloc_n<float>(NP * I);
        float* up = ws.alloc_n<float>(NP * I);
        linear({.x = in.x, .x_ld = D, .row_src = perm_src, .weight = ex.shape_w1, .experts = ex.w1, .row_expert = perm_expert,
                .num_experts = skip, .y = g, .y_ld = I, .rows = NP, .round_output_bf16 = off},
               s);
        linear({.x = in.x, .x_ld = D, .row_src = perm_src, .weight = ex.shape_w1, .experts = ex.w3, .row_expert = perm_expert,
                .num_experts = skip, .y = up, .y_ld = I, .rows = NP, .round_output_bf16 = off},
               s);
        swiglu({.g = g, .u = up, .row_weight = row_weight, .row_weight_index = perm_slot, .rows = NP, .width = I,
                .limit = L, .round_bf16 = off},
               s);
        if (u.q_mid) act_quant_dequant({.x = g, .out = g, .rows = NP, .cols = I, .block = p.act_block}, s);
        float* y_perm = ws.alloc_n<float>(NP * D);
        linear({.x = g, .x_ld = I, .weight = ex.shape_w2, .experts = ex.w2, .row_expert = perm_expert,
                .num_experts = skip, .y = y_perm, .y_ld = D, .rows = NP, .round_output_bf16 = off},
               s);
        scatter_rows({.src = y_perm, .index = out_row, .dst = y, .n = scattered, .width = D}, s);
    }
}

// All-gather dispatch: every rank's rows here, every slot's output back to its row's rank.
float* all_gather_experts(const RoutedExpertsParams& p, const Setup& u, const ExpertRows& own, DeviceArena& ws, Stream s) {
    ExpertExchange* ep = p.exchange;
    const int me = p.rank, G = ep->ranks();
    const bool tail = p.replay_tail;
    const int64_t S = p.rows, D = u.D, K = u.K, El = u.E / G, T = ep->total_rows(tail);
    const Stream c = ep->comm_stream(me);
    // Every rank's rows here, in one group of transfers: each plane of this rank's rows (FP8 row +
    // scales, or f32 row; ids; weights when they scale before w2) to every peer, the peers' into
    // place, this rank's by a copy.
    ExpertRows all{.rows = T};
    std::vector<EpTransfer> sends, recvs;
    ep->fork(me, s);
    auto gather = [&](const void* src, int64_t width) {
        auto* dst = ws.alloc_n<uint8_t>(T * width);
        copy_on_device(dst + ep->first_row(me, tail) * width, src, size_t(S * width), c);
        for (int r = 0; r < G; ++r)
            if (r != me) {
                sends.push_back({r, const_cast<void*>(src), size_t(S * width)});
                recvs.push_back({r, dst + ep->first_row(r, tail) * width, size_t(ep->rows(r, tail) * width)});
            }
        return dst;
    };
    if (u.fast) {
        all.xq = gather(own.xq, D);
        all.xs = reinterpret_cast<const float*>(gather(own.xs, (D / 128) * 4));
    } else {
        all.x = reinterpret_cast<const float*>(gather(own.x, D * 4));
    }
    all.ids = reinterpret_cast<const int32_t*>(gather(own.ids, K * 4));
    if (p.weight_before_w2) all.weights = reinterpret_cast<const float*>(gather(own.weights, K * 4));  // else: the combine's
    ep->send_recv(me, sends, recvs, c);
    if (p.overlap) p.overlap();  // on s while the rows travel
    ep->join(me, s);
    float* y = ws.alloc_n<float>(T * K * D);
    run_experts(p, u, all, true, me * El, El, nullptr, 0, y, ws, s);
    // Every rank returns each rank the outputs of that rank's slots (bf16 under official numerics, as
    // in the routed form); each pair then takes its row from the block of the rank holding its expert.
    const bool half = u.off;
    const int64_t elem = half ? 2 : 4;
    const void* out = y;
    if (half) {
        auto* yb = ws.alloc_n<uint16_t>(T * K * D);
        to_bf16({.x = y, .x_ld = D, .rows = T * K, .cols = D, .out = yb}, s);  // (unwritten slots: never read)
        out = yb;
    }
    auto* back = ws.alloc_n<uint8_t>(G * S * K * D * elem);
    ep->fork(me, s);
    ep->return_rows(me, out, back, size_t(D * elem), K, c, tail);
    ep->join(me, s);
    int32_t* src_row = ws.alloc_n<int32_t>(S * K);
    expert_source_rows({.ids = p.ids, .n = S * K, .experts_per_rank = static_cast<int32_t>(El), .index = src_row}, s);
    float* y_slot = ws.alloc_n<float>(S * K * D);
    if (half)
        ep_gather_bf16_rows({.src = reinterpret_cast<const uint16_t*>(back), .index = src_row, .dst = y_slot, .n = S * K,
                             .width = D},
                            s);
    else
        gather_rows({.src = reinterpret_cast<const float*>(back), .index = src_row, .dst = y_slot, .n = S * K, .width = D}, s);
    ep->add_stats(me, {.layers_all_gather = 1, .rows_broadcast = S * (G - 1), .slots_all_gather = S * K * (G - 1)});
    return y_slot;
}

// Routed dispatch (ep/dispatch_plan.h): rows only to the ranks of their experts, compact returns.
float* routed_dispatch_experts(const RoutedExpertsParams& p, const Setup& u, const ExpertRows& own, DeviceArena& ws,
                               Stream s) {
    ExpertExchange* ep = p.exchange;
    const int me = p.rank, G = ep->ranks();
    const size_t R = size_t(me);
    const int64_t S = p.rows, D = u.D, K = u.K, El = u.E / G;
    const Stream c = ep->comm_stream(me);
    // The plan of this rank's rows, its counts to the host; the transfers' side stream starts here.
    int32_t* send_rows = ws.alloc_n<int32_t>(G * S);
    int32_t* pair_slot = ws.alloc_n<int32_t>(S * K);
    int32_t* counts = ws.alloc_n<int32_t>(2 * G);
    ep_route_plan({.ids = p.ids, .rows = S, .top_k = K, .experts_per_rank = static_cast<int32_t>(El), .ranks = G,
                   .send_rows = send_rows, .pair_slot = pair_slot, .counts = counts},
                  s);
    ep->share_counts_begin(me, counts, 2 * G, s);
    // The planes of a row (FP8 row + scales, or f32 row; ids; weights when they scale before w2):
    // received blocks in rank order (at most every rank's rows), this rank's own block packed straight
    // into place, the peers' into staging (at most all own rows each). Allocated before `overlap` runs:
    // its scratch is reused in stream order on s, while these are written on the side stream meanwhile.
    struct Plane {
        const void* src;
        int64_t width;
        uint8_t* recv;
        uint8_t* staged[kMaxEpRanks];
    };
    std::vector<Plane> planes;
    const int64_t T_most = ep->total_rows(p.replay_tail);
    auto plane = [&](const void* src, int64_t width) {
        Plane pl{src, width, ws.alloc_n<uint8_t>(T_most * width), {}};
        for (int r = 0; r < G; ++r)
            if (r != me) pl.staged[r] = ws.alloc_n<uint8_t>(S * width);
        planes.push_back(pl);
        return pl.recv;
    };
    ExpertRows in;
    if (u.fast) {
        in.xq = plane(own.xq, D);
        in.xs = reinterpret_cast<const float*>(plane(own.xs, (D / 128) * 4));
    } else {
        in.x = reinterpret_cast<const float*>(plane(own.x, D * 4));
    }
    in.ids = reinterpret_cast<const int32_t*>(plane(own.ids, K * 4));
    if (p.weight_before_w2) in.weights = reinterpret_cast<const float*>(plane(own.weights, K * 4));  // else: the combine's
    ep->fork(me, s);
    if (p.overlap) p.overlap();  // on s while the host waits for the counts and the rows travel
    const EpRankPlan plan = make_ep_rank_plan(G, me, ep->share_counts_end(me));
    DI_ICHECK(plan.returned_pairs == S * K && plan.recv_total <= T_most);
    const int64_t T = plan.recv_total;
    in.rows = T;
    EpPackParams pack;
    pack.num_planes = int32_t(planes.size());
    pack.send_rows = send_rows;
    pack.rows = S;
    pack.ranks = G;
    std::vector<EpTransfer> sends, recvs;
    for (int r = 0; r < G; ++r) pack.count[r] = plan.send_rows[size_t(r)];
    for (size_t k = 0; k < planes.size(); ++k) {
        const Plane& pl = planes[k];
        pack.planes[k].src = pl.src;
        pack.planes[k].width = pl.width;
        for (int r = 0; r < G; ++r) {
            const size_t rr = size_t(r);
            if (r == me) {
                pack.planes[k].dst[rr] = pl.recv + plan.recv_at[R] * pl.width;
                continue;
            }
            pack.planes[k].dst[rr] = pl.staged[rr];
            sends.push_back({r, pl.staged[rr], size_t(plan.send_rows[rr] * pl.width)});
            recvs.push_back({r, pl.recv + plan.recv_at[rr] * pl.width, size_t(plan.recv_rows[rr] * pl.width)});
        }
    }
    ep_pack(pack, c);
    ep->send_recv(me, sends, recvs, c);
    ep->join(me, s);
    // The experts here, each local pair's output at its compact index: the blocks of the ranks the
    // rows came from, in rank order.
    int32_t* compact = ws.alloc_n<int32_t>(T * K);
    ep_local_slots({.ids = in.ids, .n = T * K, .first_expert = static_cast<int32_t>(me * El),
                    .experts_per_rank = static_cast<int32_t>(El), .compact = compact},
                   s);
    float* y = ws.alloc_n<float>(plan.computed_pairs * D);
    run_experts(p, u, in, true, me * El, El, compact, plan.computed_pairs, y, ws, s);
    // Return: each rank its block; this rank's pairs land at pair_slot in `back`. Official numerics
    // round every expert output to bf16 (w2's output): those travel as bf16, half the bytes, the same
    // values.
    const bool half = u.off;
    const int64_t elem = half ? 2 : 4;
    const size_t row_bytes = size_t(D * elem);
    const uint8_t* out = reinterpret_cast<const uint8_t*>(y);
    if (half) {
        auto* yb = ws.alloc_n<uint16_t>(plan.computed_pairs * D);
        if (plan.computed_pairs > 0) to_bf16({.x = y, .x_ld = D, .rows = plan.computed_pairs, .cols = D, .out = yb}, s);
        out = reinterpret_cast<const uint8_t*>(yb);
    }
    auto* back = ws.alloc_n<uint8_t>(S * K * D * elem);
    ep->fork(me, s);
    copy_on_device(back + size_t(plan.ret_recv_at[R]) * row_bytes, out + size_t(plan.ret_send_at[R]) * row_bytes,
                   size_t(plan.ret_recv_pairs[R]) * row_bytes, c);
    sends.clear();
    recvs.clear();
    for (int r = 0; r < G; ++r) {
        const size_t rr = size_t(r);
        if (r == me) continue;
        sends.push_back({r, const_cast<uint8_t*>(out) + size_t(plan.ret_send_at[rr]) * row_bytes,
                         size_t(plan.ret_send_pairs[rr]) * row_bytes});
        recvs.push_back({r, back + size_t(plan.ret_recv_at[rr]) * row_bytes, size_t(plan.ret_recv_pairs[rr]) * row_bytes});
    }
    ep->send_recv(me, sends, recvs, c);
    ep->join(me, s);
    float* y_slot = ws.alloc_n<float>(S * K * D);
    if (half)
        ep_gather_bf16_rows({.src = reinterpret_cast<const uint16_t*>(back), .index = pair_slot, .dst = y_slot, .n = S * K,
                             .width = D},
                            s);
    else
        gather_rows({.src = reinterpret_cast<const float*>(back), .index = pair_slot, .dst = y_slot, .n = S * K, .width = D}, s);
    EpExchangeStats st{.layers_routed = 1, .rows_broadcast = S * (G - 1), .slots_all_gather = S * K * (G - 1)};
    for (int r = 0; r < G; ++r)
        if (r != me) {
            st.rows_sent += plan.send_rows[size_t(r)];
            st.pairs_returned += plan.ret_send_pairs[size_t(r)];
        }
    ep->add_stats(me, st);
    return y_slot;
}

}  // namespace

size_t ep_staging_bytes(int64_t ranks, int64_t rows, int64_t gathered, int64_t top_k, int64_t hidden) {
    const int64_t staging = ranks * rows * (hidden * 4 + top_k * 8);
    const int64_t index = ranks * rows + rows * top_k + 2 * ranks + 2 * gathered * top_k;
    const int64_t bf16_out = gathered * top_k * hidden * 2;  // official numerics: the outputs as bf16
    return size_t(staging + index * 4 + bf16_out) + size_t(8 * ranks + 16) * 256;
}

float* routed_experts(const RoutedExpertsParams& p, DeviceArena& ws, Stream s) {
    DI_CHECK(p.experts && p.x && p.ids && p.weights, "routed_experts: missing input");
    const DeviceExperts& ex = *p.experts;
    const int64_t S = p.rows;
    Setup u{.D = p.hidden, .K = p.top_k, .E = p.experts_total, .I = ex.shape_w1.out_features, .off = p.official,
            .fast = p.fast && fast_supported(ex)};
    const int64_t D = u.D;
    // Fast GEMMs under official numerics with a finer act_quant than the kernels' 128 (V4.1: 32): the
    // reference's per-block quantization first, then the kernels' FP8 form per 128 of its result (the
    // same e4m3 codes wherever a block's scale is its 128-group's largest, else shifted by the scales'
    // distance, exact down to e4m3's normal range).
    u.fine = u.fast && u.off && p.act_block < 128;
    const bool q_in = !u.fast && u.off && quantized(ex.shape_w1);
    u.q_mid = !u.fast && u.off && quantized(ex.shape_w2);
    // The experts' inputs, quantized once per row (before any transfer): FP8 + scales (fast GEMMs,
    // which gather the rows) or act_quant'ed f32 (official numerics on the reference kernels).
    ExpertRows own{.rows = S, .x = p.x, .ids = p.ids, .weights = p.weights};
    if (u.fast && p.xq && p.xs && !u.fine) {
        own.xq = p.xq;
        own.xs = p.xs;
    } else if (u.fast) {
        // The fine QAT (per act_block) in the same pass where the block allows it (act_quant_fp8's
        // pre_block: the same codes and scales as act_quant_dequant first).
        const float* xf = p.x;
        const bool fused = u.fine && fused_qat_block_ok(p.act_block);
        if (u.fine && !fused) {
            float* aq = ws.alloc_n<float>(S * D);
            act_quant_dequant({.x = p.x, .out = aq, .rows = S, .cols = D, .block = p.act_block}, s);
            xf = aq;
        }
        auto* xq = ws.alloc_n<uint8_t>(S * D);
        auto* xs = ws.alloc_n<float>(S * (D / 128));
        act_quant_fp8({.x = xf, .x_ld = D, .rows = S, .cols = D, .q = xq, .scale = xs, .pre_block = fused ? p.act_block : 0}, s);
        own.xq = xq;
        own.xs = xs;
    } else if (q_in) {
        float* aq = ws.alloc_n<float>(S * D);
        act_quant_dequant({.x = p.x, .out = aq, .rows = S, .cols = D, .block = p.act_block}, s);
        own.x = aq;
    }
    if (ExpertExchange* ep = p.exchange) {
        DI_CHECK(ep->rows(p.rank, p.replay_tail) == S, "expert parallelism: rank ", p.rank, " runs ", S, " rows, the exchange counts ",
                 ep->rows(p.rank, p.replay_tail), p.replay_tail ? " (bounded replay's tail)" : "");
        DI_CHECK(u.E % ep->ranks() == 0, "expert parallelism: ", u.E, " experts over ", ep->ranks(), " ranks");
        return ep->routed() ? routed_dispatch_experts(p, u, own, ws, s) : all_gather_experts(p, u, own, ws, s);
    }
    float* y = ws.alloc_n<float>(S * u.K * D);
    run_experts(p, u, own, false, 0, u.E, nullptr, 0, y, ws, s);
    if (p.overlap) p.overlap();
    return y;
}

}  // namespace deepinfer::cuda
