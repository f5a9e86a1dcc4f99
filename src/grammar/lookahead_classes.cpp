// SPDX-License-Identifier: Apache-2.0
// State equivalences by partition refinement (see lookahead_classes.h).
#include "grammar/lookahead_classes.h"

#include <algorithm>
#include <unordered_map>

namespace deepinfer::grammar {
namespace {

struct VecHash {
    size_t operator()(const std::vector<int32_t>& v) const {
        uint64_t h = 1469598103934665603ull;
        for (int32_t x : v) h = (h ^ uint64_t(uint32_t(x))) * 1099511628211ull;
        return size_t(h ^ (h >> 29));
    }
};

// Numbers the signatures in order of first appearance; returns the number of classes.
int32_t intern_all(const std::vector<std::vector<int32_t>>& sigs, std::vector<int32_t>& out) {
    std::unordered_map<std::vector<int32_t>, int32_t, VecHash> ids;
    ids.reserve(sigs.size());
    out.resize(sigs.size());
    for (size_t s = 0; s < sigs.size(); ++s) out[s] = ids.emplace(sigs[s], int32_t(ids.size())).first->second;
    return static_cast<int32_t>(ids.size());
}

}  // namespace

Refiner::Refiner(const Automaton& a) : a_(a), sigs_(static_cast<size_t>(a.num_states())) {
    run_begin_.push_back(0);
    for (int32_t s = 0; s < a.num_states(); ++s) {
        int32_t last = -2;
        for (int b = 0; b < 256; ++b) {
            const int32_t t = a.next[size_t(s) * 256 + size_t(b)];
            if (t != last) runs_.emplace_back(b, t);
            last = t;
        }
        run_begin_.push_back(static_cast<int32_t>(runs_.size()));
    }
}

int32_t Refiner::initial(std::vector<int32_t>& cls) const {
    std::vector<std::vector<int32_t>> sigs(sigs_.size());
    for (int32_t s = 0; s < a_.num_states(); ++s) sigs[size_t(s)] = {a_.state_rule[size_t(s)], a_.state_final[size_t(s)]};
    return intern_all(sigs, cls);
}

int32_t Refiner::refine(const std::vector<int32_t>& old, const std::vector<int32_t>& byte_cls,
                        const std::vector<int32_t>& edge_cls, std::vector<int32_t>& out) {
    std::vector<std::pair<int32_t, int32_t>> edge_sig;
    for (int32_t s = 0; s < a_.num_states(); ++s) {
        std::vector<int32_t>& sig = sigs_[size_t(s)];
        sig.clear();
        sig.push_back(old[size_t(s)]);
        int32_t last = -2;
        for (int32_t r = run_begin_[size_t(s)]; r < run_begin_[size_t(s) + 1]; ++r) {
            const auto [lo, t] = runs_[size_t(r)];
            const int32_t c = t < 0 ? -1 : byte_cls[size_t(t)];
            if (c == last) continue;  // equivalent targets: one run
            sig.push_back(lo);
            sig.push_back(c);
            last = c;
        }
        edge_sig.clear();
        for (int32_t e = a_.edge_begin[size_t(s)]; e < a_.edge_begin[size_t(s) + 1]; ++e)
            edge_sig.emplace_back(a_.edges[size_t(e)].first, edge_cls[size_t(a_.edges[size_t(e)].second)]);
        std::sort(edge_sig.begin(), edge_sig.end());
        sig.push_back(-3);
        for (const auto& [rule, c] : edge_sig) {
            sig.push_back(rule);
            sig.push_back(c);
        }
    }
    return intern_all(sigs_, out);
}

std::vector<int32_t> moore_classes(const Automaton& a, int32_t* num_classes) {
    Refiner r(a);
    std::vector<int32_t> cls, next;
    int32_t n = r.initial(cls);
    while (true) {  // each round refines the last: equal counts, equal partitions
        const int32_t m = r.refine(cls, cls, cls, next);
        cls.swap(next);
        if (m == n) break;
        n = m;
    }
    *num_classes = n;
    return cls;
}

LookaheadClasses::LookaheadClasses(const Automaton& a, int32_t max_depth, int64_t max_entries) {
    const int64_t S = a.num_states();
    Refiner r(a);
    std::vector<int32_t> level;
    int32_t count = r.initial(level);
    cls_.push_back(std::move(level));
    for (int32_t d = 1; d <= max_depth; ++d) {
        if (static_cast<int64_t>(cls_.size() + 1) * S > max_entries) return;
        const std::vector<int32_t>& prev = cls_.back();
        // Bytes step into depth d-1; rule edges stay at depth d (a rule may match nothing): refine
        // those to a fixed point.
        std::vector<int32_t> cur = prev, next;
        int32_t cur_count = count;
        while (true) {
            const int32_t n = r.refine(prev, prev, cur, next);
            cur.swap(next);
            if (n == cur_count) break;
            cur_count = n;
        }
        cls_.push_back(std::move(cur));
        last_ = d;
        if (cur_count == count) {
            stable_ = true;
            return;
        }
        count = cur_count;
    }
}

}  // namespace deepinfer::grammar
