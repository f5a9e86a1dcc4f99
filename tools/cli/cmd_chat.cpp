// SPDX-License-Identifier: Apache-2.0
// `deepinfer render`: a Chat Completions request body -> {"prompt": ..., "ids": [...]} for
// DeepSeek-V4 (v4) or V4.1 (v41). With --requests F.jsonl it renders one request per line and
// writes one line each ({"error": ...} for an invalid request), in order.
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "deepinfer/chat.h"
#include "deepinfer/check.h"
#include "deepinfer/tokenizer.h"

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

}  // namespace

Command register_render(CLI::App& app) {
    auto o = std::make_shared<ChatCliOptions>();
    CLI::App* sub = app.add_subcommand(
        "render", "Render a Chat Completions request into the exact DeepSeek prompt text and token ids");
    add_family_and_tokenizer(sub, *o);
    auto* single = sub->add_option("--request", o->request, "JSON file with one request body");
    auto* many = sub->add_option("--requests", o->requests, "JSONL file, one request body per line");
    single->excludes(many);
    sub->add_flag("--no-ids", o->no_ids, "Print only the prompt text");
    sub->add_flag("--default-thinking-off", o->no_thinking_default,
                  "Requests that say nothing about thinking get non-thinking mode (default: thinking)");
    return [sub, o]() -> int {
        if (!sub->parsed()) return -1;
        DI_CHECK(!o->request.empty() || !o->requests.empty(), "render needs --request FILE or --requests F.jsonl");
        const ChatFamily family = parse_chat_family(o->family);
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

}  // namespace deepinfer::cli
