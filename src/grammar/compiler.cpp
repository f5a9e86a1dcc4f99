// SPDX-License-Identifier: Apache-2.0
// GrammarCompiler: spec -> front end -> automaton -> per-state token caches, cached by content.
// Also the trigger tables of ConstrainedDecoder (cached per literal).
#include <chrono>
#include <list>
#include <map>
#include <mutex>
#include <unordered_map>

#include "grammar/compiled.h"
#include "grammar/ebnf.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace deepinfer {

int32_t TriggerTable::step(int32_t state, uint8_t b) const {
    while (state > 0 && static_cast<uint8_t>(text[size_t(state)]) != b) state = fail[size_t(state - 1)];
    if (static_cast<uint8_t>(text[size_t(state)]) == b) ++state;
    return state;
}

int32_t TriggerTable::scan(int32_t& state, std::string_view bytes) const {
    for (size_t i = 0; i < bytes.size(); ++i) {
        state = step(state, static_cast<uint8_t>(bytes[i]));
        if (state == static_cast<int32_t>(text.size())) {
            state = 0;
            return static_cast<int32_t>(i + 1);
        }
    }
    return -1;
}

std::shared_ptr<const TriggerTable> TriggerTable::build(const TokenVocabulary::Impl& v, std::string text) {
    auto t = std::make_shared<TriggerTable>();
    t->text = std::move(text);
    const size_t n = t->text.size();
    t->fail.assign(n, 0);
    for (size_t i = 1, k = 0; i < n; ++i) {
        while (k > 0 && t->text[i] != t->text[k]) k = size_t(t->fail[k - 1]);
        if (t->text[i] == t->text[k]) ++k;
        t->fail[i] = static_cast<int32_t>(k);
    }
    t->completing.resize(n);
    for (int32_t id = 0; id < v.vocab_size; ++id) {
        const std::string& b = v.bytes[size_t(id)];
        if (b.empty() || v.is_eos[size_t(id)]) continue;
        for (size_t s = 0; s < n; ++s) {
            int32_t st = static_cast<int32_t>(s);
            const int32_t off = t->scan(st, b);
            if (off >= 0) t->completing[s].emplace_back(id, off);
        }
    }
    return t;
}

struct GrammarCompiler::Impl {
    std::shared_ptr<const TokenVocabulary> vocab;
    size_t max_cached;
    std::mutex mu;
    std::unordered_map<std::string, std::pair<CompiledGrammar, std::list<std::string>::iterator>> cache;
    std::list<std::string> lru;  // most recent first
    std::map<std::string, std::shared_ptr<const TriggerTable>> triggers;
    std::vector<uint64_t> free_mask;
    int64_t hits = 0;

    std::shared_ptr<const TriggerTable> trigger(const std::string& text) {
        if (text.empty()) return nullptr;
        auto it = triggers.find(text);
        if (it != triggers.end()) return it->second;
        auto t = TriggerTable::build(vocab->impl(), text);
        triggers.emplace(text, t);
        return t;
    }
};

GrammarCompiler::GrammarCompiler(std::shared_ptr<const TokenVocabulary> vocabulary, size_t max_cached)
    : impl_(std::make_unique<Impl>()) {
    impl_->vocab = std::move(vocabulary);
    impl_->max_cached = std::max<size_t>(1, max_cached);
    const auto& v = impl_->vocab->impl();
    impl_->free_mask.assign(size_t(impl_->vocab->bitmask_words()), 0);
    for (int32_t id = 0; id < v.vocab_size; ++id)
        if (!v.bytes[size_t(id)].empty() && !v.is_eos[size_t(id)]) impl_->free_mask[size_t(id >> 6)] |= uint64_t{1} << (id & 63);
}
GrammarCompiler::~GrammarCompiler() = default;
const TokenVocabulary& GrammarCompiler::vocabulary() const { return *impl_->vocab; }
int64_t GrammarCompiler::cache_hits() const { return impl_->hits; }

namespace {

grammar::Grammar front_end(const GrammarSpec& spec) {
    switch (spec.kind) {
        case GrammarSpec::Kind::kEbnf: return grammar::parse_ebnf(spec.text);
        case GrammarSpec::Kind::kRegex: return grammar::regex_grammar(spec.text);
        case GrammarSpec::Kind::kJsonSchema: return grammar::json_schema_grammar(spec.text, spec.json);
        case GrammarSpec::Kind::kJsonObject: return grammar::json_object_grammar(spec.json);
    }
    return {};
}

// root' ::= root | root? "\n"* PREFIX <any byte>*   (a tool call after, or instead of, the answer)
void add_tool_escape(grammar::Grammar& g, const std::string& prefix) {
    const int32_t old_root = g.root();
    const grammar::ExprId escape = g.seq({g.star(g.bytes("\n")), g.bytes(prefix), g.star(g.byte_class({{0, 255}}))});
    const int32_t r = g.add_rule("root_or_tool_call", g.alt({g.ref(old_root), g.seq({g.opt(g.ref(old_root)), escape})}));
    g.set_root(r);
}

std::string cache_key(const GrammarSpec& s) {
    std::string k;
    k += static_cast<char>('0' + static_cast<int>(s.kind));
    k += s.json.whitespace == JsonWhitespace::kCompact ? 'c' : 'f';
    k += std::to_string(s.json.max_whitespace) + (s.json.strict ? "s" : "n");
    for (const std::string* p : {&s.start_after, &s.tool_call_prefix}) {
        k += std::to_string(p->size()) + ':';
        k += *p;
    }
    k += s.text;
    return k;
}

}  // namespace

CompiledGrammar GrammarCompiler::compile(const GrammarSpec& spec) {
    const std::string key = cache_key(spec);
    {
        std::lock_guard<std::mutex> lock(impl_->mu);
        auto it = impl_->cache.find(key);
        if (it != impl_->cache.end()) {
            ++impl_->hits;
            impl_->lru.splice(impl_->lru.begin(), impl_->lru, it->second.second);
            return it->second.first;
        }
    }
    const auto t0 = std::chrono::steady_clock::now();
    grammar::Grammar g = front_end(spec);
    if (!spec.tool_call_prefix.empty()) add_tool_escape(g, spec.tool_call_prefix);
    auto impl = std::make_shared<CompiledGrammar::Impl>();
    impl->vocabulary = impl_->vocab;
    impl->automaton = grammar::build_automaton(g);
    impl->tokens = grammar::compute_all_state_tokens(impl->automaton, impl_->vocab->impl());
    {
        std::lock_guard<std::mutex> lock(impl_->mu);
        impl->start_trigger = impl_->trigger(spec.start_after);
        impl->tool_trigger = impl_->trigger(spec.tool_call_prefix);
    }
    impl->free_mask = impl_->free_mask;
    impl->compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CompiledGrammar out(std::move(impl));
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->cache.count(key)) return impl_->cache.at(key).first;
    impl_->lru.push_front(key);
    impl_->cache.emplace(key, std::make_pair(out, impl_->lru.begin()));
    while (impl_->cache.size() > impl_->max_cached) {
        impl_->cache.erase(impl_->lru.back());
        impl_->lru.pop_back();
    }
    return out;
}

CompiledGrammar GrammarCompiler::compile_ebnf(std::string_view text, std::string_view root) {
    if (root == "root") {
        GrammarSpec spec;
        spec.kind = GrammarSpec::Kind::kEbnf;
        spec.text = std::string(text);
        return compile(spec);
    }
    // A non-default root name: not cached (rare; tests).
    auto impl = std::make_shared<CompiledGrammar::Impl>();
    const auto t0 = std::chrono::steady_clock::now();
    impl->vocabulary = impl_->vocab;
    impl->automaton = grammar::build_automaton(grammar::parse_ebnf(text, root));
    impl->tokens = grammar::compute_all_state_tokens(impl->automaton, impl_->vocab->impl());
    impl->free_mask = impl_->free_mask;
    impl->compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return CompiledGrammar(std::move(impl));
}
CompiledGrammar GrammarCompiler::compile_regex(std::string_view regex) {
    GrammarSpec spec;
    spec.kind = GrammarSpec::Kind::kRegex;
    spec.text = std::string(regex);
    return compile(spec);
}
CompiledGrammar GrammarCompiler::compile_json_schema(std::string_view schema, const JsonOptions& options) {
    GrammarSpec spec;
    spec.kind = GrammarSpec::Kind::kJsonSchema;
    spec.text = std::string(schema);
    spec.json = options;
    return compile(spec);
}

}  // namespace deepinfer
