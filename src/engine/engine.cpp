// SPDX-License-Identifier: Apache-2.0
// The engine: one step = schedule -> run the model once over every scheduled chunk -> sample ->
// account -> post-process (detokenize, stop strings). With async scheduling the next step's forward
// is launched before this step's post-processing, on a worker thread; a sequence that a stop string
// ends meanwhile has its extra token discarded (batch invariance makes that invisible to others).
#include "engine/engine_impl.h"

#include <algorithm>
#include <exception>
#include <chrono>
#include <deque>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
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

void Engine::Impl::launch(Plan& plan) {
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
        s.counter = c->generated.size();
        // Verify rows: decided on the device when it can (asynchronous drafting: in the worker, once the
        // drafts exist), else verified on the host from their logits.
        if (s.draft_slots > 0) continue;
        if (s.drafts > 0) {
            if (add_verify_draws(s, static_cast<int32_t>(i), draws)) want[i] = 0;
            continue;
        }
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
                           .temperature = p.temperature, .uniforms = s.draft_uniforms,
                           .host_probs = !device_verifiable(*c)};
        drafting.push_back(&s);
    }
    std::function<ForwardOutputs()> run;
    if (drafting.empty()) {
        run = [m = model, chunks = std::move(chunks), want = std::move(want), draws = std::move(draws)]() {
            return m->forward_sampled(chunks, want, draws);
        };
    } else {
        run = [this, m = model, items = plan.items.data(), n = plan.items.size(), drafting = std::move(drafting),
               budget = plan.draft_budget, want = std::move(want), draws = std::move(draws)]() mutable {
            draft_in_worker(drafting, budget);
            for (Scheduled* s : drafting) {
                const auto i = static_cast<size_t>(s - items);
                if (add_verify_draws(*s, static_cast<int32_t>(i), draws)) want[i] = 0;
            }
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

std::vector<Completion*> Engine::Impl::sample_and_account(Plan& plan) {
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
        int64_t rows = 0, decode_rows = 0, verifying = 0, drafts = 0;
        for (const Scheduled& s : plan.items) {
            rows += static_cast<int64_t>(s.tokens.size());
            verifying += s.drafts > 0;
            drafts += s.drafts;
            if (s.drafts > 0 || total_tokens(*s.completion) - s.completion->num_computed == 1)
                decode_rows += static_cast<int64_t>(s.tokens.size());
        }
        // Asynchronous: the worker drafted this plan's blocks before its forward, inside this interval.
        observation = {.valid = plan.decode_only, .tokens = rows, .tapped = plan.speculate,
                       .drafted = cfg.async_scheduling ? last_drafted : 0,
                       .draft_seconds = cfg.async_scheduling ? last_draft_seconds : 0.0,
                       .verifying = verifying, .drafts = drafts, .decode_rows = decode_rows, .taken = true};
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
    // The host's draws and the token-wise verdicts of every verify row, completions in parallel (at a real
    // vocabulary each costs a pass over the row's whole distribution, a top-logprobs sort more); emitted
    // below in plan order.
    std::vector<RowVerdicts> verdicts(plan.items.size());
    std::vector<std::optional<HostDraw>> draws(plan.items.size());
    std::vector<size_t> ahead;
    for (size_t i = 0; i < plan.items.size(); ++i) {
        const Scheduled& s = plan.items[i];
        const Completion& c = *s.completion;
        if (c.status != Status::kRunning) continue;
        const bool block = cfg.speculative_block_verification && c.request->params.temperature > 0;
        const bool sampled = s.drafts == 0 && s.draw < 0 &&
                             c.num_computed + static_cast<int64_t>(s.tokens.size()) >= total_tokens(c);
        // Verify rows the device gave up (token -1: top-p / min-p keeping more ids than it sorts): on the host.
        bool given_up = false;
        if (s.drafts > 0 && s.draw >= 0)
            for (int64_t j = 0; j <= s.drafts; ++j) given_up = given_up || outputs.tokens.at(size_t(s.draw + j)) < 0;
        if ((s.drafts > 0 && !block && s.draw < 0) || sampled || given_up) ahead.push_back(i);
    }
    std::vector<std::exception_ptr> failed(ahead.size());
#pragma omp parallel for schedule(dynamic, 1) if (ahead.size() > 1)
    for (size_t k = 0; k < ahead.size(); ++k) {
        const size_t i = ahead[k];
        Completion& c = *plan.items[i].completion;
        try {
            const Scheduled& s = plan.items[i];
            if (s.drafts > 0 && s.draw >= 0)
                verdicts[i] = device_row_verdicts(c, s, outputs);
            else if (s.drafts > 0)
                verdicts[i] = verify_rows_ahead(c, logits[i], s.drafts, mc);
            else
                draws[i] = draw_on_host(c, logits[i], mc);
        } catch (...) {
            failed[k] = std::current_exception();
        }
    }
    for (const std::exception_ptr& e : failed)
        if (e) std::rethrow_exception(e);
    for (size_t i = 0; i < plan.items.size(); ++i) {
        Completion* c = plan.items[i].completion;
        Request& r = *c->request;
        c->num_computed += static_cast<int64_t>(plan.items[i].tokens.size());
        c->drafter_current = plan.items[i].drafter_taps;
        if (c->status != Status::kRunning) continue;  // ended by a stop string meanwhile: discard
        if (plan.items[i].drafts > 0) {
            if (plan.items[i].draw >= 0) {  // decided on the device: row j's token and its test's outcome
                if (verdicts[i].rows.empty()) verdicts[i] = device_row_verdicts(*c, plan.items[i], outputs);
                const size_t at = static_cast<size_t>(plan.items[i].draw);
                for (size_t j = 0; j < verdicts[i].rows.size(); ++j) metrics.device_verified_rows += outputs.tokens[at + j] >= 0;
            }
            verify_into(*c, logits[i], plan.items[i].drafts, mc, verdicts[i].rows.empty() ? nullptr : &verdicts[i]);
            advanced.push_back(c);
            continue;
        }
        const int64_t prompt_len = static_cast<int64_t>(r.prompt.size());
        if (cfg.prefix_caching && c->num_computed <= prompt_len && c->num_computed % prefix.block() == 0)
            prefix.insert(std::span<const int32_t>(r.prompt).first(size_t(c->num_computed)), c->seq->state());
        if (c->num_computed < total_tokens(*c)) continue;  // mid-prefill
        if (c->index == 0 && c->generated.empty()) metrics.prompt_tokens += prompt_len;
        // A device draw, or (token -1: top-p/min-p keeping more ids than the device sorts) the host's draw
        // from the row's logits that came back with it.
        auto emit_device = [&](Completion& x, size_t k) {
            if (outputs.tokens[k] >= 0) {
                emit(x, outputs.tokens[k], {}, false, mc);
                ++metrics.device_sampled_tokens;
            } else {
                emit_draw(x, draw_on_host(x, outputs.draw_logits.at(k), mc), mc);
            }
        };
        int32_t draw = plan.items[i].draw;
        if (draw >= 0) {
            emit_device(*c, size_t(draw++));
        } else if (draws[i]) {
            emit_draw(*c, std::move(*draws[i]), mc);
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
                    emit_device(sib, size_t(draw++));
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

void Engine::Impl::sample_into(Completion& c, const std::vector<float>& logits, const ModelInfo& mc) {
    emit_draw(c, draw_on_host(c, logits, mc), mc);
}

Engine::Impl::HostDraw Engine::Impl::draw_on_host(Completion& c, const std::vector<float>& logits,
                                                   const ModelInfo& mc) const {
    const Request& r = *c.request;
    if (c.grammar && !c.mask_ready) c.mask_count = c.grammar->fill_next_token_bitmask(c.mask);  // forked siblings
    c.mask_ready = false;
    // No token can continue (a vocabulary without the bytes the grammar needs): end the completion
    // at EOS rather than sample outside the constraint.
    HostDraw d;
    d.dead_end = c.grammar && c.mask_count == 0;
    if (d.dead_end)
        for (int64_t e : mc.eos_token_ids) c.mask[size_t(e >> 6)] |= uint64_t{1} << (e & 63);
    d.result = sample({.logits = logits, .params = &r.params, .prompt = r.prompt, .generated = c.generated,
                       .seed = r.seed, .stream = static_cast<uint64_t>(c.index),
                       .allowed = c.grammar ? std::span<const uint64_t>(c.mask) : std::span<const uint64_t>()});
    return d;
}

void Engine::Impl::emit_draw(Completion& c, HostDraw d, const ModelInfo& mc) {
    bool grammar_done = false, grammar_dead = false;
    if (c.grammar) {
        if (d.dead_end || !c.grammar->accept_token(d.result.token)) {
            DI_LOG_WARN("request '{}': the structured-output grammar has no continuation in this vocabulary; ending the completion",
                        c.request->id);
            grammar_done = grammar_dead = true;
        } else {
            grammar_done = c.grammar->is_terminated();
        }
    }
    emit(c, d.result.token, std::move(d.result.logprob), grammar_done, mc, grammar_dead);
}

void Engine::Impl::postprocess(const std::vector<Completion*>& advanced) {
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

void Engine::Impl::finish(Completion& c) {
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

void Engine::Impl::collect_garbage() {
    for (auto& r : requests)
        for (Completion& c : r->completions)
            if (c.status == Status::kFinished) c.seq.reset();
    std::erase_if(requests, [](const std::unique_ptr<Request>& r) {
        return r->num_finished == static_cast<int64_t>(r->completions.size());
    });
}

std::vector<RequestOutput> Engine::Impl::step() {
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
