// SPDX-License-Identifier: Apache-2.0
// Token-wise verification (speculative-decoding.md §3.2, §3.3).
#include "engine/speculative/verify.h"

#include <algorithm>

#include "deepinfer/check.h"

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
            Distribution r = d;
            r.total = 0;
            for (size_t i = 0; i < r.weight.size(); ++i) {
                const int32_t id = r.id(i);
                const double q = in.draft_probs.empty() ? (id == x ? 1.0 : 0.0) : double(in.draft_probs[size_t(id)]);
                r.weight[i] = std::max(d.weight[i] / d.total - q, 0.0);
                r.total += r.weight[i];
            }
            size_t n = r.weight.size();
            while (n > 1 && r.weight[n - 1] == 0) --n;  // never land on a zero-mass tail by rounding
            r.weight.resize(n);
            if (!r.ids.empty()) r.ids.resize(n);
            out.token = r.total > 0 ? draw(r, u_draw) : draw(d, u_draw);
        }
    }
    if (p.logprobs >= 0) out.logprob = token_logprob(l, p.logprobs, out.token);
    return out;
}

}  // namespace deepinfer
