// SPDX-License-Identifier: Apache-2.0
// CudaV41Model's workspace bound: what one forward takes from the arena, mirroring the allocations
// of forward_sampled (cuda_v41_forward.cpp), the plan's input block (cuda_v41_plan.cpp), compute(),
// attention (cuda_v41_attention.cpp) and the MoE (cuda_v41_model.cpp) from the config alone, so the
// arena can be sized at load before the weights are read. Every allocation is counted with a full
// extra 256 bytes (its alignment). tests/model/cuda_v41_runtime_test.cpp checks that forwards of
// varied shapes stay below the bound of their shape.
#include <algorithm>

#include "backends/cuda/model/cuda_v41_impl.h"
#include "backends/cuda/model/dspark_markov.h"
#include "backends/cuda/model/expert_exchange.h"
#include "backends/cuda/model/routed_experts.h"

namespace deepinfer::cuda {

// The shared expert's scratch kept on its own stream until the join (Scratch::kKeepSplit; none under expert
// parallelism or off the fast mode): the bf16 forms of a that w1 and w3 make where the norm made none, w2's input
// form, act_quant's f32 scratch where a width is not a multiple of 128, and the three launches' split-K partials.
size_t CudaV41Model::shared_expert_kept(int64_t S) const {
    if (!fast_ || !shared_expert_stream_ || ep_) return 0;
    const V41TextConfig& c = config_.text;
    const int64_t Dm = c.hidden_size, I = c.moe_intermediate_size;
    auto bytes = [](int64_t n) { return ((static_cast<size_t>(std::max<int64_t>(n, 0)) + 255) & ~size_t(255)) + 256; };
    return 2 * (bytes(S * Dm * 2) + bytes(S * Dm * 4)) + bytes(S * I * 2) + bytes(S * I * 4) +
           3 * bytes(fast_linear_split_floats_bound(S) * 4);
}

// The attention site's side-stream scratch kept until the join (Scratch::kKeepSplit; one GPU, the fast mode): the
// split-K partials of wkv, the compressor's two projections and the index keys' projection, the bf16 form of the
// pooled rows the index keys' projection converts (at most S groups), and one form of a in case a projection there
// converts its own (the forms it takes are made before the fork where they apply).
size_t CudaV41Model::attention_side_kept(int64_t S) const {
    if (!fast_ || !attention_side_stream_ || ep_) return 0;
    const V41TextConfig& c = config_.text;
    auto bytes = [](int64_t n) { return ((static_cast<size_t>(std::max<int64_t>(n, 0)) + 255) & ~size_t(255)) + 256; };
    return 4 * bytes(fast_linear_split_floats_bound(S) * 4) + bytes(S * c.head_dim * 2) + bytes(S * c.hidden_size * 2) +
           bytes(S * std::max(c.hidden_size, c.head_dim) * 4);
}

size_t CudaV41Model::workspace_need(int64_t S, int64_t N, int64_t R, int64_t P, int64_t D) const {
    const V41TextConfig& c = config_.text;
    const int64_t Dm = c.hidden_size, hc = c.hc_mult, V = c.vocab_size, L = c.num_hidden_layers;
    const int64_t H = c.num_attention_heads, hd = c.head_dim, QL = c.q_lora_rank, G = c.o_groups, OR = c.o_lora_rank;
    const int64_t IH = c.index_n_heads, ID = c.index_head_dim, K = c.index_topk, E = c.n_routed_experts;
    const int64_t KE = c.num_experts_per_tok, I = c.moe_intermediate_size, W = c.sliding_window;
    const int64_t n_engram = static_cast<int64_t>(c.engram_layer_ids.size()), cols = c.engram_num_hash_cols();
    S = std::max<int64_t>(S, 1);
    N = std::max<int64_t>(N, 1);
    P = std::max<int64_t>(P, 1);
    auto bytes = [](int64_t n) { return ((static_cast<size_t>(std::max<int64_t>(n, 0)) + 255) & ~size_t(255)) + 256; };

    // Scratch every layer reuses, and the input block (every table counted at its largest).
    size_t total = 2 * bytes(S * hd * 4) + bytes(S * formats_.window_bytes);
    size_t in = bytes(R * 4) + 3 * bytes(S * 4) + bytes(S * hc * 4) + bytes(S * 8) + bytes(n_engram * S * cols * 8);
    in += 2 * bytes(S);  // image-span flags (and bounded replay's tail's)
    in += bytes(N * std::max<int64_t>(1, layout_->entry_pages(P)) * 8);  // the segments' page tables
    for (int64_t l = 0; l < L; ++l) {
        const int64_t r = c.compress_ratio(l);
        if (r > 0 && c.is_kv_source(l))
            in += 2 * bytes(S * r * 8) + bytes(S * 4) + 4 * bytes(S * 8);
        if (r > 0 && c.is_index_source(l)) in += bytes(S * int64_t(sizeof(IndexRow))) + bytes(S * 4);
        in += bytes(N * int64_t(sizeof(SinkSegment))) + bytes(S * 8);
        if (fast_ && bf16_key_rows_ > 0) in += bytes(N * int64_t(sizeof(SinkBf16Keys)));
    }
    total += in + bytes((S + 1) * K * 4) + bytes((S + 1) * P);  // input block, top-k, candidate mask

    // compute(): Engram on the side stream (kept for the whole forward), streams and mixes.
    // (the fast GEMMs keep a bf16 copy of the input too)
    total += static_cast<size_t>(n_engram) * (3 * bytes(S * cols * c.engram_head_dim * 4) + bytes(S * (hc + 1) * Dm * 4));
    total += 2 * bytes(S * hc * Dm * 4) + 4 * bytes(S * hc * 4) + bytes(S * hc * hc * 4) + 2 * bytes(S * Dm * 4);
    // The largest site of a layer: attention (with its compressor and indexer) or the MoE. Each
    // projection's act_quant scratch is released right after it: one of the widest is counted.
    size_t site = 0;
    for (int64_t l = 0; l < L; ++l) {
        const int64_t r = c.compress_ratio(l);
        size_t at = bytes(S * QL * 4) + bytes(S * H * hd * 4) + bytes(S * hd * 4);
        if (r > 0 && c.is_kv_source(l)) at += bytes(S * hd * 4) + bytes(S * ID * 4);
        if (r > 0 && c.is_index_source(l)) {
            const int64_t entries = P, blocks = (entries + c.candidate_block_size - 1) / c.candidate_block_size;
            at += bytes(S * IH * ID * 4) + bytes(S * IH * 4) + bytes(S * entries * 4) + bytes(S * blocks * 4) +
                  bytes(S * c.candidate_topk_blocks * 4) + bytes(S * K * 4);
        }
        const int64_t max_cand = std::min(W, P) + (r > 0 ? K : 0);
        at += bytes(S * H * max_cand * 4) + bytes(S * H * hd * 4) + bytes(S * G * OR * 4);
        at += bytes(S * std::max({Dm, QL, G * OR, IH * ID}) * 4);
        if (fast_) at += bytes(S * std::max({Dm, QL, G * OR, H * hd / G, IH * ID}) * 2) + 512;  // bf16 / FP8 copies
        if (fast_) at += bytes(S * H * hd * 2) + 2 * bytes((G + 1) * 4) + bytes(G * S * 4);  // grouped wo_a's input, tables
        if (fast_) at += 2 * bytes(S * Dm * 2) + 2 * bytes(S * QL * 2);  // a's and qr's kept bf16 forms (InputForms)
        if (fast_ && bf16_key_rows_ > 0) at += bytes((S + bf16_key_rows_) * hd * 2);  // pre-decoded keys (bf16_key_plan.h)
        at += attention_side_kept(S);
        // MoE: under expert parallelism the experts here run the pairs of every rank's rows (each
        // rank's forward holds at most S rows — the engine gives each rank its share of a step — so at
        // most ranks · S) and the outputs come back per rank.
        const int64_t ranks = ep_ ? ep_->ranks() : 1, T = ep_ ? S * ranks : S, NT = T * KE;
        size_t mo = 2 * bytes(S * E * 4) + 2 * bytes(S * KE * 4) + bytes(S * Dm * 4) + 3 * bytes(NT * 4) +
                    bytes((E + 2) * 4) + 2 * bytes(NT * I * 4) + 2 * bytes(NT * Dm * 4) + 2 * bytes(S * I * 4) +
                    bytes(S * Dm * 4) + bytes(S * std::max(Dm, I) * 4);
        if (fast_)  // FP8 inputs (after a per-32 act_quant) and SwiGLU outputs with scales, tile table; the
                    // shared expert's bf16 input
            mo += bytes(S * Dm * 4) + bytes(S * Dm) + bytes(S * (Dm / 128 + 1) * 4) + bytes(NT * I) + bytes(NT * (I / 128 + 1) * 4) +
                  bytes((E + 1) * 4) + bytes(T * Dm) + bytes(T * (Dm / 128 + 1) * 4) + bytes(S * std::max(Dm, I) * 2);
        if (fast_) mo += 2 * bytes(S * Dm * 2);  // a's kept bf16 forms (router, shared expert)
        mo += shared_expert_kept(S);
        if (ep_)
            mo += bytes(T * Dm * 4) + 3 * bytes(T * KE * 4) + bytes(ranks * S * KE * Dm * 4) + bytes(S * KE * 4) +
                  bytes(S * KE * Dm * 4) + ep_staging_bytes(ranks, S, T, KE, Dm);
        site = std::max(site, std::max(at, mo));
    }
    // The fast mode's mHC mixing partials (hc_site), released before the site's own scratch; on the mHC stream
    // (v41_hc_side_stream, up to kHcSideRows rows) kept beside it until the join.
    const int64_t mix_outputs = (2 + hc) * hc + 1;
    const size_t mixes = bytes(hc_mix_splits(hc * Dm) * S * mix_outputs * 4) + bytes(S * mix_outputs * 4);
    if (fast_) site = hc_side_stream_ && S <= kHcSideRows ? site + mixes : std::max(site, mixes);
    total += site;
    // split-K partials (one GEMM's at a time; the grouped wo_a's: S·G rows)
    if (fast_) total += bytes(fast_linear_split_floats_bound(S * std::max<int64_t>(c.o_groups, 1)) * 4);
    total += bytes(R * hc * Dm * 4) + bytes(R * hc * 4) + bytes(R * Dm * 4) + bytes(R * V * 4) + bytes(R * Dm * 2);  // head
    total += draws_.workspace_need(S + D, V);  // sampling: a draw per row at most (verify rows), n > 1 siblings
    if (dspark_stages_ > 0) {  // DSpark taps and context rows (cuda_v41_dspark.cpp): at most every row
        const int64_t T = static_cast<int64_t>(c.dspark_target_layer_ids.size());
        total += 2 * bytes(S * 4) + static_cast<size_t>(dspark_stages_) * bytes(S * 8);  // input block
        total += bytes(S * T * Dm * 4) + bytes(S * Dm * 4) + bytes(S * hd * 4);
        total += bytes(S * T * Dm * 4) + (fast_ ? bytes(S * T * Dm * 2) + bytes(S * T * Dm) + bytes(S * T * Dm / 32 * 4) + 1024 : 0);
    }
    return total;
}

size_t CudaV41Model::dspark_workspace_need(int64_t R) const {
    if (dspark_stages_ == 0) return 0;
    const V41TextConfig& c = config_.text;
    const int64_t G = c.dspark_block_size, S = std::max<int64_t>(R, 1) * G, Dm = c.hidden_size, hc = c.hc_mult;
    const int64_t V = c.vocab_size, H = c.num_attention_heads, hd = c.head_dim, QL = c.q_lora_rank;
    const int64_t Go = c.o_groups, OR = c.o_lora_rank, W = c.sliding_window, rank = c.dspark_markov_rank;
    const int64_t E = c.dspark_n_routed_experts, KE = c.dspark_num_experts_per_tok, I = c.moe_intermediate_size;
    const int64_t Rq = std::max<int64_t>(R, 1), NT = S * KE;
    auto bytes = [](int64_t n) { return ((static_cast<size_t>(std::max<int64_t>(n, 0)) + 255) & ~size_t(255)) + 256; };
    // Input block: tokens, positions, pre-mix, anchors, anchor positions, rings, sampled, temperatures, uniforms.
    size_t total = 2 * bytes(S * 4) + bytes(S * hc * 4) + 2 * bytes(Rq * 4) + bytes(dspark_stages_ * Rq * 8) +
                   bytes(Rq * 4) + bytes(Rq * 8) + bytes(S * 8);
    total += 2 * bytes(S * hc * Dm * 4) + 4 * bytes(S * hc * 4) + bytes(S * hc * hc * 4) + 2 * bytes(S * Dm * 4);
    // The larger site: the stage attention or its MoE (each projection's act_quant scratch counted once).
    size_t at = bytes(S * QL * 4) + bytes(S * H * hd * 4) + bytes(S * hd * 4) + bytes(S * H * (W + G) * 4) +
                bytes(S * H * hd * 4) + bytes(S * Go * OR * 4) + bytes(S * std::max({Dm, QL, Go * OR}) * 4);
    if (fast_) at += bytes(S * std::max({Dm, QL, Go * OR, H * hd / Go}) * 2) + bytes(S * std::max({Dm, QL, Go * OR}) * 4) + 512;
    size_t mo = 2 * bytes(S * E * 4) + 2 * bytes(S * KE * 4) + bytes(S * Dm * 4) + 3 * bytes(NT * 4) + bytes((E + 2) * 4) +
                2 * bytes(NT * I * 4) + 2 * bytes(NT * Dm * 4) + 2 * bytes(S * I * 4) + bytes(S * Dm * 4) +
                bytes(S * std::max(Dm, I) * 4);
    if (fast_)
        mo += bytes(S * Dm * 4) + bytes(S * Dm) + bytes(S * (Dm / 128 + 1) * 4) + bytes(NT * I) + bytes(NT * (I / 128 + 1) * 4) +
              bytes((E + 1) * 4) + bytes(S * Dm) + bytes(S * (Dm / 128 + 1) * 4) + bytes(S * std::max(Dm, I) * 2);
    mo += shared_expert_kept(S);
    const int64_t mix_outputs = (2 + hc) * hc + 1;  // the fast mode's mHC mixing partials (hc_site)
    const size_t mix = fast_ ? bytes(hc_mix_splits(hc * Dm) * S * mix_outputs * 4) + bytes(S * mix_outputs * 4) : 0;
    total += std::max({at, mo, mix});
    if (fast_) total += bytes(fast_linear_split_floats_bound(S) * 4);  // split-K partials
    // Collapse, norm, head; the Markov loop.
    total += 2 * bytes(S * Dm * 4) + bytes(S * V * 4) + (fast_ ? bytes(S * Dm * 2) : 0);
    total += dspark_markov_workspace(Rq, G, V, rank, dspark_markov_fast_bias(weights_.dspark->markov_head, fast_));  // Markov steps
    return total;
}

}  // namespace deepinfer::cuda
