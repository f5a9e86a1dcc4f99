// SPDX-License-Identifier: Apache-2.0
// GrammarMatcher: the Earley state of one generation, token masks from the per-state caches plus
// an exact re-check of the uncertain tokens (walked in sorted order, sharing prefixes).
#include <algorithm>
#include <bit>

#include "grammar/compiled.h"
#include "grammar/earley.h"

namespace deepinfer {

using grammar::Earley;

// The number of set bits of a mask (hardware popcount where the CPU has it: the generic x86-64
// build would call a slow library routine for every word).
__attribute__((target_clones("popcnt", "default"))) int64_t count_mask_bits(std::span<const uint64_t> mask) {
    int64_t count = 0;
    for (uint64_t w : mask) count += __builtin_popcountll(w);
    return count;
}

GrammarError::GrammarError(std::string source, std::string where, std::string reason)
    : Error(__FILE__, __LINE__, source + ": " + where + ": " + reason),
      source_(std::move(source)),
      where_(std::move(where)),
      reason_(std::move(reason)) {}

int64_t CompiledGrammar::num_states() const { return impl_->automaton.num_states(); }
int64_t CompiledGrammar::num_rules() const { return impl_->automaton.num_rules(); }
double CompiledGrammar::compile_seconds() const { return impl_->compile_seconds; }

struct GrammarMatcher::Impl {
    CompiledGrammar grammar;
    const grammar::Automaton* a;
    const TokenVocabulary::Impl* v;
    Earley earley;
    std::vector<size_t> token_starts;  // earley.num_sets() before each accepted token
    bool terminated = false;
    std::vector<const grammar::StateTokens*> states;
    std::vector<int32_t> unc;

    explicit Impl(CompiledGrammar g)
        : grammar(std::move(g)),
          a(&grammar.impl().automaton),
          v(&grammar.impl().vocabulary->impl()),
          earley(a) {
        earley.start_root();
    }
    Impl(const Impl& o)
        : grammar(o.grammar), a(o.a), v(o.v), earley(o.earley), token_starts(o.token_starts), terminated(o.terminated) {}

    bool push_bytes(std::string_view b) {
        const size_t base = earley.num_sets();
        for (char c : b)
            if (!earley.push(static_cast<uint8_t>(c))) {
                earley.truncate(base);
                return false;
            }
        return true;
    }

    int64_t fill(std::span<uint64_t> mask) {
        if (terminated) {
            std::fill(mask.begin(), mask.end(), 0);
            return 0;
        }
        const auto& caches = grammar.impl().tokens;
        states.clear();
        for (const grammar::Item& it : earley.top())
            if (a->has_bytes(it.state)) states.push_back(&caches[size_t(it.state)].for_count(it.count));
        std::sort(states.begin(), states.end());
        states.erase(std::unique(states.begin(), states.end()), states.end());
        // The first accepted bitset is copied in (no separate clearing pass), the others OR'ed.
        const grammar::StateTokens* copied = nullptr;
        for (const grammar::StateTokens* sp : states)
            if (sp->accepted_bits) {
                copied = sp;
                break;
            }
        if (copied) {
            const std::vector<uint64_t>& bits = *copied->accepted_bits;
            const size_t n = std::min(mask.size(), bits.size());
            std::copy(bits.begin(), bits.begin() + std::ptrdiff_t(n), mask.begin());
            std::fill(mask.begin() + std::ptrdiff_t(n), mask.end(), 0);
        } else {
            std::fill(mask.begin(), mask.end(), 0);
        }
        // With one cache the count is known without counting the mask's bits: its accepted tokens,
        // plus what the checks below add.
        int64_t count = states.empty() ? 0 : states.size() == 1 ? states[0]->num_accepted : -1;
        unc.clear();
        size_t num_unc_lists = 0;
        for (const grammar::StateTokens* sp : states) {
            const grammar::StateTokens& st = *sp;
            if (sp == copied) {
            } else if (st.accepted_bits) {
                const std::vector<uint64_t>& bits = *st.accepted_bits;
                const size_t n = std::min(mask.size(), bits.size());
                for (size_t w = 0; w < n; ++w) mask[w] |= bits[w];
            } else {
                for (int32_t id : st.accepted_ids) mask[size_t(id >> 6)] |= uint64_t{1} << (id & 63);
            }
            if (!st.uncertain.empty()) {
                unc.insert(unc.end(), st.uncertain.begin(), st.uncertain.end());
                ++num_unc_lists;
            }
        }
        if (num_unc_lists > 1) {
            std::sort(unc.begin(), unc.end());
            unc.erase(std::unique(unc.begin(), unc.end()), unc.end());
        }
        // Exact check of the uncertain tokens against the whole parse, in byte order.
        const size_t base = earley.num_sets();
        std::string_view prev;
        size_t pushed = 0;
        for (int32_t idx : unc) {
            const int32_t id = v->sorted[size_t(idx)];
            if ((mask[size_t(id >> 6)] >> (id & 63)) & 1) continue;
            const std::string_view b = v->bytes[size_t(id)];
            size_t lcp = 0;
            const size_t lim = std::min(pushed, b.size());
            while (lcp < lim && b[lcp] == prev[lcp]) ++lcp;
            earley.truncate(base + lcp);
            pushed = lcp;
            while (pushed < b.size() && earley.push(static_cast<uint8_t>(b[pushed]))) ++pushed;
            if (pushed == b.size()) {
                mask[size_t(id >> 6)] |= uint64_t{1} << (id & 63);
                count += count >= 0;
            }
            prev = b;
        }
        earley.truncate(base);
        if (earley.can_end())
            for (int32_t e : v->eos_ids) {
                uint64_t& w = mask[size_t(e >> 6)];
                const uint64_t bit = uint64_t{1} << (e & 63);
                count += count >= 0 && !(w & bit);
                w |= bit;
            }
        return count >= 0 ? count : count_mask_bits(mask);
    }

    bool accept(int32_t token) {
        if (terminated || token < 0 || token >= v->vocab_size) return false;
        if (v->is_eos[size_t(token)]) {
            if (!earley.can_end()) return false;
            token_starts.push_back(earley.num_sets());
            terminated = true;
            return true;
        }
        if (!v->usable[size_t(token)]) return false;
        const size_t base = earley.num_sets();
        if (!push_bytes(v->bytes[size_t(token)])) return false;
        token_starts.push_back(base);
        return true;
    }
};

GrammarMatcher::GrammarMatcher(CompiledGrammar grammar) : impl_(std::make_unique<Impl>(std::move(grammar))) {}
GrammarMatcher::GrammarMatcher(const GrammarMatcher& o) : impl_(std::make_unique<Impl>(*o.impl_)) {}
GrammarMatcher& GrammarMatcher::operator=(const GrammarMatcher& o) {
    if (this != &o) impl_ = std::make_unique<Impl>(*o.impl_);
    return *this;
}
GrammarMatcher::~GrammarMatcher() = default;

int64_t GrammarMatcher::fill_next_token_bitmask(std::span<uint64_t> mask) { return impl_->fill(mask); }
bool GrammarMatcher::accept_token(int32_t token) { return impl_->accept(token); }
bool GrammarMatcher::accept_bytes(std::string_view bytes) {
    if (impl_->terminated) return false;
    return impl_->push_bytes(bytes);
}
bool GrammarMatcher::test_bytes(std::string_view bytes) {
    if (impl_->terminated) return false;
    const size_t base = impl_->earley.num_sets();
    const bool ok = impl_->push_bytes(bytes);
    impl_->earley.truncate(base);
    return ok;
}
void GrammarMatcher::rollback(int64_t num_tokens) {
    DI_CHECK(num_tokens >= 0 && num_tokens <= static_cast<int64_t>(impl_->token_starts.size()),
             "grammar matcher: cannot roll back ", num_tokens, " tokens");
    if (num_tokens == 0) return;
    const size_t keep = impl_->token_starts.size() - size_t(num_tokens);
    impl_->earley.truncate(impl_->token_starts[keep]);
    impl_->token_starts.resize(keep);
    impl_->terminated = false;
}
bool GrammarMatcher::can_end() const { return !impl_->terminated && impl_->earley.can_end(); }
bool GrammarMatcher::is_terminated() const { return impl_->terminated; }
int64_t GrammarMatcher::num_accepted_tokens() const { return static_cast<int64_t>(impl_->token_starts.size()); }

}  // namespace deepinfer
