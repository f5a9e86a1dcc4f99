// SPDX-License-Identifier: Apache-2.0
// JSON Schema front end: instances the schema accepts and rejects (compact whitespace, so each
// instance has one spelling), whitespace policies, and error records for unsupported schemas.
#include <gtest/gtest.h>

#include "test_util.h"

namespace deepinfer {
namespace {

using test::accepts;

struct SchemaFixture : ::testing::Test {
    // Single bytes of everything JSON needs, so any string is reachable byte by byte.
    std::shared_ptr<TokenVocabulary> vocab = [] {
        std::vector<std::string> toks = {"<eos>"};
        for (int b = 1; b < 256; ++b) toks.emplace_back(1, char(b));
        return std::make_shared<TokenVocabulary>(std::move(toks), std::vector<int32_t>{0});
    }();
    GrammarCompiler compiler{vocab};
    CompiledGrammar compact(const std::string& schema) { return compiler.compile_json_schema(schema, {JsonWhitespace::kCompact, 0, true}); }
};

TEST_F(SchemaFixture, ObjectsPropertiesRequiredAndAdditional) {
    auto g = compact(R"J({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}}, "required": ["b"]})J");
    EXPECT_TRUE(accepts(g, R"J({"b":"x"})J"));
    EXPECT_TRUE(accepts(g, R"J({"a":1,"b":"x","c":true})J"));
    EXPECT_TRUE(accepts(g, R"J({"a":-12,"b":""})J"));
    EXPECT_FALSE(accepts(g, R"J({"a":1})J"));             // b required
    EXPECT_FALSE(accepts(g, R"J({"b":"x","d":1})J"));     // strict: no extras
    EXPECT_FALSE(accepts(g, R"J({"a":1.5,"b":"x"})J"));   // integer
    auto extra = compact(R"J({"type": "object", "properties": {"id": {"type": "integer"}}, "additionalProperties": {"type": "number"}})J");
    EXPECT_TRUE(accepts(extra, R"J({"id":1,"x":2.5,"y":3})J"));
    EXPECT_TRUE(accepts(extra, R"J({"x":2.5})J"));
    EXPECT_FALSE(accepts(extra, R"J({"id":1,"id":2})J"));  // a listed name is not an extra key
    EXPECT_FALSE(accepts(extra, R"J({"x":"s"})J"));
    auto any = compact(R"J({"type": "object"})J");
    EXPECT_TRUE(accepts(any, R"J({"k":[1,{"z":null}],"":"\u00e9"})J"));
}

TEST_F(SchemaFixture, ArraysTuplesAndCounts) {
    auto g = compact(R"J({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3})J");
    EXPECT_FALSE(accepts(g, "[1]"));
    EXPECT_TRUE(accepts(g, "[1,2]"));
    EXPECT_TRUE(accepts(g, "[1,2,3]"));
    EXPECT_FALSE(accepts(g, "[1,2,3,4]"));
    auto t = compact(R"J({"type": "array", "prefixItems": [{"type": "string"}, {"type": "null"}], "items": false})J");
    EXPECT_TRUE(accepts(t, "[]"));
    EXPECT_TRUE(accepts(t, R"J(["a"])J"));
    EXPECT_TRUE(accepts(t, R"J(["a",null])J"));
    EXPECT_FALSE(accepts(t, R"J(["a",null,1])J"));
    auto d7 = compact(R"J({"type": "array", "items": [{"type": "boolean"}], "additionalItems": {"type": "integer"}, "minItems": 1})J");
    EXPECT_TRUE(accepts(d7, "[true,1,2]"));
    EXPECT_FALSE(accepts(d7, "[]"));
    EXPECT_FALSE(accepts(d7, "[1]"));
}

TEST_F(SchemaFixture, IntegerAndNumberBounds) {
    auto g = compact(R"J({"type": "integer", "minimum": -15, "exclusiveMaximum": 120})J");
    for (int v = -30; v <= 140; ++v) EXPECT_EQ(accepts(g, std::to_string(v)), v >= -15 && v < 120) << v;
    EXPECT_FALSE(accepts(g, "007"));
    auto big = compact(R"J({"type": "integer", "minimum": 1000})J");
    EXPECT_TRUE(accepts(big, "1000"));
    EXPECT_TRUE(accepts(big, "123456789012345678901234"));
    EXPECT_FALSE(accepts(big, "999"));
    auto n = compact(R"J({"type": "number", "minimum": 0, "maximum": 1})J");
    EXPECT_TRUE(accepts(n, "0"));
    EXPECT_TRUE(accepts(n, "1"));
    EXPECT_TRUE(accepts(n, "0.25"));
    EXPECT_FALSE(accepts(n, "1.5"));
    EXPECT_FALSE(accepts(n, "-0.5"));
    EXPECT_FALSE(accepts(n, "2"));
    auto ex = compact(R"J({"type": "number", "exclusiveMinimum": 2})J");
    EXPECT_FALSE(accepts(ex, "2"));
    EXPECT_TRUE(accepts(ex, "2.5"));
    EXPECT_TRUE(accepts(ex, "3"));
}

TEST_F(SchemaFixture, StringsLengthsFormatsPatterns) {
    auto len = compact(R"J({"type": "string", "minLength": 2, "maxLength": 3})J");
    EXPECT_FALSE(accepts(len, R"J("a")J"));
    EXPECT_TRUE(accepts(len, R"J("a\n")J"));
    EXPECT_TRUE(accepts(len, "\"\xC3\xA9\xC3\xA9\xC3\xA9\""));
    EXPECT_FALSE(accepts(len, R"J("abcd")J"));
    EXPECT_FALSE(accepts(len, R"J("\ud83d\ude00")J"));  // escaped surrogates are never produced
    auto date = compact(R"J({"type": "string", "format": "date"})J");
    EXPECT_TRUE(accepts(date, R"J("2024-02-28")J"));
    EXPECT_FALSE(accepts(date, R"J("2024-02-30")J"));
    EXPECT_FALSE(accepts(date, R"J("2024-13-01")J"));
    auto dt = compact(R"J({"type": "string", "format": "date-time"})J");
    EXPECT_TRUE(accepts(dt, R"J("2024-01-31T23:59:59.123+05:30")J"));
    EXPECT_FALSE(accepts(dt, R"J("2024-01-31 23:59:59Z")J"));
    auto uuid = compact(R"J({"format": "uuid"})J");
    EXPECT_TRUE(accepts(uuid, R"J("123e4567-e89b-12d3-a456-426614174000")J"));
    auto ip = compact(R"J({"type": "string", "format": "ipv4"})J");
    EXPECT_TRUE(accepts(ip, R"J("192.168.0.255")J"));
    EXPECT_FALSE(accepts(ip, R"J("256.1.1.1")J"));
    EXPECT_FALSE(accepts(ip, R"J("01.1.1.1")J"));
    auto email = compact(R"J({"type": "string", "format": "email"})J");
    EXPECT_TRUE(accepts(email, R"J("a.b+c@example.co")J"));
    EXPECT_FALSE(accepts(email, R"J("a@b")J"));
    auto pat = compact(R"J({"type": "string", "pattern": "^[A-Z]{2}-\\d{3}$"})J");
    EXPECT_TRUE(accepts(pat, R"J("AB-123")J"));
    EXPECT_FALSE(accepts(pat, R"J("AB-12")J"));
}

TEST_F(SchemaFixture, EnumConstCombinatorsRefsRecursion) {
    auto e = compact(R"J({"enum": ["red", 1, null, {"a": [true]}]})J");
    EXPECT_TRUE(accepts(e, R"J("red")J"));
    EXPECT_TRUE(accepts(e, R"J({"a":[true]})J"));
    EXPECT_FALSE(accepts(e, R"J("blue")J"));
    auto c = compact(R"J({"const": "x"})J");
    EXPECT_TRUE(accepts(c, R"J("x")J"));
    auto u = compact(R"J({"type": ["string", "null"]})J");
    EXPECT_TRUE(accepts(u, "null"));
    EXPECT_TRUE(accepts(u, R"J("s")J"));
    EXPECT_FALSE(accepts(u, "1"));
    auto all = compact(R"J({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                                       {"properties": {"b": {"type": "string"}}, "required": ["b"]}]})J");
    EXPECT_TRUE(accepts(all, R"J({"a":1,"b":"x"})J"));
    EXPECT_FALSE(accepts(all, R"J({"a":1})J"));
    auto tree = compact(R"J({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}}, "$ref": "#/$defs/node"})J");
    EXPECT_TRUE(accepts(tree, R"J({"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4,"kids":[]}]}]})J"));
    EXPECT_FALSE(accepts(tree, R"J({"v":1,"kids":[{"w":2}]})J"));
    auto d7 = compact(R"J({"definitions": {"p": {"type": "integer"}}, "type": "array", "items": {"$ref": "#/definitions/p"}})J");
    EXPECT_TRUE(accepts(d7, "[1,2]"));
}

TEST_F(SchemaFixture, FalseSubschemasAndEscapedReferences) {
    auto g = compact(R"J({"type": "object", "properties": {"a": {"type": "integer"}, "b": false}, "additionalProperties": true})J");
    EXPECT_TRUE(accepts(g, R"J({"a":1,"c":2})J"));
    EXPECT_FALSE(accepts(g, R"J({"a":1,"b":2})J"));  // "b" may not appear, not even as an extra key
    auto any = compact(R"J({"anyOf": [false, {"type": "null"}]})J");
    EXPECT_TRUE(accepts(any, "null"));
    auto tuple = compact(R"J({"prefixItems": [{"type": "integer"}, false]})J");
    EXPECT_TRUE(accepts(tuple, "[1]"));
    EXPECT_FALSE(accepts(tuple, "[1,2]"));
    auto ref = compact(R"J({"$defs": {"a%b": {"type": "boolean"}}, "$ref": "#/$defs/a%25b"})J");
    EXPECT_TRUE(accepts(ref, "true"));
}

TEST_F(SchemaFixture, WhitespacePolicies) {
    const std::string s = R"J({"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"}}}, "required": ["a"]})J";
    auto flex = compiler.compile_json_schema(s, {JsonWhitespace::kFlexible, 4, true});
    EXPECT_TRUE(accepts(flex, "{ \"a\" : [ 1 ,\n  2 ] }"));
    EXPECT_FALSE(accepts(flex, "\n{\"a\":[]}"));  // no leading whitespace
    EXPECT_TRUE(accepts(flex, "{\"a\":[]}\n\n"));
    EXPECT_FALSE(accepts(flex, "{     \"a\":[]}"));  // 5 spaces > max 4
    auto comp = compiler.compile_json_schema(s, {JsonWhitespace::kCompact, 4, true});
    EXPECT_FALSE(accepts(comp, "{ \"a\":[]}"));
    EXPECT_TRUE(accepts(comp, "{\"a\":[1,2]}"));
    auto obj = compiler.compile({GrammarSpec::Kind::kJsonObject, "", {JsonWhitespace::kCompact, 0, true}, "", ""});
    EXPECT_TRUE(accepts(obj, R"J({"x":[1,"y",{"z":-1.5e3}]})J"));
    EXPECT_FALSE(accepts(obj, "[1]"));
}

TEST_F(SchemaFixture, UnsupportedOrInvalidSchemasAreErrorsWithPointerAndReason) {
    auto expect_error = [&](const std::string& schema, const std::string& where, const std::string& reason_part) {
        try {
            compact(schema);
            ADD_FAILURE() << "no error for " << schema;
        } catch (const GrammarError& e) {
            EXPECT_EQ(e.source(), "json_schema");
            EXPECT_EQ(e.where(), where) << schema << " -> " << e.what();
            EXPECT_NE(e.reason().find(reason_part), std::string::npos) << e.reason();
        }
    };
    expect_error(R"J({"type": "object", "properties": {"a": {"not": {"type": "string"}}}})J", "/properties/a/not", "'not' is not supported");
    expect_error(R"J({"type": "array", "uniqueItems": true})J", "/uniqueItems", "uniqueItems");
    expect_error(R"J({"type": "string", "format": "hostname"})J", "/format", "'hostname' is not supported");
    expect_error(R"J({"type": "string", "pattern": "(a"})J", "/pattern", "invalid pattern");
    expect_error(R"J({"$ref": "#/$defs/missing"})J", "/$ref", "does not resolve");
    expect_error(R"J({"$ref": "http://example.com/s.json"})J", "/$ref", "only local references");
    expect_error(R"J({"type": "integer", "minimum": 5, "maximum": 4})J", "/", "no integer satisfies");
    expect_error(R"J({"type": "widget"})J", "/type", "unknown type");
    expect_error(R"J({"type": "object", "properties": {"a": false}, "required": ["a"]})J", "/properties/a", "has the schema 'false'");
    expect_error("{not json", "/", "not valid JSON");
}

}  // namespace
}  // namespace deepinfer
