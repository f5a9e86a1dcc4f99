// SPDX-License-Identifier: Apache-2.0
// The engine's private state (Engine::Impl) and its bookkeeping types, shared by the files that
// implement it: engine.cpp (construction, launch, sampling, post-processing, the public API),
// engine_schedule.cpp (what each step runs: decode rows, prefill chunks, admission, preemption) and
// engine_speculative.cpp (verify lengths, drafting, verification, the step-cost samples).
#pragma once

#include <algorithm>
#include <chrono>
#include <deque>
#include <future>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "deepinfer/check.h"
#include "deepinfer/drafter.h"
#include "deepinfer/engine.h"
#include "deepinfer/grammar.h"
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
namespace engine_internal {

using Clock = std::chrono::steady_clock;
inline double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

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
    // Sampled drafts of a GPU drafter: their distributions on its device (Draft::device_probs), valid
    // until its next call; the rows are verified there (Impl::device_verifiable).
    const float* draft_device_probs = nullptr;
    int64_t draft_device_stride = 0;
    int64_t draft_call = -1;  // the drafter call that made `drafts` (Impl::draft_calls)
    size_t posted = 0;
    // Its last forward pass updated the drafter's state (speculation paused: a pass without taps); the
    // engine drafts only for completions whose drafter state is current.
    bool drafter_current = true;
};

// Verdicts of a completion's verify rows computed ahead of their emission (Engine::Impl::verify_rows_ahead).
struct RowVerdictList {
    std::vector<VerifyRowResult> rows;  // rows 0 .. up to the first rejection
    std::vector<uint8_t> dead_end;      // per row: the grammar had no continuation (its mask was EOS only)
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
                                  // (n > 1: the pending siblings' draws follow it; verify rows: one
                                  // draw per row, drafts + 1)
    uint64_t counter = 0;         // tokens generated when it was launched (the verify draws' counters)
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

inline int64_t total_tokens(const Completion& c) {
    return static_cast<int64_t>(c.request->prompt.size() + c.generated.size());
}
// Rows the completion runs in a step without drafts: its decode row, or its next prefill chunk at most
// `max_prefill_chunk` long (before the step's budget and share points shorten it).
inline int64_t plain_rows(const Completion& c, int64_t max_prefill_chunk) {
    const int64_t rem = total_tokens(c) - c.num_computed;
    return rem == 1 ? 1 : std::min(rem, max_prefill_chunk);
}
inline int32_t token_at(const Completion& c, int64_t i) {
    const auto& p = c.request->prompt;
    return i < static_cast<int64_t>(p.size()) ? p[size_t(i)] : c.generated[size_t(i) - p.size()];
}


}  // namespace engine_internal

using engine_internal::Clock;
using engine_internal::Completion;
using engine_internal::Plan;
using engine_internal::RowVerdictList;
using engine_internal::Request;
using engine_internal::Scheduled;
using engine_internal::Status;
using engine_internal::since;
using engine_internal::plain_rows;
using engine_internal::token_at;
using engine_internal::total_tokens;

// The state budget: the engine's, or less when the model holds state in a pool of its own (a GPU
// model's device pages), so admission never asks that pool for more than it has.
inline uint64_t state_limit(const Model& model, const EngineConfig& c) {
    const uint64_t own = model.state_capacity_bytes();
    return own > 0 ? std::min(own, c.state_memory_bytes) : c.state_memory_bytes;
}

// The engine's own StatePool: the state budget, unless the model holds its states in a pool of its
// own (a GPU model's device pages, state_capacity_bytes() > 0), which ignores this one: then a small
// one, so a budget meant for the device (the CLI's on cuda: unbounded) reserves no host memory.
inline uint64_t host_pool_bytes(const Model& model, const EngineConfig& c) {
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
            verify_scheduler = std::make_unique<VerifyScheduler>(cfg.num_speculative_tokens, cfg.speculative_scheduler,
                                                                 cfg.speculative_subset_from);
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
    Plan schedule();

    // Whether a completion's next token can be drawn by the model on its device: plain sampling only
    // (the host sampler handles logit bias, penalties, logprobs and grammar masks).
    bool device_samplable(const Completion& c) const {
        const SamplingParams& p = c.request->params;
        return cfg.device_sampling && !c.grammar && p.logprobs < 0 && p.logit_bias.empty() &&
               p.repetition_penalty == 1.0 && p.presence_penalty == 0.0 && p.frequency_penalty == 0.0;
    }

    // Whether a completion's speculative verify rows are decided on the model's device: device
    // sampling, token-wise verification, and rows the device sampler serves (greedy or untruncated).
    bool device_verifiable(const Completion& c) const;
    // Appends the device draws of verify item `s` (chunk `chunk`): the test of each draft, then the row
    // after them; false (nothing appended) when its rows are verified on the host.
    bool add_verify_draws(Scheduled& s, int32_t chunk, std::vector<DeviceDraw>& draws) const;

    void launch(Plan& plan);

    // ---- sampling and accounting (engine thread, no forward in flight) ----
    std::vector<Completion*> sample_and_account(Plan& plan);

    void sample_into(Completion& c, const std::vector<float>& logits, const ModelInfo& mc);
    // sample_into in two halves: the draw (the step's grammar mask, EOS only at a dead end; touches c
    // only, so completions draw in parallel), then its emission in plan order.
    struct HostDraw {
        SampleResult result;
        bool dead_end = false;
    };
    HostDraw draw_on_host(Completion& c, const std::vector<float>& logits, const ModelInfo& mc) const;
    void emit_draw(Completion& c, HostDraw d, const ModelInfo& mc);

    // ---- speculative decoding ----
    // Drafts each scheduled decode row verifies (index-aligned with `order`); 0 without a drafter.
    // `speculating` (aligned with `order`): the decode rows that speculate this step (the others verify
    // and draft nothing).
    std::vector<int64_t> plan_verify_lengths(const std::vector<Completion*>& order, std::span<const uint8_t> speculating,
                                             int64_t budget);

    // Asynchronous scheduling: the drafts each decode row may get (index-aligned with `order`), decided
    // before they exist. Confidence scheduler: every candidate drafts its full block (the scores feed
    // the next budget) and `draft_budget` = B* from the stale confidences, allocated by the worker over
    // the current ones; fixed mode: each row's count, `draft_budget` = -1.
    std::vector<int64_t> plan_async_drafts(const std::vector<Completion*>& order, std::span<const uint8_t> speculating,
                                           int64_t budget, int64_t& draft_budget);

    // The worker's part of an asynchronous speculative step: draft the scheduled decode rows, allocate
    // the verify slots (the confidence scheduler's top-B* over current survivals, or every draft), and
    // append the admitted drafts to the rows. Touches only the completions' draft fields and the rows.
    void draft_in_worker(const std::vector<Scheduled*>& items, int64_t draft_budget);

    // Verification of one request's rows [anchor, drafts...] (engine/speculative/verify.h): every row
    // under the rules of ordinary sampling (penalties counting the tokens accepted before it, the
    // grammar mask after them), stop at the first rejection, EOS/stop id or length; then roll back
    // the rejected rows of the target state (truncate, no undo).
    // `verdicts`: the rows' verdicts computed ahead (verify_rows_ahead), or null: computed here.
    using RowVerdicts = RowVerdictList;
    void verify_into(Completion& c, const std::vector<float>& logits, int64_t num_drafts, const ModelInfo& mc,
                     const RowVerdicts* verdicts = nullptr);
    // The token-wise rule's verdicts of c's rows [anchor, drafts...] up to the first rejection (or the row
    // after a draft the grammar refuses), each row's input as verify_into builds it once the drafts before
    // it are accepted: reads c only (the grammar through a copy), so completions run it in parallel.
    // Block verification computes its own (verify_into).
    RowVerdicts verify_rows_ahead(const Completion& c, const std::vector<float>& logits, int64_t num_drafts,
                                  const ModelInfo& mc) const;
    // The verdicts of s's verify rows decided on the device (add_verify_draws) up to the first rejection: each
    // row's token and test outcome from `o`, or for a row the device gave up (token -1) verify_row on the
    // host from the logits and draft distribution that came back with it. Reads c only (parallel).
    RowVerdicts device_row_verdicts(const Completion& c, const Scheduled& s, const ForwardOutputs& o) const;

    // New drafts for every completion that goes on decoding (one batched drafter call).
    // `drafting`: the step speculated (a plain step drafts nothing; its rows did not tap).
    void draft_for(const std::vector<Completion*>& advanced, bool drafting);
    int64_t last_drafted = 0;
    // Drafter calls so far: a completion's device-only draft distributions are valid until the next one.
    int64_t draft_calls = 0;
    double last_draft_seconds = 0;
    // The step cost-model sample of the plan consumed in this step() (taken at its end).
    struct Observation {
        bool valid = false;  // a decode-only step with a confidence scheduler
        int64_t tokens = 0;
        bool tapped = false;
        int64_t drafted = 0;
        double draft_seconds = 0;
        int64_t verifying = 0, drafts = 0, accepted = 0, decode_rows = 0;  // (speculative_trace)
        bool taken = false;  // sample_and_account recorded this step (any step with a confidence scheduler)
    } observation;
    std::optional<Clock::time_point> last_step_end;

    // Feeds the step that just ended to the scheduler's cost model (measured wall time since the previous
    // step ended, or the injected cost).
    void observe_step_cost();

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
    void postprocess(const std::vector<Completion*>& advanced);

    void finish(Completion& c);

    // Frees the state of finished completions and drops finished requests (no forward in flight).
    void collect_garbage();

    std::vector<RequestOutput> step();
};

}  // namespace deepinfer
