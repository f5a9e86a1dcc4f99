// SPDX-License-Identifier: Apache-2.0
// The engine: one step = schedule -> run the model once over every scheduled chunk -> sample ->
// account -> post-process (detokenize, stop strings). With async scheduling the next step's forward
// is launched before this step's post-processing, on a worker thread; a sequence that a stop string
// ends meanwhile has its extra token discarded (batch invariance makes that invisible to others).
#include "deepinfer/engine.h"

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
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

enum class Status { kWaiting, kForkPending, kRunning, kFinished };

struct Request;

struct Completion {
    Request* request = nullptr;
    int64_t index = 0;
    Status status = Status::kWaiting;
    std::unique_ptr<Sequence> seq;
    int64_t num_computed = 0;  // tokens of prompt+generated whose state is in seq
    std::vector<int32_t> generated;
    std::vector<TokenLogprob> logprobs;
    std::unique_ptr<IncrementalDecoder> decoder;
    std::unique_ptr<StopMatcher> stop;
    std::string text;
    std::string finish_reason;
    bool token_finished = false;  // EOS / stop id / length decided at sampling time
    int64_t admitted = -1;        // admission order (preemption victim = latest)
    std::vector<float> last_logits;  // completion 0's prefill logits, for forked siblings
    // Structured output: the constraint's state and the mask of the next sample ([words] u64),
    // computed while the forward that produces its logits runs.
    std::unique_ptr<ConstrainedDecoder> grammar;
    std::vector<uint64_t> mask;
    int64_t mask_count = 0;
    bool mask_ready = false;
    // Speculative decoding: drafts for the tokens after the last generated one (the anchor), their
    // distributions ([drafts, vocab], sampled drafts only) and confidences; the previous drafts'
    // confidences (the scheduler's stale scores); tokens already post-processed.
    std::vector<int32_t> drafts;
    std::vector<float> draft_probs, confidence, stale_confidence;
    size_t posted = 0;
    // Its last forward pass updated the drafter's state (speculation paused: a pass without taps); the
    // engine drafts only for completions whose drafter state is current.
    bool drafter_current = true;
};

struct Request {
    std::string id;
    std::vector<int32_t> prompt;
    SamplingParams params;
    uint64_t seed = 0;
    std::vector<Completion> completions;
    int64_t cached_tokens = 0;
    int64_t num_finished = 0;
    std::vector<uint64_t> block_hashes;  // its prompt's whole-block prefixes, counted in Impl::shares
};

struct Scheduled {
    Completion* completion = nullptr;
    std::vector<int32_t> tokens;  // a copy: the worker thread reads it while the engine thread moves on
    int64_t drafts = 0;           // trailing draft tokens to verify (speculative decoding)
    // Asynchronous scheduling with a drafter: the worker drafts this decode row's block first (up to
    // `draft_slots` drafts), then appends the admitted ones to `tokens` and sets `drafts`.
    int64_t draft_slots = 0;
    DraftRequest draft_request = {};
    std::vector<double> draft_uniforms = {};
    int32_t draw = -1;            // its token is drawn on the device: index of the first DeviceDraw
                                  // (n > 1: the pending siblings' draws follow it)
    bool drafter_taps = true;     // the pass updates the drafter's state (SequenceChunk::drafter_taps)
};

struct Plan {
    std::vector<Scheduled> items;
    int64_t draft_budget = -1;  // asynchronous + confidence scheduler: B*, allocated after drafting
    bool speculate = true;      // decode rows tap for the drafter and drafting follows (scheduler's call)
    bool decode_only = true;    // every row is a decode row (anchor or draft): a cost-model sample
    std::future<ForwardOutputs> outputs;  // logits of host-sampled chunks, device-sampled tokens
    std::future<void> masks;  // structured output: next-token masks, overlapped with the forward
    Clock::time_point launched;
};

int64_t total_tokens(const Completion& c) {
    return static_cast<int64_t>(c.request->prompt.size() + c.generated.size());
}
int32_t token_at(const Completion& c, int64_t i) {
    const auto& p = c.request->prompt;
    return i < static_cast<int64_t>(p.size()) ? p[size_t(i)] : c.generated[size_t(i) - p.size()];
}

}  // namespace

// The state budget: the engine's, or less when the model holds state in a pool of its own (a GPU
// model's device pages), so admission never asks that pool for more than it has.
uint64_t state_limit(const Model& model, const EngineConfig& c) {
    const uint64_t own = model.state_capacity_bytes();
    return own > 0 ? std::min(own, c.state_memory_bytes) : c.state_memory_bytes;
}

// The engine's own StatePool: the state budget, unless the model holds its states in a pool of its
// own (a GPU model's device pages, state_capacity_bytes() > 0), which ignores this one: then a small
// one, so a budget meant for the device (the CLI's on cuda: unbounded) reserves no host memory.
static uint64_t host_pool_bytes(const Model& model, const EngineConfig& c) {
    return model.state_capacity_bytes() > 0 ? std::min<uint64_t>(c.state_memory_bytes, uint64_t{64} << 20) : c.state_memory_bytes;
}

struct Engine::Impl {
    std::shared_ptr<const Model> model;
    std::shared_ptr<const Tokenizer> tokenizer;
    EngineConfig cfg;
    EngineMetrics metrics;
    std::shared_ptr<StatePool> pool;  // pages of every sequence's growing state (and of prefix snapshots)
    PrefixCache prefix;
    uint64_t prefix_cap = 0;  // the prefix cache's configured share of the state budget
    SharePoints shares;       // block prefixes of the held prompts: where prefill chunks end
    std::deque<std::unique_ptr<Request>> requests;  // unfinished, in arrival order
    std::deque<Completion*> waiting;                // admission queue (preempted first)
    std::vector<Completion*> running;
    std::optional<Plan> pending;  // launched, not yet collected (async)
    std::unique_ptr<ForwardWorker> worker;  // async scheduling only
    std::vector<RequestOutput> finished_outputs;
    int64_t admissions = 0;
    std::unique_ptr<GrammarCompiler> grammars;  // created with the first constrained request
    std::shared_ptr<const Drafter> drafter;     // speculative decoding (null: off)
    std::unique_ptr<VerifyScheduler> verify_scheduler;

    Impl(std::shared_ptr<const Model> m, std::shared_ptr<const Tokenizer> t, EngineConfig c,
         std::shared_ptr<const Drafter> d)
        : model(std::move(m)),
          tokenizer(std::move(t)),
          cfg(c),
          pool(std::make_shared<StatePool>(host_pool_bytes(*model, c), c.state_page_bytes)),
          prefix(static_cast<uint64_t>(double(state_limit(*model, c)) * c.prefix_cache_fraction), std::max<int64_t>(1, c.prefix_block)),
          prefix_cap(static_cast<uint64_t>(double(state_limit(*model, c)) * c.prefix_cache_fraction)),
          shares(std::max<int64_t>(1, c.prefix_block)) {
        DI_CHECK(cfg.max_num_seqs > 0 && cfg.max_num_batched_tokens > 0 && cfg.max_prefill_chunk > 0,
                 "engine: max_num_seqs, max_num_batched_tokens and max_prefill_chunk must be positive");
        if (cfg.speculative_method == "auto") {  // the checkpoint's own drafter, if it has one
            if (!d && model->drafter()) d = std::shared_ptr<const Drafter>(model, model->drafter());
            cfg.speculative_method = d ? std::string(d->method()) : std::string("none");
            if (d) cfg.num_speculative_tokens = std::min(cfg.num_speculative_tokens, d->max_drafts());
        }
        if (cfg.speculative_method != "none") {
            if (!d && model->drafter()) d = std::shared_ptr<const Drafter>(model, model->drafter());
            DI_CHECK(d && d->method() == cfg.speculative_method, "engine: speculative method '",
                     cfg.speculative_method, "' needs a checkpoint with that drafter (this one has ",
                     d ? std::string(d->method()) : std::string("none"), ")");
            DI_CHECK(cfg.num_speculative_tokens >= 1 && cfg.num_speculative_tokens <= d->max_drafts(),
                     "engine: num_speculative_tokens must be in [1, ", d->max_drafts(), "]");
            drafter = std::move(d);
            verify_scheduler = std::make_unique<VerifyScheduler>(cfg.num_speculative_tokens, cfg.speculative_scheduler);
            metrics.spec_position_verified.assign(size_t(cfg.num_speculative_tokens), 0);
            metrics.spec_position_accepted.assign(size_t(cfg.num_speculative_tokens), 0);
            // Asynchronous scheduling: the next step is sized before its drafts exist (budget from the
            // stale confidences); the forward worker drafts, allocates and verifies (spec §4.3).
        }
    }

    // A sequence's state bytes at `num_tokens` tokens, with what the drafter attaches to it.
    uint64_t estimate_state_bytes(int64_t num_tokens, uint64_t page_bytes) const {
        return model->estimate_state_bytes(num_tokens, page_bytes) + (drafter ? drafter->state_bytes(page_bytes) : 0);
    }

    // Sequences start attached to the drafter (it keeps what drafting needs from their passes).
    std::unique_ptr<Sequence> new_sequence() {
        auto seq = std::make_unique<Sequence>(model->new_sequence(pool));
        if (drafter) drafter->attach(*seq);
        return seq;
    }

    uint64_t running_bytes() const {
        uint64_t b = 0;
        for (const Completion* c : running) b += c->seq ? c->seq->state_bytes() : 0;
        return b;
    }

    // ---- scheduling ----
    Plan schedule() {
        Plan plan;
        int64_t budget = cfg.max_num_batched_tokens;
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
        if (verify_scheduler) {
            // Whether this step speculates at all (the scheduler's expected gain, probes).
            int64_t decode_rows = 0, tokens = 0;
            for (const Completion* c : order) {
                const int64_t rem = total_tokens(*c) - c->num_computed;
                decode_rows += rem == 1;
                tokens += rem == 1 ? 1 : std::min(rem, cfg.max_prefill_chunk);
            }
            plan.speculate = verify_scheduler->speculate(decode_rows, tokens);
        }
        const std::vector<int64_t> verify_len =
            !plan.speculate ? std::vector<int64_t>(order.size(), 0)
            : async_drafts  ? plan_async_drafts(order, budget, plan.draft_budget)
                            : plan_verify_lengths(order, budget);
        if (plan.draft_budget > 0) budget -= plan.draft_budget;  // reserved for the worker's allocation
        for (size_t oi = 0; oi < order.size(); ++oi) {
            Completion* c = order[oi];
            const int64_t rem = total_tokens(*c) - c->num_computed;
            const int64_t drafts = rem == 1 ? verify_len[oi] : 0;
            // Rows of this step: a decode row and its drafts (asynchronous: the drafts come later, at
            // most `drafts`; with a draft budget they were reserved above).
            const int64_t extra = async_drafts && plan.draft_budget >= 0 ? 0 : drafts;
            int64_t take = rem == 1 ? (budget > extra ? 1 + extra : 0) : chunk_size(c, budget);
            if (static_cast<int64_t>(plan.items.size()) >= cfg.max_num_seqs) take = 0;
            advance.emplace_back(c, std::max<int64_t>(take, 0) + (take > 0 && async_drafts ? drafts - extra : 0));
            if (take <= 0) continue;
            budget -= take;
            plan.decode_only = plan.decode_only && rem == 1;
            if (async_drafts) {
                Scheduled s{c, {token_at(*c, c->num_computed)}, 0};
                s.drafter_taps = plan.speculate || rem != 1;  // prefill rows always tap
                if (rem == 1 && drafts > 0) s.draft_slots = drafts;
                else if (rem != 1) s.tokens.clear();
                if (rem != 1)
                    for (int64_t i = 0; i < take; ++i) s.tokens.push_back(token_at(*c, c->num_computed + i));
                plan.items.push_back(std::move(s));
                continue;
            }
            Scheduled s{c, {}, take > 1 && rem == 1 ? drafts : 0};
            s.drafter_taps = plan.speculate || rem != 1;  // prefill rows always tap
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
        // Admit waiting completions while budget, slots and memory allow.
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
            const int64_t take = chunk_size(c, budget);
            use += estimate_state_bytes(start + take, pool->page_bytes());
            budget -= take;
            plan.decode_only = false;
            Scheduled s{c, {}};
            for (int64_t i = 0; i < take; ++i) s.tokens.push_back(token_at(*c, c->num_computed + i));
            plan.items.push_back(std::move(s));
        }
        return plan;
    }

    // Whether a completion's next token can be drawn by the model on its device: plain sampling only
    // (the host sampler handles logit bias, penalties, logprobs and grammar masks).
    bool device_samplable(const Completion& c) const {
        const SamplingParams& p = c.request->params;
        return cfg.device_sampling && !c.grammar && p.logprobs < 0 && p.logit_bias.empty() &&
               p.repetition_penalty == 1.0 && p.presence_penalty == 0.0 && p.frequency_penalty == 0.0;
    }

    void launch(Plan& plan) {
        std::vector<SequenceChunk> chunks;
        for (Scheduled& s : plan.items) {
            chunks.push_back({s.completion->seq.get(), s.tokens, s.drafts > 0});
            chunks.back().drafter_taps = s.drafter_taps;
        }
        // Per chunk: its logits go to the host only when the host samples from them; tokens of plain
        // requests are drawn on the device (same random stream: seed, completion, tokens generated).
        std::vector<uint8_t> want(plan.items.size(), 1);
        std::vector<DeviceDraw> draws;
        for (size_t i = 0; i < plan.items.size(); ++i) {
            Scheduled& s = plan.items[i];
            Completion* c = s.completion;
            if (s.drafts > 0 || s.draft_slots > 0) continue;  // verify rows: the host verifies from logits
            if (c->num_computed + static_cast<int64_t>(s.tokens.size()) < total_tokens(*c)) {
                want[i] = 0;  // mid-prefill: no sample
                continue;
            }
            if (!device_samplable(*c)) continue;
            const Request& r = *c->request;
            const SamplingParams& p = r.params;
            const DeviceDraw d{.chunk = static_cast<int32_t>(i), .seed = r.seed, .stream = static_cast<uint64_t>(c->index),
                               .counter = c->generated.size(), .temperature = p.temperature, .top_k = p.top_k,
                               .top_p = p.top_p, .min_p = p.min_p};
            if (!model->can_sample_on_device(d)) continue;
            s.draw = static_cast<int32_t>(draws.size());
            want[i] = 0;
            draws.push_back(d);
            if (c->index == 0 && c->generated.empty())  // n > 1: the siblings draw from the same row
                for (const Completion& sib : r.completions)
                    if (sib.index != 0 && sib.status == Status::kForkPending) {
                        DeviceDraw ds = d;
                        ds.stream = static_cast<uint64_t>(sib.index);
                        draws.push_back(ds);
                    }
        }
        plan.launched = Clock::now();
        // Masks of the completions this forward will sample, computed while it runs.
        std::vector<Completion*> constrained;
        for (Scheduled& s : plan.items) {
            Completion* c = s.completion;
            if (c->grammar && c->num_computed + static_cast<int64_t>(s.tokens.size()) - s.drafts == total_tokens(*c)) {
                c->mask_ready = false;
                constrained.push_back(c);
            }
        }
        if (!constrained.empty())
            plan.masks = std::async(std::launch::async, [constrained] {
                for (Completion* c : constrained) {
                    c->mask_count = c->grammar->fill_next_token_bitmask(c->mask);
                    c->mask_ready = true;
                }
            });
        // Asynchronous speculative decoding: the worker drafts the decode rows' blocks first (anchors and
        // uniforms fixed here, on the engine thread), allocates the verify slots, appends the drafts.
        std::vector<Scheduled*> drafting;
        for (Scheduled& s : plan.items) {
            if (s.draft_slots <= 0) continue;
            Completion* c = s.completion;
            const SamplingParams& p = c->request->params;
            s.draft_uniforms.clear();
            if (p.temperature > 0 && cfg.speculative_sample_drafts)
                for (int64_t j = 0; j < s.draft_slots; ++j)
                    s.draft_uniforms.push_back(draft_uniform(c->request->seed, static_cast<uint64_t>(c->index),
                                                             static_cast<int64_t>(c->generated.size()) - 1, j));
            s.draft_request = {.sequence = c->seq.get(), .anchor = c->generated.back(), .num_drafts = s.draft_slots,
                               .temperature = p.temperature, .uniforms = s.draft_uniforms};
            drafting.push_back(&s);
        }
        std::function<ForwardOutputs()> run;
        if (drafting.empty()) {
            run = [m = model, chunks = std::move(chunks), want = std::move(want), draws = std::move(draws)]() {
                return m->forward_sampled(chunks, want, draws);
            };
        } else {
            run = [this, m = model, items = plan.items.data(), n = plan.items.size(), drafting = std::move(drafting),
                   budget = plan.draft_budget, want = std::move(want), draws = std::move(draws)]() {
                draft_in_worker(drafting, budget);
                std::vector<SequenceChunk> all;
                for (size_t i = 0; i < n; ++i) {
                    all.push_back({items[i].completion->seq.get(), items[i].tokens, items[i].drafts > 0});
                    all.back().drafter_taps = items[i].drafter_taps;
                }
                return m->forward_sampled(all, want, draws);
            };
        }
        if (cfg.async_scheduling) {
            if (!worker) worker = std::make_unique<ForwardWorker>();
            plan.outputs = worker->submit(std::move(run));
        } else {
            plan.outputs = std::async(std::launch::deferred, std::move(run));
        }
    }

    // ---- sampling and accounting (engine thread, no forward in flight) ----
    std::vector<Completion*> sample_and_account(Plan& plan) {
        ForwardOutputs outputs = plan.outputs.get();
        const std::vector<std::vector<float>>& logits = outputs.logits;
        // Asynchronous speculative decoding: the worker drafted before the forward (draft_seconds).
        const double forward_seconds = since(plan.launched) - (cfg.async_scheduling ? last_draft_seconds : 0.0);
        metrics.forward_seconds += forward_seconds;
        // The step cost the scheduler learns is the wall time between the ends of consecutive steps (the
        // forward, the host's sampling and verification of the rows, scheduling, post-processing), less
        // the drafting, observed at the end of step(): with a GPU forward the host's part can be what
        // makes speculation not pay.
        if (verify_scheduler) {
            int64_t rows = 0, decode_rows = 0;
            for (const Scheduled& s : plan.items) {
                rows += static_cast<int64_t>(s.tokens.size());
                if (s.drafts > 0 || total_tokens(*s.completion) - s.completion->num_computed == 1)
                    decode_rows += static_cast<int64_t>(s.tokens.size());
            }
            // Asynchronous: the worker drafted this plan's blocks before its forward, inside this interval.
            observation = {.valid = plan.decode_only, .tokens = rows, .tapped = plan.speculate,
                           .drafted = cfg.async_scheduling ? last_drafted : 0,
                           .draft_seconds = cfg.async_scheduling ? last_draft_seconds : 0.0};
            last_drafted = 0;
            if (cfg.async_scheduling) last_draft_seconds = 0;  // set again by the next step's worker
            if (!plan.speculate && decode_rows > 0) ++metrics.spec_plain_steps;
            ++metrics.spec_steps;
            metrics.spec_verify_tokens += decode_rows;
            if (plan.speculate) metrics.spec_budget_sum += verify_scheduler->last_budget();
        }
        if (plan.masks.valid()) plan.masks.get();
        std::vector<Completion*> advanced;
        const ModelInfo& mc = model->info();
        for (size_t i = 0; i < plan.items.size(); ++i) {
            Completion* c = plan.items[i].completion;
            Request& r = *c->request;
            c->num_computed += static_cast<int64_t>(plan.items[i].tokens.size());
            c->drafter_current = plan.items[i].drafter_taps;
            if (c->status != Status::kRunning) continue;  // ended by a stop string meanwhile: discard
            if (plan.items[i].drafts > 0) {
                verify_into(*c, logits[i], plan.items[i].drafts, mc);
                advanced.push_back(c);
                continue;
            }
            const int64_t prompt_len = static_cast<int64_t>(r.prompt.size());
            if (cfg.prefix_caching && c->num_computed <= prompt_len && c->num_computed % prefix.block() == 0)
                prefix.insert(std::span<const int32_t>(r.prompt).first(size_t(c->num_computed)), c->seq->state());
            if (c->num_computed < total_tokens(*c)) continue;  // mid-prefill
            if (c->index == 0 && c->generated.empty()) metrics.prompt_tokens += prompt_len;
            int32_t draw = plan.items[i].draw;
            if (draw >= 0) {
                emit(*c, outputs.tokens[size_t(draw++)], {}, false, mc);
                ++metrics.device_sampled_tokens;
            } else {
                sample_into(*c, logits[i], mc);
            }
            advanced.push_back(c);
            // n > 1: siblings fork from completion 0's prompt state and sample from the same logits
            // (or take the tokens the device drew for them from that row).
            if (c->index == 0 && c->generated.size() == 1) {
                for (Completion& sib : r.completions) {
                    if (sib.index == 0 || sib.status != Status::kForkPending) continue;
                    sib.seq = std::make_unique<Sequence>(c->seq->fork());
                    // The state holds the prompt only: c's sampled token has not been fed yet.
                    sib.num_computed = prompt_len;
                    sib.status = Status::kRunning;
                    sib.admitted = admissions++;
                    running.push_back(&sib);
                    if (draw >= 0) {
                        emit(sib, outputs.tokens[size_t(draw++)], {}, false, mc);
                        ++metrics.device_sampled_tokens;
                    } else {
                        sample_into(sib, logits[i], mc);
                    }
                    advanced.push_back(&sib);
                }
            }
        }
        // Completions that finished on their sampled token run no further forward: free their state now,
        // not at the next collection (with async scheduling the next step is scheduled before that, and
        // memory it does not account for would be taken).
        for (Completion* c : advanced)
            if (c->token_finished) c->seq.reset();
        return advanced;
    }

    void sample_into(Completion& c, const std::vector<float>& logits, const ModelInfo& mc) {
        const Request& r = *c.request;
        if (c.grammar && !c.mask_ready) c.mask_count = c.grammar->fill_next_token_bitmask(c.mask);  // forked siblings
        c.mask_ready = false;
        // No token can continue (a vocabulary without the bytes the grammar needs): end the completion
        // at EOS rather than sample outside the constraint.
        const bool dead_end = c.grammar && c.mask_count == 0;
        if (dead_end)
            for (int64_t e : mc.eos_token_ids) c.mask[size_t(e >> 6)] |= uint64_t{1} << (e & 63);
        SampleResult s = sample({.logits = logits, .params = &r.params, .prompt = r.prompt, .generated = c.generated,
                                 .seed = r.seed, .stream = static_cast<uint64_t>(c.index),
                                 .allowed = c.grammar ? std::span<const uint64_t>(c.mask) : std::span<const uint64_t>()});
        bool grammar_done = false, grammar_dead = false;
        if (c.grammar) {
            if (dead_end || !c.grammar->accept_token(s.token)) {
                DI_LOG_WARN("request '{}': the structured-output grammar has no continuation in this vocabulary; ending the completion", r.id);
                grammar_done = grammar_dead = true;
            } else {
                grammar_done = c.grammar->is_terminated();
            }
        }
        emit(c, s.token, std::move(s.logprob), grammar_done, mc, grammar_dead);
    }

    // ---- speculative decoding ----
    // Drafts each scheduled decode row verifies (index-aligned with `order`); 0 without a drafter.
    std::vector<int64_t> plan_verify_lengths(const std::vector<Completion*>& order, int64_t budget) {
        std::vector<int64_t> len(order.size(), 0);
        if (!drafter) return len;
        std::vector<VerifyCandidate> cands;
        std::vector<size_t> at;
        int64_t other = 0;
        for (size_t i = 0; i < order.size(); ++i) {
            const Completion* c = order[i];
            const int64_t rem = total_tokens(*c) - c->num_computed;
            if (rem != 1 || c->drafts.empty()) {
                other += rem == 1 ? 1 : std::min(rem, cfg.max_prefill_chunk);
                continue;
            }
            // Every emitted token must fit max_tokens: the step emits at most drafts + 1.
            const int64_t room = c->request->params.max_tokens - static_cast<int64_t>(c->generated.size()) - 1;
            cands.push_back({std::clamp<int64_t>(room, 0, static_cast<int64_t>(c->drafts.size())), c->confidence,
                             c->stale_confidence});
            at.push_back(i);
            ++other;
        }
        if (cands.empty()) return len;
        const std::vector<int64_t> l = verify_scheduler->plan(cands, other, budget - other);
        for (size_t k = 0; k < at.size(); ++k) len[at[k]] = l[k];
        return len;
    }

    // Asynchronous scheduling: the drafts each decode row may get (index-aligned with `order`), decided
    // before they exist. Confidence scheduler: every candidate drafts its full block (the scores feed
    // the next budget) and `draft_budget` = B* from the stale confidences, allocated by the worker over
    // the current ones; fixed mode: each row's count, `draft_budget` = -1.
    std::vector<int64_t> plan_async_drafts(const std::vector<Completion*>& order, int64_t budget, int64_t& draft_budget) {
        std::vector<int64_t> len(order.size(), 0);
        draft_budget = -1;
        std::vector<VerifyCandidate> cands;
        std::vector<size_t> at;
        int64_t other = 0;
        for (size_t i = 0; i < order.size(); ++i) {
            const Completion* c = order[i];
            const int64_t rem = total_tokens(*c) - c->num_computed;
            if (rem != 1) {
                other += std::min(rem, cfg.max_prefill_chunk);
                continue;
            }
            ++other;
            // The row must be a generated token's (a prompt's last chunk of one token drafts nothing).
            if (c->status != Status::kRunning || c->token_finished || !c->seq || c->generated.empty()) continue;
            if (!c->drafter_current) continue;  // its last pass kept nothing for the drafter
            const int64_t k = std::min<int64_t>(cfg.num_speculative_tokens, c->request->params.max_tokens -
                                                                              static_cast<int64_t>(c->generated.size()) - 1);
            if (k <= 0) continue;
            cands.push_back({k, {}, c->confidence});  // stale: the scores of the drafts just verified
            at.push_back(i);
        }
        if (cands.empty()) return len;
        const int64_t B = verify_scheduler->budget(cands, other, budget - other);
        if (verify_scheduler->adaptive()) {
            draft_budget = B;
            for (size_t k = 0; k < at.size(); ++k) len[at[k]] = cands[k].available;
        } else {
            const std::vector<int64_t> l = verify_scheduler->allocate(cands, B);
            for (size_t k = 0; k < at.size(); ++k) len[at[k]] = l[k];
        }
        return len;
    }

    // The worker's part of an asynchronous speculative step: draft the scheduled decode rows, allocate
    // the verify slots (the confidence scheduler's top-B* over current survivals, or every draft), and
    // append the admitted drafts to the rows. Touches only the completions' draft fields and the rows.
    void draft_in_worker(const std::vector<Scheduled*>& items, int64_t draft_budget) {
        const auto t0 = Clock::now();
        std::vector<DraftRequest> reqs;
        for (const Scheduled* s : items) reqs.push_back(s->draft_request);
        std::vector<Draft> out = drafter->draft(reqs);
        std::vector<VerifyCandidate> cands;
        for (size_t i = 0; i < items.size(); ++i) {
            Completion* c = items[i]->completion;
            c->stale_confidence = std::move(c->confidence);
            c->drafts = std::move(out[i].tokens);
            c->draft_probs = std::move(out[i].probs);
            c->confidence = std::move(out[i].confidence);
            cands.push_back({items[i]->draft_slots, c->confidence, c->stale_confidence});
        }
        std::vector<int64_t> len;
        if (draft_budget >= 0) {
            len = verify_scheduler->allocate(cands, draft_budget);
        } else {
            for (const Scheduled* s : items) len.push_back(s->draft_slots);
        }
        for (size_t i = 0; i < items.size(); ++i) {
            Scheduled& s = *items[i];
            const std::vector<int32_t>& d = s.completion->drafts;
            s.drafts = std::min<int64_t>(len[i], static_cast<int64_t>(d.size()));
            s.tokens.insert(s.tokens.end(), d.begin(), d.begin() + s.drafts);
        }
        const double dt = since(t0);
        metrics.draft_seconds += dt;
        last_drafted = static_cast<int64_t>(reqs.size());
        last_draft_seconds = dt;
    }

    // Verification of one request's rows [anchor, drafts...] (engine/speculative/verify.h): every row
    // under the rules of ordinary sampling (penalties counting the tokens accepted before it, the
    // grammar mask after them), stop at the first rejection, EOS/stop id or length; then roll back
    // the rejected rows of the target state (truncate, no undo).
    void verify_into(Completion& c, const std::vector<float>& logits, int64_t num_drafts, const ModelInfo& mc) {
        const Request& r = *c.request;
        const int64_t V = mc.vocab_size, P = c.num_computed - 1 - num_drafts;  // the anchor's position
        const bool sampled = !c.draft_probs.empty();
        int64_t accepted = 0;
        const bool block = cfg.speculative_block_verification && r.params.temperature > 0 && num_drafts > 0;
        if (block) {
            // Every row's distribution given the drafts before it, then one decision for the block.
            // Structured output: row j's mask comes from a copy of the matcher advanced through
            // d_1 .. d_j; after a draft the grammar rejects, p(draft) = 0 makes later rows irrelevant.
            std::vector<std::vector<int32_t>> gens(size_t(num_drafts + 1), c.generated);
            std::vector<std::vector<uint64_t>> masks(c.grammar ? size_t(num_drafts + 1) : 0);
            std::vector<uint8_t> dead_end(size_t(num_drafts + 1), 0);
            std::optional<ConstrainedDecoder> g;
            if (c.grammar) g.emplace(*c.grammar);
            bool grammar_alive = true;
            std::vector<SampleInput> rows;
            for (int64_t j = 0; j <= num_drafts; ++j) {
                gens[size_t(j)].insert(gens[size_t(j)].end(), c.drafts.begin(), c.drafts.begin() + j);
                if (g) {
                    std::vector<uint64_t>& m = masks[size_t(j)];
                    if (grammar_alive) {
                        m.assign(c.mask.size(), 0);
                        dead_end[size_t(j)] = g->fill_next_token_bitmask(m) == 0;  // as in sample_into
                        if (dead_end[size_t(j)])
                            for (int64_t e : mc.eos_token_ids) m[size_t(e >> 6)] |= uint64_t{1} << (e & 63);
                        if (j < num_drafts) grammar_alive = !dead_end[size_t(j)] && g->accept_token(c.drafts[size_t(j)]);
                    } else {
                        m = masks[size_t(j - 1)];
                    }
                }
                rows.push_back({.logits = std::span<const float>(logits).subspan(size_t(j * V), size_t(V)),
                                .params = &r.params, .prompt = r.prompt, .generated = gens[size_t(j)], .seed = r.seed,
                                .stream = static_cast<uint64_t>(c.index),
                                .allowed = g ? std::span<const uint64_t>(masks[size_t(j)]) : std::span<const uint64_t>()});
            }
            c.mask_ready = false;
            BlockVerifyResult b = verify_block({.rows = rows,
                                                .drafts = std::span<const int32_t>(c.drafts).first(size_t(num_drafts)),
                                                .draft_probs = sampled ? std::span<const float>(c.draft_probs).first(size_t(num_drafts * V))
                                                                       : std::span<const float>()});
            for (int64_t j = 0; j < num_drafts; ++j) {
                ++metrics.spec_position_verified[size_t(j)];
                metrics.spec_position_accepted[size_t(j)] += j < b.accepted;
            }
            for (size_t i = 0; i < b.tokens.size(); ++i) {
                bool grammar_done = false, grammar_dead = false;
                if (c.grammar) {
                    if (dead_end[i] || !c.grammar->accept_token(b.tokens[i])) {
                        DI_LOG_WARN("request '{}': the structured-output grammar has no continuation in this vocabulary; "
                                    "ending the completion", r.id);
                        grammar_done = grammar_dead = true;
                    } else {
                        grammar_done = c.grammar->is_terminated();
                    }
                }
                emit(c, b.tokens[i], i < b.logprobs.size() ? std::move(b.logprobs[i]) : TokenLogprob{}, grammar_done, mc,
                     grammar_dead);
                if (int64_t(i) == b.accepted || c.token_finished) break;
                ++accepted;
            }
        }
        for (int64_t j = 0; !block && j <= num_drafts; ++j) {
            if (c.grammar && (j > 0 || !c.mask_ready)) c.mask_count = c.grammar->fill_next_token_bitmask(c.mask);
            c.mask_ready = false;
            const bool dead_end = c.grammar && c.mask_count == 0;  // as in sample_into
            if (dead_end)
                for (int64_t e : mc.eos_token_ids) c.mask[size_t(e >> 6)] |= uint64_t{1} << (e & 63);
            VerifyRowInput in{
                .sample = {.logits = std::span<const float>(logits).subspan(size_t(j * V), size_t(V)), .params = &r.params,
                           .prompt = r.prompt, .generated = c.generated, .seed = r.seed,
                           .stream = static_cast<uint64_t>(c.index),
                           .allowed = c.grammar ? std::span<const uint64_t>(c.mask) : std::span<const uint64_t>()},
                .draft = j < num_drafts ? std::optional<int32_t>(c.drafts[size_t(j)]) : std::nullopt,
                .draft_probs = sampled && j < num_drafts
                                   ? std::span<const float>(c.draft_probs).subspan(size_t(j * V), size_t(V))
                                   : std::span<const float>()};
            VerifyRowResult v = verify_row(in);
            if (j < num_drafts) {
                ++metrics.spec_position_verified[size_t(j)];
                metrics.spec_position_accepted[size_t(j)] += v.accepted;
            }
            bool grammar_done = false, grammar_dead = false;
            if (c.grammar) {
                if (dead_end || !c.grammar->accept_token(v.token)) {
                    DI_LOG_WARN("request '{}': the structured-output grammar has no continuation in this vocabulary; "
                                "ending the completion", r.id);
                    grammar_done = grammar_dead = true;
                } else {
                    grammar_done = c.grammar->is_terminated();
                }
            }
            emit(c, v.token, std::move(v.logprob), grammar_done, mc, grammar_dead);
            if (!v.accepted || c.token_finished) break;
            ++accepted;
        }
        ++metrics.spec_verify_steps;
        metrics.spec_draft_tokens += num_drafts;
        metrics.spec_accepted_tokens += accepted;
        verify_scheduler->observe_acceptance(c.confidence, num_drafts, accepted);
        metrics.spec_calibration_error.resize(metrics.spec_position_verified.size());
        for (size_t j = 0; j < metrics.spec_calibration_error.size(); ++j)
            metrics.spec_calibration_error[j] = verify_scheduler->calibrator().mean_abs_error(static_cast<int64_t>(j));
        // Committed: the anchor and the accepted drafts (positions P .. P+accepted).
        c.num_computed = P + 1 + accepted;
        if (c.seq && c.seq->num_tokens() > c.num_computed) c.seq->truncate(c.num_computed);
        c.drafts.clear();
    }

    // New drafts for every completion that goes on decoding (one batched drafter call).
    // `drafting`: the step speculated (a plain step drafts nothing; its rows did not tap).
    void draft_for(const std::vector<Completion*>& advanced, bool drafting) {
        const auto t0 = Clock::now();
        last_drafted = 0;
        last_draft_seconds = 0;
        std::vector<Completion*> todo;
        std::vector<DraftRequest> reqs;
        std::vector<std::vector<double>> uniforms;
        for (Completion* c : advanced) {
            c->stale_confidence = std::move(c->confidence);
            c->confidence.clear();
            c->drafts.clear();
            c->draft_probs.clear();
            if (!drafting || !c->drafter_current || c->status != Status::kRunning || c->token_finished || !c->seq)
                continue;
            if (total_tokens(*c) - c->num_computed != 1) continue;
            const SamplingParams& p = c->request->params;
            const int64_t k = std::min<int64_t>(cfg.num_speculative_tokens,
                                                p.max_tokens - static_cast<int64_t>(c->generated.size()) - 1);
            if (k <= 0) continue;
            std::vector<double> u;
            if (p.temperature > 0 && cfg.speculative_sample_drafts)
                for (int64_t j = 0; j < k; ++j)
                    u.push_back(draft_uniform(c->request->seed, static_cast<uint64_t>(c->index),
                                              static_cast<int64_t>(c->generated.size()) - 1, j));
            uniforms.push_back(std::move(u));
            todo.push_back(c);
            reqs.push_back({.sequence = c->seq.get(), .anchor = c->generated.back(), .num_drafts = k,
                            .temperature = p.temperature});
        }
        for (size_t i = 0; i < reqs.size(); ++i) reqs[i].uniforms = uniforms[i];
        if (reqs.empty()) return;
        std::vector<Draft> out = drafter->draft(reqs);
        for (size_t i = 0; i < todo.size(); ++i) {
            todo[i]->drafts = std::move(out[i].tokens);
            todo[i]->draft_probs = std::move(out[i].probs);
            todo[i]->confidence = std::move(out[i].confidence);
        }
        const double dt = since(t0);
        metrics.draft_seconds += dt;
        last_drafted = static_cast<int64_t>(reqs.size());
        last_draft_seconds = dt;
    }
    int64_t last_drafted = 0;
    double last_draft_seconds = 0;
    // The step cost-model sample of the plan consumed in this step() (taken at its end).
    struct Observation {
        bool valid = false;  // a decode-only step with a confidence scheduler
        int64_t tokens = 0;
        bool tapped = false;
        int64_t drafted = 0;
        double draft_seconds = 0;
    } observation;
    std::optional<Clock::time_point> last_step_end;

    // Feeds the step that just ended to the scheduler's cost model (measured wall time since the previous
    // step ended, or the injected cost).
    void observe_step_cost() {
        const auto now = Clock::now();
        if (verify_scheduler && observation.valid && (last_step_end || cfg.speculative_step_cost)) {
            double seconds = last_step_end ? std::chrono::duration<double>(now - *last_step_end).count() : 0.0;
            double draft_seconds = observation.draft_seconds;
            seconds -= draft_seconds;
            if (cfg.speculative_step_cost) {
                const SpeculativeStepCost c = cfg.speculative_step_cost(
                    {.tokens = observation.tokens, .drafter_taps = observation.tapped, .drafted_requests = observation.drafted});
                seconds = c.step_seconds;
                draft_seconds = c.draft_seconds;
            }
            verify_scheduler->observe_step(observation.tokens, observation.tapped, seconds, observation.drafted,
                                           draft_seconds);
        }
        observation.valid = false;
        last_step_end = now;
        // Idle engine (every request done): the next step's interval would include the caller's pause.
        bool busy = false;
        for (const auto& r : requests) busy = busy || r->num_finished < static_cast<int64_t>(r->completions.size());
        if (!busy) last_step_end.reset();
    }

    // Appends a sampled or verified token; decides EOS / stop ids / length.
    void emit(Completion& c, int32_t token, TokenLogprob logprob, bool grammar_done, const ModelInfo& mc,
              bool grammar_dead = false) {
        const Request& r = *c.request;
        c.generated.push_back(token);
        if (r.params.logprobs >= 0) c.logprobs.push_back(std::move(logprob));
        ++metrics.generated_tokens;
        const bool eos = std::find(mc.eos_token_ids.begin(), mc.eos_token_ids.end(), token) != mc.eos_token_ids.end();
        const bool stop_id = std::find(r.params.stop_token_ids.begin(), r.params.stop_token_ids.end(), token) !=
                             r.params.stop_token_ids.end();
        if ((eos && (!r.params.ignore_eos || grammar_done)) || stop_id || grammar_dead) {
            c.token_finished = true;
            c.finish_reason = "stop";
        } else if (static_cast<int64_t>(c.generated.size()) >= r.params.max_tokens) {
            c.token_finished = true;
            c.finish_reason = "length";
        }
        if (c.token_finished) std::erase(running, &c);  // no further scheduling
    }

    // ---- post-processing: detokenize, stop strings, finished requests ----
    void postprocess(const std::vector<Completion*>& advanced) {
        for (Completion* c : advanced) {
            if (c->status != Status::kRunning) continue;
            bool stopped = false;
            if (c->decoder) {
                // Every token of this step (several after a verify pass), in order.
                for (size_t i = c->posted; i < c->generated.size() && !stopped; ++i) {
                    const bool last = i + 1 == c->generated.size();
                    // Stop ids and EOS are not part of the text.
                    const bool is_stop_token = last && c->token_finished && c->finish_reason == "stop";
                    std::string piece = is_stop_token ? std::string() : c->decoder->push(c->generated[i]);
                    if (last && c->token_finished) piece += c->decoder->finish();
                    if (auto at = c->stop->feed(piece)) {
                        c->text = c->stop->text().substr(0, *at);
                        c->finish_reason = "stop";
                        stopped = true;
                        // Accepted drafts after the one that completed the stop string are dropped.
                        metrics.generated_tokens -= static_cast<int64_t>(c->generated.size() - (i + 1));
                        c->generated.resize(i + 1);
                        if (c->logprobs.size() > i + 1) c->logprobs.resize(i + 1);
                    } else {
                        c->text = c->stop->text();
                    }
                }
                c->posted = c->generated.size();
            }
            if (stopped && !c->token_finished) std::erase(running, c);
            if (stopped || c->token_finished) finish(*c);
        }
    }

    void finish(Completion& c) {
        c.status = Status::kFinished;
        Request& r = *c.request;
        if (++r.num_finished < static_cast<int64_t>(r.completions.size())) return;
        shares.remove(r.block_hashes);
        r.block_hashes.clear();
        RequestOutput out;
        out.request_id = r.id;
        out.prompt_tokens = static_cast<int64_t>(r.prompt.size());
        out.cached_prompt_tokens = r.cached_tokens;
        for (Completion& k : r.completions)
            out.completions.push_back({k.index, std::move(k.generated), std::move(k.text), std::move(k.finish_reason),
                                       std::move(k.logprobs)});
        finished_outputs.push_back(std::move(out));
    }

    // Frees the state of finished completions and drops finished requests (no forward in flight).
    void collect_garbage() {
        for (auto& r : requests)
            for (Completion& c : r->completions)
                if (c.status == Status::kFinished) c.seq.reset();
        std::erase_if(requests, [](const std::unique_ptr<Request>& r) {
            return r->num_finished == static_cast<int64_t>(r->completions.size());
        });
    }

    std::vector<RequestOutput> step() {
        const auto t0 = Clock::now();
        if (!pending) {
            collect_garbage();
            if (requests.empty()) return {};
            Plan plan = schedule();
            DI_CHECK(!plan.items.empty(), "engine: ", requests.size(), " requests remain but none can be scheduled");
            launch(plan);
            pending = std::move(plan);
        }
        Plan current = std::move(*pending);
        pending.reset();
        std::vector<Completion*> advanced = sample_and_account(current);
        const uint64_t bytes = running_bytes();
        metrics.state_bytes_in_use = bytes;
        metrics.state_bytes_peak = std::max(metrics.state_bytes_peak, bytes);
        if (cfg.async_scheduling) {
            collect_garbage();
            Plan next = schedule();
            if (!next.items.empty()) {
                launch(next);
                pending = std::move(next);
            }
        }
        postprocess(advanced);
        if (drafter && !cfg.async_scheduling) {  // (asynchronous: the worker drafts)
            draft_for(advanced, current.speculate);
            observation.drafted = last_drafted;  // drafted inside this step's interval
            observation.draft_seconds = last_draft_seconds;
        }
        if (!cfg.async_scheduling) collect_garbage();
        observe_step_cost();
        ++metrics.steps;
        metrics.step_seconds += since(t0);
        metrics.prefix_cache_bytes = prefix.bytes();
        metrics.pool_pages_in_use = pool->pages_in_use();
        metrics.pool_pages_peak = pool->peak_pages();
        metrics.pool_pages_capacity = pool->capacity_pages();
        metrics.pool_page_bytes = pool->page_bytes();
        metrics.prefix_cache_entries = prefix.entries();
        std::vector<RequestOutput> out = std::move(finished_outputs);
        finished_outputs.clear();
        return out;
    }
};

Engine::Engine(std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tokenizer, EngineConfig config,
               std::shared_ptr<const Drafter> drafter)
    : impl_(std::make_unique<Impl>(std::move(model), std::move(tokenizer), config, std::move(drafter))) {}

Engine::~Engine() {
    if (impl_ && impl_->pending && impl_->pending->outputs.valid()) impl_->pending->outputs.wait();
}

void Engine::add_request(std::string id, std::vector<int32_t> prompt, SamplingParams params) {
    const ModelInfo& mc = impl_->model->info();
    DI_CHECK(!prompt.empty(), "request '", id, "': empty prompt");
    for (size_t i = 0; i < prompt.size(); ++i)
        DI_CHECK(prompt[i] >= 0 && prompt[i] < mc.vocab_size, "request '", id, "': prompt token ", i, " = ", prompt[i],
                 " is outside the vocabulary [0, ", mc.vocab_size, ")");
    DI_CHECK(params.max_tokens >= 1, "request '", id, "': max_tokens must be >= 1, got ", params.max_tokens);
    const int64_t max_len = impl_->cfg.max_model_len > 0 ? std::min(impl_->cfg.max_model_len, mc.max_position_embeddings)
                                                         : mc.max_position_embeddings;
    DI_CHECK(static_cast<int64_t>(prompt.size()) + params.max_tokens <= max_len, "request '", id,
             "': prompt (", prompt.size(), " tokens) + max_tokens (", params.max_tokens,
             ") exceeds the model's context of ", max_len, impl_->cfg.max_model_len > 0 ? " (max_model_len)" : "");
    DI_CHECK(params.n >= 1 && params.n <= 128, "request '", id, "': n must be in [1, 128], got ", params.n);
    DI_CHECK(params.temperature >= 0, "request '", id, "': temperature must be >= 0");
    DI_CHECK(params.top_p > 0 && params.top_p <= 1, "request '", id, "': top_p must be in (0, 1]");
    DI_CHECK(params.min_p >= 0 && params.min_p <= 1, "request '", id, "': min_p must be in [0, 1]");
    DI_CHECK(params.top_k >= 0, "request '", id, "': top_k must be >= 0");
    DI_CHECK(params.repetition_penalty > 0, "request '", id, "': repetition_penalty must be > 0");
    DI_CHECK(params.logprobs <= 20, "request '", id, "': logprobs must be <= 20");
    DI_CHECK(params.stop.empty() || impl_->tokenizer, "request '", id, "': stop strings need a tokenizer");
    std::optional<CompiledGrammar> compiled;
    if (params.grammar) {
        DI_CHECK(impl_->tokenizer, "request '", id, "': structured output needs a tokenizer");
        if (!impl_->grammars)
            impl_->grammars = std::make_unique<GrammarCompiler>(std::make_shared<TokenVocabulary>(
                *impl_->tokenizer, static_cast<int32_t>(mc.vocab_size),
                std::vector<int32_t>(mc.eos_token_ids.begin(), mc.eos_token_ids.end()),
                std::vector<std::string>{"\xEF\xBD\x9C" "DSML" "\xEF\xBD\x9C"}));  // the DSML tool-call token
        compiled = impl_->grammars->compile(*params.grammar);  // GrammarError names the problem
    }
    auto r = std::make_unique<Request>();
    r->id = std::move(id);
    r->prompt = std::move(prompt);
    r->params = std::move(params);
    r->seed = r->params.seed ? *r->params.seed : derive_seed(impl_->cfg.job_seed, r->id);
    r->completions.resize(static_cast<size_t>(r->params.n));
    for (int64_t i = 0; i < r->params.n; ++i) {
        Completion& c = r->completions[size_t(i)];
        c.request = r.get();
        c.index = i;
        c.status = i == 0 ? Status::kWaiting : Status::kForkPending;
        if (compiled) {
            c.grammar = std::make_unique<ConstrainedDecoder>(*compiled, *r->params.grammar);
            c.mask.assign(size_t((mc.vocab_size + 63) / 64), 0);
        }
        if (impl_->tokenizer) {
            c.decoder = std::make_unique<IncrementalDecoder>(*impl_->tokenizer);
            c.stop = std::make_unique<StopMatcher>(r->params.stop);
        }
    }
    if (impl_->cfg.prefix_caching) {
        r->block_hashes = impl_->shares.block_hashes(r->prompt);
        impl_->shares.add(r->block_hashes);
    }
    impl_->waiting.push_back(&r->completions[0]);
    impl_->requests.push_back(std::move(r));
}

bool Engine::has_unfinished() const { return num_unfinished() > 0; }
int64_t Engine::num_unfinished() const {
    int64_t n = 0;
    for (const auto& r : impl_->requests) n += r->num_finished < static_cast<int64_t>(r->completions.size());
    return n;
}
std::vector<RequestOutput> Engine::step() { return impl_->step(); }
const EngineMetrics& Engine::metrics() const { return impl_->metrics; }
const EngineConfig& Engine::config() const { return impl_->cfg; }

void Engine::run_until_done(const std::function<void(RequestOutput&&)>& on_finished) {
    while (has_unfinished())
        for (RequestOutput& o : step()) on_finished(std::move(o));
}

}  // namespace deepinfer
