// SPDX-License-Identifier: Apache-2.0
// The engine's scheduler: decode rows first, then prefill chunks (ended where a held prompt parts
// from another, share_points.h), then admissions from the waiting queue (from a prefix-cache
// snapshot when one matches) within the token budget, the sequence slots and the state budget;
// preemption of the latest admitted when memory runs short.
#include "engine/engine_impl.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <set>

#include "deepinfer/check.h"
#include "deepinfer/drafter.h"
#include "deepinfer/grammar.h"
#include "deepinfer/log.h"
#include "deepinfer/tokenizer.h"
#include "engine/forward_worker.h"
#include "engine/prefix_cache.h"
#include "engine/share_points.h"
#include "engine/sampler.h"
#include "engine/speculative/scheduler.h"
#include "engine/speculative/verify.h"
#include "engine/stop_matcher.h"
#include "model/paged_rows.h"

namespace deepinfer {

Plan Engine::Impl::schedule() {
    Plan plan;
    int64_t budget = cfg.max_num_batched_tokens;
    // A model that places sequences in groups (one GPU each under expert parallelism) gets an equal
    // share of the budget per group, so a prefill on one group cannot take a step the others idle in.
    const int groups = std::max(1, model->placement_groups());
    std::vector<int64_t> group_budget(static_cast<size_t>(groups), (budget + groups - 1) / groups);
    auto group_of = [&](const Completion* c) -> int64_t& {
        return group_budget[groups > 1 ? static_cast<size_t>(model->placement_group(*c->seq)) : 0];
    };
    std::vector<Completion*> order = running;
    std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->admitted < b->admitted; });
    // Memory after this step, if every running sequence advances (decode first).
    auto projected = [&](const Completion* c, int64_t take) {
        return estimate_state_bytes(c->num_computed + take, pool->page_bytes());
    };
    uint64_t limit = state_limit(*model, cfg);
    auto chunk_size = [&](const Completion* c, int64_t budget_left) {
        const int64_t rem = total_tokens(*c) - c->num_computed;
        int64_t take = std::min({rem, cfg.max_prefill_chunk, budget_left});
        const int64_t prompt_len = static_cast<int64_t>(c->request->prompt.size());
        if (cfg.prefix_caching && take > 1 && c->num_computed < prompt_len) {
            // A snapshot is taken at every chunk end on a prefix block (see share_points.h):
            // end the chunk where this prompt parts from another held one, else at the
            // last block boundary it reaches inside the prompt.
            const int64_t from = c->num_computed, end = from + take, block = prefix.block();
            const int64_t part = shares.next_share_point(c->request->block_hashes, from, prompt_len - 1);
            if (part > from && part < end) take = part - from;
            else if (end < prompt_len && end / block * block > from) take = end / block * block - from;
        }
        return take;
    };
    std::vector<std::pair<Completion*, int64_t>> advance;  // every running completion and its take
    const bool async_drafts = drafter && cfg.async_scheduling;
    std::vector<uint8_t> speculating(order.size(), 1);  // per row of `order`: its decode row speculates
    if (verify_scheduler) {
        // Whether this step speculates at all (the scheduler's expected gain, probes), and for how many
        // requests: a subset is the first decode rows in admission order (the same ones step after step).
        // Decided on the decode rows alone: prefill chunks are the same work with or without drafts, so
        // speculation pays in this step exactly when its extra tokens per extra second beat plain decoding
        // (weighed with the prefill rows, a step's fixed draft cost would look small beside them).
        int64_t decode_rows = 0;
        for (const Completion* c : order) decode_rows += total_tokens(*c) - c->num_computed == 1;
        const int64_t m = verify_scheduler->speculate(decode_rows, decode_rows);
        plan.speculate = m > 0;
        int64_t k = 0;
        for (size_t i = 0; i < order.size(); ++i)
            if (total_tokens(*order[i]) - order[i]->num_computed == 1) speculating[i] = k++ < m;
    }
    const std::vector<int64_t> verify_len =
        !plan.speculate ? std::vector<int64_t>(order.size(), 0)
        : async_drafts  ? plan_async_drafts(order, speculating, budget, plan.draft_budget)
                        : plan_verify_lengths(order, speculating, budget);
    if (plan.draft_budget > 0) budget -= plan.draft_budget;  // reserved for the worker's allocation
    for (size_t oi = 0; oi < order.size(); ++oi) {
        Completion* c = order[oi];
        const int64_t rem = total_tokens(*c) - c->num_computed;
        const int64_t drafts = rem == 1 ? verify_len[oi] : 0;
        // Rows of this step: a decode row and its drafts (asynchronous: the drafts come later, at
        // most `drafts`; with a draft budget they were reserved above).
        const int64_t extra = async_drafts && plan.draft_budget >= 0 ? 0 : drafts;
        int64_t& group_left = group_of(c);
        const int64_t left = std::min(budget, group_left);
        int64_t take = rem == 1 ? (left > extra ? 1 + extra : 0) : chunk_size(c, left);
        if (static_cast<int64_t>(plan.items.size()) >= cfg.max_num_seqs) take = 0;
        advance.emplace_back(c, std::max<int64_t>(take, 0) + (take > 0 && async_drafts ? drafts - extra : 0));
        if (take <= 0) continue;
        budget -= take;
        group_left -= take;
        plan.decode_only = plan.decode_only && rem == 1;
        if (async_drafts) {
            Scheduled s{c, {token_at(*c, c->num_computed)}, 0};
            s.drafter_taps = speculating[oi] || rem != 1;  // prefill rows always tap
            if (rem == 1 && drafts > 0) s.draft_slots = drafts;
            else if (rem != 1) s.tokens.clear();
            if (rem != 1)
                for (int64_t i = 0; i < take; ++i) s.tokens.push_back(token_at(*c, c->num_computed + i));
            plan.items.push_back(std::move(s));
            continue;
        }
        Scheduled s{c, {}, take > 1 && rem == 1 ? drafts : 0};
        s.drafter_taps = speculating[oi] || rem != 1;  // prefill rows always tap
        for (int64_t i = 0; i < take - s.drafts; ++i) s.tokens.push_back(token_at(*c, c->num_computed + i));
        s.tokens.insert(s.tokens.end(), c->drafts.begin(), c->drafts.begin() + s.drafts);
        plan.items.push_back(std::move(s));
    }
    auto total_use = [&] {
        uint64_t u = 0;
        for (const auto& [c, take] : advance) u += projected(c, take);
        return u;
    };
    uint64_t use = total_use();
    // Out of memory: shrink the prefix cache, then preempt the latest admitted (recomputed later;
    // the recomputed state is bit-identical, so the output does not change).
    // (The cap also grows back to the prefix cache's share as running states end: admission
    // below shrinks it.)
    prefix.set_max_bytes(std::min(prefix_cap, limit > use ? limit - use : 0));
    while (use > limit && advance.size() > 1) {
        auto victim_it = std::max_element(advance.begin(), advance.end(),
                                          [](const auto& a, const auto& b) { return a.first->admitted < b.first->admitted; });
        Completion* victim = victim_it->first;
        budget += victim_it->second;
        group_of(victim) += victim_it->second;
        advance.erase(victim_it);
        std::erase_if(plan.items, [&](const Scheduled& s) { return s.completion == victim; });
        std::erase(running, victim);
        victim->seq.reset();
        victim->num_computed = 0;
        victim->drafts.clear();
        victim->draft_probs.clear();
        victim->status = Status::kWaiting;
        waiting.push_front(victim);
        ++metrics.preemptions;
        use = total_use();
    }
    // Admit waiting completions while budget, slots and memory allow. With placement groups, a new
    // sequence whose group has no budget left waits for the next step (admitted, no tokens now); as
    // many such in a row as there are groups end the admissions.
    int starved = 0;
    while (!waiting.empty() && budget > 0 && static_cast<int64_t>(plan.items.size()) < cfg.max_num_seqs) {
        Completion* c = waiting.front();
        Request& r = *c->request;
        PrefixCache::Hit hit;
        if (cfg.prefix_caching) hit = prefix.lookup(r.prompt, static_cast<int64_t>(r.prompt.size()) - 1);
        const int64_t start = hit.length;
        const int64_t rem = total_tokens(*c) - start;
        const int64_t take_est = std::min({rem, cfg.max_prefill_chunk, budget});
        const uint64_t need = estimate_state_bytes(start + take_est, pool->page_bytes());
        if (use + need > limit) {
            if (running.empty() && plan.items.empty())
                DI_THROW("request '", r.id, "' needs ", need, " bytes of state, more than the engine's budget of ",
                         limit, " (raise state_memory_bytes", model->state_capacity_bytes() ? " or the device state pool" : "", ")");
            break;
        }
        waiting.pop_front();
        // The prefix cache makes room for the admitted state (after the hit is cloned: its entry may
        // go), so running states and snapshots together stay within the budget (a model's own pool
        // must never run out).
        auto hit_copy = hit.state ? std::make_unique<Sequence>(hit.state->clone()) : nullptr;
        if (use + need + prefix.bytes() > limit) prefix.set_max_bytes(limit > use + need ? limit - use - need : 0);
        c->seq = hit_copy ? std::move(hit_copy) : new_sequence();
        c->num_computed = start;
        if (c->index == 0 && r.cached_tokens == 0) r.cached_tokens = start;
        metrics.prefix_cache_hit_tokens += c->index == 0 ? start : 0;
        c->status = Status::kRunning;
        c->admitted = admissions++;
        running.push_back(c);
        int64_t& group_left = group_of(c);
        const int64_t take = chunk_size(c, std::min(budget, group_left));
        use += estimate_state_bytes(start + take, pool->page_bytes());
        if (take <= 0) {
            if (++starved >= groups) break;
            continue;
        }
        starved = 0;
        budget -= take;
        group_left -= take;
        plan.decode_only = false;
        Scheduled s{c, {}};
        for (int64_t i = 0; i < take; ++i) s.tokens.push_back(token_at(*c, c->num_computed + i));
        plan.items.push_back(std::move(s));
    }
    return plan;
}

}  // namespace deepinfer
