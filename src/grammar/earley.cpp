// SPDX-License-Identifier: Apache-2.0
// Earley recognizer over rule automata (see earley.h).
#include "grammar/earley.h"

namespace deepinfer::grammar {

void Earley::add(int32_t state, int32_t origin, int32_t count) {
    for (size_t i = set_begin_.back(); i < items_.size(); ++i)
        if (items_[i].state == state && items_[i].origin == origin && items_[i].count == count) return;
    items_.push_back({state, origin, count});
}

void Earley::close(size_t set_idx) {
    const Automaton& a = *a_;
    const int32_t k = static_cast<int32_t>(set_idx);
    uint8_t flags = 0;
    for (size_t i = set_begin_.back(); i < items_.size(); ++i) {
        const Item it = items_[i];
        const int32_t s = it.state;
        for (int32_t e = a.edge_begin[size_t(s)]; e < a.edge_begin[size_t(s) + 1]; ++e) {
            const auto [rule, t] = a.edges[size_t(e)];
            add(a.rule_start[size_t(rule)], k);
            if (a.rule_nullable[size_t(rule)]) add(t, it.origin, it.count);
        }
        if (!a.state_final[size_t(s)]) continue;
        const int32_t rule = a.state_rule[size_t(s)];
        if (it.origin == kOutside) {
            flags |= kPopped;
            if (any_context_)
                for (int32_t t : a.rule_returns[size_t(rule)]) add(t, kOutside);
            continue;
        }
        if (rule == a.root && it.origin == 0) flags |= kCanEnd;
        if (it.origin == k) continue;  // empty completion: handled at prediction (nullable)
        // Complete: advance every item of the origin set waiting on this rule.
        const size_t ob = set_begin_[size_t(it.origin)], oe = set_begin_[size_t(it.origin) + 1];
        for (size_t j = ob; j < oe; ++j) {
            const Item p = items_[j];
            for (int32_t e = a.edge_begin[size_t(p.state)]; e < a.edge_begin[size_t(p.state) + 1]; ++e)
                if (a.edges[size_t(e)].first == rule) add(a.edges[size_t(e)].second, p.origin, p.count);
        }
    }
    flags_.push_back(flags);
}

void Earley::start_root() {
    any_context_ = false;
    items_.clear();
    set_begin_.assign(1, 0);
    flags_.clear();
    items_.push_back({a_->rule_start[size_t(a_->root)], 0});
    close(0);
}

void Earley::start_any_context(std::span<const int32_t> seeds) {
    any_context_ = true;
    items_.clear();
    set_begin_.assign(1, 0);
    flags_.clear();
    for (int32_t s : seeds) add(s, kOutside);
    close(0);
}

bool Earley::push_seeded(uint8_t b, std::span<const int32_t> seeds) {
    const Automaton& a = *a_;
    const size_t begin = set_begin_.back(), end = items_.size();
    set_begin_.push_back(static_cast<uint32_t>(end));
    for (size_t i = begin; i < end; ++i) {
        const Item it = items_[i];
        int32_t count = it.count;
        const int32_t t = a.step(it.state, count, b);
        if (t >= 0) add(t, it.origin, count);
    }
    for (int32_t s : seeds) add(s, kOutside);
    close(set_begin_.size() - 1);
    return items_.size() > set_begin_.back();
}

void Earley::start_at(int32_t state) {
    any_context_ = false;
    items_.clear();
    set_begin_.assign(1, 0);
    flags_.clear();
    items_.push_back({state, kOutside});
    close(0);
}

bool Earley::push(uint8_t b) {
    const Automaton& a = *a_;
    const size_t begin = set_begin_.back(), end = items_.size();
    // Fast path: one item, a plain byte step inside a rule (strings, numbers, literals).
    if (end - begin == 1) {
        const Item it = items_[begin];
        int32_t count = it.count;
        const int32_t t = a.step(it.state, count, b);
        if (t < 0) return false;
        if (!a.state_final[size_t(t)] && !a.has_edges(t)) {
            set_begin_.push_back(static_cast<uint32_t>(end));
            items_.push_back({t, it.origin, count});
            flags_.push_back(0);
            return true;
        }
    }
    set_begin_.push_back(static_cast<uint32_t>(end));
    for (size_t i = begin; i < end; ++i) {
        const Item it = items_[i];
        int32_t count = it.count;
        const int32_t t = a.step(it.state, count, b);
        if (t >= 0) add(t, it.origin, count);
    }
    if (items_.size() == end) {
        set_begin_.pop_back();
        return false;
    }
    close(set_begin_.size() - 1);
    return true;
}

void Earley::pop() {
    items_.resize(set_begin_.back());
    set_begin_.pop_back();
    flags_.pop_back();
}

void Earley::truncate(size_t num_sets) {
    if (num_sets >= set_begin_.size()) return;
    items_.resize(set_begin_[num_sets]);
    set_begin_.resize(num_sets);
    flags_.resize(num_sets);
}

ByteSet Earley::top_bytes() const {
    ByteSet u{0, 0, 0, 0};
    for (const Item& it : top()) {
        const ByteSet& b = a_->state_bytes[size_t(it.state)];
        for (int i = 0; i < 4; ++i) u[size_t(i)] |= b[size_t(i)];
    }
    return u;
}

}  // namespace deepinfer::grammar
