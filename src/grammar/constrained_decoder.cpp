// SPDX-License-Identifier: Apache-2.0
// ConstrainedDecoder: the phases around a GrammarMatcher. Before `start_after` (thinking mode's
// reasoning) the text is free except that it may not end, and a token that completes the trigger
// in its middle is allowed only if the grammar accepts the rest of its bytes; a tool-call prefix
// there frees the rest of the output. Then the grammar decides every token.
#include "grammar/compiled.h"

namespace deepinfer {

struct ConstrainedDecoder::Impl {
    enum class Phase { kPrefix, kGrammar, kFree };
    CompiledGrammar grammar;
    GrammarMatcher matcher;
    Phase phase = Phase::kGrammar;
    int32_t start_state = 0, tool_state = 0;
    bool terminated = false;
    const TriggerTable* start;
    const TriggerTable* tool;

    Impl(CompiledGrammar g, const GrammarSpec& spec)
        : grammar(g), matcher(g), start(g.impl().start_trigger.get()), tool(g.impl().tool_trigger.get()) {
        if (!spec.start_after.empty()) phase = Phase::kPrefix;
    }

    const std::string& bytes(int32_t id) const { return grammar.impl().vocabulary->impl().bytes[size_t(id)]; }

    int64_t fill(std::span<uint64_t> mask) {
        const auto& v = grammar.impl().vocabulary->impl();
        if (terminated) {
            std::fill(mask.begin(), mask.end(), 0);
            return 0;
        }
        if (phase == Phase::kGrammar) return matcher.fill_next_token_bitmask(mask);
        const auto& free_mask = grammar.impl().free_mask;
        std::copy(free_mask.begin(), free_mask.end(), mask.begin());
        if (phase == Phase::kFree) {
            for (int32_t e : v.eos_ids) mask[size_t(e >> 6)] |= uint64_t{1} << (e & 63);
        } else {
            for (const auto& [id, off] : start->completing[size_t(start_state)]) {
                const std::string& b = bytes(id);
                if (tool) {
                    int32_t ts = tool_state;
                    const int32_t toff = tool->scan(ts, std::string_view(b).substr(0, size_t(off)));
                    if (toff >= 0) continue;  // a tool call starts first: free
                }
                if (size_t(off) < b.size() && !matcher.test_bytes(std::string_view(b).substr(size_t(off))))
                    mask[size_t(id >> 6)] &= ~(uint64_t{1} << (id & 63));
            }
        }
        return count_mask_bits(mask);
    }

    bool accept(int32_t token) {
        const auto& v = grammar.impl().vocabulary->impl();
        if (terminated || token < 0 || token >= v.vocab_size) return false;
        if (phase == Phase::kGrammar) {
            if (!matcher.accept_token(token)) return false;
            terminated = matcher.is_terminated();
            return true;
        }
        if (v.is_eos[size_t(token)]) {
            if (phase != Phase::kFree) return false;
            terminated = true;
            return true;
        }
        if (phase == Phase::kFree) return true;
        const std::string& b = bytes(token);
        int32_t ss = start_state, ts = tool_state;
        const int32_t soff = start->scan(ss, b);
        const int32_t toff = tool ? tool->scan(ts, b) : -1;
        if (toff >= 0 && (soff < 0 || toff <= soff)) {
            phase = Phase::kFree;
            return true;
        }
        if (soff >= 0) {
            if (size_t(soff) < b.size() && !matcher.accept_bytes(std::string_view(b).substr(size_t(soff)))) return false;
            phase = Phase::kGrammar;
            return true;
        }
        start_state = ss;
        tool_state = ts;
        return true;
    }
};

ConstrainedDecoder::ConstrainedDecoder(CompiledGrammar grammar, const GrammarSpec& spec)
    : impl_(std::make_unique<Impl>(std::move(grammar), spec)) {}
ConstrainedDecoder::ConstrainedDecoder(const ConstrainedDecoder& o) : impl_(std::make_unique<Impl>(*o.impl_)) {}
ConstrainedDecoder::~ConstrainedDecoder() = default;
int64_t ConstrainedDecoder::fill_next_token_bitmask(std::span<uint64_t> mask) { return impl_->fill(mask); }
bool ConstrainedDecoder::accept_token(int32_t token) { return impl_->accept(token); }
bool ConstrainedDecoder::is_terminated() const { return impl_->terminated; }
bool ConstrainedDecoder::in_grammar() const { return impl_->phase == Impl::Phase::kGrammar; }

}  // namespace deepinfer
