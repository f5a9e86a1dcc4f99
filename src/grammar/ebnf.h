// SPDX-License-Identifier: Apache-2.0
// The EBNF front end (GBNF / xgrammar dialect, documented in docs/grammar.md): text -> Grammar.
#pragma once

#include <string_view>

#include "grammar/ir.h"

namespace deepinfer::grammar {

// Throws GrammarError("ebnf", "line L, column C", reason).
Grammar parse_ebnf(std::string_view text, std::string_view root_rule = "root");

}  // namespace deepinfer::grammar
