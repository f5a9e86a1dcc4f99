// SPDX-License-Identifier: Apache-2.0
// The DeepSeek-V4 / V4.1 chat format, request side: an OpenAI Chat Completions body -> a validated
// ChatRequest -> the exact prompt (as pieces: template special tokens and plain text) -> token
// ids. The rules are those of DeepSeek's `deepseek-recipe` 0.2.0 (the reference; see
// docs/chat-format notes in tests/data/chat/README.md), checked against it in the tests.
//
// Message content is always encoded as plain text: "<｜User｜>" typed by a user is five ordinary
// tokens, never the control token (what the official API does).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/tokenizer.h"

namespace deepinfer {

enum class ChatFamily { kV4, kV41 };

// "v4" (DeepSeek-V4, V4-Flash, V4-Pro) or "v41" (DeepSeek-V4.1). Throws on anything else.
ChatFamily parse_chat_family(std::string_view name);
const char* chat_family_name(ChatFamily family);

enum class ReasoningEffort { kLow, kHigh, kXHigh, kMax };
enum class ToolChoice { kAuto, kNone, kRequired, kNamed };
enum class ResponseFormat { kText, kJsonObject, kJsonSchema };

struct ChatToolCall {
    std::string id;
    std::string name;
    std::string arguments;  // as the client sent it (normally a JSON object)
};

struct ChatMessage {
    // `developer` messages become user messages (as DeepSeek's Responses conversion does).
    enum class Role { kSystem, kUser, kAssistant, kTool, kLatestReminder };
    Role role = Role::kUser;
    std::string content;  // text parts joined by "\n\n"
    std::optional<std::string> reasoning_content;  // assistant only
    std::vector<ChatToolCall> tool_calls;          // assistant only
    std::string tool_call_id;                      // tool only
    bool prefix = false;  // final assistant message to continue (no end-of-sentence)
};

struct ChatTool {
    std::string name;
    std::string description;
    std::string parameters_json;  // JSON object text, key order as sent (strict: normalized)
};

struct ChatRequest {
    std::vector<ChatMessage> messages;
    std::vector<ChatTool> tools;  // already filtered to the named tool for a named tool_choice
    ToolChoice tool_choice = ToolChoice::kAuto;
    std::string tool_choice_name;
    bool thinking = true;
    ReasoningEffort effort = ReasoningEffort::kHigh;
    ResponseFormat response_format = ResponseFormat::kText;
    std::string response_schema_json;  // json_schema: the schema object's JSON text
    std::vector<std::string> stop;     // non-empty stop strings, at most 16

    // Tools are described in the prompt and parsed in the output.
    bool tools_active() const { return !tools.empty() && tool_choice != ToolChoice::kNone; }
};

struct ChatOptions {
    bool default_thinking = true;  // when the request says nothing about thinking
};

// Parses and validates a Chat Completions request body. Throws deepinfer::Error with an
// OpenAI-style message ("Empty input messages", "Tool names must be unique.", ...) on a request
// DeepSeek's API would answer with 400.
ChatRequest parse_chat_request(std::string_view body_json, const ChatOptions& options = {});

// One piece of a rendered prompt: either exactly one special token's text (encoded as that
// added token) or plain text (encoded without the added vocabulary).
struct PromptPiece {
    std::string text;
    bool special = false;
};

struct ChatPrompt {
    std::vector<PromptPiece> pieces;
    std::string text() const;  // the pieces concatenated: the prompt string
};

ChatPrompt render_chat(const ChatRequest& request, ChatFamily family);

// Ids of a rendered prompt. Throws if the tokenizer lacks one of the special tokens the prompt
// uses (e.g. V4's tokenizer.json has no "<｜System｜>", which V4.1 prompts need).
std::vector<int32_t> encode_chat_prompt(const ChatPrompt& prompt, const Tokenizer& tokenizer);

}  // namespace deepinfer
