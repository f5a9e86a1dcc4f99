// SPDX-License-Identifier: Apache-2.0
// Output parsing. Two layers:
//   * a byte-level state machine: per stage, an ordered list of patterns ("branches"); every byte
//     goes to each branch until one completes; bytes no branch can still use are released with
//     the stage's default action; a completed branch releases what precedes it, acts on the
//     matched bytes and switches stage. Behaviour matches deepseek-recipe's stream parser.
//   * an accumulator that turns (action, bytes) segments into the message and deltas.
// The only chunking-dependent behaviour of the reference (JSON mode turns every released run into
// one space, so a run released in two pieces gave two spaces) is removed: a run gives one space.
#include "deepinfer/chat_parser.h"
#include "tokenizer/chat_json.h"

#include <array>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "deepinfer/check.h"

namespace deepinfer {

namespace {

// ---- Actions and stages ------------------------------------------------------------------------

enum class Action : uint8_t {
    kContent,        // answer text
    kToSpace,        // JSON mode: text around the JSON becomes one space
    kSkip,           // markup
    kSkipInvalid,    // stray </think> in the answer
    kSkipAfterEnd,   // text after the tool-call block or a stop sequence
    kStop,           // a stop sequence
    kLabelContent,   // a raw "{" / "[" that starts JSON output: kept
    kReasoning,      // reasoning text
    kToolCallBegin,  // `invoke name="`
    kToolName,       // bytes of the tool name
    kToolNameEnd,    // the closing quote of the name
    kArgsLabel,      // fixed argument text: {"  ,"  ":  "  }  {}
    kArgsRaw,        // a key or a non-string value, copied verbatim
    kArgsString,     // a string value, JSON-escaped
};

enum class Stage : uint8_t {
    kContent, kJson, kMatchedJson, kToolCalls, kToolName, kToolArgs, kParamName, kParamType,
    kParamValue, kReasoning, kFinished,
};

struct StageState {
    Stage stage = Stage::kContent;
    bool leading = false;       // kContent / kReasoning / kToolArgs
    bool string_value = false;  // kParamValue
};

constexpr std::string_view kDsmlBegin = "<｜DSML｜";
constexpr std::string_view kDsmlEnd = "</｜DSML｜";
constexpr std::string_view kThinkEnd = "</think>";

// ---- Pattern matching --------------------------------------------------------------------------

// A pattern with its KMP failure table, built once per parser.
struct Pattern {
    std::string text;
    std::vector<uint32_t> fail;
    explicit Pattern(std::string_view t) : text(t), fail(t.size(), 0) {
        for (size_t i = 1, k = 0; i < text.size();) {
            if (text[i] == text[k]) {
                fail[i++] = static_cast<uint32_t>(++k);
            } else if (k > 0) {
                k = fail[k - 1];
            } else {
                fail[i++] = 0;
            }
        }
    }
    // Longest prefix of the pattern that is a suffix of (matched prefix of length `len`) + b.
    size_t next(size_t len, unsigned char b) const {
        while (len > 0 && (len >= text.size() || static_cast<unsigned char>(text[len]) != b)) len = fail[len - 1];
        if (len < text.size() && static_cast<unsigned char>(text[len]) == b) ++len;
        return len;
    }
};

struct Branch {
    enum class Kind : uint8_t { kLiteral, kNewlinesThenLiteral, kLeadingNewline };
    Kind kind = Kind::kLiteral;
    const Pattern* pattern = nullptr;
    Action on_match = Action::kSkip;
    StageState next;
    const char* label = nullptr;  // kArgsLabel text
    size_t len = 0;               // matched pattern prefix
    size_t newlines = 0;          // kNewlinesThenLiteral: newlines held before the literal
    bool first_byte = true;       // kLeadingNewline
    bool matched = false;         // kLeadingNewline

    // Feeds one byte; true when the branch completes.
    bool feed(unsigned char b) {
        switch (kind) {
            case Kind::kLiteral:
                len = pattern->next(len, b);
                return len == pattern->text.size();
            case Kind::kNewlinesThenLiteral: {
                if (len == 0 && b == '\n') {
                    ++newlines;
                } else {
                    const size_t n = pattern->next(len, b);
                    if (n <= len) newlines = 0;  // the literal restarted: earlier newlines are free
                    len = n;
                }
                return len == pattern->text.size();
            }
            case Kind::kLeadingNewline:
                if (first_byte) matched = b == '\n';
                first_byte = false;
                return matched;
        }
        return false;
    }
    size_t matching_len() const {
        switch (kind) {
            case Kind::kLiteral: return len;
            case Kind::kNewlinesThenLiteral: return len + newlines;
            case Kind::kLeadingNewline: return matched ? 1 : 0;
        }
        return 0;
    }
};

// The fixed patterns, shared by all parsers.
struct Patterns {
    Pattern dsml_begin{kDsmlBegin}, dsml_end{kDsmlEnd}, think_end{kThinkEnd};
    Pattern json_fence{"```json\n"}, plain_fence{"```\n"}, brace{"{"}, bracket{"["}, json_end{"\n```"};
    Pattern invoke{"invoke name=\""}, calls_end_v4{"</｜DSML｜tool_calls>"}, calls_end_v41{"</｜DSML｜ calls>"};
    Pattern quote{"\""}, parameter{"parameter name=\""}, true_gt{"true\">"}, false_gt{"false\">"};
};

const Patterns& patterns() {
    static const Patterns p;
    return p;
}

// ---- Tool-call ids and JSON escaping -----------------------------------------------------------

std::string tool_call_id(const std::string& response_id, int index) {
    // 24 base-62 characters from a 64-bit FNV-1a hash stream of (response id, index).
    static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : response_id) h = (h ^ c) * 1099511628211ull;
    h = (h ^ static_cast<uint64_t>(index)) * 1099511628211ull;
    char prefix[16];
    std::snprintf(prefix, sizeof(prefix), "call_%02d_", index);
    std::string id = prefix;
    for (int i = 0; i < 24; ++i) {
        h ^= h >> 29;
        h *= 0xBF58476D1CE4E5B9ull;
        h ^= h >> 32;
        id.push_back(kAlphabet[h % 62]);
    }
    return id;
}


}  // namespace

// ---- The parser --------------------------------------------------------------------------------

struct ChatStreamParser::Impl {
    ChatParseOptions options;
    std::vector<Pattern> stop_patterns;
    StageState state;
    std::vector<Branch> branches;
    Action default_action = Action::kContent;
    std::string held;  // bytes not released yet (a possible partial match)

    ParsedMessage message;
    bool finished = false;          // finish() was called
    bool stopped_by_sequence = false;
    bool reached_end = false;       // Finished stage
    bool last_was_space = false;    // previous segment was a kToSpace run
    std::string pending_name;       // the tool name being read
    size_t dropped_after_end = 0;   // non-whitespace bytes dropped after the block / stop
    std::vector<ChatDelta>* deltas = nullptr;

    explicit Impl(ChatParseOptions opts) : options(std::move(opts)) {
        for (const std::string& s : options.stop)
            if (!s.empty()) stop_patterns.emplace_back(s);
        if (options.thinking()) message.reasoning_content = std::string();
        StageState initial;
        if (options.starts_in_tool_calls) {
            initial.stage = Stage::kToolCalls;
        } else if (options.start == OutputStart::kReasoning) {
            initial = {Stage::kReasoning, true, false};
        } else if (options.start == OutputStart::kReasoningContinuation) {
            initial = {Stage::kReasoning, false, false};
        } else if (options.start == OutputStart::kContentContinuation) {
            initial = {Stage::kContent, false, false};
        } else {
            initial = {Stage::kContent, true, false};
        }
        enter(initial);
    }

    void add(Branch::Kind kind, const Pattern* p, Stage next_stage, Action action, bool leading = false,
             bool string_value = false, const char* label = nullptr) {
        Branch b;
        b.kind = kind;
        b.pattern = p;
        b.on_match = action;
        b.next = {next_stage, leading, string_value};
        b.label = label;
        branches.push_back(b);
    }
    void add_stop_branches() {
        for (const Pattern& p : stop_patterns) add(Branch::Kind::kLiteral, &p, Stage::kFinished, Action::kStop);
    }
    void add_tool_call_begin() {
        add(Branch::Kind::kNewlinesThenLiteral, &patterns().dsml_begin, Stage::kToolCalls, Action::kSkip);
    }

    // Sets up the branches and default action of a stage (the reference's table, §3.2).
    void enter(StageState s) {
        using K = Branch::Kind;
        const Patterns& P = patterns();
        state = s;
        branches.clear();
        switch (s.stage) {
            case Stage::kContent:
                if (options.json_output) {
                    add(K::kLiteral, &P.json_fence, Stage::kJson, Action::kSkip);
                    add(K::kLiteral, &P.plain_fence, Stage::kJson, Action::kSkip);
                    add(K::kLiteral, &P.brace, Stage::kJson, Action::kLabelContent);
                    add(K::kLiteral, &P.bracket, Stage::kJson, Action::kLabelContent);
                } else {
                    add_stop_branches();
                }
                if (options.parse_tool_calls) add_tool_call_begin();
                if (s.leading) add(K::kLeadingNewline, nullptr, Stage::kContent, Action::kSkip, true);
                add(K::kLiteral, &P.think_end, Stage::kContent, Action::kSkipInvalid, false);
                default_action = options.json_output ? Action::kToSpace : Action::kContent;
                break;
            case Stage::kJson:
                add_stop_branches();
                add(K::kLiteral, &P.json_end, Stage::kMatchedJson, Action::kSkip);
                default_action = Action::kContent;
                break;
            case Stage::kMatchedJson:
                if (options.parse_tool_calls) add_tool_call_begin();
                default_action = Action::kToSpace;
                break;
            case Stage::kToolCalls:
                add(K::kLiteral, &P.invoke, Stage::kToolName, Action::kToolCallBegin);
                add(K::kLiteral, &P.calls_end_v4, Stage::kFinished, Action::kSkip);
                add(K::kLiteral, &P.calls_end_v41, Stage::kFinished, Action::kSkip);
                default_action = Action::kSkip;
                break;
            case Stage::kToolName:
                add(K::kLiteral, &P.quote, Stage::kToolArgs, Action::kToolNameEnd, true);
                default_action = Action::kToolName;
                break;
            case Stage::kToolArgs:
                add(K::kLiteral, &P.parameter, Stage::kParamName, Action::kArgsLabel, false, false,
                    s.leading ? "{\"" : ", \"");
                add(K::kLiteral, &P.dsml_end, Stage::kToolCalls, Action::kArgsLabel, false, false,
                    s.leading ? "{}" : "}");
                default_action = Action::kSkip;
                break;
            case Stage::kParamName:
                add(K::kLiteral, &P.quote, Stage::kParamType, Action::kArgsLabel, false, false, "\": ");
                default_action = Action::kArgsRaw;
                break;
            case Stage::kParamType:
                add(K::kLiteral, &P.true_gt, Stage::kParamValue, Action::kArgsLabel, false, true, "\"");
                add(K::kLiteral, &P.false_gt, Stage::kParamValue, Action::kSkip, false, false);
                default_action = Action::kSkip;
                break;
            case Stage::kParamValue:
                add(K::kLiteral, &P.dsml_end, Stage::kToolArgs,
                    s.string_value ? Action::kArgsLabel : Action::kSkip, false, false,
                    s.string_value ? "\"" : nullptr);
                default_action = s.string_value ? Action::kArgsString : Action::kArgsRaw;
                break;
            case Stage::kReasoning:
                if (options.parse_tool_calls) add_tool_call_begin();
                if (s.leading) add(K::kLeadingNewline, nullptr, Stage::kReasoning, Action::kSkip, true);
                add(K::kNewlinesThenLiteral, &P.think_end, Stage::kContent, Action::kSkip, true);
                default_action = Action::kReasoning;
                break;
            case Stage::kFinished:
                default_action = Action::kSkipAfterEnd;
                reached_end = true;
                break;
        }
    }

    // ---- Accumulation ----

    ParsedToolCall* current_call() { return message.tool_calls.empty() ? nullptr : &message.tool_calls.back(); }

    void append_args(std::string_view text) {
        ParsedToolCall* call = current_call();
        if (call == nullptr || text.empty()) return;
        call->arguments += text;
        if (!deltas->empty() && deltas->back().kind == ChatDelta::Kind::kToolCallArguments &&
            deltas->back().index == static_cast<int>(message.tool_calls.size()) - 1)
            deltas->back().text += text;
        else
            deltas->push_back({ChatDelta::Kind::kToolCallArguments, static_cast<int>(message.tool_calls.size()) - 1,
                               std::string(text), {}, {}});
    }
    void append_text(ChatDelta::Kind kind, std::string_view text) {
        if (text.empty()) return;
        (kind == ChatDelta::Kind::kReasoning ? *message.reasoning_content : message.content) += text;
        if (!deltas->empty() && deltas->back().kind == kind)
            deltas->back().text += text;
        else
            deltas->push_back({kind, 0, std::string(text), {}, {}});
    }

    void apply(Action action, std::string_view bytes, const char* label) {
        const bool space_run = action == Action::kToSpace;
        switch (action) {
            case Action::kContent: append_text(ChatDelta::Kind::kContent, bytes); break;
            case Action::kToSpace:
                if (!last_was_space) append_text(ChatDelta::Kind::kContent, " ");
                break;
            case Action::kLabelContent: append_text(ChatDelta::Kind::kContent, bytes); break;
            case Action::kReasoning:
                if (message.reasoning_content) append_text(ChatDelta::Kind::kReasoning, bytes);
                break;
            case Action::kSkip:
            case Action::kSkipInvalid: break;
            case Action::kSkipAfterEnd:
                for (unsigned char c : bytes)
                    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') ++dropped_after_end;
                break;
            case Action::kStop: stopped_by_sequence = true; break;
            case Action::kToolCallBegin: pending_name.clear(); break;
            case Action::kToolName: pending_name += bytes; break;
            case Action::kToolNameEnd: {
                // A call exists once its name is complete (an output cut inside the name has none).
                ParsedToolCall call;
                call.id = tool_call_id(options.response_id, static_cast<int>(message.tool_calls.size()));
                call.name = std::move(pending_name);
                pending_name.clear();
                deltas->push_back({ChatDelta::Kind::kToolCallStart, static_cast<int>(message.tool_calls.size()), {},
                                   call.id, call.name});
                message.tool_calls.push_back(std::move(call));
                break;
            }
            case Action::kArgsLabel: append_args(label == nullptr ? "" : label); break;
            case Action::kArgsRaw: append_args(bytes); break;
            case Action::kArgsString: {
                std::string escaped;
                append_json_escaped(bytes, escaped);
                append_args(escaped);
                break;
            }
        }
        last_was_space = space_run;
    }

    // Releases the first `n` held bytes with `action`.
    void release(Action action, size_t n, const char* label = nullptr) {
        apply(action, std::string_view(held).substr(0, n), label);
        held.erase(0, n);
    }

    void feed(std::string_view text) {
        for (unsigned char b : text) {
            held.push_back(static_cast<char>(b));
            for (Branch& br : branches) {
                if (!br.feed(b)) continue;
                const size_t m = br.matching_len();
                const Action action = br.on_match;
                const char* label = br.label;
                const StageState next = br.next;
                if (m < held.size()) release(default_action, held.size() - m);
                if (m > 0) release(action, m, label);
                enter(next);
                break;
            }
        }
        size_t keep = 0;
        for (const Branch& br : branches) keep = std::max(keep, br.matching_len());
        if (keep < held.size()) release(default_action, held.size() - keep);
    }
};

ChatStreamParser::ChatStreamParser(ChatParseOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}
ChatStreamParser::~ChatStreamParser() = default;
ChatStreamParser::ChatStreamParser(ChatStreamParser&&) noexcept = default;
ChatStreamParser& ChatStreamParser::operator=(ChatStreamParser&&) noexcept = default;

std::vector<ChatDelta> ChatStreamParser::feed(std::string_view text) {
    std::vector<ChatDelta> deltas;
    DI_CHECK(!impl_->finished, "ChatStreamParser::feed after finish");
    impl_->deltas = &deltas;
    impl_->feed(text);
    impl_->deltas = nullptr;
    return deltas;
}

std::vector<ChatDelta> ChatStreamParser::finish(BackendFinish reason) {
    std::vector<ChatDelta> deltas;
    Impl& s = *impl_;
    if (s.finished) return deltas;
    s.deltas = &deltas;
    if (!s.held.empty()) s.release(s.default_action, s.held.size());
    s.deltas = nullptr;
    s.finished = true;

    ParsedMessage& m = s.message;
    if (s.stopped_by_sequence) m.finish_reason = "stop";
    else if (reason == BackendFinish::kLength) m.finish_reason = "length";
    else if (reason == BackendFinish::kContentFilter) m.finish_reason = "content_filter";
    else m.finish_reason = m.tool_calls.empty() ? "stop" : "tool_calls";

    // Report what was malformed; the message keeps whatever was recognized.
    const bool in_block = s.state.stage == Stage::kToolCalls || s.state.stage == Stage::kToolName ||
                          s.state.stage == Stage::kToolArgs || s.state.stage == Stage::kParamName ||
                          s.state.stage == Stage::kParamType || s.state.stage == Stage::kParamValue;
    if (in_block)
        m.errors.push_back(reason == BackendFinish::kLength
                               ? "the output ended inside the tool-call block (length limit)"
                               : "the tool-call block is not closed");
    for (size_t i = 0; i < m.tool_calls.size(); ++i) {
        const ParsedToolCall& c = m.tool_calls[i];
        if (c.name.empty()) m.errors.push_back("tool call " + std::to_string(i) + " has no name");
        bool ok = false;
        try {
            ok = nlohmann::json::parse(c.arguments).is_object();
        } catch (const nlohmann::json::exception&) {
            ok = false;
        }
        if (!ok)
            m.errors.push_back("tool call " + std::to_string(i) + " (" + c.name +
                               "): arguments are not a JSON object: " + c.arguments.substr(0, 200));
    }
    if (s.dropped_after_end > 0 && !s.stopped_by_sequence)
        m.errors.push_back("text after the tool-call block was dropped (" + std::to_string(s.dropped_after_end) +
                           " non-space bytes)");
    return deltas;
}

bool ChatStreamParser::done() const { return impl_->reached_end; }

const ParsedMessage& ChatStreamParser::message() const { return impl_->message; }

// ---- One-shot entry points ---------------------------------------------------------------------

ParsedMessage parse_chat_output(std::string_view text, const ChatParseOptions& options, BackendFinish reason) {
    ChatStreamParser p(options);
    p.feed(text);
    p.finish(reason);
    return p.message();
}

ParsedMessage parse_chat_output_ids(std::span<const int32_t> ids, const Tokenizer& tokenizer,
                                    const ChatParseOptions& options, std::optional<BackendFinish> reason) {
    const std::optional<int32_t> eos = tokenizer.added_token_id("<｜end▁of▁sentence｜>");
    ChatStreamParser p(options);
    IncrementalDecoder dec(tokenizer);
    bool saw_eos = false;
    for (int32_t id : ids) {
        if (eos && id == *eos) {
            saw_eos = true;
            break;
        }
        p.feed(dec.push(id));
    }
    p.feed(dec.finish());
    p.finish(reason.value_or(saw_eos ? BackendFinish::kStop : BackendFinish::kLength));
    return p.message();
}

ChatParseOptions parse_options_for(const ChatRequest& req) {
    ChatParseOptions o;
    o.parse_tool_calls = req.tools_active();
    o.starts_in_tool_calls =
        req.tools_active() && (req.tool_choice == ToolChoice::kRequired || req.tool_choice == ToolChoice::kNamed);
    o.json_output = req.response_format == ResponseFormat::kJsonObject;
    o.stop = req.stop;
    const ChatMessage* last = req.messages.empty() ? nullptr : &req.messages.back();
    const bool prefix = last != nullptr && last->role == ChatMessage::Role::kAssistant && last->prefix;
    if (!req.thinking) {
        o.start = OutputStart::kContent;
    } else if (prefix && !last->content.empty()) {
        o.start = OutputStart::kContentContinuation;
    } else if (prefix && last->reasoning_content && !last->reasoning_content->empty()) {
        o.start = OutputStart::kReasoningContinuation;
    } else {
        o.start = OutputStart::kReasoning;
    }
    return o;
}

std::string ParsedMessage::to_json() const {
    nlohmann::ordered_json j;
    j["role"] = "assistant";
    j["content"] = content;
    if (reasoning_content) j["reasoning_content"] = *reasoning_content;
    if (!tool_calls.empty()) {
        nlohmann::ordered_json calls = nlohmann::ordered_json::array();
        for (const ParsedToolCall& c : tool_calls)
            calls.push_back({{"id", c.id},
                             {"type", "function"},
                             {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
        j["tool_calls"] = calls;
    }
    j["finish_reason"] = finish_reason;
    if (!errors.empty()) j["parse_error"] = errors;
    return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace deepinfer
