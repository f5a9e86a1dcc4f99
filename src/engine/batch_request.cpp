// SPDX-License-Identifier: Apache-2.0
// Batch input line -> engine request: field validation, sampling parameters, structured output,
// the chat recipe (parse -> render -> encode) or the raw completion prompt.
#include "engine/batch_request.h"

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "core/fnv1a.h"
#include "deepinfer/check.h"
#include "deepinfer/grammar.h"

namespace deepinfer {
namespace {

using json = BatchJson;

double num(const json& body, const char* key, double def, double lo, double hi) {
    if (!body.contains(key) || body[key].is_null()) return def;
    DI_CHECK(body[key].is_number(), "body.", key, " must be a number, got ", body[key].dump());
    const double v = body[key].get<double>();
    DI_CHECK(v >= lo && v <= hi, "body.", key, " = ", v, " is out of range [", lo, ", ", hi, "]");
    return v;
}

SamplingParams sampling_from_body(const json& body, int64_t default_max_tokens) {
    SamplingParams p;
    p.temperature = num(body, "temperature", 1.0, 0.0, 2.0);
    p.top_p = num(body, "top_p", 1.0, 0.0, 1.0);
    DI_CHECK(p.top_p > 0, "body.top_p must be > 0");
    p.top_k = static_cast<int64_t>(num(body, "top_k", 0, -1, 1e9));
    if (p.top_k < 0) p.top_k = 0;
    p.min_p = num(body, "min_p", 0.0, 0.0, 1.0);
    p.repetition_penalty = num(body, "repetition_penalty", 1.0, 0.01, 100.0);
    p.presence_penalty = num(body, "presence_penalty", 0.0, -2.0, 2.0);
    p.frequency_penalty = num(body, "frequency_penalty", 0.0, -2.0, 2.0);
    const double mt = body.contains("max_completion_tokens") && !body["max_completion_tokens"].is_null()
                          ? num(body, "max_completion_tokens", 0, 1, 1e9)
                          : num(body, "max_tokens", double(default_max_tokens), 1, 1e9);
    p.max_tokens = static_cast<int64_t>(mt);
    p.n = static_cast<int64_t>(num(body, "n", 1, 1, 128));
    if (body.contains("seed") && !body["seed"].is_null()) {
        DI_CHECK(body["seed"].is_number_integer(), "body.seed must be an integer");
        p.seed = static_cast<uint64_t>(body["seed"].get<int64_t>());
    }
    p.ignore_eos = body.value("ignore_eos", false);
    if (body.contains("logit_bias") && !body["logit_bias"].is_null()) {
        DI_CHECK(body["logit_bias"].is_object(), "body.logit_bias must be an object of token id -> bias");
        for (auto it = body["logit_bias"].begin(); it != body["logit_bias"].end(); ++it) {
            char* end = nullptr;
            const long id = std::strtol(it.key().c_str(), &end, 10);
            DI_CHECK(end && *end == '\0' && id >= 0, "body.logit_bias key '", it.key(), "' is not a token id");
            DI_CHECK(it.value().is_number(), "body.logit_bias['", it.key(), "'] must be a number");
            p.logit_bias.emplace_back(static_cast<int32_t>(id), std::clamp(it.value().get<float>(), -100.0f, 100.0f));
        }
    }
    if (body.contains("stop") && !body["stop"].is_null()) {
        const json& s = body["stop"];
        if (s.is_string()) p.stop.push_back(s.get<std::string>());
        else {
            DI_CHECK(s.is_array() && s.size() <= 16, "body.stop must be a string or a list of at most 16 strings");
            for (const json& e : s) {
                DI_CHECK(e.is_string(), "body.stop entries must be strings");
                p.stop.push_back(e.get<std::string>());
            }
        }
    }
    if (body.contains("stop_token_ids") && body["stop_token_ids"].is_array())
        for (const json& e : body["stop_token_ids"]) p.stop_token_ids.push_back(e.get<int32_t>());
    // Chat: logprobs is a bool + top_logprobs; completions: logprobs is an integer.
    if (body.contains("logprobs") && !body["logprobs"].is_null()) {
        if (body["logprobs"].is_boolean()) {
            if (body["logprobs"].get<bool>()) p.logprobs = static_cast<int64_t>(num(body, "top_logprobs", 0, 0, 20));
        } else {
            p.logprobs = static_cast<int64_t>(num(body, "logprobs", 0, 0, 20));
        }
    }
    return p;
}

// Structured output from the body: response_format (json_schema / json_object), or the extensions
// `regex` and `ebnf`; `json_whitespace` ("flexible" | "compact") and `max_whitespace` tune JSON
// spacing. Chat in thinking mode constrains only the answer (after </think>); offered tools stay
// callable (a DSML block ends the constraint).
std::optional<GrammarSpec> grammar_from_body(const json& body, const ChatParseOptions* chat) {
    std::optional<GrammarSpec> spec;
    auto set = [&](GrammarSpec::Kind kind, std::string text, const char* what) {
        DI_CHECK(!spec, "only one structured-output constraint per request (", what, " given with another)");
        spec = GrammarSpec{};
        spec->kind = kind;
        spec->text = std::move(text);
    };
    if (body.contains("response_format") && body["response_format"].is_object()) {
        const json& rf = body["response_format"];
        const std::string type = rf.value("type", "text");
        if (type == "json_object") {
            set(GrammarSpec::Kind::kJsonObject, "", "response_format");
            spec->json.strict = false;
        } else if (type == "json_schema") {
            DI_CHECK(rf.contains("json_schema") && rf["json_schema"].is_object() && rf["json_schema"].contains("schema"),
                     "response_format.json_schema.schema is required");
            const json& js = rf["json_schema"];
            set(GrammarSpec::Kind::kJsonSchema, js["schema"].dump(), "response_format");  // key order kept
            spec->json.strict = js.contains("strict") && js["strict"].is_boolean() && js["strict"].get<bool>();
        } else {
            DI_CHECK(type == "text", "body.response_format.type must be text, json_object or json_schema");
        }
    }
    for (const char* key : {"regex", "ebnf"})
        if (body.contains(key) && !body[key].is_null()) {
            DI_CHECK(body[key].is_string(), "body.", key, " must be a string");
            set(std::string(key) == "regex" ? GrammarSpec::Kind::kRegex : GrammarSpec::Kind::kEbnf, body[key].get<std::string>(), key);
        }
    if (!spec) return spec;
    if (body.contains("json_whitespace") && !body["json_whitespace"].is_null()) {
        const json& w = body["json_whitespace"];
        DI_CHECK(w == "flexible" || w == "compact", "body.json_whitespace must be \"flexible\" or \"compact\"");
        spec->json.whitespace = w == "compact" ? JsonWhitespace::kCompact : JsonWhitespace::kFlexible;
    }
    spec->json.max_whitespace = static_cast<int32_t>(num(body, "max_whitespace", spec->json.max_whitespace, -1, 256));
    if (chat) {
        DI_CHECK(!chat->starts_in_tool_calls, "structured output cannot be combined with tool_choice required or a named tool");
        if (chat->thinking()) spec->start_after = "</think>";
        if (chat->parse_tool_calls) spec->tool_call_prefix = "<\xEF\xBD\x9C" "DSML" "\xEF\xBD\x9C";
    }
    return spec;
}

}  // namespace

std::string batch_custom_id(const BatchJson& j) {
    if (j.is_object() && j.contains("custom_id") && j["custom_id"].is_string()) return j["custom_id"].get<std::string>();
    return {};
}

BatchRequest prepare_batch_request(const BatchJson& j, bool duplicate_id, const BatchRequestContext& ctx) {
    DI_CHECK(ctx.tokenizer != nullptr, "a batch request needs a tokenizer");
    DI_CHECK(!j.is_discarded(), "invalid JSON");
    DI_CHECK(j.is_object(), "the line must be a JSON object");
    BatchRequest r;
    r.custom_id = batch_custom_id(j);
    DI_CHECK(!r.custom_id.empty(), "missing or non-string field 'custom_id'");
    DI_CHECK(!duplicate_id, "duplicate custom_id '", r.custom_id, "'");
    DI_CHECK(!j.contains("method") || j["method"] == "POST", "field 'method' must be \"POST\"");
    DI_CHECK(j.contains("url") && j["url"].is_string(), "missing or non-string field 'url'");
    r.url = j["url"].get<std::string>();
    DI_CHECK(r.url == "/v1/chat/completions" || r.url == "/v1/completions", "unsupported url '", r.url,
             "' (expected /v1/chat/completions or /v1/completions)");
    DI_CHECK(j.contains("body") && j["body"].is_object(), "missing or non-object field 'body'");
    const json& body = j["body"];
    r.sampling = sampling_from_body(body, ctx.default_max_tokens);
    if (r.url == "/v1/chat/completions") {
        // The body's text in the client's key order: tool parameter schemas render as sent.
        ChatRequest req = parse_chat_request(body.dump());
        r.parse = parse_options_for(req);
        r.parse.response_id = "chatcmpl-" + batch_hex_id(r.custom_id);
        if (r.sampling.stop.empty()) r.sampling.stop = req.stop;
        const ChatPrompt prompt = render_chat(req, ctx.family);
        r.prompt_text = prompt.text();
        r.prompt = encode_chat_prompt(prompt, *ctx.tokenizer);
        r.sampling.grammar = grammar_from_body(body, &r.parse);
    } else {
        DI_CHECK(body.contains("prompt"), "body.prompt is required for /v1/completions");
        r.sampling.grammar = grammar_from_body(body, nullptr);
        const json& pr = body["prompt"];
        if (pr.is_string()) {
            r.prompt_text = pr.get<std::string>();
            r.prompt = ctx.tokenizer->encode(r.prompt_text);
        } else {
            DI_CHECK(pr.is_array() && !pr.empty(), "body.prompt must be a string or a list of token ids");
            for (const json& t : pr) {
                DI_CHECK(t.is_number_integer(), "body.prompt token lists must hold integers");
                r.prompt.push_back(t.get<int32_t>());
            }
        }
    }
    return r;
}

std::string batch_hex_id(const std::string& s) { return hex16(fnv1a(kIdHashBasis, s)); }

}  // namespace deepinfer
