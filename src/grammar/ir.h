// SPDX-License-Identifier: Apache-2.0
// The grammar IR every front end (EBNF, regex, JSON Schema) produces: named rules whose bodies are
// expression trees over bytes and Unicode code points. Rules refer to each other only by RuleRef;
// everything else in a body (literals, classes, sequences, alternatives, repetitions) is compiled
// into one byte automaton per rule (automaton.h), so recursion lives only between rules.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deepinfer::grammar {

using ExprId = int32_t;

enum class ExprKind : uint8_t {
    kEmpty,      // matches ""
    kBytes,      // a literal byte string (UTF-8 for text)
    kCharClass,  // one code point from `ranges` (UTF-8 encoded); ranges are sorted and disjoint
    kByteClass,  // one raw byte from `ranges` (values 0..255)
    kSeq,        // children in order
    kAlt,        // one of the children
    kRepeat,     // child{min,max}; max = -1: unbounded
    kRuleRef,    // rule `rule`
};

struct Expr {
    ExprKind kind = ExprKind::kEmpty;
    std::string bytes;                                 // kBytes
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  // kCharClass / kByteClass, inclusive
    std::vector<ExprId> children;                      // kSeq / kAlt / kRepeat (one)
    int32_t min = 0, max = 0;                          // kRepeat
    int32_t rule = -1;                                 // kRuleRef
};

struct Rule {
    std::string name;
    ExprId body = -1;  // -1 while declared but not yet defined
};

// A grammar under construction or finished. Value type; the front ends build it with the helpers.
class Grammar {
public:
    ExprId empty();
    ExprId bytes(std::string_view s);
    // Code point ranges; `negated` complements over all Unicode scalar values (surrogates excluded).
    ExprId char_class(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated = false);
    ExprId byte_class(std::vector<std::pair<uint32_t, uint32_t>> ranges);
    ExprId seq(std::vector<ExprId> children);
    ExprId alt(std::vector<ExprId> children);
    ExprId repeat(ExprId child, int32_t min, int32_t max);
    ExprId star(ExprId child) { return repeat(child, 0, -1); }
    ExprId plus(ExprId child) { return repeat(child, 1, -1); }
    ExprId opt(ExprId child) { return repeat(child, 0, 1); }
    ExprId ref(int32_t rule);

    // Declares a rule (or returns the existing one of that name); define it later with `define`.
    int32_t declare(std::string_view name);
    void define(int32_t rule, ExprId body);
    // Declares a fresh rule whose name starts with `prefix` (unique).
    int32_t add_rule(std::string_view prefix, ExprId body);
    int32_t find_rule(std::string_view name) const;  // -1 if absent

    const Expr& expr(ExprId id) const { return exprs_[size_t(id)]; }
    const std::vector<Rule>& rules() const { return rules_; }
    int32_t root() const { return root_; }
    void set_root(int32_t rule) { root_ = rule; }

    // A canonical text form (EBNF-like), used for the content hash and in tests.
    std::string to_string() const;

private:
    ExprId push(Expr e);
    std::vector<Expr> exprs_;
    std::vector<Rule> rules_;
    int32_t root_ = -1;
};

// Sorts, merges and (optionally) complements code point ranges over the Unicode scalar values.
std::vector<std::pair<uint32_t, uint32_t>> normalize_ranges(std::vector<std::pair<uint32_t, uint32_t>> ranges,
                                                            bool negated, uint32_t max_value = 0x10FFFF,
                                                            bool skip_surrogates = true);

}  // namespace deepinfer::grammar
