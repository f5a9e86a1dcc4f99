// SPDX-License-Identifier: Apache-2.0
// JSON Schema -> grammar. Each schema node becomes an expression of the grammar IR; $ref targets
// become rules (so recursion works), and the generic JSON pieces (any value, plain strings,
// numbers) are shared rules so their token caches are computed once. Objects emit their listed
// properties in schema order (optional ones may be skipped), then additional properties.
#include "grammar/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "grammar/regex.h"
#include "tokenizer/utf8.h"

namespace deepinfer::grammar {
namespace {

using Json = nlohmann::ordered_json;
using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

const std::set<std::string>& annotation_keywords() {
    static const std::set<std::string> k = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                            "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding",
                                            "$anchor", "$defs", "definitions", "$vocabulary", "nullable", "discriminator"};
    return k;
}
const std::set<std::string>& unsupported_keywords() {
    static const std::set<std::string> k = {"not", "if", "then", "else", "dependentRequired", "dependentSchemas",
                                            "dependencies", "patternProperties", "propertyNames", "unevaluatedProperties",
                                            "unevaluatedItems", "contains", "minContains", "maxContains", "multipleOf",
                                            "minProperties", "maxProperties", "$dynamicRef", "$recursiveRef",
                                            "$dynamicAnchor", "$recursiveAnchor", "contentSchema"};
    return k;
}

std::string escape_pointer(const std::string& key) {
    std::string o;
    for (char c : key) {
        if (c == '~') o += "~0";
        else if (c == '/') o += "~1";
        else o += c;
    }
    return o;
}

// Decimal digit strings of equal length n: all strings s with lo <= s <= hi.
std::string same_length_regex(const std::string& lo, const std::string& hi) {
    if (lo.empty()) return "";
    if (lo[0] == hi[0]) return std::string(1, lo[0]) + same_length_regex(lo.substr(1), hi.substr(1));
    const size_t rest = lo.size() - 1;
    const std::string nines(rest, '9'), zeros(rest, '0');
    // The first digit runs over [first, last] with free tails; the ends get their own branches
    // unless their tails are free too (this keeps the pattern linear in the digit count).
    const bool lo_free = lo.substr(1) == zeros, hi_free = hi.substr(1) == nines;
    const char first = lo_free ? lo[0] : char(lo[0] + 1), last = hi_free ? hi[0] : char(hi[0] - 1);
    std::vector<std::string> alts;
    if (!lo_free) alts.push_back(std::string(1, lo[0]) + same_length_regex(lo.substr(1), nines));
    if (first <= last) {
        std::string mid = "[" + std::string(1, first) + "-" + std::string(1, last) + "]";
        if (rest) mid += "[0-9]{" + std::to_string(rest) + "}";
        alts.push_back(mid);
    }
    if (!hi_free) alts.push_back(std::string(1, hi[0]) + same_length_regex(zeros, hi.substr(1)));
    std::string o = "(?:";
    for (size_t i = 0; i < alts.size(); ++i) o += (i ? "|" : "") + alts[i];
    return o + ")";
}

// Non-negative integers in [lo, hi] (hi < 0: unbounded), no leading zeros.
std::string nonneg_range_regex(int64_t lo, int64_t hi) {
    std::vector<std::string> alts;
    const std::string los = std::to_string(lo);
    const size_t max_len = hi < 0 ? 19 : std::to_string(hi).size();
    for (size_t d = los.size(); d <= max_len; ++d) {
        const std::string dmin = d == 1 ? "0" : "1" + std::string(d - 1, '0');
        const std::string dmax(d, '9');
        const std::string a = d == los.size() ? los : dmin;
        std::string b = dmax;
        if (hi >= 0 && d == max_len) b = std::to_string(hi);
        if (a.size() == b.size() && a <= b) alts.push_back(same_length_regex(a, b));
    }
    if (hi < 0) alts.push_back("[1-9][0-9]{19,}");
    if (alts.empty()) return "";
    std::string o = "(?:";
    for (size_t i = 0; i < alts.size(); ++i) o += (i ? "|" : "") + alts[i];
    return o + ")";
}

constexpr int64_t kIntCap = 999999999999999999;  // 10^18 - 1: beyond, bounds are clamped (sound)

// Integers in [lo, hi]; nullopt bounds are unbounded.
std::string int_range_regex(std::optional<int64_t> lo, std::optional<int64_t> hi) {
    std::vector<std::string> alts;
    // Negative part: -k with k in [max(1, -hi), -lo].
    if (!lo || *lo < 0) {
        const int64_t kmin = hi ? std::max<int64_t>(1, -*hi) : 1;
        const int64_t kmax = lo ? -*lo : -1;
        if (kmax < 0 || kmin <= kmax) {
            const std::string r = nonneg_range_regex(kmin, kmax);
            if (!r.empty()) alts.push_back("-" + r);
        }
    }
    if (!hi || *hi >= 0) {
        const int64_t a = lo ? std::max<int64_t>(0, *lo) : 0;
        const int64_t b = hi ? *hi : -1;
        if (b < 0 || a <= b) {
            const std::string r = nonneg_range_regex(a, b);
            if (!r.empty()) alts.push_back(r);
        }
    }
    if (alts.empty()) return "";
    std::string o = "(?:";
    for (size_t i = 0; i < alts.size(); ++i) o += (i ? "|" : "") + alts[i];
    return o + ")";
}

class SchemaConverter {
public:
    SchemaConverter(const Json& root, const JsonOptions& o) : root_(root), o_(o) {
        const ExprId ws_char = g_.byte_class({{' ', ' '}, {'\t', '\t'}, {'\n', '\n'}, {'\r', '\r'}});
        ws_ = o.whitespace == JsonWhitespace::kCompact ? g_.empty()
              : o.max_whitespace < 0                   ? g_.star(ws_char)
                                                       : g_.repeat(ws_char, 0, o.max_whitespace);
    }

    Grammar convert_root() {
        const int32_t root = g_.declare("root");
        const ExprId body = convert(root_, "");
        g_.define(root, g_.seq({body, ws_}));  // no leading whitespace (as xgrammar)
        g_.set_root(root);
        return std::move(g_);
    }

    Grammar any_object_root() {
        const int32_t root = g_.declare("root");
        g_.define(root, g_.seq({g_.ref(any_object_rule()), ws_}));
        g_.set_root(root);
        return std::move(g_);
    }

private:
    [[noreturn]] void fail(const std::string& path, const std::string& reason) const {
        throw GrammarError("json_schema", path.empty() ? "/" : path, reason);
    }

    // ---- shared pieces ----
    ExprId lit(std::string_view s) { return g_.bytes(s); }

    ExprId string_char() {
        // [^"\\\x00-\x1f] | \\ ( ["\\/bfnrt] | u hex4 without surrogates )
        if (string_char_ >= 0) return string_char_;
        const ExprId raw = g_.char_class({{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}});
        const ExprId hex = g_.char_class({{'0', '9'}, {'a', 'f'}, {'A', 'F'}});
        const ExprId u = g_.seq({lit("u"), g_.alt({g_.seq({g_.char_class({{'0', '9'}, {'a', 'c'}, {'A', 'C'}, {'e', 'f'}, {'E', 'F'}}), hex, hex, hex}),
                                                   g_.seq({g_.char_class({{'d', 'd'}, {'D', 'D'}}), g_.char_class({{'0', '7'}}), hex, hex})})});
        const ExprId esc = g_.seq({lit("\\"), g_.alt({g_.char_class({{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 'b'}, {'f', 'f'}, {'n', 'n'}, {'r', 'r'}, {'t', 't'}}), u})});
        string_char_ = g_.alt({raw, esc});
        return string_char_;
    }

    int32_t string_rule() {
        if (string_rule_ < 0) string_rule_ = g_.add_rule("json_string", g_.seq({lit("\""), g_.star(string_char()), lit("\"")}));
        return string_rule_;
    }

    ExprId number_expr() {
        const ExprId digits = g_.plus(g_.char_class({{'0', '9'}}));
        const ExprId intpart = g_.alt({lit("0"), g_.seq({g_.char_class({{'1', '9'}}), g_.star(g_.char_class({{'0', '9'}}))})});
        return g_.seq({g_.opt(lit("-")), intpart, g_.opt(g_.seq({lit("."), digits})),
                       g_.opt(g_.seq({g_.char_class({{'e', 'e'}, {'E', 'E'}}), g_.opt(g_.char_class({{'+', '+'}, {'-', '-'}})), digits}))});
    }
    int32_t number_rule() {
        if (number_rule_ < 0) number_rule_ = g_.add_rule("json_number", number_expr());
        return number_rule_;
    }
    int32_t integer_rule() {
        if (integer_rule_ < 0)
            integer_rule_ = g_.add_rule("json_integer", g_.seq({g_.opt(lit("-")), g_.alt({lit("0"), g_.seq({g_.char_class({{'1', '9'}}), g_.star(g_.char_class({{'0', '9'}}))})})}));
        return integer_rule_;
    }

    int32_t any_value_rule() {
        if (value_rule_ >= 0) return value_rule_;
        value_rule_ = g_.declare("json_value");
        const int32_t obj = g_.declare("json_object");
        const int32_t arr = g_.declare("json_array");
        g_.define(value_rule_, g_.alt({g_.ref(obj), g_.ref(arr), g_.ref(string_rule()), g_.ref(number_rule()), lit("true"), lit("false"), lit("null")}));
        const ExprId member = g_.seq({g_.ref(string_rule()), ws_, lit(":"), ws_, g_.ref(value_rule_)});
        g_.define(obj, g_.seq({lit("{"), ws_, g_.opt(g_.seq({member, g_.star(g_.seq({ws_, lit(","), ws_, member})), ws_})), lit("}")}));
        const ExprId v = g_.ref(value_rule_);
        g_.define(arr, g_.seq({lit("["), ws_, g_.opt(g_.seq({v, g_.star(g_.seq({ws_, lit(","), ws_, v})), ws_})), lit("]")}));
        object_rule_ = obj;
        return value_rule_;
    }
    int32_t any_object_rule() {
        any_value_rule();
        return object_rule_;
    }
    int32_t any_array_rule() {
        any_value_rule();
        return g_.find_rule("json_array");
    }

    ExprId regex_expr(const std::string& re, const std::string& path, bool search) {
        try {
            return regex_to_expr(g_, re, {RegexEncoding::kJsonString, search});
        } catch (const GrammarError& e) {
            fail(path, "invalid pattern: " + e.reason() + " at " + e.where());
        }
    }

    // ---- schema nodes ----
    const Json& resolve_ref(const std::string& ref, const std::string& path) {
        if (ref.empty() || ref[0] != '#') fail(path + "/$ref", "only local references ('#...') are supported, got '" + ref + "'");
        try {
            std::string ptr;  // a URI fragment: %XX escapes decode first
            for (size_t i = 1; i < ref.size(); ++i) {
                if (ref[i] == '%' && i + 2 < ref.size() && std::isxdigit(static_cast<unsigned char>(ref[i + 1])) &&
                    std::isxdigit(static_cast<unsigned char>(ref[i + 2]))) {
                    ptr.push_back(static_cast<char>(std::stoi(ref.substr(i + 1, 2), nullptr, 16)));
                    i += 2;
                } else {
                    ptr.push_back(ref[i]);
                }
            }
            if (ptr.empty()) return root_;
            return root_.at(Json::json_pointer(ptr));
        } catch (const std::exception&) {
            fail(path + "/$ref", "reference '" + ref + "' does not resolve");
        }
    }

    ExprId ref_expr(const std::string& ref, const std::string& path) {
        auto it = ref_rules_.find(ref);
        if (it != ref_rules_.end()) return g_.ref(it->second);
        const Json& target = resolve_ref(ref, path);
        std::string name = "ref";
        const size_t slash = ref.rfind('/');
        if (slash != std::string::npos && slash + 1 < ref.size()) name += "_" + ref.substr(slash + 1);
        std::string clean;
        for (char c : name) clean += std::isalnum(static_cast<unsigned char>(c)) || c == '_' ? c : '_';
        const int32_t rule = g_.add_rule(clean, -1);
        ref_rules_[ref] = rule;
        g_.define(rule, convert(target, ref.substr(1)));
        return g_.ref(rule);
    }

    // allOf / sibling merge: a flat schema whose keywords combine both (errors when it cannot).
    Json merge(const Json& a, const Json& b, const std::string& path) {
        Json out = a;
        for (auto it = b.begin(); it != b.end(); ++it) {
            const std::string& k = it.key();
            if (!out.contains(k)) {
                out[k] = it.value();
                continue;
            }
            Json& cur = out[k];
            if (cur == it.value()) continue;
            if (k == "properties") {
                for (auto p = it.value().begin(); p != it.value().end(); ++p)
                    cur[p.key()] = cur.contains(p.key()) ? merge(deref(cur[p.key()], path), deref(p.value(), path), path + "/properties/" + escape_pointer(p.key())) : p.value();
            } else if (k == "required") {
                for (const Json& r : it.value())
                    if (std::find(cur.begin(), cur.end(), r) == cur.end()) cur.push_back(r);
            } else if (k == "minimum" || k == "exclusiveMinimum" || k == "minLength" || k == "minItems") {
                if (it.value().is_number() && cur.is_number()) cur = std::max(cur.get<double>(), it.value().get<double>());
            } else if (k == "maximum" || k == "exclusiveMaximum" || k == "maxLength" || k == "maxItems") {
                if (it.value().is_number() && cur.is_number()) cur = std::min(cur.get<double>(), it.value().get<double>());
            } else if (k == "type") {
                auto as_set = [](const Json& t) {
                    std::set<std::string> s;
                    if (t.is_string()) s.insert(t.get<std::string>());
                    else for (const Json& e : t) s.insert(e.get<std::string>());
                    if (s.count("number")) s.insert("integer");
                    return s;
                };
                const auto sa = as_set(cur), sb = as_set(it.value());
                Json types = Json::array();
                for (const auto& t : sa)
                    if (sb.count(t) && !(t == "number" && (!sa.count("number") || !sb.count("number")))) types.push_back(t);
                if (types.empty()) fail(path + "/allOf", "the merged types are disjoint");
                cur = types.size() == 1 ? types[0] : types;
            } else if (annotation_keywords().count(k)) {
                continue;
            } else {
                fail(path + "/allOf", "cannot merge keyword '" + k + "' that appears with different values");
            }
        }
        return out;
    }

    Json deref(const Json& s, const std::string& path) {
        if (s.is_object() && s.contains("$ref") && s.size() == 1) return resolve_ref(s["$ref"].get<std::string>(), path);
        return s;
    }

    ExprId convert(const Json& schema, const std::string& path, int depth = 0) {
        if (depth > 64) fail(path, "schema nesting is too deep (or a $ref cycle without a rule)");
        if (schema.is_boolean()) {
            if (schema.get<bool>()) return g_.ref(any_value_rule());
            fail(path, "the schema 'false' admits no value");
        }
        if (!schema.is_object()) fail(path, "a schema must be an object or a boolean");
        for (auto it = schema.begin(); it != schema.end(); ++it) {
            if (unsupported_keywords().count(it.key())) fail(path + "/" + escape_pointer(it.key()), "keyword '" + it.key() + "' is not supported");
            if (it.key() == "uniqueItems" && it.value() == true) fail(path + "/uniqueItems", "keyword 'uniqueItems: true' is not supported");
        }
        if (schema.contains("$ref")) {
            Json rest = schema;
            const std::string ref = rest["$ref"].get<std::string>();
            rest.erase("$ref");
            bool only_annotations = true;
            for (auto it = rest.begin(); it != rest.end(); ++it) only_annotations &= annotation_keywords().count(it.key()) > 0;
            if (only_annotations) return ref_expr(ref, path);
            return convert(merge(resolve_ref(ref, path), rest, path), path, depth + 1);
        }
        if (schema.contains("allOf")) {
            const Json& all = schema["allOf"];
            if (!all.is_array() || all.empty()) fail(path + "/allOf", "allOf must be a non-empty array");
            Json acc = schema;
            acc.erase("allOf");
            // additionalProperties sees only its own schema's properties: merging would change it.
            bool has_ap = acc.contains("additionalProperties");
            for (const Json& part : all) has_ap |= part.is_object() && part.contains("additionalProperties");
            if (has_ap) fail(path + "/allOf", "allOf together with additionalProperties is not supported");
            for (size_t i = 0; i < all.size(); ++i) {
                Json part = deref(all[i], path + "/allOf/" + std::to_string(i));
                if (part.is_boolean()) {
                    if (part.get<bool>()) continue;
                    fail(path + "/allOf/" + std::to_string(i), "the schema 'false' admits no value");
                }
                if (part.contains("allOf") || part.contains("anyOf") || part.contains("oneOf") || part.contains("$ref"))
                    fail(path + "/allOf/" + std::to_string(i), "allOf of schemas with their own combinators or references is not supported");
                acc = merge(acc, part, path);
            }
            return convert(acc, path, depth + 1);
        }
        for (const char* comb : {"anyOf", "oneOf"}) {
            if (!schema.contains(comb)) continue;
            const Json& alts = schema[comb];
            if (!alts.is_array() || alts.empty()) fail(path + "/" + comb, std::string(comb) + " must be a non-empty array");
            Json base = schema;
            base.erase(comb);
            bool base_empty = true;
            for (auto it = base.begin(); it != base.end(); ++it) base_empty &= annotation_keywords().count(it.key()) > 0;
            if (std::string(comb) == "oneOf") check_disjoint(alts, path);
            std::vector<ExprId> out;
            for (size_t i = 0; i < alts.size(); ++i) {
                const std::string p = path + "/" + comb + "/" + std::to_string(i);
                if (alts[i].is_boolean() && !alts[i].get<bool>()) continue;  // admits nothing
                if (base_empty) out.push_back(convert(alts[i], p, depth + 1));
                else out.push_back(convert(merge(base, deref(alts[i], p), p), p, depth + 1));
            }
            if (out.empty()) fail(path + "/" + comb, "no branch admits a value");
            return g_.alt(std::move(out));
        }
        if (schema.contains("const")) return literal_value(schema["const"]);
        if (schema.contains("enum")) {
            const Json& e = schema["enum"];
            if (!e.is_array() || e.empty()) fail(path + "/enum", "enum must be a non-empty array");
            std::vector<ExprId> alts;
            for (const Json& v : e)
                if (type_allows(schema, v)) alts.push_back(literal_value(v));
            if (alts.empty()) fail(path + "/enum", "no enum value has the schema's type");
            return g_.alt(std::move(alts));
        }
        std::vector<std::string> types;
        if (schema.contains("type")) {
            const Json& t = schema["type"];
            if (t.is_string()) types.push_back(t.get<std::string>());
            else if (t.is_array())
                for (const Json& x : t) {
                    if (!x.is_string()) fail(path + "/type", "type entries must be strings");
                    types.push_back(x.get<std::string>());
                }
            else fail(path + "/type", "type must be a string or an array of strings");
            if (types.empty()) fail(path + "/type", "type must not be empty");
        } else {
            // Infer from the keywords present; none at all means any value.
            auto has = [&](std::initializer_list<const char*> ks) {
                for (const char* k : ks)
                    if (schema.contains(k)) return true;
                return false;
            };
            if (has({"properties", "required", "additionalProperties"})) types.push_back("object");
            if (has({"items", "prefixItems", "minItems", "maxItems", "additionalItems"})) types.push_back("array");
            if (has({"minLength", "maxLength", "pattern", "format"})) types.push_back("string");
            if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) types.push_back("number");
            if (types.empty()) {
                for (auto it = schema.begin(); it != schema.end(); ++it)
                    if (!annotation_keywords().count(it.key()) && it.key() != "uniqueItems")
                        fail(path + "/" + escape_pointer(it.key()), "keyword '" + it.key() + "' is not supported");
                return g_.ref(any_value_rule());
            }
        }
        std::vector<ExprId> alts;
        const bool has_number = std::find(types.begin(), types.end(), "number") != types.end();
        for (const std::string& t : types) {
            if (t == "string") alts.push_back(string_expr(schema, path));
            else if (t == "integer") {
                if (!has_number) alts.push_back(integer_expr(schema, path));
            } else if (t == "number") alts.push_back(number_schema_expr(schema, path));
            else if (t == "boolean") alts.push_back(g_.alt({lit("true"), lit("false")}));
            else if (t == "null") alts.push_back(lit("null"));
            else if (t == "object") alts.push_back(object_expr(schema, path, depth));
            else if (t == "array") alts.push_back(array_expr(schema, path, depth));
            else fail(path + "/type", "unknown type '" + t + "'");
        }
        return g_.alt(std::move(alts));
    }

    // oneOf is compiled as anyOf, which is exact only when no value matches two branches. Accepted
    // when every pair of branches is provably disjoint: disjoint explicit types, or objects that
    // require a common property with disjoint const/enum values (a discriminator).
    void check_disjoint(const Json& alts, const std::string& path) {
        auto types = [](const Json& b) -> std::optional<std::set<std::string>> {
            if (!b.is_object() || !b.contains("type")) {
                if (b.is_object() && b.contains("const")) return std::set<std::string>{"const"};
                return std::nullopt;
            }
            std::set<std::string> t;
            if (b["type"].is_string()) t.insert(b["type"].get<std::string>());
            else for (const Json& x : b["type"]) t.insert(x.get<std::string>());
            if (t.count("number")) t.insert("integer");
            return t;
        };
        auto values = [](const Json& b, const std::string& p) -> std::optional<std::vector<Json>> {
            if (!b.is_object() || !b.contains("properties") || !b["properties"].contains(p)) return std::nullopt;
            const Json& ps = b["properties"][p];
            if (ps.contains("const")) return std::vector<Json>{ps["const"]};
            if (ps.contains("enum") && ps["enum"].is_array()) return std::vector<Json>(ps["enum"].begin(), ps["enum"].end());
            return std::nullopt;
        };
        auto required = [](const Json& b) {
            std::set<std::string> r;
            if (b.is_object() && b.contains("required") && b["required"].is_array())
                for (const Json& x : b["required"]) if (x.is_string()) r.insert(x.get<std::string>());
            return r;
        };
        for (size_t i = 0; i < alts.size(); ++i)
            for (size_t j = i + 1; j < alts.size(); ++j) {
                const Json a = deref(alts[i], path), b = deref(alts[j], path);
                const auto ta = types(a), tb = types(b);
                bool disjoint = false;
                if (ta && tb && !ta->count("const") && !tb->count("const")) {
                    disjoint = true;
                    for (const auto& t : *ta) disjoint &= !tb->count(t);
                }
                if (!disjoint && a.is_object() && b.is_object() && a.contains("const") && b.contains("const"))
                    disjoint = a["const"] != b["const"];
                if (!disjoint)
                    for (const std::string& p : required(a)) {
                        if (!required(b).count(p)) continue;
                        const auto va = values(a, p), vb = values(b, p);
                        if (!va || !vb) continue;
                        bool overlap = false;
                        for (const Json& x : *va) overlap |= std::find(vb->begin(), vb->end(), x) != vb->end();
                        if (!overlap) {
                            disjoint = true;
                            break;
                        }
                    }
                if (!disjoint)
                    fail(path + "/oneOf", "oneOf branches " + std::to_string(i) + " and " + std::to_string(j) +
                                              " may both match (only disjoint types or a const/enum discriminator are supported)");
            }
    }

    static bool type_allows(const Json& schema, const Json& v) {
        if (!schema.contains("type")) return true;
        std::vector<std::string> ts;
        if (schema["type"].is_string()) ts.push_back(schema["type"].get<std::string>());
        else for (const Json& t : schema["type"]) ts.push_back(t.get<std::string>());
        for (const std::string& t : ts) {
            if ((t == "string" && v.is_string()) || (t == "number" && v.is_number()) || (t == "boolean" && v.is_boolean()) ||
                (t == "null" && v.is_null()) || (t == "object" && v.is_object()) || (t == "array" && v.is_array()))
                return true;
            if (t == "integer" && (v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>())))
                return true;
        }
        return false;
    }

    ExprId literal_value(const Json& v) { return lit(v.dump(-1, ' ', false, Json::error_handler_t::replace)); }

    int64_t get_count(const Json& schema, const char* key, const std::string& path, int64_t def) {
        if (!schema.contains(key)) return def;
        const Json& v = schema[key];
        if (!v.is_number() || v.get<double>() < 0 || std::floor(v.get<double>()) != v.get<double>())
            fail(path + "/" + key, std::string(key) + " must be a non-negative integer");
        if (v.get<double>() > 100000) fail(path + "/" + key, std::string(key) + " above 100000 is not supported");
        return static_cast<int64_t>(v.get<double>());
    }

    ExprId string_expr(const Json& schema, const std::string& path) {
        const bool has_len = schema.contains("minLength") || schema.contains("maxLength");
        const int64_t min_len = get_count(schema, "minLength", path, 0);
        const int64_t max_len = get_count(schema, "maxLength", path, -1);
        if (max_len >= 0 && max_len < min_len) fail(path, "maxLength is below minLength");
        if (schema.contains("pattern")) {
            if (has_len) fail(path, "pattern together with minLength/maxLength is not supported");
            if (schema.contains("format")) fail(path, "pattern together with format is not supported");
            if (!schema["pattern"].is_string()) fail(path + "/pattern", "pattern must be a string");
            return g_.seq({lit("\""), regex_expr(schema["pattern"].get<std::string>(), path + "/pattern", true), lit("\"")});
        }
        if (schema.contains("format")) {
            if (!schema["format"].is_string()) fail(path + "/format", "format must be a string");
            const std::string f = schema["format"].get<std::string>();
            const char* re = format_regex(f);
            if (!re) fail(path + "/format", "format '" + f + "' is not supported (supported: date, time, date-time, email, uuid, ipv4, uri)");
            if (has_len) fail(path, "format together with minLength/maxLength is not supported");
            return g_.seq({lit("\""), regex_expr(re, path + "/format", false), lit("\"")});
        }
        if (!has_len) return g_.ref(string_rule());
        // A rule of its own per pair of bounds: a counted repetition (automaton.h) when maxLength
        // (or minLength) is at least 2, whose caches do not grow with the count.
        auto [it, fresh] = bounded_strings_.try_emplace({min_len, max_len}, -1);
        if (fresh)
            it->second = g_.add_rule("json_string_" + std::to_string(min_len) + "_" + (max_len < 0 ? "inf" : std::to_string(max_len)),
                                     g_.seq({lit("\""), g_.repeat(string_char(), int32_t(min_len), int32_t(max_len)), lit("\"")}));
        return g_.ref(it->second);
    }

    static const char* format_regex(const std::string& f) {
        // Dates: days per month exact except February 29 (leap years are not modelled: never produced).
        static const char* kDate = "[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))";
        static const char* kTime = "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,9})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
        static const std::string kDateTime = std::string(kDate) + "T" + kTime;
        if (f == "date") return kDate;
        if (f == "time") return kTime;
        if (f == "date-time") return kDateTime.c_str();
        if (f == "uuid") return "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
        if (f == "ipv4") return "(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])\\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])";
        if (f == "email")
            return "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(?:\\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\\.)+[A-Za-z](?:[A-Za-z0-9-]*[A-Za-z0-9])?";
        if (f == "uri")
            return "[A-Za-z][A-Za-z0-9+.-]*://(?:[A-Za-z0-9._~!$&'()*+,;=:-]|%[0-9A-Fa-f]{2})*(?:/(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|%[0-9A-Fa-f]{2})*)*(?:\\?(?:[A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*)?(?:#(?:[A-Za-z0-9._~!$&'()*+,;=:@/?-]|%[0-9A-Fa-f]{2})*)?";
        return nullptr;
    }

    struct Bounds {
        std::optional<double> lo, hi;
        bool lo_excl = false, hi_excl = false;
    };
    Bounds bounds(const Json& schema, const std::string& path) {
        Bounds b;
        auto num = [&](const char* k) -> std::optional<double> {
            if (!schema.contains(k)) return std::nullopt;
            const Json& v = schema[k];
            if (v.is_boolean()) return std::nullopt;  // draft-04 style booleans: handled below
            if (!v.is_number()) fail(path + "/" + k, std::string(k) + " must be a number");
            const double d = v.get<double>();
            if (!std::isfinite(d)) fail(path + "/" + k, std::string(k) + " must be finite");
            return d;
        };
        b.lo = num("minimum");
        b.hi = num("maximum");
        if (auto x = num("exclusiveMinimum"); x && (!b.lo || *x >= *b.lo)) b.lo = x, b.lo_excl = true;
        if (auto x = num("exclusiveMaximum"); x && (!b.hi || *x <= *b.hi)) b.hi = x, b.hi_excl = true;
        return b;
    }

    // Integer bounds (inclusive) of a Bounds, clamped to +-kIntCap.
    static std::pair<std::optional<int64_t>, std::optional<int64_t>> int_bounds(const Bounds& b) {
        std::optional<int64_t> lo, hi;
        if (b.lo) {
            double v = std::ceil(*b.lo);
            if (b.lo_excl && v == *b.lo) v += 1;
            lo = static_cast<int64_t>(std::clamp(v, -double(kIntCap), double(kIntCap)));
        }
        if (b.hi) {
            double v = std::floor(*b.hi);
            if (b.hi_excl && v == *b.hi) v -= 1;
            hi = static_cast<int64_t>(std::clamp(v, -double(kIntCap), double(kIntCap)));
        }
        return {lo, hi};
    }

    ExprId integer_expr(const Json& schema, const std::string& path) {
        const Bounds b = bounds(schema, path);
        if (!b.lo && !b.hi) return g_.ref(integer_rule());
        auto [lo, hi] = int_bounds(b);
        if (lo && hi && *lo > *hi) fail(path, "no integer satisfies the bounds");
        return regex_expr(int_range_regex(lo, hi), path, false);
    }

    ExprId number_schema_expr(const Json& schema, const std::string& path) {
        const Bounds b = bounds(schema, path);
        if (!b.lo && !b.hi) return g_.ref(number_rule());
        // Bounded numbers: integers in range, plus I.F (at most 6 fraction digits, the last not 0)
        // whose open interval (I, I+1) (or (-(I+1), -I)) lies inside the bounds. Sound; values
        // closer than one unit to a non-integer bound are not produced.
        constexpr int64_t kExact = 999999999999999;  // integer forms stay exact in a double
        constexpr int64_t kFracCap = 999999999;      // I.FFFFFF stays exact enough in a double
        auto [ilo, ihi] = int_bounds(b);
        if (!ilo) ilo = -kExact;
        if (!ihi) ihi = kExact;
        ilo = std::max<int64_t>(*ilo, -kExact);
        ihi = std::min<int64_t>(*ihi, kExact);
        std::vector<std::string> alts;
        if (*ilo <= *ihi) alts.push_back(int_range_regex(ilo, ihi));
        const std::string frac = "\\.[0-9]{0,5}[1-9]";
        const double lo = b.lo ? *b.lo : -double(kExact), hi = b.hi ? *b.hi : double(kExact);
        // Positive fractions: I >= 0, I >= lo, I + 1 <= hi.
        {
            const int64_t a = std::max<int64_t>(0, static_cast<int64_t>(std::ceil(std::max(lo, -1.0))));
            const int64_t z = std::min<int64_t>(kFracCap, static_cast<int64_t>(std::floor(std::min(hi, double(kFracCap) + 1))) - 1);
            if (a <= z) alts.push_back(nonneg_range_regex(a, z) + frac);
        }
        // Negative fractions -(I.F): -(I+1) >= lo and -I <= hi.
        {
            const int64_t a = std::max<int64_t>(0, static_cast<int64_t>(std::ceil(std::max(-hi, -1.0))));
            const int64_t z = std::min<int64_t>(kFracCap, static_cast<int64_t>(std::floor(std::min(-lo, double(kFracCap) + 1))) - 1);
            if (a <= z) alts.push_back("-" + nonneg_range_regex(a, z) + frac);
        }
        std::erase(alts, std::string());
        if (alts.empty()) fail(path, "no number satisfies the bounds");
        std::string re = "(?:";
        for (size_t i = 0; i < alts.size(); ++i) re += (i ? "|" : "") + alts[i];
        return regex_expr(re + ")", path, false);
    }

    // JSON string of raw characters (no escapes) that is none of `names` (additional property keys:
    // without escapes, a key cannot spell a listed name another way).
    ExprId key_not_in(const std::vector<std::u32string>& names) {
        const Ranges raw = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}};
        // Trie over code points.
        struct Node {
            std::map<char32_t, int> kids;
            bool end = false;
        };
        std::vector<Node> nodes(1);
        for (const auto& n : names) {
            int cur = 0;
            for (char32_t c : n) {
                auto it = nodes[size_t(cur)].kids.find(c);
                if (it == nodes[size_t(cur)].kids.end()) {
                    nodes.emplace_back();
                    const int id = static_cast<int>(nodes.size() - 1);
                    nodes[size_t(cur)].kids[c] = id;
                    cur = id;
                } else {
                    cur = it->second;
                }
            }
            nodes[size_t(cur)].end = true;
        }
        const ExprId any_rest = g_.star(g_.char_class(raw));
        auto build = [&](auto&& self, int node) -> ExprId {
            std::vector<ExprId> alts;
            if (!nodes[size_t(node)].end) alts.push_back(g_.empty());
            Ranges others = raw;
            for (const auto& [c, kid] : nodes[size_t(node)].kids) {
                if (c < 0x20 || c == '"' || c == '\\') continue;  // not spellable without escapes
                std::string b;
                utf8::append_code_point(uint32_t(c), b);
                alts.push_back(g_.seq({g_.bytes(b), self(self, kid)}));
                Ranges cut;
                for (const auto& [lo, hi] : others) {
                    if (uint32_t(c) < lo || uint32_t(c) > hi) { cut.emplace_back(lo, hi); continue; }
                    if (lo < uint32_t(c)) cut.emplace_back(lo, uint32_t(c) - 1);
                    if (uint32_t(c) < hi) cut.emplace_back(uint32_t(c) + 1, hi);
                }
                others = std::move(cut);
            }
            if (!others.empty()) alts.push_back(g_.seq({g_.char_class(others), any_rest}));
            return g_.alt(std::move(alts));
        };
        return g_.seq({lit("\""), build(build, 0), lit("\"")});
    }

    static std::u32string to_u32(const std::string& s) {
        std::u32string o;
        for (size_t i = 0; i < s.size();) {
            const unsigned char c = static_cast<unsigned char>(s[i]);
            const int n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
            char32_t cp = n == 1 ? c : c & (0x7F >> n);
            for (int k = 1; k < n && i + size_t(k) < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + size_t(k)]) & 0x3F);
            o.push_back(cp);
            i += size_t(n);
        }
        return o;
    }

    // A value used in more than one rule (an object's optional-member rules) becomes a rule of its
    // own, so its automaton states (and their token caches) exist once.
    ExprId shared(ExprId e, const char* prefix) {
        const Expr& ex = g_.expr(e);
        if (ex.kind == ExprKind::kRuleRef || ex.kind == ExprKind::kBytes) return e;
        return g_.ref(g_.add_rule(prefix, e));
    }

    ExprId object_expr(const Json& schema, const std::string& path, int depth) {
        const Json empty_props = Json::object();
        const Json& props = schema.contains("properties") ? schema["properties"] : empty_props;
        if (!props.is_object()) fail(path + "/properties", "properties must be an object");
        std::vector<std::string> required;
        if (schema.contains("required")) {
            if (!schema["required"].is_array()) fail(path + "/required", "required must be an array");
            for (const Json& r : schema["required"]) {
                if (!r.is_string()) fail(path + "/required", "required entries must be strings");
                required.push_back(r.get<std::string>());
            }
        }
        // Additional properties: a schema, or none.
        std::optional<Json> additional;
        if (schema.contains("additionalProperties")) {
            const Json& ap = schema["additionalProperties"];
            if (ap.is_boolean()) {
                if (ap.get<bool>()) additional = Json(true);
            } else {
                additional = ap;
            }
        } else if (props.empty() || !o_.strict) {
            additional = Json(true);
        }
        if (props.empty() && required.empty() && additional && *additional == Json(true)) return g_.ref(any_object_rule());

        struct Member {
            ExprId expr;
            bool required;
        };
        std::vector<Member> members;
        std::vector<std::u32string> names;
        auto key_lit = [&](const std::string& name) { return lit(Json(name).dump(-1, ' ', false, Json::error_handler_t::replace)); };
        for (auto it = props.begin(); it != props.end(); ++it) {
            const std::string p = path + "/properties/" + escape_pointer(it.key());
            const bool req = std::find(required.begin(), required.end(), it.key()) != required.end();
            if (it.value().is_boolean() && !it.value().get<bool>()) {  // the property may not appear
                if (req) fail(p, "required property '" + it.key() + "' has the schema 'false'");
                names.push_back(to_u32(it.key()));
                continue;
            }
            members.push_back({g_.seq({key_lit(it.key()), ws_, lit(":"), ws_, shared(convert(it.value(), p, depth + 1), "prop")}), req});
            names.push_back(to_u32(it.key()));
        }
        for (const std::string& r : required)
            if (!props.contains(r)) {
                if (!additional) fail(path + "/required", "required property '" + r + "' is not allowed by properties/additionalProperties");
                members.push_back({g_.seq({key_lit(r), ws_, lit(":"), ws_, convert(*additional, path + "/additionalProperties", depth + 1)}), true});
                names.push_back(to_u32(r));
            }
        std::optional<ExprId> extra;
        if (additional) extra = g_.seq({key_not_in(names), ws_, lit(":"), ws_, convert(*additional, path + "/additionalProperties", depth + 1)});

        const ExprId comma = g_.seq({ws_, lit(","), ws_});
        // rest(i, first): members i.. in order, optional ones skippable, then the extras.
        const size_t n = members.size();
        bool any_optional = false;
        for (const Member& m : members) any_optional |= !m.required;
        ExprId body;
        if (!any_optional) {
            std::vector<ExprId> parts;
            for (size_t i = 0; i < n; ++i) {
                if (i) parts.push_back(comma);
                parts.push_back(members[i].expr);
            }
            if (extra) {
                if (n == 0) parts.push_back(g_.opt(g_.seq({*extra, g_.star(g_.seq({comma, *extra}))})));
                else parts.push_back(g_.star(g_.seq({comma, *extra})));
            }
            body = g_.seq(std::move(parts));
        } else {
            const int32_t id = object_counter_++;
            std::vector<std::array<int32_t, 2>> rules(n + 1, {-1, -1});
            for (size_t i = 0; i <= n; ++i)
                for (int first = 0; first < 2; ++first)
                    rules[i][size_t(first)] = g_.add_rule("obj" + std::to_string(id) + "_" + std::to_string(i) + (first ? "_first" : "_next"), -1);
            for (size_t i = 0; i <= n; ++i)
                for (int first = 0; first < 2; ++first) {
                    ExprId e;
                    if (i == n) {
                        if (!extra) e = g_.empty();
                        else if (first) e = g_.opt(g_.seq({*extra, g_.star(g_.seq({comma, *extra}))}));
                        else e = g_.star(g_.seq({comma, *extra}));
                    } else {
                        const ExprId take = g_.seq({first ? g_.empty() : comma, members[i].expr, g_.ref(rules[i + 1][0])});
                        e = members[i].required ? take : g_.alt({take, g_.ref(rules[i + 1][size_t(first)])});
                    }
                    g_.define(rules[i][size_t(first)], e);
                }
            body = g_.ref(rules[0][1]);
        }
        return g_.seq({lit("{"), ws_, body, ws_, lit("}")});
    }

    ExprId array_expr(const Json& schema, const std::string& path, int depth) {
        const int64_t min_items = get_count(schema, "minItems", path, 0);
        const int64_t max_items = get_count(schema, "maxItems", path, -1);
        if (max_items >= 0 && max_items < min_items) fail(path, "maxItems is below minItems");
        std::vector<Json> prefix;
        std::optional<Json> rest = Json(true);
        if (schema.contains("prefixItems")) {
            if (!schema["prefixItems"].is_array()) fail(path + "/prefixItems", "prefixItems must be an array");
            for (const Json& p : schema["prefixItems"]) prefix.push_back(p);
            if (schema.contains("items")) rest = schema["items"];
        } else if (schema.contains("items") && schema["items"].is_array()) {  // draft-07 tuple
            for (const Json& p : schema["items"]) prefix.push_back(p);
            if (schema.contains("additionalItems")) rest = schema["additionalItems"];
        } else if (schema.contains("items")) {
            rest = schema["items"];
        }
        if (rest && rest->is_boolean() && !rest->get<bool>()) rest.reset();
        auto item_ref = [&](const Json& s, const std::string& p) {
            const ExprId e = convert(s, p, depth + 1);
            const Expr& ex = g_.expr(e);
            if (ex.kind == ExprKind::kRuleRef || ex.kind == ExprKind::kBytes) return e;
            return g_.ref(g_.add_rule("item", e));
        };
        const ExprId comma = g_.seq({ws_, lit(","), ws_});
        for (size_t j = 0; j < prefix.size(); ++j)
            if (prefix[j].is_boolean() && !prefix[j].get<bool>()) {  // no element from here on
                prefix.resize(j);
                rest.reset();
                break;
            }
        const int64_t P = static_cast<int64_t>(prefix.size());
        if (!rest && min_items > P) fail(path, "minItems exceeds the number of allowed items");
        std::vector<ExprId> prefix_e;
        for (int64_t j = 0; j < P; ++j) prefix_e.push_back(item_ref(prefix[size_t(j)], path + "/prefixItems/" + std::to_string(j)));
        // Tail after the prefix: items number k in [kmin, kmax], each preceded by a comma.
        std::optional<ExprId> rest_e;
        if (rest) rest_e = item_ref(*rest, path + "/items");
        const int64_t kmin = std::max<int64_t>(0, min_items - P);
        const int64_t kmax = max_items < 0 ? -1 : std::max<int64_t>(0, max_items - P);
        if (kmax > 10000 || kmin > 10000) fail(path, "item counts above 10000 are not supported");
        // Elements: e_0 .. e_{P-1} from prefix (optional from index min_items on), then the tail.
        // build(j, first): the elements from j on.
        auto tail = [&](bool first) -> ExprId {
            if (!rest_e || kmax == 0) return g_.empty();
            const ExprId one = first ? *rest_e : g_.seq({comma, *rest_e});
            const ExprId more = g_.seq({comma, *rest_e});
            if (kmin == 0) {
                const int32_t mx = kmax < 0 ? -1 : int32_t(kmax - 1);
                return g_.opt(g_.seq({one, g_.repeat(more, 0, mx)}));
            }
            return g_.seq({one, g_.repeat(more, int32_t(kmin - 1), kmax < 0 ? -1 : int32_t(kmax - 1))});
        };
        const int64_t maxP = max_items < 0 ? P : std::min(P, max_items);
        std::function<ExprId(int64_t)> build = [&](int64_t j) -> ExprId {
            if (j == maxP) return j < P ? g_.empty() : tail(j == 0);
            const ExprId elem = j == 0 ? prefix_e[size_t(j)] : g_.seq({comma, prefix_e[size_t(j)]});
            const ExprId e = g_.seq({elem, build(j + 1)});
            return j < min_items ? e : g_.opt(e);
        };
        const ExprId body = build(0);
        if (P == 0 && rest_e && g_.expr(*rest_e).kind == ExprKind::kRuleRef && g_.expr(*rest_e).rule == any_value_rule_if_built() &&
            min_items == 0 && max_items < 0)
            return g_.ref(any_array_rule());
        return g_.seq({lit("["), ws_, body, ws_, lit("]")});
    }
    int32_t any_value_rule_if_built() const { return value_rule_; }

    Grammar g_;
    const Json& root_;
    JsonOptions o_;
    ExprId ws_ = -1;
    ExprId string_char_ = -1;
    std::map<std::pair<int64_t, int64_t>, int32_t> bounded_strings_;  // (minLength, maxLength) -> rule
    int32_t string_rule_ = -1, number_rule_ = -1, integer_rule_ = -1, value_rule_ = -1, object_rule_ = -1;
    int32_t object_counter_ = 0;
    std::map<std::string, int32_t> ref_rules_;
};

}  // namespace

Grammar json_schema_grammar(std::string_view schema_text, const JsonOptions& options) {
    Json schema = Json::parse(schema_text, nullptr, false);
    if (schema.is_discarded()) throw GrammarError("json_schema", "/", "the schema is not valid JSON");
    return SchemaConverter(schema, options).convert_root();
}

Grammar json_object_grammar(const JsonOptions& options) {
    const Json empty = Json::object();
    return SchemaConverter(empty, options).any_object_root();
}

}  // namespace deepinfer::grammar
