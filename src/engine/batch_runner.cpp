// SPDX-License-Identifier: Apache-2.0
// Batch runner: input lines -> engine requests -> output lines, with resume and progress.
#include "engine/batch_runner.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "deepinfer/chat_parser.h"
#include "deepinfer/check.h"
#include "deepinfer/grammar.h"
#include "deepinfer/log.h"
#include "deepinfer/tokenizer.h"

namespace deepinfer {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string hex_id(const std::string& s) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
    return buf;
}

// Appends whole lines to the output and flushes each one (a kill loses nothing already written).
class OutputFile {
public:
    OutputFile(const std::string& path, bool append) {
        f_ = std::fopen(path.c_str(), append ? "ab" : "wb");
        DI_CHECK(f_ != nullptr, path, ": cannot open for writing");
    }
    ~OutputFile() {
        if (f_) std::fclose(f_);
    }
    void write_line(const json& j) {
        std::string line = j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
        DI_CHECK(std::fwrite(line.data(), 1, line.size(), f_) == line.size() && std::fflush(f_) == 0,
                 "output write failed (disk full?)");
    }

private:
    std::FILE* f_ = nullptr;
};

// Reads the custom_ids (and the line numbers of error records without one) already in an output
// file, and cuts off a torn last line.
struct ResumeState {
    std::set<std::string> done_ids;
    std::set<int64_t> done_lines;
};

ResumeState scan_output(const std::string& path) {
    ResumeState st;
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return st;
    std::ifstream in(path, std::ios::binary);
    std::string content((std::istreambuf_iterator<char>(in)), {});
    const size_t last_nl = content.rfind('\n');
    const size_t keep = last_nl == std::string::npos ? 0 : last_nl + 1;
    if (keep < content.size()) {
        DI_LOG_WARN("{}: dropping a torn last line of {} bytes (the run was killed mid-write)", path,
                    content.size() - keep);
        std::filesystem::resize_file(path, keep);
    }
    size_t pos = 0;
    while (pos < keep) {
        const size_t nl = content.find('\n', pos);
        std::string_view line(content.data() + pos, nl - pos);
        pos = nl + 1;
        json j = json::parse(line, nullptr, false);
        if (!j.is_object()) continue;
        if (j.contains("custom_id") && j["custom_id"].is_string()) st.done_ids.insert(j["custom_id"].get<std::string>());
        else if (j.contains("error") && j["error"].is_object() && j["error"].contains("line"))
            st.done_lines.insert(j["error"]["line"].get<int64_t>());
    }
    return st;
}

int64_t count_lines(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    DI_CHECK(in.good(), path, ": cannot open the input");
    int64_t n = 0;
    std::string line;
    while (std::getline(in, line))
        if (line.find_first_not_of(" \t\r") != std::string::npos) ++n;
    return n;
}

// ---- request parsing ---------------------------------------------------------------------------

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
std::optional<GrammarSpec> grammar_from_body(const json& body, const ChatParseOptions* chat, const std::string& line) {
    // The schema's text with its key order (property order is the output order).
    std::string schema_text;
    {
        const auto ordered = nlohmann::ordered_json::parse(line, nullptr, false);
        const auto ptr = nlohmann::ordered_json::json_pointer("/body/response_format/json_schema/schema");
        if (!ordered.is_discarded() && ordered.contains(ptr)) schema_text = ordered.at(ptr).dump();
    }
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
            set(GrammarSpec::Kind::kJsonSchema, schema_text.empty() ? js["schema"].dump() : schema_text, "response_format");
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

// The assistant message of one completion: the recipe's parser splits reasoning, content and DSML
// tool calls (a malformed tool call stays in content, with a parse_error).
json assistant_message(const std::string& text, const std::string& finish_reason, ChatParseOptions options,
                       int64_t index) {
    options.stop.clear();  // the engine already cut the text at the stop string
    options.response_id.append(1, '-').append(std::to_string(index));
    ParsedMessage m = parse_chat_output(text, options, finish_reason == "length" ? BackendFinish::kLength
                                                                                 : BackendFinish::kStop);
    json out = json::parse(m.to_json());
    out.erase("finish_reason");
    out["role"] = "assistant";
    out["__finish_reason"] = m.finish_reason;
    return out;
}

json logprobs_json(const CompletionOutput& c, const Tokenizer* tok) {
    json content = json::array();
    for (const TokenLogprob& lp : c.logprobs) {
        auto piece = [&](int32_t id) { return tok ? tok->decode(std::span<const int32_t>(&id, 1)) : std::to_string(id); };
        json top = json::array();
        for (const auto& [id, l] : lp.top) top.push_back({{"token", piece(id)}, {"logprob", l}, {"id", id}});
        content.push_back({{"token", piece(lp.token)}, {"logprob", lp.logprob}, {"id", lp.token}, {"top_logprobs", top}});
    }
    return {{"content", content}};
}

struct Pending {
    std::string custom_id;
    std::string url;
    ChatParseOptions parse;  // chat only
    int64_t line = 0;
};

}  // namespace

BatchRunSummary run_batch(const BatchRunOptions& o, std::shared_ptr<const Model> model,
                          std::shared_ptr<const Tokenizer> tokenizer, const EngineConfig& ecfg) {
    const auto t0 = Clock::now();
    BatchRunSummary sum;
    DI_CHECK(tokenizer != nullptr, "deepinfer run needs a tokenizer");
    std::error_code ec;
    const bool exists = std::filesystem::exists(o.output_path, ec) && std::filesystem::file_size(o.output_path, ec) > 0;
    DI_CHECK(o.resume || !exists, o.output_path, ": the output file exists; pass --resume to continue it, or remove it");
    ResumeState resume = o.resume ? scan_output(o.output_path) : ResumeState{};
    sum.lines = count_lines(o.input_path);
    OutputFile out(o.output_path, o.resume);
    std::ifstream in(o.input_path, std::ios::binary);
    DI_CHECK(in.good(), o.input_path, ": cannot open the input");

    Engine engine(model, tokenizer, ecfg);
    std::unordered_map<std::string, Pending> pending;
    std::set<std::string> seen;
    const int64_t cap = o.max_in_flight > 0 ? o.max_in_flight : 4 * ecfg.max_num_seqs;
    int64_t line_no = 0, done_lines = 0;
    bool eof = false;
    const std::string model_name = o.model_name;
    const bool tty = o.progress == BatchRunOptions::Progress::kAlways ||
                     (o.progress == BatchRunOptions::Progress::kAuto && ::isatty(STDERR_FILENO));
    auto last_report = Clock::now();

    auto error_record = [&](const std::string& custom_id, int64_t line, const std::string& code, const std::string& msg) {
        json e = {{"id", "batch_req_" + hex_id(custom_id.empty() ? std::to_string(line) : custom_id)},
                  {"custom_id", custom_id.empty() ? json(nullptr) : json(custom_id)},
                  {"response", nullptr},
                  {"error", {{"code", code}, {"message", msg}, {"line", line}}}};
        out.write_line(e);
        ++sum.errors;
        ++done_lines;
    };

    auto feed_one = [&]() -> bool {
        std::string line;
        while (std::getline(in, line)) {
            ++line_no;
            if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
            const std::string where = o.input_path + ":" + std::to_string(line_no);
            json j = json::parse(line, nullptr, false);
            std::string custom_id;
            if (j.is_object() && j.contains("custom_id") && j["custom_id"].is_string())
                custom_id = j["custom_id"].get<std::string>();
            if (!custom_id.empty() ? resume.done_ids.count(custom_id) : resume.done_lines.count(line_no)) {
                ++sum.skipped_done;
                ++done_lines;
                seen.insert(custom_id);
                continue;
            }
            try {
                DI_CHECK(!j.is_discarded(), "invalid JSON");
                DI_CHECK(j.is_object(), "the line must be a JSON object");
                DI_CHECK(!custom_id.empty(), "missing or non-string field 'custom_id'");
                DI_CHECK(seen.insert(custom_id).second, "duplicate custom_id '", custom_id, "'");
                DI_CHECK(!j.contains("method") || j["method"] == "POST", "field 'method' must be \"POST\"");
                DI_CHECK(j.contains("url") && j["url"].is_string(), "missing or non-string field 'url'");
                const std::string url = j["url"].get<std::string>();
                DI_CHECK(url == "/v1/chat/completions" || url == "/v1/completions", "unsupported url '", url,
                         "' (expected /v1/chat/completions or /v1/completions)");
                DI_CHECK(j.contains("body") && j["body"].is_object(), "missing or non-object field 'body'");
                const json& body = j["body"];
                SamplingParams sp = sampling_from_body(body, o.default_max_tokens);
                std::vector<int32_t> prompt;
                ChatParseOptions parse;
                if (url == "/v1/chat/completions") {
                    ChatRequest req = parse_chat_request(body.dump());
                    parse = parse_options_for(req);
                    parse.response_id = "chatcmpl-" + hex_id(custom_id);
                    if (sp.stop.empty()) sp.stop = req.stop;
                    prompt = encode_chat_prompt(render_chat(req, o.family), *tokenizer);
                    sp.grammar = grammar_from_body(body, &parse, line);
                } else {
                    DI_CHECK(body.contains("prompt"), "body.prompt is required for /v1/completions");
                    sp.grammar = grammar_from_body(body, nullptr, line);
                    const json& pr = body["prompt"];
                    if (pr.is_string()) prompt = tokenizer->encode(pr.get<std::string>());
                    else {
                        DI_CHECK(pr.is_array() && !pr.empty(), "body.prompt must be a string or a list of token ids");
                        for (const json& t : pr) {
                            DI_CHECK(t.is_number_integer(), "body.prompt token lists must hold integers");
                            prompt.push_back(t.get<int32_t>());
                        }
                    }
                }
                engine.add_request(custom_id, std::move(prompt), std::move(sp));
                pending[custom_id] = {custom_id, url, std::move(parse), line_no};
                return true;
            } catch (const GrammarError& e) {
                error_record(custom_id, line_no, "invalid_grammar", where + ": " + e.message());
            } catch (const Error& e) {
                error_record(custom_id, line_no, "invalid_request", where + ": " + e.message());
            }
        }
        eof = true;
        return false;
    };

    auto write_result = [&](RequestOutput&& r) {
        Pending p = std::move(pending.at(r.request_id));
        pending.erase(r.request_id);
        json choices = json::array();
        int64_t completion_tokens = 0;
        const bool chat = p.url == "/v1/chat/completions";
        for (CompletionOutput& c : r.completions) {
            completion_tokens += static_cast<int64_t>(c.token_ids.size());
            json choice = {{"index", c.index}, {"finish_reason", c.finish_reason}};
            if (chat) {
                json message = assistant_message(c.text, c.finish_reason, p.parse, c.index);
                choice["finish_reason"] = message["__finish_reason"];
                message.erase("__finish_reason");
                choice["message"] = std::move(message);
            } else {
                choice["text"] = c.text;
            }
            choice["logprobs"] = c.logprobs.empty() ? json(nullptr) : logprobs_json(c, tokenizer.get());
            choices.push_back(std::move(choice));
        }
        const std::string rid = "batch_req_" + hex_id(p.custom_id);
        json body = {{"id", (chat ? "chatcmpl-" : "cmpl-") + hex_id(p.custom_id)},
                     {"object", chat ? "chat.completion" : "text_completion"},
                     {"created", static_cast<int64_t>(std::time(nullptr))},
                     {"model", model_name},
                     {"choices", choices},
                     {"usage", {{"prompt_tokens", r.prompt_tokens},
                                {"completion_tokens", completion_tokens},
                                {"total_tokens", r.prompt_tokens + completion_tokens},
                                {"prompt_tokens_details", {{"cached_tokens", r.cached_prompt_tokens}}}}}};
        out.write_line({{"id", rid},
                        {"custom_id", p.custom_id},
                        {"response", {{"status_code", 200}, {"request_id", rid}, {"body", body}}},
                        {"error", nullptr}});
        ++sum.completed;
        ++done_lines;
        sum.prompt_tokens += r.prompt_tokens;
        sum.completion_tokens += completion_tokens;
    };

    auto report = [&](bool final) {
        const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
        const double tps = secs > 0 ? double(sum.completion_tokens) / secs : 0;
        const double rps = secs > 0 ? double(done_lines - sum.skipped_done) / secs : 0;
        const int64_t left = sum.lines - done_lines;
        const double eta = rps > 0 ? double(left) / rps : 0;
        if (tty) {
            const int width = 30;
            const int filled = sum.lines ? static_cast<int>(double(width) * done_lines / sum.lines) : width;
            std::fprintf(stderr, "\r[%-*s] %lld/%lld requests  %.1f tok/s  ETA %.0fs   %s",
                         width, std::string(size_t(std::min(filled, width)), '#').c_str(), (long long)done_lines,
                         (long long)sum.lines, tps, eta, final ? "\n" : "");
        } else {
            DI_LOG_INFO("{}/{} requests done, {} errors, {:.1f} completion tok/s, ETA {:.0f}s", done_lines, sum.lines,
                        sum.errors, tps, eta);
        }
    };

    while (true) {
        while (!eof && engine.num_unfinished() < cap) feed_one();
        if (!engine.has_unfinished()) break;
        for (RequestOutput& r : engine.step()) write_result(std::move(r));
        if (o.on_progress) o.on_progress(sum);
        const double since = std::chrono::duration<double>(Clock::now() - last_report).count();
        if (o.progress != BatchRunOptions::Progress::kNever && since >= (tty ? 0.1 : o.log_interval_seconds)) {
            report(false);
            last_report = Clock::now();
        }
    }
    if (o.progress != BatchRunOptions::Progress::kNever) report(true);
    sum.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    sum.engine = engine.metrics();
    return sum;
}

}  // namespace deepinfer
