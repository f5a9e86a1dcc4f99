// SPDX-License-Identifier: Apache-2.0
// Structured output: constrain generation to a grammar. Front ends (EBNF, regex, JSON Schema,
// json_object) turn a request's constraint into one grammar IR; the compiler builds a byte-level
// automaton per rule and, for every automaton state, the set of vocabulary tokens whose acceptance
// does not depend on the parse stack (xgrammar's "adaptive token mask cache" idea); a matcher runs
// an Earley recognizer over bytes and produces, per step, a bitmask over the model vocabulary of
// the tokens that keep the output a prefix of some string of the language (EOS exactly when the
// output is complete). docs/grammar.md describes the EBNF dialect and the JSON Schema coverage.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/check.h"

namespace deepinfer {

class Tokenizer;

// An invalid or unsupported constraint: `source` names the front end ("ebnf", "regex",
// "json_schema"), `position` is a byte offset into the text (or a JSON pointer for schemas, in
// `where`), `reason` says what is wrong. Never thrown for model output, only for the constraint.
class GrammarError : public Error {
public:
    GrammarError(std::string source, std::string where, std::string reason);
    const std::string& source() const { return source_; }
    const std::string& where() const { return where_; }
    const std::string& reason() const { return reason_; }

private:
    std::string source_, where_, reason_;
};

// How JSON output may be spaced (between tokens, and around the value).
enum class JsonWhitespace {
    kFlexible,  // any run of [ \t\n\r] (at most `max_whitespace` bytes when that is >= 0)
    kCompact,   // none at all: {"a":1,"b":[2,3]}
};

struct JsonOptions {
    JsonWhitespace whitespace = JsonWhitespace::kFlexible;
    // Longest whitespace run (kFlexible); -1: unbounded (xgrammar's default). A bound costs compile
    // time in proportion (every position of the run is an automaton state with a token cache).
    int32_t max_whitespace = -1;
    // OpenAI `strict` semantics: objects admit no properties beyond `properties` unless the schema
    // says `additionalProperties`; without strict, a missing additionalProperties means "allowed".
    bool strict = true;
};

// The constraint of one request (SamplingParams::grammar).
struct GrammarSpec {
    enum class Kind { kEbnf, kRegex, kJsonSchema, kJsonObject };
    Kind kind = Kind::kJsonObject;
    std::string text;  // EBNF text, regex, or the schema's JSON text (unused for kJsonObject)
    JsonOptions json;
    // The constraint starts once this text has been generated (thinking mode: "</think>"); before
    // that the output is free except that it may not end. Empty: from the first token.
    std::string start_after;
    // Tool calls stay possible: once this text appears (before the constraint starts, or where the
    // constrained part allows it, after optional newlines) the rest of the output is free.
    // Empty: no escape.
    std::string tool_call_prefix;
};

// The model vocabulary as the grammar engine sees it: each token's bytes, which tokens may appear
// in constrained text, and the end-of-sequence ids. Built once per tokenizer; immutable.
class TokenVocabulary {
public:
    // `vocab_size`: the model's logit width (may exceed the tokenizer's ids; extra ids are never
    // allowed). Added tokens are excluded from constrained text except those in `allowed_added`
    // (by content), and EOS ids are allowed exactly where the grammar may end.
    TokenVocabulary(const Tokenizer& tokenizer, int32_t vocab_size, std::vector<int32_t> eos_ids,
                    const std::vector<std::string>& allowed_added = {});
    // From raw token byte strings (tests): ids 0..n-1; ids in eos_ids are end tokens.
    TokenVocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> eos_ids);
    ~TokenVocabulary();

    int32_t size() const;
    int32_t bitmask_words() const { return (size() + 63) / 64; }
    struct Impl;
    const Impl& impl() const { return *impl_; }

private:
    std::unique_ptr<Impl> impl_;
};

// A compiled constraint: automata, token caches. Immutable and shared between requests.
class CompiledGrammar {
public:
    struct Impl;
    explicit CompiledGrammar(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
    const Impl& impl() const { return *impl_; }
    // Statistics for benchmarks and tests.
    int64_t num_states() const;
    int64_t num_rules() const;
    double compile_seconds() const;

private:
    std::shared_ptr<const Impl> impl_;
};

// Compiles specs against one vocabulary and caches the results by content hash (the spec's kind,
// text and options). Thread-safe.
class GrammarCompiler {
public:
    explicit GrammarCompiler(std::shared_ptr<const TokenVocabulary> vocabulary, size_t max_cached = 256);
    ~GrammarCompiler();
    // Throws GrammarError for an invalid or unsupported constraint.
    CompiledGrammar compile(const GrammarSpec& spec);
    CompiledGrammar compile_ebnf(std::string_view text, std::string_view root = "root");
    CompiledGrammar compile_regex(std::string_view regex);
    CompiledGrammar compile_json_schema(std::string_view schema, const JsonOptions& options = {});
    const TokenVocabulary& vocabulary() const;
    int64_t cache_hits() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// The state of one generation under a grammar. Not thread-safe; one per completion. Cheap to
// create; copyable (n > 1 completions start from copies).
class GrammarMatcher {
public:
    explicit GrammarMatcher(CompiledGrammar grammar);
    GrammarMatcher(const GrammarMatcher&);
    GrammarMatcher& operator=(const GrammarMatcher&);
    ~GrammarMatcher();

    // Bits of `mask` [bitmask_words] u64 are set for the allowed tokens (bit t%64 of word t/64).
    // Returns the number of allowed tokens (0 only for a grammar that admits nothing more).
    int64_t fill_next_token_bitmask(std::span<uint64_t> mask);
    // Advances by a token; false (state unchanged) if the token is not allowed.
    bool accept_token(int32_t token);
    // Advances by raw bytes (tests, forced prefixes); false (state unchanged) if not a valid prefix.
    bool accept_bytes(std::string_view bytes);
    // Whether `bytes` could be accepted now (state unchanged either way).
    bool test_bytes(std::string_view bytes);
    // Undo the last `num_tokens` accepted tokens (speculative decoding).
    void rollback(int64_t num_tokens);
    bool can_end() const;        // the output so far is a complete string of the language
    bool is_terminated() const;  // an end token was accepted
    int64_t num_accepted_tokens() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// The per-request controller the engine uses: phases (free text before `start_after`, the grammar,
// free text after a tool-call escape) around a GrammarMatcher.
class ConstrainedDecoder {
public:
    ConstrainedDecoder(CompiledGrammar grammar, const GrammarSpec& spec);
    ConstrainedDecoder(const ConstrainedDecoder&);
    ~ConstrainedDecoder();
    int64_t fill_next_token_bitmask(std::span<uint64_t> mask);
    bool accept_token(int32_t token);
    bool is_terminated() const;
    bool in_grammar() const;  // the constraint has started and not been escaped

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer
