// SPDX-License-Identifier: Apache-2.0
// One OpenAI Batch API input line -> a validated engine request (prompt ids, sampling parameters,
// the chat parser's options). Shared by `deepinfer run` (single process and MPI replicas) and
// `deepinfer render --batch`, so what is rendered is exactly what runs. The line is parsed with its
// key order kept (nlohmann::ordered_json): tool parameter schemas and JSON schemas render in the
// client's order, as DeepSeek's recipe does.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "deepinfer/chat.h"
#include "deepinfer/chat_parser.h"
#include "deepinfer/engine.h"
#include "deepinfer/tokenizer.h"

namespace deepinfer {

using BatchJson = nlohmann::ordered_json;

struct BatchRequest {
    std::string custom_id;
    std::string url;                // /v1/chat/completions | /v1/completions
    std::vector<int32_t> prompt;    // token ids
    std::string prompt_text;        // chat: the rendered prompt; completions: the prompt string (empty for ids)
    SamplingParams sampling;
    ChatParseOptions parse;         // chat only
};

struct BatchRequestContext {
    const Tokenizer* tokenizer = nullptr;
    ChatFamily family = ChatFamily::kV4;
    int64_t default_max_tokens = 256;
};

// The 16-hex-digit FNV-1a hash of a custom_id: the stable ids of its output records.
std::string batch_hex_id(const std::string& s);

// The custom_id of a parsed line ("" when the line is not an object with a string custom_id).
std::string batch_custom_id(const BatchJson& line);

// Validates `line` (already parsed; discarded when the text was not JSON) and builds the request.
// `duplicate_id`: an earlier line already claimed this custom_id. Throws Error (invalid_request) or
// GrammarError (invalid_grammar) with the message of the line's error record (without the
// file:line prefix). Checks run in a fixed order, so the message names the first problem.
BatchRequest prepare_batch_request(const BatchJson& line, bool duplicate_id, const BatchRequestContext& ctx);

}  // namespace deepinfer
