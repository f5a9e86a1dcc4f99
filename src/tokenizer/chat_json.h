// SPDX-License-Identifier: Apache-2.0
// JSON text as DeepSeek's prompts spell it: Python json.dumps style (", " and ": " separators,
// non-ASCII raw, key order kept) with the float spelling of each model family, plus OpenAI's
// strict-mode normalization of tool parameter schemas.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "deepinfer/chat.h"

namespace deepinfer {

using OrderedJson = nlohmann::ordered_json;

// V4.1: Python repr of floats (1e-05, 1.5e+20, 100.0). V4: the same except that numbers from
// 1e-5 up are positional (0.00001) and exponents are not zero-padded (1e-6).
std::string dump_prompt_json(const OrderedJson& value, ChatFamily family);
std::string format_float(double value, ChatFamily family);
// Appends `s` JSON-escaped (", \, control characters; other bytes as they are) without quotes.
void append_json_escaped(std::string_view s, std::string& out);

// A tool's parameters in OpenAI strict mode, rebuilt the way DeepSeek's reference does: the top
// level must be an object; every object gets "additionalProperties": false and "required": all
// its properties (a different "required" or additionalProperties: true is an error); only the
// keywords of the strict subset are kept. Throws deepinfer::Error with the reference's message.
OrderedJson normalize_strict_schema(const OrderedJson& schema);

}  // namespace deepinfer
