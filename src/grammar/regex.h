// SPDX-License-Identifier: Apache-2.0
// The regex front end: the ECMAScript subset JSON Schema `pattern` uses (classes, groups,
// alternation, greedy and lazy quantifiers, anchors at the ends, escapes, Unicode escapes) ->
// an expression of a Grammar. Two encodings of the matched characters: raw UTF-8 (the `regex`
// request constraint) or JSON string content (a schema `pattern`: `"` and `\` and control
// characters are written as JSON escapes).
#pragma once

#include <string_view>

#include "grammar/ir.h"

namespace deepinfer::grammar {

enum class RegexEncoding { kRaw, kJsonString };

struct RegexOptions {
    RegexEncoding encoding = RegexEncoding::kRaw;
    // Search semantics (JSON Schema `pattern`): without ^ the match may start anywhere, without $
    // it may end anywhere. Otherwise the whole output must match (anchors are optional).
    bool search = false;
};

// Adds the regex's language to `g` and returns its expression. Throws GrammarError("regex",
// "offset N", reason) for invalid or unsupported syntax (lookaround, backreferences, \b, \p).
ExprId regex_to_expr(Grammar& g, std::string_view regex, const RegexOptions& options = {});

// A JSON string content character for the code points in `ranges` (json encoding).
ExprId json_char_expr(Grammar& g, const std::vector<std::pair<uint32_t, uint32_t>>& ranges);

// A whole grammar whose root matches the regex (the `regex` request constraint).
Grammar regex_grammar(std::string_view regex);

}  // namespace deepinfer::grammar
