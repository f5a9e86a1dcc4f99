// SPDX-License-Identifier: Apache-2.0
// The chat recipe (OpenAI request body -> validated request -> DeepSeek prompt -> ids) and the
// output parser (generated text -> content, reasoning_content, tool_calls, finish_reason).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <string>
#include <string_view>

#include "bindings.h"
#include "deepinfer/chat.h"
#include "deepinfer/chat_parser.h"

namespace nb = nanobind;

namespace deepinfer::python {

void register_chat(nb::module_& m) {
    nb::enum_<ChatFamily>(m, "ChatFamily").value("v4", ChatFamily::kV4).value("v41", ChatFamily::kV41);
    m.def("parse_chat_family", &parse_chat_family, nb::arg("name"), "'v4' | 'v41'");

    nb::class_<ChatRequest>(m, "ChatRequest", "A validated Chat Completions request.")
        .def_ro("stop", &ChatRequest::stop)
        .def_ro("thinking", &ChatRequest::thinking)
        .def_prop_ro("tools_active", &ChatRequest::tools_active);
    m.def(
        "parse_chat_request",
        [](std::string_view body_json, bool default_thinking) {
            return parse_chat_request(body_json, ChatOptions{.default_thinking = default_thinking});
        },
        nb::arg("body_json"), nb::arg("default_thinking") = true,
        "Parses and validates an OpenAI Chat Completions body (JSON text); raises Error with the API's message.");

    nb::class_<ChatPrompt>(m, "ChatPrompt").def("text", &ChatPrompt::text, "The prompt string.");
    m.def("render_chat", &render_chat, nb::arg("request"), nb::arg("family"));
    m.def("encode_chat_prompt", &encode_chat_prompt, nb::arg("prompt"), nb::arg("tokenizer"));

    nb::class_<ChatParseOptions>(m, "ChatParseOptions")
        .def_rw("parse_tool_calls", &ChatParseOptions::parse_tool_calls)
        .def_rw("starts_in_tool_calls", &ChatParseOptions::starts_in_tool_calls)
        .def_rw("json_output", &ChatParseOptions::json_output)
        .def_rw("stop", &ChatParseOptions::stop)
        .def_rw("response_id", &ChatParseOptions::response_id)
        .def_prop_ro("thinking", &ChatParseOptions::thinking);
    m.def("parse_options_for", &parse_options_for, nb::arg("request"));

    nb::enum_<BackendFinish>(m, "BackendFinish")
        .value("stop", BackendFinish::kStop)
        .value("length", BackendFinish::kLength)
        .value("content_filter", BackendFinish::kContentFilter);

    nb::class_<ParsedToolCall>(m, "ParsedToolCall")
        .def_ro("id", &ParsedToolCall::id)
        .def_ro("name", &ParsedToolCall::name)
        .def_ro("arguments", &ParsedToolCall::arguments, "JSON text as the model wrote it.");
    nb::class_<ParsedMessage>(m, "ParsedMessage")
        .def_ro("content", &ParsedMessage::content)
        .def_ro("reasoning_content", &ParsedMessage::reasoning_content)
        .def_ro("tool_calls", &ParsedMessage::tool_calls)
        .def_ro("finish_reason", &ParsedMessage::finish_reason)
        .def_ro("errors", &ParsedMessage::errors)
        .def("to_json", &ParsedMessage::to_json);
    m.def("parse_chat_output", &parse_chat_output, nb::arg("text"), nb::arg("options"),
          nb::arg("reason") = BackendFinish::kStop, "Generated text -> the assistant message (never raises).");
}

}  // namespace deepinfer::python
