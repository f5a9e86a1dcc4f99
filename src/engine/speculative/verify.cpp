// SPDX-License-Identifier: Apache-2.0
// Token-wise verification (speculative-decoding.md §3.2, §3.3) and block verification (§3.4).
#include "engine/speculative/verify.h"

#include <algorithm>

#include "deepinfer/check.h"
#include "model/draft_sampling.h"

namespace deepinfer {

double draft_uniform(uint64_t seed, uint64_t completion, int64_t anchor_index, int64_t k) {
    DI_ICHECK(k >= 0 && k < kMaxDraftTokens);
    return counter_uniform(seed, completion + kDraftStream, static_cast<uint64_t>(anchor_index * kMaxDraftTokens + k));
}

VerifyRowResult verify_row(const VerifyRowInput& in) {
    const SamplingParams& p = *in.sample.params;
    const std::vector<float> l = processed_logits(in.sample);
    const Distribution d = sampling_distribution(l, p);
    const uint64_t t = in.sample.generated.size();
    const double u_draw = counter_uniform(in.sample.seed, in.sample.stream, t);
    VerifyRowResult out;
    if (!in.draft) {
        out.token = draw(d, u_draw);  // the bonus row: an ordinary sample
    } else if (d.greedy) {
        out.accepted = *in.draft == d.argmax;
        out.token = d.argmax;
    } else {
        const int32_t x = *in.draft;
        const double px = d.prob(x);
        const double qx = in.draft_probs.empty() ? 1.0 : double(in.draft_probs[size_t(x)]);
        const double u_acc = counter_uniform(in.sample.seed, in.sample.stream + kAcceptStream, t);
        // Accept with probability min(1, p/q); q(x) > 0 since x was drawn from q.
        if (u_acc * qx < px) {
            out.accepted = true;
            out.token = x;
        } else {
            // Residual max(p - q, 0) over p's candidates (tokens outside them have p = 0), drawn in
            // p's candidate order with the row's draw uniform; all mass gone (numerically): p itself.
            // Untruncated: in p's blocks of ids (their sums, then inside one: the device sampler's order).
            Distribution r = d;
            r.total = 0;
            auto residual = [&](size_t i) {
                const int32_t id = r.id(i);
                const double q = in.draft_probs.empty() ? (id == x ? 1.0 : 0.0) : double(in.draft_probs[size_t(id)]);
                return std::max(d.weight[i] / d.total - q, 0.0);
            };
            if (!r.parts.empty()) {
                for (size_t b = 0; b < r.parts.size(); ++b) {
                    double s = 0;
                    for (size_t i = b * size_t(kDraftSumBlock); i < std::min(r.weight.size(), (b + 1) * size_t(kDraftSumBlock)); ++i)
                        s += (r.weight[i] = residual(i));
                    r.parts[b] = s;
                }
                for (double s : r.parts) r.total += s;
            } else {
                for (size_t i = 0; i < r.weight.size(); ++i) r.total += (r.weight[i] = residual(i));
                size_t n = r.weight.size();
                while (n > 1 && r.weight[n - 1] == 0) --n;  // never land on a zero-mass tail by rounding
                r.weight.resize(n);
                if (!r.ids.empty()) r.ids.resize(n);
            }
            out.token = r.total > 0 ? draw(r, u_draw) : draw(d, u_draw);
        }
    }
    if (p.logprobs >= 0) out.logprob = token_logprob(l, p.logprobs, out.token);
    return out;
}

BlockVerifyResult verify_block(const BlockVerifyInput& in) {
    const int64_t L = static_cast<int64_t>(in.drafts.size());
    DI_CHECK(static_cast<int64_t>(in.rows.size()) == L + 1, "verify_block: ", in.rows.size(), " rows for ", L, " drafts");
    const SampleInput& first = in.rows[0];
    const SamplingParams& p = *first.params;
    DI_CHECK(p.temperature > 0, "verify_block: block verification is for sampled rows");
    const int64_t V = static_cast<int64_t>(first.logits.size());
    DI_CHECK(in.draft_probs.empty() || static_cast<int64_t>(in.draft_probs.size()) == L * V,
             "verify_block: draft_probs must hold one distribution per draft");
    auto q_of = [&](int64_t i, int32_t x) {  // q_{i+1}(x), 0-based draft i
        return in.draft_probs.empty() ? (x == in.drafts[size_t(i)] ? 1.0 : 0.0)
                                      : double(in.draft_probs[size_t(i * V + x)]);
    };
    std::vector<std::vector<float>> logits;
    std::vector<Distribution> dist;
    for (const SampleInput& row : in.rows) {
        logits.push_back(processed_logits(row));
        dist.push_back(sampling_distribution(logits.back(), p));
    }
    const uint64_t t = first.generated.size();  // index of the token the anchor row decides
    // P_i (P[0] = 1) and the stopping probabilities h_i; τ = the last i with η_i <= h_i.
    std::vector<double> P(size_t(L + 1), 1.0);
    int64_t tau = 0;
    for (int64_t i = 1; i <= L; ++i) {
        const int32_t d = in.drafts[size_t(i - 1)];
        const double q = q_of(i - 1, d);
        P[size_t(i)] = q > 0 ? std::min(1.0, P[size_t(i - 1)] * dist[size_t(i - 1)].prob(d) / q) : 0.0;
        double h = P[size_t(i)];
        if (i < L) {
            const Distribution& next = dist[size_t(i)];
            double R = 0;
            for (size_t k = 0; k < next.weight.size(); ++k)
                R += std::max(P[size_t(i)] * next.weight[k] / next.total - q_of(i, next.id(k)), 0.0);
            h = R > 0 ? R / (R + 1.0 - P[size_t(i)]) : 0.0;
        }
        const double eta = counter_uniform(first.seed, first.stream + kBlockStream,
                                           t * uint64_t(kMaxDraftTokens) + uint64_t(i - 1));
        if (eta <= h) tau = i;
    }
    BlockVerifyResult out;
    out.accepted = tau;
    out.tokens.assign(in.drafts.begin(), in.drafts.begin() + tau);
    const Distribution& d = dist[size_t(tau)];
    const double u_draw = counter_uniform(first.seed, first.stream, t + uint64_t(tau));
    int32_t token = 0;
    if (tau == L) {
        token = draw(d, u_draw);
    } else {
        // normalize(max(P_τ p_{τ+1} - q_{τ+1}, 0)) over p's candidates, in p's candidate order.
        Distribution r = d;
        r.total = 0;
        r.parts.clear();  // (drawn in candidate order, one sum)
        for (size_t k = 0; k < r.weight.size(); ++k) {
            r.weight[k] = std::max(P[size_t(tau)] * d.weight[k] / d.total - q_of(tau, r.id(k)), 0.0);
            r.total += r.weight[k];
        }
        size_t n = r.weight.size();
        while (n > 1 && r.weight[n - 1] == 0) --n;  // never land on a zero-mass tail by rounding
        r.weight.resize(n);
        if (!r.ids.empty()) r.ids.resize(n);
        token = r.total > 0 ? draw(r, u_draw) : draw(d, u_draw);
    }
    out.tokens.push_back(token);
    if (p.logprobs >= 0)
        for (int64_t i = 0; i <= tau; ++i)
            out.logprobs.push_back(token_logprob(logits[size_t(i)], p.logprobs, out.tokens[size_t(i)]));
    return out;
}

}  // namespace deepinfer
