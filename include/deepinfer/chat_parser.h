// SPDX-License-Identifier: Apache-2.0
// The DeepSeek-V4 / V4.1 chat format, response side: generated text (or ids) -> an OpenAI-shaped
// assistant message {content, reasoning_content, tool_calls, finish_reason}. A byte-level state
// machine (deepseek-recipe's design, chat-format.md §3.2) that holds back only what could still be
// the start of a marker, so streaming gives the same message as parsing everything at once,
// whatever the chunking. Both DSML spellings (V4 "tool_calls", V4.1 " calls") are understood.
//
// Malformed output never throws: whatever was recognized is returned, and `errors` says what was
// wrong (unclosed tool-call block, arguments that are not a JSON object, text dropped after the
// block).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/chat.h"
#include "deepinfer/tokenizer.h"

namespace deepinfer {

// Where the output starts, given how the prompt ended.
enum class OutputStart {
    kContent,                // prompt ended with </think> (non-thinking)
    kReasoning,              // prompt ended with <think>
    kReasoningContinuation,  // prefix continuation inside reasoning: keep leading newlines
    kContentContinuation,    // prefix continuation inside the answer: keep leading newlines
};

struct ChatParseOptions {
    OutputStart start = OutputStart::kReasoning;
    bool parse_tool_calls = true;       // tools were offered (and tool_choice != none)
    bool starts_in_tool_calls = false;  // required / named tool_choice: the prompt opened the block
    bool json_output = false;           // response_format json_object
    std::vector<std::string> stop;      // stop sequences (answer text only); empty ones ignored
    std::string response_id = "deepinfer";  // tool-call ids are derived from it

    bool thinking() const { return start == OutputStart::kReasoning || start == OutputStart::kReasoningContinuation; }
};

// The options that go with a request (thinking, tools, tool_choice, json_object, stop, prefix).
ChatParseOptions parse_options_for(const ChatRequest& request);

// What the engine says about why generation ended.
enum class BackendFinish { kStop, kLength, kContentFilter };

struct ParsedToolCall {
    std::string id;         // call_{index:02}_{24 characters derived from the response id}
    std::string name;
    std::string arguments;  // JSON text as the model wrote it (string values escaped)
};

struct ParsedMessage {
    std::string content;
    std::optional<std::string> reasoning_content;  // present in thinking mode
    std::vector<ParsedToolCall> tool_calls;
    std::string finish_reason;        // "stop", "length", "tool_calls", "content_filter"
    std::vector<std::string> errors;  // empty when the output was well-formed
    // {"role": "assistant", "content", ["reasoning_content"], ["tool_calls"], "finish_reason",
    //  ["parse_error"]}
    std::string to_json() const;
};

// One increment of the message, in the order the text arrived.
struct ChatDelta {
    enum class Kind { kReasoning, kContent, kToolCallStart, kToolCallArguments };
    Kind kind;
    int index = 0;     // tool call index
    std::string text;  // reasoning / content / arguments text
    std::string id;    // kToolCallStart
    std::string name;  // kToolCallStart
};

// Incremental parser. Feed text in any pieces (complete UTF-8 characters, as IncrementalDecoder
// produces them); message() after finish() is the same for every way of cutting the text.
// Not thread-safe; one per stream.
class ChatStreamParser {
public:
    explicit ChatStreamParser(ChatParseOptions options);
    ~ChatStreamParser();
    ChatStreamParser(ChatStreamParser&&) noexcept;
    ChatStreamParser& operator=(ChatStreamParser&&) noexcept;

    std::vector<ChatDelta> feed(std::string_view text);
    std::vector<ChatDelta> finish(BackendFinish reason);
    // True once nothing more can change the message (a stop sequence matched, or the tool-call
    // block closed): generation can stop early.
    bool done() const;
    const ParsedMessage& message() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

ParsedMessage parse_chat_output(std::string_view text, const ChatParseOptions& options,
                                BackendFinish reason = BackendFinish::kStop);

// Generated ids -> message. The end-of-sentence token (id of <｜end▁of▁sentence｜>) ends the
// output (backend finish "stop"); without it the output ran out of budget ("length") unless
// `reason` says otherwise. Ids are detokenized incrementally with special tokens kept.
ParsedMessage parse_chat_output_ids(std::span<const int32_t> ids, const Tokenizer& tokenizer,
                                    const ChatParseOptions& options,
                                    std::optional<BackendFinish> reason = std::nullopt);

}  // namespace deepinfer
