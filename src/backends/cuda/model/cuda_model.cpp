// SPDX-License-Identifier: Apache-2.0
// CudaModel: composes the CUDA ops into the V4 forward, mirroring CpuModel (src/model/forward.cpp,
// moe_block.cpp) step by step, with the same rounding points; the attention sub-block is cuda_attention.cpp.
#include "backends/cuda/model/cuda_model_impl.h"

#include <cstring>

#include "backends/cuda/model/routed_experts.h"
#include "deepinfer/log.h"

namespace deepinfer::cuda::v4 {

void CudaModel::fp8_input(ConvertedInput& in, int64_t block) const {
    if (in.q && in.block == block) return;
    in.q = workspace_->alloc_n<uint8_t>(in.rows * in.cols);
    in.qs = workspace_->alloc_n<float>(in.rows * (in.cols / block));
    in.block = block;
    act_quant_fp8({.x = in.x, .x_ld = in.cols, .rows = in.rows, .cols = in.cols, .q = in.q, .scale = in.qs, .block = block},
                  stream_.get());
}

int64_t CudaModel::fast_fp8_block(const DeviceLinear& w) const {
    return fast_ && w.kind != WeightKind::kBF16 && fast_linear_supported(w) ? fast_activation_block(w) : 0;
}

void CudaModel::rms_norm_forms(const float* weight, float* x, int64_t rows, int64_t n, ConvertedInput& in, int64_t block,
                               bool bf16) const {
    RmsNormParams p{.x = x, .weight = weight, .out = x, .rows = rows, .n = n, .eps = static_cast<float>(config_.rms_norm_eps),
                    .round_bf16 = official(), .tree_sum = fast_};
    const bool can = n % 128 == 0 && n <= 8192 && reinterpret_cast<uintptr_t>(weight) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(x) % 16 == 0 && in.x == x && in.rows == rows && in.cols == n;
    if (can && block > 0 && !in.q) {
        in.q = p.q = workspace_->alloc_n<uint8_t>(rows * n);
        in.qs = p.q_scale = workspace_->alloc_n<float>(rows * (n / block));
        in.block = p.q_block = block;
    }
    if (can && bf16 && !in.bf16) in.bf16 = p.out_bf16 = workspace_->alloc_n<uint16_t>(rows * n);
    rms_norm(p, stream_.get());
}

bool CudaModel::project_fast(const DeviceLinear& w, const float* x, int64_t rows, float* y, bool round_bf16,
                             ConvertedInput* in, int k_chunks) const {
    if (!fast_ || !fast_linear_supported(w)) return false;
    const Stream s = stream_.get();
    const int64_t K = w.in_features;
    if (in && (in->x != x || in->rows != rows || in->cols != K)) in = nullptr;
    FastLinearParams f{.weight = w, .y = y, .y_ld = w.out_features, .rows = rows, .round_output_bf16 = round_bf16,
                       .k_chunks = k_chunks};
    // The input's converted form: kept in `in` (before this call's scratch mark), else scratch.
    if (in && w.kind == WeightKind::kBF16) {
        if (!in->bf16) {
            in->bf16 = workspace_->alloc_n<uint16_t>(rows * K);
            to_bf16({.x = x, .x_ld = K, .rows = rows, .cols = K, .out = in->bf16}, s);
        }
        f.a = in->bf16;
    } else if (in) {
        fp8_input(*in, fast_activation_block(w));
        f.a = in->q;
        f.a_scale = in->qs;
    }
    const size_t mark = workspace_->mark();
    if (!in && w.kind == WeightKind::kBF16) {
        uint16_t* xb = workspace_->alloc_n<uint16_t>(rows * K);
        to_bf16({.x = x, .x_ld = K, .rows = rows, .cols = K, .out = xb}, s);
        f.a = xb;
    } else if (!in) {
        const int64_t block = fast_activation_block(w);
        uint8_t* q = workspace_->alloc_n<uint8_t>(rows * K);
        float* qs = workspace_->alloc_n<float>(rows * (K / block));
        act_quant_fp8({.x = x, .x_ld = K, .rows = rows, .cols = K, .q = q, .scale = qs, .block = block}, s);
        f.a = q;
        f.a_scale = qs;
    }
    // Split-K partials (within the workspace's bound; above it the launch runs unsplit: the same bits).
    if (const int64_t n = fast_linear_split_floats(w, rows, SplitK::kAuto, k_chunks); n > 0 && n <= fast_linear_split_floats_bound(rows))
        f.split_scratch = workspace_->alloc_n<float>(n);
    fast_linear(f, s);
    workspace_->reset(mark);  // stream-ordered
    return true;
}

void CudaModel::project_f32(const DeviceLinear& w, const float* x, int64_t rows, float* y, ConvertedInput* in) const {
    if (official() && w.kind == WeightKind::kBF16 && project_fast(w, x, rows, y, false, in)) return;
    linear({.x = x, .x_ld = w.in_features, .weight = w, .y = y, .y_ld = w.out_features, .rows = rows}, stream_.get());
}

bool CudaModel::hc_mix_fast(const DeviceHc& w, const float* x, int64_t rows, int64_t outputs, float* mix) const {
    if (!fast_) return false;
    const Stream s = stream_.get();
    const size_t mark = workspace_->mark();
    const int64_t flat = config_.hc_mult * config_.hidden_size;
    float* partial = workspace_->alloc_n<float>(hc_mix_splits(flat) * rows * (outputs + 1));
    hc_mix_splitk({.x = x, .fn = w.fn, .rows = rows, .outputs = outputs, .flat = flat, .partial = partial, .mix = mix}, s);
    workspace_->reset(mark);  // stream-ordered
    return true;
}

CudaModel::MixPartials CudaModel::hc_mix_partials(const DeviceHc& w, const float* x, int64_t rows, int64_t outputs) const {
    if (!fast_) return {};
    const size_t mark = workspace_->mark();
    const int64_t flat = config_.hc_mult * config_.hidden_size, splits = hc_mix_splits(flat);
    float* partial = workspace_->alloc_n<float>(splits * rows * (outputs + 1));
    hc_mix_splitk({.x = x, .fn = w.fn, .rows = rows, .outputs = outputs, .flat = flat, .partial = partial, .partials_only = true},
                  stream_.get());
    workspace_->reset(mark);  // stream-ordered: read by the next launch
    return {partial, splits};
}

void CudaModel::project(const DeviceLinear& w, const float* x, int64_t rows, float* y, ConvertedInput* in) const {
    const Stream s = stream_.get();
    if (project_fast(w, x, rows, y, official(), in)) return;
    if (official() && quantized(w)) {
        const size_t mark = workspace_->mark();
        float* xq = workspace_->alloc_n<float>(rows * w.in_features);
        act_quant_dequant({.x = x, .out = xq, .rows = rows, .cols = w.in_features}, s);
        linear({.x = xq, .x_ld = w.in_features, .weight = w, .y = y, .y_ld = w.out_features, .rows = rows,
                .round_output_bf16 = true},
               s);
        workspace_->reset(mark);  // stream-ordered: later work on this stream may reuse the scratch
        return;
    }
    linear({.x = x, .x_ld = w.in_features, .weight = w, .y = y, .y_ld = w.out_features, .rows = rows,
            .round_output_bf16 = official()},
           s);
}

void CudaModel::moe(const DeviceLayer& lw, const Batch& b, const float* a, float* out, const ConvertedInput* made) const {
    moe_rows(lw, b.rows, b.tokens, config_.n_routed_experts, config_.num_experts_per_tok, a, out, ep_, made);
}

void CudaModel::moe_rows(const DeviceLayer& lw, int64_t S, const int32_t* tokens, int64_t E, int64_t K, const float* a,
                         float* out, ExpertExchange* exchange, const ConvertedInput* made) const {
    const ModelConfig& c = config_;
    const Stream s = stream_.get();
    const bool off = official();
    const int64_t D = c.hidden_size;
    const float L = static_cast<float>(c.swiglu_limit);
    float* logits = workspace_->alloc_n<float>(S * E);
    float* biased = workspace_->alloc_n<float>(S * E);
    int32_t* ids = workspace_->alloc_n<int32_t>(S * K);
    float* wts = workspace_->alloc_n<float>(S * K);
    // The routed experts' FP8 form of a (per 128 columns), made once (or by a's norm: `made`) and shared with
    // the shared expert's w1 and w3 where their weights take the same form; its bf16 form, where a's norm made
    // it, for the gate.
    ConvertedInput ca = made && made->x == a ? *made : ConvertedInput{.x = a, .rows = S, .cols = D};
    project_f32(lw.gate, a, S, logits, ca.bf16 ? &ca : nullptr);
    route({.logits = logits, .bias = lw.gate_bias, .tid2eid = lw.mlp_type == MlpType::kHashMoe ? lw.tid2eid : nullptr,
           .tokens = tokens, .rows = S, .experts = E, .top_k = K, .scoring = scoring_of(c.scoring_func),
           .norm_topk_prob = c.norm_topk_prob, .routed_scaling_factor = static_cast<float>(c.routed_scaling_factor),
           .official = off, .biased = biased, .ids = ids, .weights = wts},
          s);
    DI_CHECK(lw.mlp_type != MlpType::kHashMoe || lw.tid2eid, "hash-routed layer without tid2eid");
    bench_routing_.route(ids, S, K, E, exchange, static_cast<int>(ep_rank_), s);  // benchmarks only
    // Shared expert (no routing weight): on the stream while the routed experts' rows travel.
    const int64_t SI = lw.shared_w1.out_features;
    float* ys = workspace_->alloc_n<float>(S * D);
    if (fast_) fp8_input(ca, 128);
    auto shared_expert = [&] {
        // w2's FP8 input straight from the SwiGLU kernel (swiglu_quant: swiglu then act_quant_fp8's codes and
        // scales) where w2 takes it per 128 columns; the f32 values are then not stored. And then w1 and w3
        // as one GEMM over their joined rows where they share an allocation (shared_w13): g and u are the
        // halves of each row of [S, 2·SI] (the same bits per element as two GEMMs where the split-K chunks
        // agree: fast_linear_k_chunks of 2·SI and SI rows, equal at V4-Flash's shapes).
        const bool quantized_h = fast_fp8_block(lw.shared_w2) == 128 && SI % 128 == 0;
        float *sg = nullptr, *su = nullptr;
        int64_t ld = SI;
        if (quantized_h && lw.shared_w13.weight && fast_fp8_block(lw.shared_w13) > 0) {
            sg = workspace_->alloc_n<float>(S * 2 * SI);
            su = sg + SI;
            ld = 2 * SI;
            project(lw.shared_w13, a, S, sg, &ca);
        } else {
            sg = workspace_->alloc_n<float>(S * SI);
            su = workspace_->alloc_n<float>(S * SI);
            project(lw.shared_w1, a, S, sg, &ca);
            project(lw.shared_w3, a, S, su, &ca);
        }
        ConvertedInput cg{.x = sg, .rows = S, .cols = SI};
        if (quantized_h) {
            cg.q = workspace_->alloc_n<uint8_t>(S * SI);
            cg.qs = workspace_->alloc_n<float>(S * (SI / 128));
            cg.block = 128;
        }
        swiglu({.g = sg, .u = su, .rows = S, .width = SI, .limit = L, .round_bf16 = off, .ld = ld, .q = cg.q, .q_scale = cg.qs}, s);
        project(lw.shared_w2, sg, S, ys, cg.q ? &cg : nullptr);
    };
    const float* y_slot = routed_experts({.experts = &lw.experts, .x = a, .xq = ca.q, .xs = ca.qs, .ids = ids, .weights = wts, .rows = S,
                                          .hidden = D, .top_k = K, .experts_total = E, .swiglu_limit = L,
                                          .official = off, .weight_before_w2 = off, .fast = fast_,
                                          .expert_load = bench_routing_.counters(),
                                          .exchange = exchange, .rank = static_cast<int>(ep_rank_), .overlap = shared_expert},
                                         *workspace_, s);
    moe_combine({.expert_out = y_slot, .ids = ids, .weights = wts, .shared = ys, .out = out, .rows = S, .top_k = K,
                 .hidden = D, .scale_outputs = !off, .round_bf16 = off},
                s);
}

void CudaModel::run_layer(const DeviceLayer& lw, const Batch& b, float*& x, float*& y) const {
    const ModelConfig& c = config_;
    const Stream s = stream_.get();
    const bool off = official();
    const int64_t S = b.rows, D = c.hidden_size, hc = c.hc_mult;
    const float eps = static_cast<float>(c.rms_norm_eps);
    const size_t mark = workspace_->mark();
    float* post = workspace_->alloc_n<float>(S * hc);
    float* comb = workspace_->alloc_n<float>(S * hc * hc);
    float* a = workspace_->alloc_n<float>(S * D);
    float* out = workspace_->alloc_n<float>(S * D);
    float* mix = workspace_->alloc_n<float>(S * ((2 + hc) * hc + 1));
    // a's forms for the sub-block's fast GEMMs, written by its norm (rms_norm_forms): FP8 per 128 columns
    // (attention: wq_a's block, where wq_a is FP8; MoE: the experts'), bf16 where the official numerics run
    // bf16 linears on it (the compressors, the gate).
    ConvertedInput made{.x = a, .rows = S, .cols = D};
    auto pre = [&](const DeviceHc& w, const float* norm, int64_t block, bool bf16) {
        const MixPartials mp = hc_mix_partials(w, x, S, (2 + hc) * hc);
        hc_pre({.x = x, .fn = w.fn, .base = w.base, .scale = w.scale, .rows = S, .hc = hc, .hidden = D,
                .sinkhorn_iters = c.hc_sinkhorn_iters, .norm_eps = eps, .hc_eps = static_cast<float>(c.hc_eps),
                .post = post, .comb = comb, .collapsed = a, .round_bf16 = off, .mix = mix, .mix_given = mp.partial != nullptr,
                .mix_partial = mp.partial, .mix_splits = mp.splits},
               s);
        made = ConvertedInput{.x = a, .rows = S, .cols = D};
        rms_norm_forms(norm, a, S, D, made, block, bf16);
    };
    auto post_mix = [&] {
        hc_post({.out = out, .x = x, .post = post, .comb = comb, .y = y, .rows = S, .hc = hc, .hidden = D,
                 .round_bf16 = off},
                s);
        std::swap(x, y);
    };
    const bool bf16_compressor = off && lw.compressor && lw.compressor->wkv.kind == WeightKind::kBF16 && fast_ &&
                                 fast_linear_supported(lw.compressor->wkv);
    pre(lw.hc_attn, lw.attn_norm, fast_fp8_block(lw.wq_a), bf16_compressor);
    {
        const size_t inner = workspace_->mark();
        attention(lw, b, a, out, &made);
        workspace_->reset(inner);
    }
    post_mix();
    pre(lw.hc_ffn, lw.ffn_norm, fast_ ? 128 : 0, off && fast_ && lw.gate.kind == WeightKind::kBF16 && fast_linear_supported(lw.gate));
    {
        const size_t inner = workspace_->mark();
        moe(lw, b, a, out, &made);
        workspace_->reset(inner);
    }
    post_mix();
    workspace_->reset(mark);
}

size_t CudaModel::workspace_need(int64_t S, int64_t N, int64_t R, int64_t P, int64_t D) const {
    const ModelConfig& c = config_;
    const int64_t Dm = c.hidden_size, hc = c.hc_mult, V = c.vocab_size, L = c.num_hidden_layers;
    const int64_t H = c.num_attention_heads, Dh = c.head_dim, QL = c.q_lora_rank, G = c.o_groups, OL = c.o_lora_rank;
    const int64_t E = c.n_routed_experts, K = c.num_experts_per_tok;
    // Each arena allocation is 256-aligned: count every one with a full extra 256 bytes.
    auto bytes = [](int64_t n) { return align256(static_cast<size_t>(std::max<int64_t>(n, 0))) + 256; };
    size_t total = bytes(S * 4) * 3 + bytes(L * N * int64_t(sizeof(DeviceSegment))) + bytes(R * 4) +
                   bytes(N * layout_->entry_pages(P) * int64_t(sizeof(float*)));  // inputs (with the page tables)
    total += 2 * bytes(S * hc * Dm * 4);                                                               // x, y
    auto peak_of = [&](const DeviceLayer& lw, int64_t n) -> size_t {
        size_t fixed = bytes(n * hc * 4) + bytes(n * hc * hc * 4) + 2 * bytes(n * Dm * 4) +
                       bytes(n * ((2 + hc) * hc + 1) * 4);  // post, comb, a, out, mixing logits
        if (fast_)  // a's forms made by its norms (FP8 + scales, bf16), the attention's and the MoE's
            fixed += 2 * (bytes(n * Dm) + bytes(n * (Dm / 32) * 4) + bytes(n * Dm * 2));
        // The fast mode's mixing scratch (bf16 streams, three partial logits) is released before the sub-block.
        const size_t mixing = fast_ ? bytes(hc_mix_splits(hc * Dm) * n * ((2 + hc) * hc + 1) * 4) : 0;
        // Attention: everything it takes stays until its end, plus the largest act_quant scratch.
        size_t at = bytes(n * QL * 4) + bytes(n * H * Dh * 4) + bytes(n * Dh * 4);
        const int64_t m = std::max<int64_t>(lw.compress_ratio, 1);
        for (const auto* cw : {&lw.compressor, &lw.indexer_compressor})
            if (*cw) at += 2 * bytes(n * ((*cw)->overlap ? 2 : 1) * (*cw)->head_dim * 4);
        int64_t max_cand = std::min<int64_t>(c.sliding_window, P);
        if (lw.indexer_compressor) {
            at += bytes(n * c.index_n_heads * c.index_head_dim * 4) + bytes(n * c.index_n_heads * 4) +
                  bytes(n * std::max<int64_t>(P / m, 1) * 4) + bytes(n * c.index_topk * 4) + bytes(n * 4);
            max_cand += std::min<int64_t>(c.index_topk, P / m);
        } else if (lw.attention_type != AttentionType::kSliding) {
            max_cand += P / m;
        }
        at += bytes(n * H * max_cand * 4) + bytes(n * H * Dh * 4) + bytes(n * G * OL * 4);  // (o f32, or q in bf16)
        at += bytes(n * std::max({Dm, QL, G * OL}) * 4);
        if (fast_)  // wo_a on tensor cores: o in bf16, the group tables, the tile table
            at += bytes(n * H * Dh * 2) + 2 * bytes((G + 1) * 4) + bytes(G * n * 4);
        if (fast_)  // the converted inputs kept for the whole sub-block: a in bf16 and FP8 + scales, qr in FP8 + scales
            at += bytes(n * Dm * 2) + bytes(n * Dm) + bytes(n * (Dm / 32) * 4) + bytes(n * QL) + bytes(n * (QL / 32) * 4);
        // MoE.
        const int64_t I = lw.experts.shape_w1.out_features, SI = lw.shared_w1.out_features;
        // Expert parallelism: the experts here run the pairs of every rank's rows (T: each rank's
        // forward holds at most n rows — the engine gives each rank its share of a step — so at most
        // ranks · n), and the outputs come back per rank.
        const int64_t ranks = ep_ ? ep_->ranks() : 1, T = ep_ ? n * ranks : n, NT = T * K;
        size_t mo = 2 * bytes(n * E * 4) + 2 * bytes(n * K * 4) + 3 * bytes(NT * 4) + bytes((E + 2) * 4) +
                    bytes(n * Dm * 4) + 2 * bytes(NT * I * 4) + 2 * bytes(NT * Dm * 4) + 2 * bytes(n * SI * 4) +
                    bytes(n * Dm * 4) + bytes(n * std::max(Dm, SI) * 4);
        if (fast_)  // tensor-core experts: FP8 copies of the inputs and of the SwiGLU output, tile table; the
                    // shared expert's FP8 SwiGLU output
            mo += bytes(NT * I) + bytes(NT * (I / 128) * 4) + bytes(n * Dm) + bytes(n * (Dm / 128) * 4) + bytes((E + 1) * 4) +
                  bytes(n * SI) + bytes(n * (SI / 128) * 4);
        if (ep_)  // gathered inputs (f32 or FP8 + scales), ids, weights, local ids; returned blocks, index, slots
            mo += bytes(T * Dm * 4) + bytes(T * Dm) + bytes(T * (Dm / 128) * 4) + 3 * bytes(T * K * 4) +
                  bytes(ranks * n * K * Dm * 4) + bytes(n * K * 4) + bytes(n * K * Dm * 4) +
                  ep_staging_bytes(ranks, n, T, K, Dm);
        // (fast GEMMs split act_quant's scratch in two allocations: one more alignment each)
        return fixed + std::max({at, mo, mixing}) + 1024;
    };
    size_t layer_peak = 0;
    for (const DeviceLayer& lw : weights_.layers) layer_peak = std::max(layer_peak, peak_of(lw, S));
    // The MTP rows of a pass (at most one per row) run after the layers, with their own inputs and streams.
    auto mtp_rows = [&](int64_t M) { return 3 * bytes(M * hc * Dm * 4) + 2 * bytes(M * Dm * 4) + 2 * bytes(M * hc * Dm * 4); };
    if (weights_.mtp) layer_peak = std::max(layer_peak, mtp_rows(S) + peak_of(weights_.mtp->block, S));
    total += layer_peak;
    // split-K partials, one GEMM's (MTP: S·hc rows; the grouped wo_a: S·G)
    if (fast_) total += bytes(fast_linear_split_floats_bound(S * std::max<int64_t>(hc, config_.o_groups)) * 4);
    const size_t head = bytes(R * hc * Dm * 4) + bytes(R * Dm * 4) + bytes(R * (hc + 1) * 4) + bytes(R * V * 4) +
                        bytes(R * Dm * 4) + 256 +  // (+ fast GEMM scratch)
                        (fast_ ? bytes(hc_mix_splits(hc * Dm) * R * (hc + 1) * 4) : 0);  // fast mixing
    total += head;
    total += draws_.workspace_need(S + D, V);  // sampling: a draw per row at most (verify rows), n > 1 siblings
    if (weights_.dspark) {  // DSpark taps and context rows (cuda_dspark_v4.cpp): at most every row
        const int64_t T = static_cast<int64_t>(c.dspark_target_layer_ids.size());
        total += 2 * bytes(S * 4) + weights_.dspark->stages.size() * bytes(S * 8);  // inputs
        total += 2 * bytes(S * T * Dm * 4) + bytes(S * Dm * 4) + bytes(S * Dh * 4) + 1024;
        if (fast_) total += bytes(S * T * Dm) + bytes(S * (T * Dm / 128 + 1) * 4) + bytes(S * T * Dm * 2);
        total = std::max(total, dspark_workspace_need(D));  // a draft of up to D requests
    }
    if (weights_.mtp) {  // a draft of up to D requests (cuda_mtp.cpp: inputs, two stream buffers, one chained step)
        const int64_t Rd = std::max<int64_t>(D, 1);
        const size_t draft = 16 * bytes(Rd * 64) + 2 * bytes(Rd * hc * Dm * 4) + bytes(Rd * 16 * 12) + mtp_rows(Rd) +
                             peak_of(weights_.mtp->block, Rd) + bytes(Rd * hc * Dm * 4) + bytes(Rd * Dm * 4) + bytes(Rd * (hc + 1) * 4) +
                             bytes(Rd * V * 4) + bytes(Rd * Dm * 4) + 256 + bytes(Rd * V * 4) +
                             bytes(draft_sample_parts(Rd, V) * 8) +
                             2 * bytes(Rd * 4);
        total = std::max(total, draft);
    }
    return total;
}

float* CudaModel::compute(const Batch& batch) const {
    const ModelConfig& c = config_;
    const Stream s = stream_.get();
    const int64_t D = c.hidden_size, hc = c.hc_mult, L = c.num_hidden_layers;
    Batch b = batch;
    const int64_t S = b.rows;
    float* x = workspace_->alloc_n<float>(S * hc * D);
    float* y = workspace_->alloc_n<float>(S * hc * D);
    embed({.table = weights_.embed, .tokens = b.tokens, .x = x, .rows = S, .hc = hc, .round_bf16 = official()}, s);
    // DSpark taps of attached sequences' rows: [num_taps, taps * D] (cuda_dspark_v4.cpp).
    float* taps = b.num_taps > 0 ? workspace_->alloc_n<float>(b.num_taps * int64_t(c.dspark_target_layer_ids.size()) * D)
                                 : nullptr;
    for (int64_t l = 0; l < L; ++l) {
        b.segments = b.all_segments + l * b.num_segments;
        run_layer(weights_.layers[size_t(l)], b, x, y);
        dspark_tap_layer(l, b, x, taps);  // the stream leaving the layer
    }
    dspark_write_context(b, taps);
    if (b.mtp) run_mtp_pass(b, x);
    if (b.num_picked == 0) return nullptr;
    // Rows whose logits are wanted, gathered so the head runs once for the whole batch.
    const int64_t R = b.num_picked;
    float* xs = workspace_->alloc_n<float>(R * hc * D);
    gather_rows({.src = x, .index = b.picked, .dst = xs, .n = R, .width = hc * D}, s);
    return head_logits(xs, R, weights_.hc_head, weights_.norm);
}

float* CudaModel::head_logits(const float* xs, int64_t R, const DeviceHc& hcw, const float* norm) const {
    const ModelConfig& c = config_;
    const Stream s = stream_.get();
    const int64_t D = c.hidden_size, V = c.vocab_size;
    float* hy = workspace_->alloc_n<float>(R * D);
    float* mix = workspace_->alloc_n<float>(R * (c.hc_mult + 1));
    const float eps = static_cast<float>(c.rms_norm_eps);
    const MixPartials mp = hc_mix_partials(hcw, xs, R, c.hc_mult);
    hc_head({.x = xs, .fn = hcw.fn, .base = hcw.base, .scale = hcw.scale, .rows = R, .hc = c.hc_mult, .hidden = D,
             .norm_eps = eps, .hc_eps = static_cast<float>(c.hc_eps), .y = hy, .round_bf16 = official(), .mix = mix,
             .mix_given = mp.partial != nullptr, .mix_partial = mp.partial, .mix_splits = mp.splits},
            s);
    // The LM head's bf16 input (a bf16 weight on the tensor cores) written by the norm.
    ConvertedInput ch{.x = hy, .rows = R, .cols = D};
    const DeviceLinear& head = weights_.head;
    rms_norm_forms(norm, hy, R, D, ch, 0, fast_ && head.kind == WeightKind::kBF16 && fast_linear_supported(head));
    float* logits = workspace_->alloc_n<float>(R * V);
    if (!project_fast(weights_.head, hy, R, logits, false, &ch))
        linear({.x = hy, .x_ld = D, .weight = weights_.head, .y = logits, .y_ld = V, .rows = R}, s);
    return logits;
}

void CudaModel::pack_segments(std::span<DeviceSequenceState* const> states, const Batch& b, int64_t table,
                              const uint8_t* d_tables, DeviceSegment* segs, float** tables) const {
    const DeviceStateLayout& Y = *layout_;
    for (int64_t i = 0; i < b.num_segments; ++i) {
        const DeviceSequenceState& st = *states[size_t(i)];
        float** t = tables + i * table;
        for (int64_t k = 0; k < table; ++k) t[k] = k < st.entries.size() ? st.entries.page(k) : nullptr;
    }
    const int64_t L = config_.num_hidden_layers;
    for (int64_t l = 0; l < L; ++l) {
        const LayerStateLayout& y = Y.layers[size_t(l)];
        int64_t row = 0;
        for (int64_t i = 0; i < b.num_segments; ++i) {
            const DeviceSequenceState& st = *states[size_t(i)];
            DeviceSegment& d = segs[l * b.num_segments + i];
            d = DeviceSegment{};
            d.row_begin = row;
            d.num_rows = b.num_rows[size_t(i)];
            d.first_position = b.first_position[size_t(i)];
            d.window = st.ring(y.window);
            d.comp_kv = st.ring(y.comp_kv);
            d.comp_gate = st.ring(y.comp_gate);
            d.idx_kv = st.ring(y.idx_kv);
            d.idx_gate = st.ring(y.idx_gate);
            d.pages = reinterpret_cast<float* const*>(d_tables) + i * table;
            d.entries_per_page = y.entries_per_page;
            d.comp_offset = y.comp_offset;
            d.idx_offset = y.idx_offset;
            row += b.num_rows[size_t(i)];
        }
    }
}

ForwardOutputs CudaModel::forward_sampled(std::span<const SequenceChunk> chunks, std::span<const uint8_t> want_logits,
                                          std::span<const DeviceDraw> draws) const {
    std::lock_guard<std::mutex> lock(mutex_);
    set_current_device(device_);
    const ModelConfig& c = config_;
    const Stream s = stream_.get();
    const int64_t V = c.vocab_size, L = c.num_hidden_layers;
    DI_CHECK(want_logits.empty() || want_logits.size() == chunks.size(), "forward_sampled: ", want_logits.size(),
             " logits flags for ", chunks.size(), " chunks");
    auto wants = [&](size_t i) { return want_logits.empty() || want_logits[i] != 0; };
    const std::vector<uint8_t> drawn = check_device_draws(draws, chunks);
    Batch b;
    std::vector<int32_t> tokens, positions, row_segment;
    std::vector<DeviceSequenceState*> states;
    bool decode = !chunks.empty(), short_chunks = !chunks.empty();
    for (size_t i = 0; i < chunks.size(); ++i) {
        const SequenceChunk& ch = chunks[i];
        DI_CHECK(ch.sequence != nullptr, "forward_batch: chunk without a sequence");
        DI_CHECK(ch.image_span.empty(), "DeepSeek-V4 has no vision tower: image spans are not accepted");
        const int64_t n = static_cast<int64_t>(ch.tokens.size());
        DI_CHECK(n > 0, "forward: chunk ", i, " has no tokens");
        auto* dev = dynamic_cast<DeviceSequenceState*>(&ch.sequence->state());
        DI_CHECK(dev != nullptr, "forward: the sequence was not created by this CUDA model");
        for (DeviceSequenceState* o : states) DI_CHECK(o != dev, "forward: a sequence appears twice in a batch");
        const int64_t P0 = dev->length;
        DI_CHECK(P0 + n <= max_len_, "sequence of ", P0 + n, " tokens exceeds the CUDA model's max_model_len ", max_len_);
        for (int64_t t = 0; t < n; ++t) {
            const int32_t tok = ch.tokens[size_t(t)];
            DI_CHECK(tok >= 0 && tok < V, "token id ", tok, " at index ", t, " is outside [0, ", V, ")");
            tokens.push_back(tok);
            positions.push_back(static_cast<int32_t>(P0 + t));
            row_segment.push_back(static_cast<int32_t>(i));
        }
        b.first_position.push_back(P0);
        b.num_rows.push_back(n);
        b.max_rows = std::max(b.max_rows, n);
        b.max_position = std::max(b.max_position, P0 + n - 1);
        states.push_back(dev);
        decode = decode && n == 1 && !(ch.all_logits && wants(i));
        short_chunks = short_chunks && n <= kGraphChunkRows;
    }
    const int64_t real_rows = static_cast<int64_t>(tokens.size());
    // Every page this forward writes becomes its sequence's own (copy-on-write) before anything else.
    prepare_state_writes(states, chunks);
    // MTP-attached sequences: the MTP rows this pass completes (in a graph step one per row: padded below).
    MtpPassPlan mtp_plan;
    if (weights_.mtp) mtp_plan = mtp_pass_plan(states, chunks);
    // A pure decode step replays the CUDA graph of its (rows, context) bucket; padding rows decode
    // token 0 at position 0 of the scratch sequence (batch invariance: they change no other row). Steps
    // of short chunks (verify rows: an anchor and its drafts; a prompt's tail) replay the graphs of their
    // own variant: as many segments as rows (zero-row segments of the scratch sequence after the padding
    // rows), each sized for kGraphChunkRows rows, so one graph serves every composition of its bucket.
    // DSpark-attached sequences: their taps and context rows (in a graph step every row taps: padded below).
    TapPlan tap_plan = dspark_tap_plan(states, chunks, b);
    const bool graph_step = decode || (verify_graphs_ && short_chunks);
    const bool mtp_ok = !mtp_plan.any || mtp_plan.graphable;
    const int64_t bucket = graphs_.enabled() && graph_step && mtp_ok ? graph_bucket(real_rows) : 0;
    b.graph = bucket > 0 && bucket <= max_rows_;
    b.short_chunks = b.graph && !decode;
    if (b.graph) {
        auto* pad = static_cast<DeviceSequenceState*>(&pad_.state());
        int64_t segments = static_cast<int64_t>(states.size());
        for (int64_t k = real_rows; k < bucket; ++k) {
            tokens.push_back(0);
            positions.push_back(0);
            row_segment.push_back(static_cast<int32_t>(segments++));
            b.first_position.push_back(0);
            b.num_rows.push_back(1);
            states.push_back(pad);
        }
        for (; segments < bucket; ++segments) {  // (short chunks only)
            b.first_position.push_back(0);
            b.num_rows.push_back(0);
            states.push_back(pad);
        }
        if (b.short_chunks) b.max_rows = kGraphChunkRows;
        b.max_position = context_bucket(b.max_position + 1, max_len_) - 1;
        if (!tap_plan.src.empty()) tap_plan = pad_tap_plan(tap_plan, bucket);
    }
    b.rows = static_cast<int64_t>(tokens.size());
    b.num_segments = static_cast<int64_t>(states.size());
    if (b.graph && mtp_plan.any) mtp_plan = pad_mtp_pass_plan(std::move(mtp_plan), b, static_cast<int64_t>(chunks.size()));
    // Rows of logits: every row of a graph step; else the rows a chunk wants (all or its last) and the
    // last row of a chunk with draws (every row with verify draws). Chunks that want neither (mid-prefill)
    // skip the head.
    std::vector<int32_t> picked;
    std::vector<int64_t> first_pick(chunks.size(), -1), num_pick(chunks.size(), 0);
    {
        int64_t offset = 0;
        for (size_t i = 0; i < chunks.size(); ++i) {
            const int64_t n = static_cast<int64_t>(chunks[i].tokens.size());
            if (b.graph || wants(i) || drawn[i]) {  // (a graph step's head runs over every row, in order)
                const int64_t from = (wants(i) && chunks[i].all_logits) || drawn[i] == 2 ? 0 : n - 1, lo = b.graph ? 0 : from;
                first_pick[i] = static_cast<int64_t>(picked.size()) + from - lo;
                num_pick[i] = n - from;
                for (int64_t r = lo; r < n; ++r) picked.push_back(static_cast<int32_t>(offset + r));
            }
            offset += n;
        }
        if (b.graph)
            for (int64_t r = real_rows; r < b.rows; ++r) picked.push_back(static_cast<int32_t>(r));
    }
    b.num_picked = static_cast<int64_t>(picked.size());

    // Inputs: packed into pinned memory and copied with one transfer into one arena block.
    const int64_t S = b.rows, D = static_cast<int64_t>(draws.size());
    size_t in_bytes = 0;
    auto place = [&](size_t n) {
        const size_t at = in_bytes;
        in_bytes = align256(in_bytes + n);
        return at;
    };
    const size_t o_tok = place(size_t(S) * 4), o_pos = place(size_t(S) * 4), o_rs = place(size_t(S) * 4);
    // Per segment a page table of its entry pages (the same length for all: graphs size it from the bucket).
    const int64_t table = layout_->entry_pages(b.max_position + 1);
    const size_t o_segs = place(size_t(L * b.num_segments) * sizeof(DeviceSegment)), o_pick = place(picked.size() * 4);
    const size_t o_pages = place(size_t(b.num_segments * table) * sizeof(float*));
    const size_t o_mtp = place(mtp_pass_bytes(mtp_plan));
    const size_t o_tsrc = place(tap_plan.src.size() * 4), o_tpos = place(tap_plan.pos.size() * 4);
    const size_t o_tdst = place(tap_plan.dst.size() * sizeof(float*));
    const size_t graph_inputs = in_bytes;  // a graph's inputs end here
    if (!pinned_in_ || pinned_in_->nbytes() < in_bytes) pinned_in_ = std::make_unique<PinnedBuffer>(in_bytes * 2);
    auto* pin = static_cast<uint8_t*>(pinned_in_->host());
    std::memcpy(pin + o_tok, tokens.data(), size_t(S) * 4);
    std::memcpy(pin + o_pos, positions.data(), size_t(S) * 4);
    std::memcpy(pin + o_rs, row_segment.data(), size_t(S) * 4);
    const size_t mark = workspace_->mark();
    auto* d_in = static_cast<uint8_t*>(workspace_->alloc(graph_inputs));
    pack_segments(states, b, table, d_in + o_pages, reinterpret_cast<DeviceSegment*>(pin + o_segs),
                  reinterpret_cast<float**>(pin + o_pages));
    if (!picked.empty()) std::memcpy(pin + o_pick, picked.data(), picked.size() * 4);
    mtp_pass_pack(mtp_plan, pin + o_mtp);
    if (!tap_plan.src.empty()) {
        std::memcpy(pin + o_tsrc, tap_plan.src.data(), tap_plan.src.size() * 4);
        std::memcpy(pin + o_tpos, tap_plan.pos.data(), tap_plan.pos.size() * 4);
        std::memcpy(pin + o_tdst, tap_plan.dst.data(), tap_plan.dst.size() * sizeof(float*));
    }
    std::vector<int32_t> draw_rows(static_cast<size_t>(D));  // each draw samples its row's logits (by default its chunk's last)
    for (int64_t k = 0; k < D; ++k) {
        const DeviceDraw& d = draws[size_t(k)];
        draw_rows[size_t(k)] = device_draw_logit_row(d, static_cast<int64_t>(chunks[size_t(d.chunk)].tokens.size()),
                                                     first_pick[size_t(d.chunk)], num_pick[size_t(d.chunk)]);
    }

    timer_.start(s);
    copy_to_device(d_in, pin, graph_inputs, s);
    b.tokens = reinterpret_cast<const int32_t*>(d_in + o_tok);
    b.positions = reinterpret_cast<const int32_t*>(d_in + o_pos);
    b.row_segment = reinterpret_cast<const int32_t*>(d_in + o_rs);
    b.all_segments = reinterpret_cast<const DeviceSegment*>(d_in + o_segs);
    b.picked = reinterpret_cast<const int32_t*>(d_in + o_pick);
    mtp_pass_bind(mtp_plan, d_in + o_mtp, b);
    b.num_taps = static_cast<int64_t>(tap_plan.src.size());
    b.tap_src = reinterpret_cast<const int32_t*>(d_in + o_tsrc);
    b.tap_pos = reinterpret_cast<const int32_t*>(d_in + o_tpos);
    b.tap_dst = reinterpret_cast<float* const*>(d_in + o_tdst);

    // A graph step (decode_graphs.h): the captured work reads its inputs from the block above, at the
    // same arena offset in every step of the bucket, and allocates the same arena ranges: replaying it
    // is the eager path.
    const int64_t variant = (tap_plan.src.empty() ? 0 : 1) + (b.short_chunks ? 2 : 0) + (mtp_plan.any ? 4 : 0);
    float* logits = b.graph ? graphs_.run({b.rows, b.max_position + 1, variant}, *workspace_, s, [&] { return compute(b); },
                                        stats_.graph_captures, stats_.graph_replays)
                            : compute(b);

    // Device draws (groups of at most max_seqs_ draws share one scratch), then the small copies back.
    draws_.enqueue(logits, V, draws, draw_rows, *workspace_, s);
    stats_.device_draws += D;
    ForwardOutputs out;
    out.logits.resize(chunks.size());
    for (size_t i = 0; i < chunks.size(); ++i) {
        if (!wants(i)) continue;
        out.logits[i].resize(static_cast<size_t>(num_pick[i] * V));
        copy_to_host(out.logits[i].data(), logits + first_pick[i] * V, out.logits[i].size() * sizeof(float), s);
    }
    timer_.end(s);
    stream_.synchronize();
    timer_.account(stats_);  // this forward's span, and the idle gap since the previous forward ended
    out.tokens = draws_.tokens(draws.size());
    out.accepted = draws_.accepted(draws.size());
    {  // (before the arena is reused)
        DeviceDraws::Fallback fb = draws_.fallback(logits, V, draws, out.tokens, draw_rows, s);
        out.draw_logits = std::move(fb.logits);
        out.draw_probs = std::move(fb.probs);
    }
    workspace_->reset(mark);
    if (mtp_plan.any) mtp_pass_done(std::span<DeviceSequenceState* const>(states.data(), chunks.size()), chunks);
    for (size_t i = 0; i < chunks.size(); ++i) states[i]->length += static_cast<int64_t>(chunks[i].tokens.size());
    return out;
}

}  // namespace deepinfer::cuda::v4

namespace deepinfer::cuda {

using v4::CudaModel;

int select_cuda_model_device(const CudaModelOptions& o) {
    const ExpertExchange* ep = o.expert_exchange;
    if (ep) DI_CHECK(o.expert_rank >= 0 && o.expert_rank < ep->ranks(), "expert rank ", o.expert_rank, " of ", ep->ranks());
    const int device = ep ? ep->device(o.expert_rank) : o.device;
    DI_CHECK(device >= 0 && device < device_count(), "CUDA device ", device, " not available (", device_count(),
             " devices)");
    set_current_device(device);
    return device;
}

std::unique_ptr<Model> load_cuda_model(const std::string& dir, const ModelOptions& options,
                                       const CudaModelOptions& cuda_options) {
    DI_CHECK(device_count() > 0, "--device cuda: no CUDA device is available");
    auto ckpt = std::make_unique<Checkpoint>(dir);
    Numerics n = options.numerics;
    if (options.numerics_from_checkpoint) {
        bool q = false;
        for (const CheckpointTensor& t : ckpt->tensors())
            q |= t.info->dtype == DType::kF8E4M3 || t.name.find(".scale") != std::string::npos;
        n = q ? Numerics::kOfficial : Numerics::kExact;
    }
    return std::make_unique<CudaModel>(std::move(ckpt), n, options, cuda_options);
}

namespace {
const CudaModelRuntime& as_cuda(const Model& model) {
    const auto* m = dynamic_cast<const CudaModelRuntime*>(&model);
    DI_CHECK(m != nullptr, "not a one-GPU CUDA model");
    return *m;
}
}  // namespace

CudaModelStats cuda_model_stats(const Model& model) { return as_cuda(model).stats(); }
void set_cuda_even_routing(const Model& model, bool on) { as_cuda(model).set_even_routing(on); }
int64_t cuda_model_max_len(const Model& model) { return as_cuda(model).max_len(); }
void reset_cuda_model_stats(const Model& model) { as_cuda(model).reset_stats(); }
size_t cuda_workspace_bound(const Model& model, int64_t rows, int64_t sequences, int64_t logit_rows,
                            int64_t positions, int64_t draws) {
    return as_cuda(model).workspace_bound(rows, sequences, logit_rows, positions, draws);
}

}  // namespace deepinfer::cuda
