// SPDX-License-Identifier: Apache-2.0
// The offline engine: requests of token ids in, completions out. Continuous batching with a token
// budget per step, chunked prefill mixed with decode, admission and preemption by a state-memory
// budget, a prefix cache, deterministic sampling. Not thread-safe: one thread drives `step()`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "deepinfer/grammar.h"
#include "deepinfer/model.h"

namespace deepinfer {

class Tokenizer;
class Drafter;

struct SamplingParams {
    double temperature = 1.0;  // 0 = greedy
    int64_t top_k = 0;         // 0 = off
    double top_p = 1.0;
    double min_p = 0.0;
    double repetition_penalty = 1.0;  // > 1 discourages tokens already in prompt or output
    double presence_penalty = 0.0;    // OpenAI semantics, on generated tokens
    double frequency_penalty = 0.0;
    std::vector<std::pair<int32_t, float>> logit_bias;
    std::vector<std::string> stop;         // stop strings (matched on detokenized text)
    std::vector<int32_t> stop_token_ids;   // besides the model's end-of-sequence ids
    int64_t max_tokens = 16;
    int64_t n = 1;
    int64_t logprobs = -1;  // -1: none; k >= 0: the sampled token's logprob and the top k alternatives
    std::optional<uint64_t> seed;  // default: derived from the job seed and the request id
    bool ignore_eos = false;
    // Structured output: the completion is constrained to this grammar (EBNF, regex, JSON Schema,
    // json_object); an invalid constraint makes add_request throw GrammarError. A grammar that is
    // complete ends the completion at its end token even with ignore_eos.
    std::optional<GrammarSpec> grammar;
};

// The shape of a decode-only engine step as the confidence scheduler's step-cost model sees it.
struct SpeculativeStepShape {
    int64_t tokens = 0;            // rows, drafts included
    bool drafter_taps = false;     // its rows updated the drafter's state (else a plain step)
    int64_t drafted_requests = 0;  // requests drafted during the step (for the next verification)
};
struct SpeculativeStepCost {
    double step_seconds = 0;   // the step's wall time without the drafting
    double draft_seconds = 0;  // the drafting's
};
// One engine step as the confidence scheduler saw it (EngineConfig::speculative_trace): what was run, what
// it cost, and what the scheduler's cost lines predicted for it before it learned from it (decode-only
// steps teach the cost model; steps with prefill chunks are reported too, marked).
struct SpeculativeTraceStep {
    int64_t step = 0;                 // the engine's step count when it ended
    bool decode_only = true;          // every row decodes (the steps the cost model learns from)
    int64_t decode_rows = 0;          // rows of completions at decode, drafts included (the rest: prefill)
    SpeculativeStepShape shape;       // rows (drafts included), taps, requests drafted during it
    int64_t verifying = 0;            // requests that verified drafts in it
    int64_t drafts = 0;               // drafts verified in it
    int64_t accepted = 0;             // drafts accepted in it
    double step_seconds = 0;          // as learned (measured wall time without the drafting, or the test's)
    double draft_seconds = 0;
    double predicted_step_seconds = 0;   // the cost line of its kind at its rows before it (0: unknown)
    double predicted_draft_seconds = 0;  // the drafter's line at its requests (0: unknown or none drafted)
    double expected_gain = -1;        // the gain the scheduler last estimated when it decided (-1: none)
};

// Every switch of the engine (style.md §7).
struct EngineConfig {
    int64_t max_num_seqs = 256;           // sequences in a step
    int64_t max_num_batched_tokens = 2048;  // token budget per step (decode tokens + prefill chunks)
    int64_t max_prefill_chunk = 512;      // largest prefill chunk of one sequence in one step
    uint64_t state_memory_bytes = uint64_t{8} << 30;  // budget for sequence state (running + prefix cache)
    uint64_t state_page_bytes = 16 << 10;             // page of the state pool (a row must fit one page)
    bool prefix_caching = true;
    int64_t prefix_block = 64;            // prefix-cache granularity in tokens
    double prefix_cache_fraction = 0.5;   // share of state_memory_bytes the prefix cache may keep
    // Overlap output processing with the next forward (a long-lived forward thread). Off by default on
    // the CPU backend: the overlap competes with the forward's own threads for the same cores
    // (bench/results/cpu-engine-*: slower on 2 cores); it pays when the forward runs on a GPU.
    bool async_scheduling = false;
    // Sample on the model's device when it can (GPU backends, Model::can_sample_on_device): only token
    // ids cross to the host. Requests it cannot serve (logit bias, penalties, logprobs, structured
    // output) are sampled on the host from logits, and so are draws it hands back (top-p / min-p keeping
    // more ids than it sorts). The tokens are the same either way.
    bool device_sampling = true;
    // With device_sampling: speculative verify rows that the device sampler serves (greedy, temperature
    // alone, or top-k <= 1024 with top-p/min-p inside; token-wise verification) are verified on the device, reading sampled
    // drafts' distributions where the GPU drafter left them: neither the rows' logits nor the drafts'
    // distributions cross to the host. The verdicts are the host verifier's either way.
    bool speculative_device_verification = true;
    uint64_t job_seed = 0;
    int64_t max_model_len = 0;  // prompt + max_tokens limit per request (0: the model's max_position_embeddings)
    // Speculative decoding (docs: speculative-decoding.md): "none" | "mtp" | "dspark" (the checkpoint
    // must carry that drafter) | "auto" (the checkpoint's drafter if it has one, k capped at its block). Drafts are verified in one target forward per step; greedy output is
    // token-identical to no speculation, sampled output has the same distribution and is reproducible
    // (batch-invariant with the scheduler off). Composes with async_scheduling: the next step is sized
    // from the drafts' stale confidences and the forward worker drafts, allocates and verifies.
    std::string speculative_method = "none";
    int64_t num_speculative_tokens = 3;   // drafts per request and step, at most
    bool speculative_scheduler = false;   // confidence-scheduled verify lengths (else always all drafts)
    bool speculative_sample_drafts = true;  // temperature > 0: sampled drafts (else argmax, one-hot)
    // temperature > 0: block verification (speculative-decoding.md §3.4: exact, accepts at least as many
    // drafts as token-wise verification on average; structured output: each row's mask follows the drafts
    // before it), else token-wise.
    bool speculative_block_verification = false;
    // Confidence scheduler: from this many decode rows in a step, its exploration (learning the costs,
    // probes) speculates for a subset of the requests (VerifyScheduler::kSubsetFrom).
    int64_t speculative_subset_from = 96;
    // Tests: the cost the confidence scheduler learns for each decode-only step, instead of the step's
    // measured wall time (deterministic decisions). Empty: measured.
    std::function<SpeculativeStepCost(const SpeculativeStepShape&)> speculative_step_cost;
    // Called once per engine step with a confidence scheduler (on the engine's thread): the decisions and
    // costs behind its choices, for tuning and benchmarks (deepinfer run --spec-trace, spec_bench --trace).
    // Empty: none.
    std::function<void(const SpeculativeTraceStep&)> speculative_trace;
};

struct TokenLogprob {
    int32_t token = 0;
    float logprob = 0;
    std::vector<std::pair<int32_t, float>> top;  // top alternatives, most likely first
};

struct CompletionOutput {
    int64_t index = 0;
    std::vector<int32_t> token_ids;
    std::string text;           // detokenized, truncated at a matched stop string
    std::string finish_reason;  // "stop" | "length"
    std::vector<TokenLogprob> logprobs;
};

struct RequestOutput {
    std::string request_id;
    int64_t prompt_tokens = 0;
    int64_t cached_prompt_tokens = 0;  // served from the prefix cache
    std::vector<CompletionOutput> completions;
};

struct EngineMetrics {
    int64_t steps = 0;
    int64_t prompt_tokens = 0;
    int64_t prefix_cache_hit_tokens = 0;  // prompt tokens whose state came from the prefix cache
    int64_t generated_tokens = 0;
    int64_t preemptions = 0;
    uint64_t state_bytes_in_use = 0;
    uint64_t state_bytes_peak = 0;
    uint64_t prefix_cache_bytes = 0;
    // The paged state pool (compressed KV and indexer keys of every sequence and prefix snapshot).
    uint64_t pool_pages_in_use = 0;
    uint64_t pool_pages_peak = 0;
    uint64_t pool_pages_capacity = 0;
    uint64_t pool_page_bytes = 0;
    int64_t prefix_cache_entries = 0;
    double forward_seconds = 0;  // time inside the model forward
    int64_t device_sampled_tokens = 0;  // tokens drawn on the model's device (the rest: host sampler)
    int64_t device_verified_rows = 0;   // speculative verify rows decided on the model's device
    // Speculative decoding.
    int64_t spec_steps = 0;            // engine steps with a drafter
    int64_t spec_verify_steps = 0;     // request-steps that verified drafts
    int64_t spec_draft_tokens = 0;     // drafts verified
    int64_t spec_accepted_tokens = 0;  // drafts accepted
    int64_t spec_verify_tokens = 0;    // decode rows (anchors + drafts) over all steps
    int64_t spec_budget_sum = 0;       // sum of the scheduler's draft budgets B*
    // Decode steps the confidence scheduler ran without speculating (no drafter taps, nothing drafted:
    // expected gain below 1, or measuring plain steps).
    int64_t spec_plain_steps = 0;
    std::vector<int64_t> spec_position_verified, spec_position_accepted;  // per draft position
    // Confidence-scheduler health: per position, mean |calibrated confidence - realized acceptance|
    // over the trials (before each observation is added: an online, out-of-sample error).
    std::vector<double> spec_calibration_error;
    double draft_seconds = 0;          // time inside the drafter
    // Tokens per verify: 1 (correction or bonus) + accepted drafts.
    double mean_accepted_length() const {
        return spec_verify_steps ? 1.0 + double(spec_accepted_tokens) / double(spec_verify_steps) : 0;
    }
    double step_seconds = 0;     // wall time of the steps
    double prefix_hit_rate() const { return prompt_tokens ? double(prefix_cache_hit_tokens) / double(prompt_tokens) : 0; }
};

class Engine {
public:
    // `tokenizer` may be null (then stop strings and text are unavailable).
    // `drafter`: overrides the model's own drafter for speculative decoding (tests, benchmarks).
    Engine(std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tokenizer, EngineConfig config,
           std::shared_ptr<const Drafter> drafter = nullptr);
    ~Engine();
    Engine(const Engine&) = delete;
    Engine& operator=(const Engine&) = delete;

    // Queues a request; throws on invalid input (empty prompt, unknown ids, prompt too long).
    void add_request(std::string request_id, std::vector<int32_t> prompt, SamplingParams sampling);
    bool has_unfinished() const;
    int64_t num_unfinished() const;
    // One step: schedule, run the model once, sample, account. Returns the requests that finished.
    std::vector<RequestOutput> step();
    // Runs until every queued request is finished, calling `on_finished` as each completes.
    void run_until_done(const std::function<void(RequestOutput&&)>& on_finished);
    const EngineMetrics& metrics() const;
    const EngineConfig& config() const;

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer
