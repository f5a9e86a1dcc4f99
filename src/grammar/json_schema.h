// SPDX-License-Identifier: Apache-2.0
// The JSON Schema front end (draft 2020-12 and draft-07 keywords; docs/grammar.md lists them):
// schema text -> Grammar whose language is JSON texts valid under the schema. Unsupported
// validation keywords are errors (never silently dropped); annotations are ignored.
#pragma once

#include <string_view>

#include "deepinfer/grammar.h"
#include "grammar/ir.h"

namespace deepinfer::grammar {

// Throws GrammarError("json_schema", JSON pointer, reason).
Grammar json_schema_grammar(std::string_view schema_text, const JsonOptions& options);
// Any JSON object (response_format json_object).
Grammar json_object_grammar(const JsonOptions& options);

}  // namespace deepinfer::grammar
