// SPDX-License-Identifier: Apache-2.0
// The chat-format commands, for DeepSeek-V4 (v4) and V4.1 (v41):
//   `deepinfer render`: a Chat Completions request body -> {"prompt": ..., "ids": [...]}; with
//     --requests F.jsonl one request per line, one output line each ({"error": ...} if invalid).
//   `deepinfer parse`: generated ids -> the assistant message {content, reasoning_content,
//     tool_calls, finish_reason} as JSON.
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "deepinfer/chat.h"
#include "deepinfer/chat_parser.h"
#include "deepinfer/check.h"
#include "deepinfer/tokenizer.h"
#include "engine/batch_request.h"

#ifndef DI_DEFAULT_TOKENIZER
#define DI_DEFAULT_TOKENIZER ""
#endif

namespace deepinfer::cli {

namespace {

using json = nlohmann::ordered_json;  // keeps "prompt" before "ids"

std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    DI_CHECK(in.good(), "cannot open ", path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

void print_line(const json& j) {
    std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
    s.push_back('\n');
    std::fwrite(s.data(), 1, s.size(), stdout);
}

struct ChatCliOptions {
    std::string family = "v4";
    std::string tokenizer = DI_DEFAULT_TOKENIZER;
    std::string request;
    std::string requests;
    std::string batch;
    bool no_ids = false;
    bool no_thinking_default = false;
};

void add_family_and_tokenizer(CLI::App* sub, ChatCliOptions& o) {
    sub->add_option("--family", o.family, "Model family: v4 (DeepSeek-V4, V4-Flash) or v41 (V4.1)")
        ->check(CLI::IsMember({"v4", "v41"}))
        ->capture_default_str();
    sub->add_option("--tokenizer", o.tokenizer,
                    "tokenizer.json (default: the bundled DeepSeek-V4 one; V4.1 ids need V4.1's file)")
        ->capture_default_str();
}

json render_one(const std::string& body, ChatFamily family, const Tokenizer* tok, const ChatOptions& copts) {
    const ChatRequest req = parse_chat_request(body, copts);
    const ChatPrompt prompt = render_chat(req, family);
    json out = {{"prompt", prompt.text()}};
    if (tok != nullptr) out["ids"] = encode_chat_prompt(prompt, *tok);
    return out;
}

// Each Batch API line exactly as `deepinfer run` prepares it (validation, key order, prompt, ids).
int render_batch(const std::string& path, ChatFamily family, const std::string& tokenizer_path, bool no_ids) {
    const Tokenizer tok = Tokenizer::from_file(tokenizer_path);
    const BatchRequestContext ctx{&tok, family, 256};
    std::ifstream in(path, std::ios::binary);
    DI_CHECK(in.good(), "cannot open ", path);
    std::set<std::string> seen;
    int64_t line_no = 0;
    for (std::string line; std::getline(in, line);) {
        ++line_no;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        const BatchJson j = BatchJson::parse(line, nullptr, false);
        const std::string custom_id = batch_custom_id(j);
        const bool duplicate = !custom_id.empty() && !seen.insert(custom_id).second;
        json out = {{"custom_id", custom_id.empty() ? json(nullptr) : json(custom_id)}};
        try {
            BatchRequest r = prepare_batch_request(j, duplicate, ctx);
            out["prompt"] = r.prompt_text;
            if (!no_ids) out["ids"] = r.prompt;
        } catch (const Error& e) {
            out["line"] = line_no;
            out["error"] = e.message();
        }
        print_line(out);
    }
    return 0;
}

}  // namespace

Command register_render(CLI::App& app) {
    auto o = std::make_shared<ChatCliOptions>();
    CLI::App* sub = app.add_subcommand(
        "render", "Render a Chat Completions request into the exact DeepSeek prompt text and token ids");
    add_family_and_tokenizer(sub, *o);
    auto* single = sub->add_option("--request", o->request, "JSON file with one request body");
    auto* many = sub->add_option("--requests", o->requests, "JSONL file, one request body per line");
    auto* batch = sub->add_option("--batch", o->batch,
                                  "OpenAI Batch API input (JSONL): each line through `deepinfer run`'s request "
                                  "preparation, printed as {custom_id, prompt, ids} or {custom_id, line, error}");
    single->excludes(many);
    batch->excludes(single)->excludes(many);
    sub->add_flag("--no-ids", o->no_ids, "Print only the prompt text");
    sub->add_flag("--default-thinking-off", o->no_thinking_default,
                  "Requests that say nothing about thinking get non-thinking mode (default: thinking)");
    return [sub, o]() -> int {
        if (!sub->parsed()) return -1;
        DI_CHECK(!o->request.empty() || !o->requests.empty() || !o->batch.empty(),
                 "render needs --request FILE, --requests F.jsonl or --batch F.jsonl");
        const ChatFamily family = parse_chat_family(o->family);
        if (!o->batch.empty()) return render_batch(o->batch, family, o->tokenizer, o->no_ids);
        std::unique_ptr<Tokenizer> tok;
        if (!o->no_ids) tok = std::make_unique<Tokenizer>(Tokenizer::from_file(o->tokenizer));
        ChatOptions copts;
        copts.default_thinking = !o->no_thinking_default;
        if (!o->request.empty()) {
            print_line(render_one(read_file(o->request), family, tok.get(), copts));
            return 0;
        }
        std::ifstream in(o->requests, std::ios::binary);
        DI_CHECK(in.good(), "cannot open ", o->requests);
        for (std::string line; std::getline(in, line);) {
            try {
                print_line(render_one(line, family, tok.get(), copts));
            } catch (const Error& e) {
                print_line(json{{"error", e.message()}});
            }
        }
        return 0;
    };
}

namespace {

std::vector<int32_t> parse_id_list(const std::string& text) {
    std::vector<int32_t> ids;
    std::stringstream ss(text);
    for (std::string item; std::getline(ss, item, ',');) {
        if (item.find_first_not_of(" \t") == std::string::npos) continue;
        size_t used = 0;
        long long v = 0;
        try {
            v = std::stoll(item, &used);
        } catch (const std::exception&) {
            used = 0;
        }
        DI_CHECK(used > 0 && item.find_first_not_of(" \t", used) == std::string::npos, "--ids: \"", item,
                 "\" is not an integer");
        ids.push_back(static_cast<int32_t>(v));
    }
    return ids;
}

std::optional<BackendFinish> parse_finish(const std::string& name) {
    if (name.empty()) return std::nullopt;
    if (name == "stop") return BackendFinish::kStop;
    if (name == "length") return BackendFinish::kLength;
    DI_CHECK(name == "content_filter", "unknown finish reason \"", name, "\" (stop, length, content_filter)");
    return BackendFinish::kContentFilter;
}

}  // namespace

Command register_parse(CLI::App& app) {
    struct ParseCliOptions : ChatCliOptions {
        std::string ids;
        std::string inputs;
        std::string thinking = "on";
        std::string finish;
        std::string response_id = "deepinfer";
        bool no_tools = false;
    };
    auto o = std::make_shared<ParseCliOptions>();
    CLI::App* sub = app.add_subcommand(
        "parse", "Parse generated ids into the assistant message (content, reasoning_content, tool_calls, "
                 "finish_reason); the end-of-sentence id ends the output");
    add_family_and_tokenizer(sub, *o);
    auto* ids_opt = sub->add_option("--ids", o->ids, "Generated token ids, comma-separated");
    auto* inputs_opt = sub->add_option("--inputs", o->inputs,
                                       "JSONL, one {\"ids\": [...], \"request\": {...}, \"finish\": ...} per line");
    ids_opt->excludes(inputs_opt);
    sub->add_option("--request", o->request,
                    "The request the ids answer (sets thinking, tools, tool_choice, response_format, stop)");
    sub->add_option("--thinking", o->thinking, "Without a request: did the prompt end with <think>?")
        ->check(CLI::IsMember({"on", "off"}))
        ->capture_default_str();
    sub->add_flag("--no-tools", o->no_tools, "Without a request: do not parse DSML tool calls");
    sub->add_option("--finish", o->finish,
                    "Why generation ended: stop, length or content_filter (default: stop if the "
                    "end-of-sentence id is present, else length)")
        ->check(CLI::IsMember({"stop", "length", "content_filter"}));
    sub->add_option("--response-id", o->response_id, "Response id the tool-call ids derive from")
        ->capture_default_str();
    return [sub, o]() -> int {
        if (!sub->parsed()) return -1;
        DI_CHECK(!o->ids.empty() || !o->inputs.empty(), "parse needs --ids 1,2,3 or --inputs F.jsonl");
        parse_chat_family(o->family);  // validates; both DSML spellings are parsed either way
        const Tokenizer tok = Tokenizer::from_file(o->tokenizer);
        ChatParseOptions defaults;
        defaults.start = o->thinking == "on" ? OutputStart::kReasoning : OutputStart::kContent;
        defaults.parse_tool_calls = !o->no_tools;
        defaults.response_id = o->response_id;
        auto options_for = [&](const std::string& request_body) {
            if (request_body.empty()) return defaults;
            ChatParseOptions p = parse_options_for(parse_chat_request(request_body));
            p.response_id = o->response_id;
            return p;
        };
        auto write = [](const std::string& s) {
            const std::string line = s + "\n";
            std::fwrite(line.data(), 1, line.size(), stdout);
        };
        if (!o->ids.empty()) {
            const auto popts = options_for(o->request.empty() ? std::string() : read_file(o->request));
            write(parse_chat_output_ids(parse_id_list(o->ids), tok, popts, parse_finish(o->finish)).to_json());
            return 0;
        }
        std::ifstream in(o->inputs, std::ios::binary);
        DI_CHECK(in.good(), "cannot open ", o->inputs);
        size_t line_no = 0;
        for (std::string line; std::getline(in, line);) {
            ++line_no;
            try {
                const nlohmann::json j = nlohmann::json::parse(line);
                DI_CHECK(j.is_object() && j.contains("ids") && j["ids"].is_array(), "expected {\"ids\": [...]}");
                const std::vector<int32_t> ids = j["ids"].get<std::vector<int32_t>>();
                const std::string body = j.contains("request") ? j["request"].dump() : std::string();
                const std::string finish = j.contains("finish") ? j["finish"].get<std::string>() : o->finish;
                write(parse_chat_output_ids(ids, tok, options_for(body), parse_finish(finish)).to_json());
            } catch (const std::exception& e) {
                const Error* err = dynamic_cast<const Error*>(&e);
                write(json{{"error", o->inputs + ":" + std::to_string(line_no) + ": " +
                                         (err != nullptr ? err->message() : std::string(e.what()))}}
                          .dump(-1, ' ', false, json::error_handler_t::replace));
            }
        }
        return 0;
    };
}

}  // namespace deepinfer::cli
