// SPDX-License-Identifier: Apache-2.0
// The engine's speculative decoding: verify lengths (confidence scheduler), drafting (in the
// forward worker under async scheduling), verification of draft rows, and the step-cost samples.
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

std::vector<int64_t> Engine::Impl::plan_verify_lengths(const std::vector<Completion*>& order,
                                                       std::span<const uint8_t> speculating, int64_t budget) {
    std::vector<int64_t> len(order.size(), 0);
    if (!drafter) return len;
    std::vector<VerifyCandidate> cands;
    std::vector<size_t> at;
    int64_t decode = 0, prefill = 0;  // the step's decode rows but drafts; its prefill chunks' rows
    for (size_t i = 0; i < order.size(); ++i) {
        const Completion* c = order[i];
        const int64_t rem = total_tokens(*c) - c->num_computed;
        // Drafts whose distributions live only on the device are verifiable until the drafter's next call
        // (a completion left out of a step keeps drafts a later call overwrote: it runs a plain row).
        const bool stale = c->draft_device_probs && c->draft_call != draft_calls;
        if (rem != 1 || c->drafts.empty() || !speculating[i] || stale) {
            (rem == 1 ? decode : prefill) += plain_rows(*c, cfg.max_prefill_chunk);
            continue;
        }
        // Every emitted token must fit max_tokens: the step emits at most drafts + 1.
        const int64_t room = c->request->params.max_tokens - static_cast<int64_t>(c->generated.size()) - 1;
        cands.push_back({std::clamp<int64_t>(room, 0, static_cast<int64_t>(c->drafts.size())), c->confidence,
                         c->stale_confidence});
        at.push_back(i);
        ++decode;
    }
    if (cands.empty()) return len;
    // The draft budget weighs the decode rows only (see speculate() in engine_schedule.cpp); the prefill
    // chunks only take their share of the step's token budget.
    const std::vector<int64_t> l = verify_scheduler->plan(cands, decode, budget - decode - prefill);
    for (size_t k = 0; k < at.size(); ++k) len[at[k]] = l[k];
    return len;
}

std::vector<int64_t> Engine::Impl::plan_async_drafts(const std::vector<Completion*>& order,
                                                     std::span<const uint8_t> speculating, int64_t budget,
                                                     int64_t& draft_budget) {
    std::vector<int64_t> len(order.size(), 0);
    draft_budget = -1;
    std::vector<VerifyCandidate> cands;
    std::vector<size_t> at;
    int64_t decode = 0, prefill = 0;  // the step's decode rows but drafts; its prefill chunks' rows
    for (size_t i = 0; i < order.size(); ++i) {
        const Completion* c = order[i];
        const int64_t rem = total_tokens(*c) - c->num_computed;
        if (rem != 1) {
            prefill += plain_rows(*c, cfg.max_prefill_chunk);
            continue;
        }
        ++decode;
        if (!speculating[i]) continue;  // outside the step's speculating subset
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
    const int64_t B = verify_scheduler->budget(cands, decode, budget - decode - prefill);  // (as above)
    if (verify_scheduler->adaptive()) {
        draft_budget = B;
        for (size_t k = 0; k < at.size(); ++k) len[at[k]] = cands[k].available;
    } else {
        const std::vector<int64_t> l = verify_scheduler->allocate(cands, B);
        for (size_t k = 0; k < at.size(); ++k) len[at[k]] = l[k];
    }
    return len;
}

void Engine::Impl::draft_in_worker(const std::vector<Scheduled*>& items, int64_t draft_budget) {
    const auto t0 = Clock::now();
    std::vector<DraftRequest> reqs;
    for (const Scheduled* s : items) reqs.push_back(s->draft_request);
    std::vector<Draft> out = drafter->draft(reqs);
    ++draft_calls;
    std::vector<VerifyCandidate> cands;
    for (size_t i = 0; i < items.size(); ++i) {
        Completion* c = items[i]->completion;
        c->draft_call = draft_calls;
        c->stale_confidence = std::move(c->confidence);
        c->drafts = std::move(out[i].tokens);
        c->draft_probs = std::move(out[i].probs);
        c->draft_device_probs = out[i].device_probs;
        c->draft_device_stride = out[i].device_probs_stride;
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

bool Engine::Impl::device_verifiable(const Completion& c) const {
    const SamplingParams& p = c.request->params;
    if (!cfg.speculative_device_verification || !device_samplable(c)) return false;
    if (p.temperature > 0 && cfg.speculative_block_verification) return false;
    return model->can_sample_on_device({.temperature = p.temperature, .top_k = p.top_k, .top_p = p.top_p,
                                        .min_p = p.min_p, .draft = 0});
}

bool Engine::Impl::add_verify_draws(Scheduled& s, int32_t chunk, std::vector<DeviceDraw>& draws) const {
    const Completion& c = *s.completion;
    if (s.drafts <= 0 || !device_verifiable(c)) return false;
    const Request& r = *c.request;
    const SamplingParams& p = r.params;
    // Sampled drafts are tested against their distributions, which must be on the device.
    const bool sampled = p.temperature > 0 && cfg.speculative_sample_drafts;
    if (sampled && !c.draft_device_probs) {  // (a drafter without device copies gave host ones)
        DI_CHECK(!c.draft_probs.empty(), "speculative decoding: sampled drafts without their distributions");
        return false;
    }
    DI_ICHECK(!sampled || c.draft_call == draft_calls);  // (the device copies of an earlier call are gone)
    s.draw = static_cast<int32_t>(draws.size());
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    for (int64_t j = 0; j <= s.drafts; ++j) {
        // Row j of the verify block (its anchor is row n - 1 - drafts) decides generated token counter + j.
        DeviceDraw d{.chunk = chunk, .row = static_cast<int32_t>(n - 1 - s.drafts + j), .seed = r.seed,
                     .stream = static_cast<uint64_t>(c.index), .counter = s.counter + static_cast<uint64_t>(j),
                     .temperature = p.temperature, .top_k = p.top_k, .top_p = p.top_p, .min_p = p.min_p};
        if (j < s.drafts) {
            d.draft = c.drafts[size_t(j)];
            d.accept_stream = static_cast<uint64_t>(c.index) + kAcceptStream;
            if (sampled) d.draft_probs = c.draft_device_probs + j * c.draft_device_stride;
        }
        draws.push_back(d);
    }
    return true;
}

Engine::Impl::RowVerdicts Engine::Impl::verify_rows_ahead(const Completion& c, const std::vector<float>& logits,
                                                         int64_t num_drafts, const ModelInfo& mc) const {
    const Request& r = *c.request;
    const int64_t V = mc.vocab_size;
    const bool sampled = !c.draft_probs.empty();
    RowVerdicts out;
    // Row j sees the tokens and grammar state after drafts 1..j (it runs only once they are accepted).
    std::vector<int32_t> generated = c.generated;
    std::optional<ConstrainedDecoder> g;
    if (c.grammar) g.emplace(*c.grammar);
    std::vector<uint64_t> mask = c.mask;
    int64_t count = c.mask_count;
    for (int64_t j = 0; j <= num_drafts; ++j) {
        if (g && (j > 0 || !c.mask_ready)) count = g->fill_next_token_bitmask(mask);
        const bool dead_end = g && count == 0;  // as in sample_into
        if (dead_end)
            for (int64_t e : mc.eos_token_ids) mask[size_t(e >> 6)] |= uint64_t{1} << (e & 63);
        VerifyRowInput in{
            .sample = {.logits = std::span<const float>(logits).subspan(size_t(j * V), size_t(V)), .params = &r.params,
                       .prompt = r.prompt, .generated = generated, .seed = r.seed,
                       .stream = static_cast<uint64_t>(c.index),
                       .allowed = g ? std::span<const uint64_t>(mask) : std::span<const uint64_t>()},
            .draft = j < num_drafts ? std::optional<int32_t>(c.drafts[size_t(j)]) : std::nullopt,
            .draft_probs = sampled && j < num_drafts
                               ? std::span<const float>(c.draft_probs).subspan(size_t(j * V), size_t(V))
                               : std::span<const float>()};
        out.rows.push_back(verify_row(in));
        out.dead_end.push_back(dead_end ? 1 : 0);
        if (!out.rows.back().accepted || j == num_drafts) break;
        generated.push_back(c.drafts[size_t(j)]);
        if (g && (dead_end || !g->accept_token(c.drafts[size_t(j)]))) break;  // the completion ends at row j
    }
    return out;
}

Engine::Impl::RowVerdicts Engine::Impl::device_row_verdicts(const Completion& c, const Scheduled& s,
                                                           const ForwardOutputs& o) const {
    const Request& r = *c.request;
    const size_t at = static_cast<size_t>(s.draw);
    const size_t V = static_cast<size_t>(model->info().vocab_size);
    // (add_verify_draws gave each sampled draft its distribution; the device verifies no grammar rows)
    const bool sampled = r.params.temperature > 0 && cfg.speculative_sample_drafts;
    RowVerdicts out;
    for (int64_t j = 0; j <= s.drafts; ++j) {
        const size_t k = at + size_t(j);
        const bool draft = j < s.drafts;
        if (o.tokens.at(k) >= 0) {
            out.rows.push_back({.accepted = draft && o.accepted.at(k) != 0, .token = o.tokens[k], .logprob = {}});
        } else {
            const std::vector<float>& l = o.draw_logits.at(k);
            const std::span<const float> q = draft && sampled ? std::span<const float>(o.draw_probs.at(k)) : std::span<const float>();
            DI_CHECK(l.size() == V && (!draft || !sampled || q.size() == V), "forward_sampled: verify row ", j,
                     " given up without its logits", draft && sampled ? " and draft distribution" : "");
            DI_ICHECK(s.counter == c.generated.size());  // (the device's counter: row j decides token counter + j)
            std::vector<int32_t> generated = c.generated;
            generated.insert(generated.end(), c.drafts.begin(), c.drafts.begin() + j);
            out.rows.push_back(verify_row({.sample = {.logits = l, .params = &r.params, .prompt = r.prompt,
                                                      .generated = generated, .seed = r.seed,
                                                      .stream = static_cast<uint64_t>(c.index), .allowed = {}},
                                           .draft = draft ? std::optional<int32_t>(c.drafts[size_t(j)]) : std::nullopt,
                                           .draft_probs = q}));
        }
        out.dead_end.push_back(0);
        if (!out.rows.back().accepted) break;
    }
    return out;
}

void Engine::Impl::verify_into(Completion& c, const std::vector<float>& logits, int64_t num_drafts, const ModelInfo& mc,
                               const RowVerdicts* verdicts) {
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
    if (!block) {
        const RowVerdicts computed = verdicts ? RowVerdicts{} : verify_rows_ahead(c, logits, num_drafts, mc);
        const RowVerdicts& vd = verdicts ? *verdicts : computed;
        for (size_t j = 0; j < vd.rows.size(); ++j) {
            const VerifyRowResult& v = vd.rows[j];
            c.mask_ready = false;  // (the mask of the next sample is computed again)
            if (int64_t(j) < num_drafts) {
                ++metrics.spec_position_verified[j];
                metrics.spec_position_accepted[j] += v.accepted;
            }
            bool grammar_done = false, grammar_dead = false;
            if (c.grammar) {
                if (vd.dead_end[j] || !c.grammar->accept_token(v.token)) {
                    DI_LOG_WARN("request '{}': the structured-output grammar has no continuation in this vocabulary; "
                                "ending the completion", r.id);
                    grammar_done = grammar_dead = true;
                } else {
                    grammar_done = c.grammar->is_terminated();
                }
            }
            emit(c, v.token, v.logprob, grammar_done, mc, grammar_dead);
            if (!v.accepted || c.token_finished) break;
            ++accepted;
        }
    }
    ++metrics.spec_verify_steps;
    metrics.spec_draft_tokens += num_drafts;
    metrics.spec_accepted_tokens += accepted;
    observation.accepted += accepted;
    verify_scheduler->observe_acceptance(c.confidence, num_drafts, accepted);
    metrics.spec_calibration_error.resize(metrics.spec_position_verified.size());
    for (size_t j = 0; j < metrics.spec_calibration_error.size(); ++j)
        metrics.spec_calibration_error[j] = verify_scheduler->calibrator().mean_abs_error(static_cast<int64_t>(j));
    // Committed: the anchor and the accepted drafts (positions P .. P+accepted).
    c.num_computed = P + 1 + accepted;
    if (c.seq && c.seq->num_tokens() > c.num_computed) c.seq->truncate(c.num_computed);
    c.drafts.clear();
}

void Engine::Impl::draft_for(const std::vector<Completion*>& advanced, bool drafting) {
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
        c->draft_device_probs = nullptr;
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
                        .temperature = p.temperature, .host_probs = !device_verifiable(*c)});
    }
    for (size_t i = 0; i < reqs.size(); ++i) reqs[i].uniforms = uniforms[i];
    if (reqs.empty()) return;
    std::vector<Draft> out = drafter->draft(reqs);
    ++draft_calls;
    for (size_t i = 0; i < todo.size(); ++i) {
        todo[i]->draft_call = draft_calls;
        todo[i]->drafts = std::move(out[i].tokens);
        todo[i]->draft_probs = std::move(out[i].probs);
        todo[i]->draft_device_probs = out[i].device_probs;
        todo[i]->draft_device_stride = out[i].device_probs_stride;
        todo[i]->confidence = std::move(out[i].confidence);
    }
    const double dt = since(t0);
    metrics.draft_seconds += dt;
    last_drafted = static_cast<int64_t>(reqs.size());
    last_draft_seconds = dt;
}

void Engine::Impl::observe_step_cost() {
    const auto now = Clock::now();
    const bool traced = verify_scheduler && observation.taken && cfg.speculative_trace;
    if (verify_scheduler && (observation.valid || traced) && (last_step_end || cfg.speculative_step_cost)) {
        double seconds = last_step_end ? std::chrono::duration<double>(now - *last_step_end).count() : 0.0;
        double draft_seconds = observation.draft_seconds;
        seconds -= draft_seconds;
        if (cfg.speculative_step_cost && observation.valid) {
            const SpeculativeStepCost c = cfg.speculative_step_cost(
                {.tokens = observation.tokens, .drafter_taps = observation.tapped, .drafted_requests = observation.drafted});
            seconds = c.step_seconds;
            draft_seconds = c.draft_seconds;
        }
        if (traced) {
            const StepCostModel& m = verify_scheduler->costs();
            const StepKind kind = observation.tapped ? StepKind::kTapped : StepKind::kPlain;
            cfg.speculative_trace({.step = metrics.steps,
                                   .decode_only = observation.valid,
                                   .decode_rows = observation.decode_rows,
                                   .shape = {.tokens = observation.tokens, .drafter_taps = observation.tapped,
                                             .drafted_requests = observation.drafted},
                                   .verifying = observation.verifying, .drafts = observation.drafts,
                                   .accepted = observation.accepted, .step_seconds = seconds, .draft_seconds = draft_seconds,
                                   .predicted_step_seconds = m.predict(kind, observation.tokens),
                                   .predicted_draft_seconds = observation.drafted > 0 ? m.predict(StepKind::kDraft, observation.drafted) : 0.0,
                                   .expected_gain = verify_scheduler->last_gain()});
        }
        if (observation.valid)
            verify_scheduler->observe_step(observation.tokens, observation.tapped, seconds, observation.drafted,
                                           draft_seconds);
    }
    observation.taken = false;
    observation.valid = false;
    last_step_end = now;
    // Idle engine (every request done): the next step's interval would include the caller's pause.
    bool busy = false;
    for (const auto& r : requests) busy = busy || r->num_finished < static_cast<int64_t>(r->completions.size());
    if (!busy) last_step_end.reset();
}

}  // namespace deepinfer
