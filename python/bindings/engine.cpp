// SPDX-License-Identifier: Apache-2.0
// The engine: sampling parameters, engine configuration, request outputs, metrics and the Engine.
// step() releases the GIL; the Python loop that drives it checks for Ctrl-C between steps.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <string>
#include <vector>

#include "bindings.h"
#include "deepinfer/engine.h"
#include "deepinfer/grammar.h"
#include "deepinfer/tokenizer.h"

namespace nb = nanobind;

namespace deepinfer::python {

void register_engine(nb::module_& m) {
    nb::enum_<JsonWhitespace>(m, "JsonWhitespace")
        .value("flexible", JsonWhitespace::kFlexible)
        .value("compact", JsonWhitespace::kCompact);
    nb::class_<JsonOptions>(m, "JsonOptions")
        .def(nb::init<>())
        .def_rw("whitespace", &JsonOptions::whitespace)
        .def_rw("max_whitespace", &JsonOptions::max_whitespace)
        .def_rw("strict", &JsonOptions::strict);
    nb::class_<GrammarSpec> spec(m, "GrammarSpec", "A structured-output constraint (see grammar.h).");
    nb::enum_<GrammarSpec::Kind>(spec, "Kind")
        .value("ebnf", GrammarSpec::Kind::kEbnf)
        .value("regex", GrammarSpec::Kind::kRegex)
        .value("json_schema", GrammarSpec::Kind::kJsonSchema)
        .value("json_object", GrammarSpec::Kind::kJsonObject);
    spec.def(nb::init<>())
        .def_rw("kind", &GrammarSpec::kind)
        .def_rw("text", &GrammarSpec::text)
        .def_rw("json", &GrammarSpec::json)
        .def_rw("start_after", &GrammarSpec::start_after)
        .def_rw("tool_call_prefix", &GrammarSpec::tool_call_prefix);

    nb::class_<SamplingParams>(m, "SamplingParams", "The engine's per-request sampling fields (see engine.h).")
        .def(nb::init<>())
        .def_rw("temperature", &SamplingParams::temperature)
        .def_rw("top_k", &SamplingParams::top_k)
        .def_rw("top_p", &SamplingParams::top_p)
        .def_rw("min_p", &SamplingParams::min_p)
        .def_rw("repetition_penalty", &SamplingParams::repetition_penalty)
        .def_rw("presence_penalty", &SamplingParams::presence_penalty)
        .def_rw("frequency_penalty", &SamplingParams::frequency_penalty)
        .def_rw("logit_bias", &SamplingParams::logit_bias)
        .def_rw("stop", &SamplingParams::stop)
        .def_rw("stop_token_ids", &SamplingParams::stop_token_ids)
        .def_rw("max_tokens", &SamplingParams::max_tokens)
        .def_rw("n", &SamplingParams::n)
        .def_rw("logprobs", &SamplingParams::logprobs)
        .def_rw("seed", &SamplingParams::seed)
        .def_rw("ignore_eos", &SamplingParams::ignore_eos)
        .def_rw("grammar", &SamplingParams::grammar);

    nb::class_<EngineConfig>(m, "EngineConfig", "Every switch of the engine (see engine.h).")
        .def(nb::init<>())
        .def_rw("max_num_seqs", &EngineConfig::max_num_seqs)
        .def_rw("max_num_batched_tokens", &EngineConfig::max_num_batched_tokens)
        .def_rw("max_prefill_chunk", &EngineConfig::max_prefill_chunk)
        .def_rw("state_memory_bytes", &EngineConfig::state_memory_bytes)
        .def_rw("state_page_bytes", &EngineConfig::state_page_bytes)
        .def_rw("prefix_caching", &EngineConfig::prefix_caching)
        .def_rw("prefix_block", &EngineConfig::prefix_block)
        .def_rw("prefix_cache_fraction", &EngineConfig::prefix_cache_fraction)
        .def_rw("async_scheduling", &EngineConfig::async_scheduling)
        .def_rw("device_sampling", &EngineConfig::device_sampling)
        .def_rw("speculative_device_verification", &EngineConfig::speculative_device_verification)
        .def_rw("job_seed", &EngineConfig::job_seed)
        .def_rw("max_model_len", &EngineConfig::max_model_len);

    nb::class_<TokenLogprob>(m, "TokenLogprob")
        .def_ro("token", &TokenLogprob::token)
        .def_ro("logprob", &TokenLogprob::logprob)
        .def_ro("top", &TokenLogprob::top, "Top alternatives (token id, logprob), most likely first.");

    nb::class_<CompletionOutput>(m, "CompletionOutput")
        .def_ro("index", &CompletionOutput::index)
        .def_ro("token_ids", &CompletionOutput::token_ids)
        .def_ro("text", &CompletionOutput::text)
        .def_ro("finish_reason", &CompletionOutput::finish_reason)
        .def_ro("logprobs", &CompletionOutput::logprobs);

    nb::class_<RequestOutput>(m, "RequestOutput")
        .def_ro("request_id", &RequestOutput::request_id)
        .def_ro("prompt_tokens", &RequestOutput::prompt_tokens)
        .def_ro("cached_prompt_tokens", &RequestOutput::cached_prompt_tokens)
        .def_ro("completions", &RequestOutput::completions);

    nb::class_<EngineMetrics>(m, "EngineMetrics")
        .def_ro("steps", &EngineMetrics::steps)
        .def_ro("prompt_tokens", &EngineMetrics::prompt_tokens)
        .def_ro("prefix_cache_hit_tokens", &EngineMetrics::prefix_cache_hit_tokens)
        .def_ro("generated_tokens", &EngineMetrics::generated_tokens)
        .def_ro("preemptions", &EngineMetrics::preemptions)
        .def_ro("state_bytes_peak", &EngineMetrics::state_bytes_peak)
        .def_ro("forward_seconds", &EngineMetrics::forward_seconds)
        .def_ro("device_sampled_tokens", &EngineMetrics::device_sampled_tokens)
        .def_ro("device_verified_rows", &EngineMetrics::device_verified_rows)
        .def_ro("step_seconds", &EngineMetrics::step_seconds)
        .def_prop_ro("prefix_hit_rate", &EngineMetrics::prefix_hit_rate);

    nb::class_<Engine>(m, "Engine", "Continuous-batching engine over one model (one thread drives step()).")
        .def(
            "__init__",
            [](Engine* self, std::shared_ptr<Model> model, std::shared_ptr<Tokenizer> tokenizer, const EngineConfig& config) {
                new (self) Engine(std::move(model), std::move(tokenizer), config);
            },
            nb::arg("model"), nb::arg("tokenizer").none(), nb::arg("config"))
        .def("add_request", &Engine::add_request, nb::arg("request_id"), nb::arg("prompt"), nb::arg("sampling"),
             "Queues a request; raises Error on invalid input (nothing is queued then).")
        .def("step", &Engine::step, nb::call_guard<nb::gil_scoped_release>(),
             "One step (schedule, forward, sample); returns the requests that finished.")
        .def("has_unfinished", &Engine::has_unfinished)
        .def("num_unfinished", &Engine::num_unfinished)
        .def_prop_ro("metrics", &Engine::metrics, nb::rv_policy::copy)
        .def_prop_ro("config", &Engine::config, nb::rv_policy::copy);
}

}  // namespace deepinfer::python
