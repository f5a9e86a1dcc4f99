// SPDX-License-Identifier: Apache-2.0
// OpenAI Chat Completions body -> ChatRequest, with the validation DeepSeek's API applies (its
// error messages, so a batch output reads like the hosted API's). Rules follow deepseek-recipe
// 0.2.0's Chat Completions conversion: thinking resolution, effort mapping, tool definitions
// (strict-mode normalization), tool_choice, response_format, stop, and the tool-call /
// tool-result pairing.
#include <algorithm>
#include <set>

#include "deepinfer/chat.h"
#include "deepinfer/check.h"
#include "tokenizer/chat_json.h"

namespace deepinfer {

namespace {

using Role = ChatMessage::Role;
constexpr size_t kMaxStopSequences = 16;

std::string type_name(const OrderedJson& v) {
    if (v.is_null()) return "null";
    if (v.is_string()) return "string";
    if (v.is_boolean()) return "boolean";
    if (v.is_number_integer() || v.is_number_unsigned()) return "integer";
    if (v.is_number()) return "number";
    if (v.is_array()) return "sequence";
    return "map";
}

// A field that is absent or null reads as absent, as serde's Option does.
const OrderedJson* field(const OrderedJson& obj, const char* key) {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
}

std::string get_string(const OrderedJson& obj, const char* key, const std::string& where) {
    const OrderedJson* v = field(obj, key);
    DI_CHECK(v != nullptr, "invalid request body: missing field `", key, "` in ", where);
    DI_CHECK(v->is_string(), "invalid request body: invalid type: ", type_name(*v),
             ", expected a string (", where, ".", key, ")");
    return v->get<std::string>();
}

// String content, or an array of parts whose texts join with "\n\n". Image parts become the
// reference's "[Unsupported Image]" text (this engine has no vision input).
std::string content_text(const OrderedJson& msg, const std::string& where, bool allow_null) {
    auto it = msg.find("content");
    if (it == msg.end() || it->is_null()) {
        DI_CHECK(allow_null, "invalid request body: content should be a string or a list (", where, ")");
        return {};
    }
    if (it->is_string()) return it->get<std::string>();
    DI_CHECK(it->is_array(), "invalid request body: content should be a string or a list (", where, ")");
    std::string out;
    bool first = true;
    for (const auto& part : *it) {
        DI_CHECK(part.is_object(), "invalid request body: content parts must be objects (", where, ")");
        const std::string type = get_string(part, "type", where + ".content[]");
        std::string text;
        if (type == "text") {
            text = get_string(part, "text", where + ".content[]");
        } else if (type == "image_url") {
            text = "[Unsupported Image]";
        } else {
            DI_THROW("invalid request body: unknown content part type `", type, "` (", where, ")");
        }
        if (!first) out += "\n\n";
        out += text;
        first = false;
    }
    return out;
}

Role parse_role(const std::string& role, const std::string& where) {
    if (role == "system") return Role::kSystem;
    if (role == "user" || role == "developer") return Role::kUser;
    if (role == "assistant") return Role::kAssistant;
    if (role == "tool") return Role::kTool;
    if (role == "latest_reminder") return Role::kLatestReminder;
    DI_THROW("invalid request body: unknown role `", role, "` (", where,
             "); expected system, developer, user, assistant, tool or latest_reminder");
}

ChatMessage parse_message(const OrderedJson& m, size_t index) {
    const std::string where = "messages[" + std::to_string(index) + "]";
    DI_CHECK(m.is_object(), "invalid request body: ", where, " is not an object");
    ChatMessage msg;
    msg.role = parse_role(get_string(m, "role", where), where);
    switch (msg.role) {
        case Role::kAssistant: {
            const bool has_content = field(m, "content") != nullptr;
            msg.content = content_text(m, where, /*allow_null=*/true);
            if (const OrderedJson* r = field(m, "reasoning_content")) {
                DI_CHECK(r->is_string(), "invalid request body: reasoning_content must be a string (", where, ")");
                msg.reasoning_content = r->get<std::string>();
            }
            if (const OrderedJson* calls = field(m, "tool_calls")) {
                DI_CHECK(calls->is_array(), "invalid request body: tool_calls must be an array (", where, ")");
                DI_CHECK(!calls->empty(), "Invalid '", where,
                         ".tool_calls': empty array. Expected an array with minimum length 1, but got "
                         "an empty array instead.");
                for (const auto& c : *calls) {
                    DI_CHECK(c.is_object(), "invalid request body: tool call is not an object (", where, ")");
                    ChatToolCall call;
                    call.id = get_string(c, "id", where + ".tool_calls[]");
                    if (const OrderedJson* t = field(c, "type"))
                        DI_CHECK(*t == "function", "invalid request body: unknown tool call type (", where, ")");
                    const OrderedJson* fn = field(c, "function");
                    DI_CHECK(fn != nullptr && fn->is_object(), "invalid request body: missing field `function` (",
                             where, ")");
                    call.name = get_string(*fn, "name", where + ".tool_calls[].function");
                    call.arguments = get_string(*fn, "arguments", where + ".tool_calls[].function");
                    msg.tool_calls.push_back(std::move(call));
                }
            }
            DI_CHECK(has_content || !msg.tool_calls.empty(),
                     "Invalid assistant message: content or tool_calls must be set");
            if (const OrderedJson* p = field(m, "prefix")) {
                DI_CHECK(p->is_boolean(), "invalid request body: prefix must be a boolean (", where, ")");
                msg.prefix = p->get<bool>();
            }
            break;
        }
        case Role::kTool:
            msg.content = content_text(m, where, false);
            msg.tool_call_id = get_string(m, "tool_call_id", where);
            break;
        default:
            msg.content = content_text(m, where, false);
            break;
    }
    return msg;
}

// Every assistant tool_calls must be answered, right after it, by exactly one tool message per
// call id; a tool message must answer such a call.
void check_tool_pairing(const std::vector<ChatMessage>& messages) {
    std::set<std::string> pending;
    for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == Role::kTool) {
            DI_CHECK(pending.erase(m.tool_call_id) == 1,
                     "Messages with role 'tool' must be a response to a preceding message with 'tool_calls'");
            continue;
        }
        DI_CHECK(pending.empty(),
                 "An assistant message with 'tool_calls' must be followed by tool messages responding to "
                 "each 'tool_call_id'. (insufficient tool messages following tool_calls message)");
        for (const ChatToolCall& c : m.tool_calls)
            DI_CHECK(pending.insert(c.id).second, "Duplicate value for 'tool_call_id' of ", c.id,
                     " in message[", i, "]");
    }
    DI_CHECK(pending.empty(),
             "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
             "'tool_call_id'. (insufficient tool messages following tool_calls message)");
}

ChatTool parse_tool(const OrderedJson& t, size_t index, bool* strict_out) {
    const std::string where = "tools[" + std::to_string(index) + "]";
    DI_CHECK(t.is_object(), "invalid request body: ", where, " is not an object");
    const std::string type = get_string(t, "type", where);
    DI_CHECK(type == "function", "invalid request body: unknown variant `", type, "`, expected `function`");
    const OrderedJson* fn = field(t, "function");
    DI_CHECK(fn != nullptr && fn->is_object(), "invalid request body: missing field `function` (", where, ")");
    ChatTool tool;
    tool.name = get_string(*fn, "name", where + ".function");
    DI_CHECK(!tool.name.empty(), "Invalid '", where,
             ".function.name': empty string. Expected a string with minimum length 1, but got an empty "
             "string instead.");
    if (field(*fn, "description")) tool.description = get_string(*fn, "description", where + ".function");
    bool strict = false;
    if (const OrderedJson* s = field(*fn, "strict")) {
        DI_CHECK(s->is_boolean(), "invalid request body: strict must be a boolean (", where, ")");
        strict = s->get<bool>();
    }
    OrderedJson params = OrderedJson::object();
    if (const OrderedJson* p = field(*fn, "parameters")) {
        params = *p;
        if (!strict) {
            const OrderedJson type_v = params.is_object() && params.contains("type") ? params["type"] : OrderedJson();
            DI_CHECK(type_v == "object", "Invalid schema for function '", tool.name,
                     "': schema must be a JSON Schema of 'type: \"object\"', got 'type: ",
                     type_v.dump(), "'.");
        }
    } else if (strict) {
        params = OrderedJson{{"type", "object"}};
    }
    if (strict) params = normalize_strict_schema(params);
    tool.parameters_json = params.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
    *strict_out = strict;
    tool.parameters_json = params.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
    return tool;
}

bool contains_json_word(const std::vector<ChatMessage>& messages) {
    for (const ChatMessage& m : messages) {
        std::string lower = m.content;
        for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        if (lower.find("json") != std::string::npos) return true;
    }
    return false;
}

}  // namespace

ChatFamily parse_chat_family(std::string_view name) {
    if (name == "v4") return ChatFamily::kV4;
    if (name == "v41" || name == "v4.1") return ChatFamily::kV41;
    DI_THROW("unknown chat family \"", name, "\" (expected v4 or v41)");
}

const char* chat_family_name(ChatFamily family) { return family == ChatFamily::kV4 ? "v4" : "v41"; }

ChatRequest parse_chat_request(std::string_view body_json, const ChatOptions& options) {
    OrderedJson body;
    try {
        body = OrderedJson::parse(body_json);
    } catch (const OrderedJson::exception& e) {
        DI_THROW("invalid request body: not valid JSON (", e.what(), ")");
    }
    DI_CHECK(body.is_object(), "invalid request body: not a JSON object");
    ChatRequest req;

    // Messages.
    const OrderedJson* messages = field(body, "messages");
    DI_CHECK(messages != nullptr, "invalid request body: missing field `messages`");
    DI_CHECK(messages->is_array(), "invalid request body: messages must be an array");
    DI_CHECK(!messages->empty(), "Empty input messages");
    for (size_t i = 0; i < messages->size(); ++i) req.messages.push_back(parse_message((*messages)[i], i));
    for (size_t i = 0; i < req.messages.size(); ++i)
        DI_CHECK(!req.messages[i].prefix ||
                     (i + 1 == req.messages.size() && req.messages[i].role == Role::kAssistant),
                 "Invalid completion message: prefix set true with message which is not final message or "
                 "message role is not assistant");
    check_tool_pairing(req.messages);

    // Thinking and effort: `thinking` wins; otherwise effort "none" switches thinking off.
    std::string effort = "high";
    bool effort_given = false;
    if (const OrderedJson* e = field(body, "reasoning_effort")) {
        DI_CHECK(e->is_string(), "invalid request body: invalid type: ", type_name(*e),
                 ", expected string or map (reasoning_effort)");
        effort = e->get<std::string>();
        effort_given = true;
        static const std::set<std::string> kKnown = {"none", "minimal", "low",  "medium",
                                                     "high", "xhigh",   "ultra", "max"};
        DI_CHECK(kKnown.count(effort), "invalid request body: unknown variant `", effort,
                 "`, expected one of `none`, `minimal`, `low`, `medium`, `high`, `xhigh`, `ultra`, `max`");
    }
    req.thinking = options.default_thinking;
    if (const OrderedJson* t = field(body, "thinking")) {
        DI_CHECK(t->is_object(), "invalid request body: thinking must be an object");
        const std::string type = get_string(*t, "type", "thinking");
        DI_CHECK(type == "enabled" || type == "disabled" || type == "adaptive",
                 "invalid request body: unknown variant `", type,
                 "`, expected one of `adaptive`, `enabled`, `disabled`");
        req.thinking = type != "disabled";
    } else if (effort_given && effort == "none") {
        req.thinking = false;
    } else if (effort_given) {
        req.thinking = true;
    }
    if (effort == "minimal" || effort == "low") req.effort = ReasoningEffort::kLow;
    else if (effort == "xhigh") req.effort = ReasoningEffort::kXHigh;
    else if (effort == "max" || effort == "ultra") req.effort = ReasoningEffort::kMax;
    else req.effort = ReasoningEffort::kHigh;  // medium, high, none (with thinking forced on)

    // tool_choice, then tools (tool_choice "none" drops the tools unread, as the reference does).
    if (const OrderedJson* c = field(body, "tool_choice")) {
        if (c->is_string()) {
            const std::string s = c->get<std::string>();
            if (s == "none") req.tool_choice = ToolChoice::kNone;
            else if (s == "auto") req.tool_choice = ToolChoice::kAuto;
            else if (s == "required") req.tool_choice = ToolChoice::kRequired;
            else DI_THROW("invalid request body: expected one of `none`, `auto`, `required` or a tool");
        } else {
            DI_CHECK(c->is_object() && field(*c, "function") != nullptr,
                     "invalid request body: expected one of `none`, `auto`, `required` or a tool");
            req.tool_choice = ToolChoice::kNamed;
            req.tool_choice_name = get_string(*field(*c, "function"), "name", "tool_choice.function");
        }
    }
    const OrderedJson* tools = field(body, "tools");
    std::vector<bool> strict_flags;
    if (tools != nullptr && req.tool_choice != ToolChoice::kNone) {
        DI_CHECK(tools->is_array(), "invalid request body: tools must be an array");
        std::set<std::string> names;
        for (size_t i = 0; i < tools->size(); ++i) {
            bool strict = false;
            req.tools.push_back(parse_tool((*tools)[i], i, &strict));
            strict_flags.push_back(strict);
            DI_CHECK(names.insert(req.tools.back().name).second, "Tool names must be unique.");
        }
    }
    if (!req.tools.empty()) {
        if (req.tool_choice == ToolChoice::kNamed) {
            std::vector<ChatTool> chosen;
            std::vector<bool> chosen_strict;
            for (size_t i = 0; i < req.tools.size(); ++i) {
                if (req.tools[i].name != req.tool_choice_name) continue;
                chosen.push_back(req.tools[i]);
                chosen_strict.push_back(strict_flags[i]);
            }
            DI_CHECK(!chosen.empty(), "Invalid value for 'tool_call': no function named '", req.tool_choice_name,
                     "' was specified in the 'tools' parameter.");
            req.tools = std::move(chosen);
            strict_flags = std::move(chosen_strict);
        }
        const auto num_strict = static_cast<size_t>(std::count(strict_flags.begin(), strict_flags.end(), true));
        DI_CHECK(num_strict == 0 || num_strict == req.tools.size(),
                 "Cannot use strict tool with non-strict tool in the same request");
        DI_CHECK(num_strict == 0 || field(body, "response_format") == nullptr,
                 "response_format should not be used with tools");
        DI_CHECK(!(req.thinking && (req.tool_choice == ToolChoice::kRequired ||
                                     req.tool_choice == ToolChoice::kNamed)),
                 "Thinking mode does not support this tool_choice");
    }

    // response_format.
    if (const OrderedJson* rf = field(body, "response_format")) {
        DI_CHECK(rf->is_object(), "invalid request body: response_format must be an object");
        const std::string type = get_string(*rf, "type", "response_format");
        if (type == "json_object") {
            req.response_format = ResponseFormat::kJsonObject;
            DI_CHECK(contains_json_word(req.messages),
                     "Prompt must contain the word 'json' in some form to use 'response_format' of type "
                     "'json_object'.");
        } else if (type == "json_schema") {
            req.response_format = ResponseFormat::kJsonSchema;
            const OrderedJson* js = field(*rf, "json_schema");
            DI_CHECK(js != nullptr && js->is_object(), "invalid request body: missing field `json_schema`");
            const OrderedJson* schema = field(*js, "schema");
            DI_CHECK(schema != nullptr, "invalid request body: missing field `schema`");
            req.response_schema_json = schema->dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
        } else {
            DI_CHECK(type == "text", "invalid request body: unknown variant `", type,
                     "`, expected one of `text`, `json_object`, `json_schema`");
        }
    }

    // A continued (prefix) assistant message cannot be combined with tools or JSON mode.
    if (!req.messages.empty() && req.messages.back().prefix) {
        DI_CHECK(tools == nullptr || !tools->is_array() || tools->empty(),
                 "Function call should not be used with prefix");
        DI_CHECK(req.response_format != ResponseFormat::kJsonObject,
                 "response_format json_object should not be used with prefix");
    }

    // Stop sequences.
    if (const OrderedJson* s = field(body, "stop")) {
        std::vector<OrderedJson> items;
        if (s->is_array()) items.assign(s->begin(), s->end());
        else items.push_back(*s);
        DI_CHECK(items.size() <= kMaxStopSequences, "Stop string array too long: ", items.size());
        for (size_t i = 0; i < items.size(); ++i) {
            DI_CHECK(items[i].is_string(), "invalid request body: invalid type: ", type_name(items[i]),
                     ", expected a string (stop)");
            std::string v = items[i].get<std::string>();
            DI_CHECK(!v.empty(), "Invalid 'stop[", i,
                     "]': empty string. Expected a string with minimum length 1, but got an empty string instead.");
            req.stop.push_back(std::move(v));
        }
    }
    return req;
}

}  // namespace deepinfer
