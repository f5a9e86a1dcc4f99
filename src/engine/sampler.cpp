// SPDX-License-Identifier: Apache-2.0
// Sampler. Order: logit_bias -> penalties -> (logprobs taken here) -> temperature -> top-k -> top-p ->
// min-p -> draw. Greedy (temperature 0) takes the highest logit, ties to the lowest id. Candidates are
// sorted by (logit desc, id asc), so the draw is deterministic for equal logits too.
#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "core/fnv1a.h"
#include "deepinfer/check.h"
#include "model/draft_sampling.h"

namespace deepinfer {
namespace {
uint64_t splitmix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
}  // namespace

double counter_uniform(uint64_t seed, uint64_t stream, uint64_t counter) {
    const uint64_t h = splitmix(splitmix(splitmix(seed) ^ stream) ^ counter);
    return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

uint64_t derive_seed(uint64_t job_seed, const std::string& request_id) {
    return splitmix(job_seed ^ splitmix(fnv1a(kIdHashBasis, request_id)));
}

std::vector<float> processed_logits(const SampleInput& in) {
    const SamplingParams& p = *in.params;
    const int64_t V = static_cast<int64_t>(in.logits.size());
    std::vector<float> l(in.logits.begin(), in.logits.end());
    if (!in.allowed.empty()) {
        for (int64_t v = 0; v < V; ++v)
            if (!((in.allowed[size_t(v >> 6)] >> (v & 63)) & 1)) l[size_t(v)] = -std::numeric_limits<float>::infinity();
    }
    for (const auto& [tok, bias] : p.logit_bias)
        if (tok >= 0 && tok < V) l[size_t(tok)] += bias;
    if (p.repetition_penalty != 1.0) {
        const float rp = static_cast<float>(p.repetition_penalty);
        std::vector<bool> seen(size_t(V), false);
        for (int32_t t : in.prompt) seen[size_t(t)] = true;
        for (int32_t t : in.generated) seen[size_t(t)] = true;
        for (int64_t v = 0; v < V; ++v)
            if (seen[size_t(v)]) l[size_t(v)] = l[size_t(v)] > 0 ? l[size_t(v)] / rp : l[size_t(v)] * rp;
    }
    if (p.presence_penalty != 0.0 || p.frequency_penalty != 0.0) {
        std::unordered_map<int32_t, int64_t> counts;
        for (int32_t t : in.generated) ++counts[t];
        for (const auto& [tok, cnt] : counts)
            l[size_t(tok)] -= static_cast<float>(p.presence_penalty + p.frequency_penalty * double(cnt));
    }
    return l;
}

TokenLogprob token_logprob(std::span<const float> l, int64_t top, int32_t token) {
    // Log-softmax of the processed logits (before temperature and truncation).
    const int64_t V = static_cast<int64_t>(l.size());
    TokenLogprob out;
    const float mx = *std::max_element(l.begin(), l.end());
    double den = 0;
    for (float v : l) den += std::exp(double(v) - mx);
    const double lse = mx + std::log(den);
    const int64_t k = std::min<int64_t>(top, V);
    const auto before = [&](int32_t a, int32_t b) {
        return l[size_t(a)] != l[size_t(b)] ? l[size_t(a)] > l[size_t(b)] : a < b;
    };
    std::vector<int32_t> idx;
    if (k <= 64) {
        // The k first ids by (logit desc, id asc) in one pass: a sorted list of at most k ids (the same
        // ids in the same order as a partial sort: the order is total).
        idx.reserve(size_t(k) + 1);
        for (int32_t v = 0; v < static_cast<int32_t>(V) && k > 0; ++v) {
            if (int64_t(idx.size()) == k && !before(v, idx.back())) continue;
            idx.insert(std::upper_bound(idx.begin(), idx.end(), v, before), v);
            if (int64_t(idx.size()) > k) idx.pop_back();
        }
    } else {
        idx.resize(static_cast<size_t>(V));
        std::iota(idx.begin(), idx.end(), 0);
        std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), before);
    }
    for (int64_t i = 0; i < k; ++i)
        out.top.emplace_back(idx[size_t(i)], static_cast<float>(l[size_t(idx[size_t(i)])] - lse));
    out.token = token;
    out.logprob = static_cast<float>(double(l[size_t(token)]) - static_cast<double>(static_cast<float>(lse)));
    return out;
}

double Distribution::prob(int32_t token) const {
    if (greedy) return token == argmax ? 1.0 : 0.0;
    if (ids.empty()) return token >= 0 && size_t(token) < weight.size() ? weight[size_t(token)] / total : 0.0;
    for (size_t i = 0; i < ids.size(); ++i)
        if (ids[i] == token) return weight[i] / total;
    return 0.0;
}

// Vocabularies from this size sample their untruncated distributions on the CPU's threads.
constexpr int64_t kParallelSampleVocab = 16384;

namespace {
// The weights exp((l - mx) / T) (times 1 / T: the device's arithmetic) summed in blocks of kDraftSumBlock
// ids (model/draft_sampling.h's order, which the device sampler sums across the GPU): each block in id order
// into parts[b], on the CPU's threads at a real vocabulary (V4: 253 blocks); `weight` (null: not kept)
// receives every weight. Returns the blocks' sums added in block order: draft_blocked_sum's bits.
double blocked_weight_sum(std::span<const float> l, double mx, double inv_t, double* weight, std::vector<double>& parts) {
    const int64_t V = static_cast<int64_t>(l.size()), nb = draft_sum_blocks(V);
    parts.assign(size_t(nb), 0.0);
#pragma omp parallel for schedule(static) if (V >= kParallelSampleVocab)
    for (int64_t b = 0; b < nb; ++b) {
        double s = 0;
        for (int64_t v = b * kDraftSumBlock; v < std::min(V, (b + 1) * kDraftSumBlock); ++v) {
            const double w = std::exp((double(l[size_t(v)]) - mx) * inv_t);
            if (weight) weight[v] = w;
            s += w;
        }
        parts[size_t(b)] = s;
    }
    double total = 0;
    for (double x : parts) total += x;
    return total;
}
}  // namespace

Distribution sampling_distribution(std::span<const float> l, const SamplingParams& p) {
    const int64_t V = static_cast<int64_t>(l.size());
    Distribution d;
    if (p.temperature <= 0.0) {
        d.greedy = true;
        for (int64_t v = 1; v < V; ++v)
            if (l[size_t(v)] > l[size_t(d.argmax)]) d.argmax = static_cast<int32_t>(v);
        return d;
    }
    const double inv_t = 1.0 / p.temperature;
    if (p.top_k == 0 && p.top_p >= 1.0 && p.min_p <= 0.0) {
        // Untruncated: no sort; the total in blocks of ids, the draw by the blocked inverse CDF (draw()).
        d.weight.resize(l.size());
        d.total = blocked_weight_sum(l, *std::max_element(l.begin(), l.end()), inv_t, d.weight.data(), d.parts);
        return d;
    }
    std::vector<int32_t> cand(static_cast<size_t>(V));
    std::iota(cand.begin(), cand.end(), 0);
    const auto by_logit = [&](int32_t a, int32_t b) {
        return l[size_t(a)] != l[size_t(b)] ? l[size_t(a)] > l[size_t(b)] : a < b;
    };
    std::vector<double> prob;
    size_t n = 0;
    if (p.top_k > 0) {  // (k >= V: every id, sorted; the normalizer in that order, as the device sampler)
        const int64_t k = std::min<int64_t>(p.top_k, V);
        std::partial_sort(cand.begin(), cand.begin() + k, cand.end(), by_logit);
        cand.resize(size_t(k));
        const double mx = l[size_t(cand[0])];
        prob.resize(cand.size());
        double den = 0;
        for (size_t i = 0; i < cand.size(); ++i) den += (prob[i] = std::exp((double(l[size_t(cand[i])]) - mx) * inv_t));
        for (double& q : prob) q /= den;
        n = cand.size();
    } else {
        // Every id a candidate: the normalizer over all of them in the blocked id order (model/draft_sampling.h,
        // on the CPU's threads from 16K ids), then only as long a prefix of the (logit desc, id asc) order as
        // top-p and min-p keep: sorted by partial sorts of growing length instead of sorting every id first.
        const double mx = *std::max_element(l.begin(), l.end());
        std::vector<double> parts;
        const double den = blocked_weight_sum(l, mx, inv_t, nullptr, parts);
        auto prob_of = [&](int32_t id) { return std::exp((double(l[size_t(id)]) - mx) * inv_t) / den; };
        size_t sorted = 0;
        double cum = 0;
        bool done = false;
        n = size_t(V);
        // 256 ids, then 4,096, then the rest in one sort; straight to the rest when the first 256 ids hold
        // under a sixteenth of top-p's mass (a flat distribution keeps most of the vocabulary: one sort then).
        auto next = [&](size_t m) {
            const bool flat = p.top_p < 1.0 && cum * 16 < p.top_p;
            return m >= 4096 || flat ? size_t(V) : std::min(size_t(V), m * 16);
        };
        for (size_t m = std::min<size_t>(256, size_t(V)); !done; m = next(m)) {
            if (m == size_t(V))
                std::sort(cand.begin() + std::ptrdiff_t(sorted), cand.end(), by_logit);
            else
                std::partial_sort(cand.begin() + std::ptrdiff_t(sorted), cand.begin() + std::ptrdiff_t(m), cand.end(), by_logit);
            for (; sorted < m && !done; ++sorted) {
                prob.push_back(prob_of(cand[sorted]));
                if (p.top_p < 1.0) {
                    cum += prob.back();
                    if (cum >= p.top_p) {
                        n = sorted + 1;
                        done = true;
                    }
                }
                // min-p: the first id under the floor ends the candidates (it and every later one are out).
                if (!done && p.min_p > 0.0 && sorted > 0 && prob.back() < p.min_p * prob[0]) {
                    n = sorted + 1;  // (cut below by the min-p rule, as for the other paths)
                    done = true;
                }
            }
            if (m == size_t(V)) done = true;
        }
        cand.resize(prob.size());
        n = std::min(n, prob.size());
    }
    if (p.top_p < 1.0 && p.top_k > 0) {  // (top_k == 0: applied while sorting, above)
        double cum = 0;
        size_t i = 0;
        for (; i < n; ++i) {
            cum += prob[i];
            if (cum >= p.top_p) break;
        }
        n = std::min(n, i + 1);
    }
    if (p.min_p > 0.0) {
        const double floor_p = p.min_p * prob[0];
        size_t i = 1;
        while (i < n && prob[i] >= floor_p) ++i;
        n = i;
    }
    while (n > 1 && prob[n - 1] == 0) --n;  // masked tokens never drawn
    cand.resize(n);
    prob.resize(n);
    for (size_t i = 0; i < n; ++i) d.total += prob[i];
    d.ids = std::move(cand);
    d.weight = std::move(prob);
    return d;
}

int32_t draw(const Distribution& d, double uniform) {
    if (d.greedy) return d.argmax;
    double u = uniform * d.total;
    if (!d.parts.empty()) {  // untruncated: the blocks' sums, then inside the block (zero weights never drawn)
        const int64_t b = draft_cdf_block(d.parts.data(), static_cast<int64_t>(d.parts.size()), u);
        return static_cast<int32_t>(draft_cdf_in_block([&](int64_t v) { return d.weight[size_t(v)]; },
                                                       static_cast<int64_t>(d.weight.size()), b, u));
    }
    const size_t n = d.weight.size();
    size_t pick = 0;
    for (; pick + 1 < n; ++pick) {
        if (u < d.weight[pick]) break;
        u -= d.weight[pick];
    }
    return d.id(pick);
}

SampleResult sample(const SampleInput& in) {
    const SamplingParams& p = *in.params;
    const std::vector<float> l = processed_logits(in);
    const Distribution d = sampling_distribution(l, p);
    SampleResult out;
    out.token = d.greedy ? d.argmax : draw(d, counter_uniform(in.seed, in.stream, in.generated.size()));
    if (p.logprobs >= 0) out.logprob = token_logprob(l, p.logprobs, out.token);
    return out;
}

}  // namespace deepinfer
