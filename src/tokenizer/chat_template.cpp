// SPDX-License-Identifier: Apache-2.0
// ChatRequest -> prompt pieces, for DeepSeek-V4 and V4.1, following deepseek-recipe 0.2.0:
//
//   BOS [V4.1: <｜System｜>] [effort line] [system text] [\n\n tools block] [\n\n response format]
//   then per message: <｜User｜>user/tool-result turn | <｜latest_reminder｜>text |
//   [V4.1] <｜System｜>text | <｜Assistant｜>think-part content [\n\n DSML calls] <｜end▁of▁sentence｜>
//   and the generation prompt <｜Assistant｜><think> or <｜Assistant｜></think>.
//
// Template text is split at the special tokens it spells (so "<think>" in the tools block is the
// token); message content is always plain text.
#include <algorithm>
#include <array>

#include "deepinfer/chat.h"
#include "deepinfer/check.h"
#include "tokenizer/chat_json.h"

namespace deepinfer {

namespace {

using Role = ChatMessage::Role;

constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";
constexpr std::string_view kUser = "<｜User｜>";
constexpr std::string_view kAssistant = "<｜Assistant｜>";
constexpr std::string_view kSystem = "<｜System｜>";
constexpr std::string_view kLatestReminder = "<｜latest_reminder｜>";
constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kDsml = "｜DSML｜";
constexpr std::array<std::string_view, 9> kTemplateSpecials = {
    kBos, kEos, kUser, kAssistant, kSystem, kLatestReminder, kThinkOpen, kThinkClose, kDsml};

constexpr std::string_view kEffortHighV4 =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve "
    "the root cause, rigorously stress-testing your logic against all potential paths, edge cases, and "
    "adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, "
    "considered alternative, and rejected hypothesis to ensure absolutely no assumption is left "
    "unchecked.\n\n";
constexpr std::string_view kEffortMaxV4 =
    "Reasoning Effort: Beyond maximum \u2014 exhaustive, relentless, and uncompromising.\n"
    "You MUST reason with the utmost depth and rigor, leaving absolutely nothing to chance: "
    "exhaustively decompose the problem into its most fundamental components, trace every causal "
    "chain to its root, and resolve the underlying cause rather than any surface symptom.\n"
    "Do not stop reasoning until you have independently verified the solution from multiple angles "
    "and are certain that no assumption remains unchecked and no error remains undiscovered.\n\n";

// The V4 spelling; V4.1 replaces "tool_calls" / "invoke" / "parameter" tags (see dsml_tags()).
constexpr std::string_view kToolsHeaderV4 =
    "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke "
    "tools by writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n"
    "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"$TOOL_NAME\">\n"
    "<｜DSML｜parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n"
    "...\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"$TOOL_NAME2\">\n...\n</｜DSML｜invoke>\n"
    "</｜DSML｜tool_calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types "
    "(numbers, booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning "
    "inside <think>...</think> BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";
constexpr std::string_view kToolsFooter =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool "
    "calls.\n";
constexpr std::string_view kJsonObjectV4 =
    "\n\nYou are a helpful assistant designed to output JSON.\n## Response Format:\n\nReply with JSON "
    "object ONLY.";
constexpr std::string_view kJsonSchemaHeader =
    "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

struct DsmlTags {
    std::string calls, invoke, parameter;  // "tool_calls" | " calls", "invoke" | " invoke", ...
};

const DsmlTags& dsml_tags(ChatFamily family) {
    static const DsmlTags v4{"tool_calls", "invoke", "parameter"};
    static const DsmlTags v41{" calls", " invoke", " parameter"};
    return family == ChatFamily::kV4 ? v4 : v41;
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
    for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size()))
        s.replace(pos, from.size(), to);
    return s;
}

std::string tools_header(ChatFamily family) {
    std::string h(kToolsHeaderV4);
    if (family == ChatFamily::kV41) {
        h = replace_all(h, "｜tool_calls", "｜ calls");
        h = replace_all(h, "｜invoke", "｜ invoke");
        h = replace_all(h, "｜parameter", "｜ parameter");
    }
    return h;
}

std::string effort_prefix(const ChatRequest& req, ChatFamily family) {
    if (!req.thinking) return {};
    if (family == ChatFamily::kV4) {
        switch (req.effort) {
            case ReasoningEffort::kLow: return {};
            case ReasoningEffort::kHigh:
            case ReasoningEffort::kXHigh: return std::string(kEffortHighV4);
            case ReasoningEffort::kMax: return std::string(kEffortMaxV4);
        }
    }
    const int level = req.effort == ReasoningEffort::kLow ? 50 : req.effort == ReasoningEffort::kMax ? 100 : 75;
    return "Reasoning Effort: " + std::to_string(level) +
           " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
}

// Collects pieces; adjacent plain pieces merge so that BPE sees the same text runs as it would
// in the whole prompt string.
class PromptBuilder {
public:
    void special(std::string_view token) { pieces_.push_back({std::string(token), true}); }
    void plain(std::string_view text) {
        if (text.empty()) return;
        if (!pieces_.empty() && !pieces_.back().special)
            pieces_.back().text += text;
        else
            pieces_.push_back({std::string(text), false});
    }
    // Fixed template text: the special tokens it spells become special pieces.
    void templ(std::string_view text) {
        size_t pos = 0;
        while (pos < text.size()) {
            size_t best = std::string_view::npos;
            std::string_view best_tok;
            for (std::string_view tok : kTemplateSpecials) {
                const size_t at = text.find(tok, pos);
                if (at < best || (at == best && tok.size() > best_tok.size())) {
                    best = at;
                    best_tok = tok;
                }
            }
            if (best == std::string_view::npos) {
                plain(text.substr(pos));
                return;
            }
            plain(text.substr(pos, best - pos));
            special(best_tok);
            pos = best + best_tok.size();
        }
    }
    ChatPrompt finish() { return ChatPrompt{std::move(pieces_)}; }

private:
    std::vector<PromptPiece> pieces_;
};

// The system-text additions: tools block and response-format instructions. The fixed text goes
// through templ() (its special tokens count); schema lines hold user text and stay plain.
void emit_system_additions(PromptBuilder& b, const ChatRequest& req, ChatFamily family) {
    if (req.tools_active()) {
        b.plain("\n\n");
        b.templ(tools_header(family));
        for (size_t i = 0; i < req.tools.size(); ++i) {
            const ChatTool& t = req.tools[i];
            OrderedJson line = OrderedJson::object();
            line["name"] = t.name;
            line["description"] = t.description;
            line["parameters"] = OrderedJson::parse(t.parameters_json);
            if (i > 0) b.plain("\n");
            b.plain(dump_prompt_json(line, family));
        }
        b.templ(kToolsFooter);
    }
    if (req.response_format == ResponseFormat::kJsonObject) {
        if (family == ChatFamily::kV4)
            b.plain(kJsonObjectV4);
        else
            b.plain(std::string(kJsonSchemaHeader) + "{\"type\": \"json_object\"}");
    } else if (req.response_format == ResponseFormat::kJsonSchema) {
        b.plain(std::string(kJsonSchemaHeader) +
                dump_prompt_json(OrderedJson::parse(req.response_schema_json), family));
    }
}

// Tool-call arguments as DSML parameters: a JSON object's members in order, strings raw and
// everything else as JSON; anything that is not a JSON object becomes one string parameter
// named "arguments" holding the raw text.
void emit_tool_calls(PromptBuilder& b, const std::vector<ChatToolCall>& calls, ChatFamily family) {
    const DsmlTags& tags = dsml_tags(family);
    b.templ("<｜DSML｜" + tags.calls + ">\n");
    for (const ChatToolCall& call : calls) {
        b.templ("<｜DSML｜" + tags.invoke + " name=\"");
        b.plain(call.name);
        b.templ("\">\n");
        OrderedJson args;
        try {
            args = OrderedJson::parse(call.arguments);
        } catch (const OrderedJson::exception&) {
            args = OrderedJson();
        }
        auto param = [&](const std::string& key, bool is_string, const std::string& value) {
            b.templ("<｜DSML｜" + tags.parameter + " name=\"");
            b.plain(key);
            b.templ(std::string("\" string=\"") + (is_string ? "true" : "false") + "\">");
            b.plain(value);
            b.templ("</｜DSML｜" + tags.parameter + ">\n");
        };
        if (args.is_object() && args.empty() && family == ChatFamily::kV41) {
            b.plain("\n");  // V4.1 leaves an empty line in a call without parameters
        } else if (args.is_object()) {
            for (const auto& [key, value] : args.items()) {
                if (value.is_string())
                    param(key, true, value.get<std::string>());
                else
                    param(key, false, dump_prompt_json(value, family));
            }
        } else {
            param("arguments", true, call.arguments);
        }
        b.templ("</｜DSML｜" + tags.invoke + ">\n");
    }
    b.templ("</｜DSML｜" + tags.calls + ">");
}

}  // namespace

std::string ChatPrompt::text() const {
    std::string out;
    for (const PromptPiece& p : pieces) out += p.text;
    return out;
}

ChatPrompt render_chat(const ChatRequest& req, ChatFamily family) {
    // Empty system messages vanish; V4 gathers every system message into the head system text.
    std::vector<const ChatMessage*> msgs;
    std::string head_system;
    bool have_head = false;
    for (const ChatMessage& m : req.messages) {
        if (m.role == Role::kSystem && m.content.empty()) continue;
        if (m.role == Role::kSystem && family == ChatFamily::kV4) {
            if (have_head) head_system += "\n\n";
            head_system += m.content;
            have_head = true;
            continue;
        }
        msgs.push_back(&m);
    }
    size_t first = 0;
    if (family == ChatFamily::kV41 && !msgs.empty() && msgs[0]->role == Role::kSystem) {
        head_system = msgs[0]->content;
        first = 1;
    }

    PromptBuilder b;
    b.special(kBos);
    const std::string effort = effort_prefix(req, family);
    const bool has_additions = req.tools_active() || req.response_format != ResponseFormat::kText;
    if (family == ChatFamily::kV41 && !(effort.empty() && head_system.empty() && !has_additions))
        b.special(kSystem);
    b.plain(effort);
    b.plain(head_system);
    emit_system_additions(b, req, family);

    const bool keep_reasoning = req.thinking && req.tools_active();
    const ChatMessage* previous_assistant = nullptr;
    for (size_t i = first; i < msgs.size(); ++i) {
        const ChatMessage& m = *msgs[i];
        switch (m.role) {
            case Role::kUser:
            case Role::kTool: {
                // One user turn: the tool results (in the order of the calls they answer), then
                // the user messages that follow, joined by blank lines.
                size_t j = i;
                std::vector<const ChatMessage*> tools, users;
                while (j < msgs.size() && (msgs[j]->role == Role::kUser || msgs[j]->role == Role::kTool)) {
                    (msgs[j]->role == Role::kTool ? tools : users).push_back(msgs[j]);
                    ++j;
                }
                if (previous_assistant != nullptr && !tools.empty()) {
                    const auto& calls = previous_assistant->tool_calls;
                    auto order = [&](const ChatMessage* t) {
                        for (size_t k = 0; k < calls.size(); ++k)
                            if (calls[k].id == t->tool_call_id) return k;
                        return calls.size();
                    };
                    std::stable_sort(tools.begin(), tools.end(), [&](const ChatMessage* x, const ChatMessage* y) {
                        return order(x) < order(y);
                    });
                }
                // V4.1 joins every part with a blank line. V4 skips empty user messages, except
                // that user text after tool results is always introduced by a blank line.
                std::string text;
                for (const ChatMessage* t : tools) {
                    if (!text.empty()) text += "\n\n";
                    text += "<tool_result>" + t->content + "</tool_result>";
                }
                std::string user_text;
                for (size_t k = 0; k < users.size(); ++k) {
                    const std::string& c = users[k]->content;
                    if (family == ChatFamily::kV4 && c.empty()) continue;
                    if (family == ChatFamily::kV4 ? !user_text.empty() : k > 0) user_text += "\n\n";
                    user_text += c;
                }
                if (!tools.empty() && !users.empty()) text += "\n\n";
                text += user_text;
                b.special(kUser);
                b.plain(text);
                i = j - 1;
                break;
            }
            case Role::kLatestReminder:
                b.special(kLatestReminder);
                b.plain(m.content);
                break;
            case Role::kSystem:  // V4.1, after the head
                b.special(kSystem);
                b.plain(m.content);
                break;
            case Role::kAssistant: {
                b.special(kAssistant);
                if (m.prefix) {
                    if (req.thinking) {
                        b.special(kThinkOpen);
                        b.plain(m.reasoning_content.value_or(""));
                        if (!m.content.empty()) {
                            b.special(kThinkClose);
                            b.plain(m.content);
                        }
                    } else {
                        b.special(kThinkClose);
                        b.plain(m.content);
                    }
                    break;
                }
                if (keep_reasoning) {
                    b.special(kThinkOpen);
                    b.plain(m.reasoning_content.value_or(""));
                }
                b.special(kThinkClose);
                b.plain(m.content);
                if (!m.tool_calls.empty()) {
                    b.plain("\n\n");
                    emit_tool_calls(b, m.tool_calls, family);
                }
                b.special(kEos);
                previous_assistant = &m;
                break;
            }
        }
    }
    const bool continues = !msgs.empty() && msgs.back()->role == Role::kAssistant && msgs.back()->prefix;
    if (!continues) {
        b.special(kAssistant);
        b.special(req.thinking ? kThinkOpen : kThinkClose);
        if (req.tools_active() &&
            (req.tool_choice == ToolChoice::kRequired || req.tool_choice == ToolChoice::kNamed)) {
            b.plain("\n\n");
            b.templ("<｜DSML｜" + dsml_tags(family).calls + ">\n");
        }
    }
    return b.finish();
}

std::vector<int32_t> encode_chat_prompt(const ChatPrompt& prompt, const Tokenizer& tokenizer) {
    std::vector<int32_t> ids;
    for (const PromptPiece& p : prompt.pieces) {
        if (p.special) {
            const auto id = tokenizer.added_token_id(p.text);
            DI_CHECK(id.has_value(), "the tokenizer has no special token ", p.text,
                     " (a V4.1 prompt needs the V4.1 tokenizer.json; pass it with --tokenizer)");
            ids.push_back(*id);
        } else {
            tokenizer.encode_ordinary_append(p.text, ids);
        }
    }
    return ids;
}

}  // namespace deepinfer
