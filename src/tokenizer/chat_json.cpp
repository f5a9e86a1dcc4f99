// SPDX-License-Identifier: Apache-2.0
// Deterministic JSON spelling for prompts. Floats go through std::to_chars' shortest round-trip
// digits, then are laid out the way Python's repr (V4.1) or DeepSeek's V4 formatter does.
#include "tokenizer/chat_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <initializer_list>

#include "deepinfer/check.h"

namespace deepinfer {

std::string format_float(double value, ChatFamily family) {
    DI_CHECK(std::isfinite(value), "non-finite number in JSON");
    if (value == 0.0) return std::signbit(value) ? "-0.0" : "0.0";
    // Shortest round-trip digits and the decimal exponent: d.ddd x 10^exp.
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
    DI_ICHECK(res.ec == std::errc());
    std::string sci(buf, res.ptr);
    const bool negative = sci[0] == '-';
    if (negative) sci.erase(0, 1);
    const size_t e_pos = sci.find('e');
    std::string digits = sci.substr(0, e_pos);
    const int exp = std::stoi(sci.substr(e_pos + 1));
    digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
    const int lo = family == ChatFamily::kV4 ? -5 : -4;
    // Built with append() only: GCC 12 misreports -Wrestrict on chains of operator+.
    std::string out;
    if (negative) out.push_back('-');
    if (exp >= lo && exp < 16) {
        // Positional, with at least one digit after the point.
        const int n = static_cast<int>(digits.size());
        if (exp < 0) {
            out.append("0.");
            out.append(size_t(-exp - 1), '0');
            out.append(digits);
        } else if (exp + 1 >= n) {
            out.append(digits);
            out.append(size_t(exp + 1 - n), '0');
            out.append(".0");
        } else {
            out.append(digits, 0, size_t(exp + 1));
            out.push_back('.');
            out.append(digits, size_t(exp + 1), std::string::npos);
        }
        return out;
    }
    out.push_back(digits[0]);
    if (digits.size() > 1) {
        out.push_back('.');
        out.append(digits, 1, std::string::npos);
    }
    char exp_buf[16];
    if (family == ChatFamily::kV4)
        std::snprintf(exp_buf, sizeof(exp_buf), "e%c%d", exp < 0 ? '-' : '+', std::abs(exp));
    else
        std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out.append(exp_buf);
    return out;
}

void append_json_escaped(std::string_view s, std::string& out) {
    for (unsigned char c : s) {
        switch (c) {
            case '"': out += "\\\""; break;
            case '\\': out += "\\\\"; break;
            case '\n': out += "\\n"; break;
            case '\r': out += "\\r"; break;
            case '\t': out += "\\t"; break;
            case '\b': out += "\\b"; break;
            case '\f': out += "\\f"; break;
            default:
                if (c < 0x20) {
                    char b[8];
                    std::snprintf(b, sizeof(b), "\\u%04x", c);
                    out += b;
                } else {
                    out.push_back(static_cast<char>(c));
                }
        }
    }
}

namespace {

void dump_string(const std::string& s, std::string& out) {
    out.push_back('"');
    append_json_escaped(s, out);
    out.push_back('"');
}

void dump(const OrderedJson& v, ChatFamily family, std::string& out) {
    switch (v.type()) {
        case OrderedJson::value_t::null: out += "null"; break;
        case OrderedJson::value_t::boolean: out += v.get<bool>() ? "true" : "false"; break;
        case OrderedJson::value_t::number_integer: out += std::to_string(v.get<int64_t>()); break;
        case OrderedJson::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); break;
        case OrderedJson::value_t::number_float: out += format_float(v.get<double>(), family); break;
        case OrderedJson::value_t::string: dump_string(v.get_ref<const std::string&>(), out); break;
        case OrderedJson::value_t::array: {
            out.push_back('[');
            bool first = true;
            for (const auto& e : v) {
                if (!first) out += ", ";
                first = false;
                dump(e, family, out);
            }
            out.push_back(']');
            break;
        }
        case OrderedJson::value_t::object: {
            out.push_back('{');
            bool first = true;
            for (const auto& [key, e] : v.items()) {
                if (!first) out += ", ";
                first = false;
                dump_string(key, out);
                out += ": ";
                dump(e, family, out);
            }
            out.push_back('}');
            break;
        }
        default: DI_THROW("cannot write this JSON value into a prompt");
    }
}

}  // namespace

std::string dump_prompt_json(const OrderedJson& value, ChatFamily family) {
    std::string out;
    dump(value, family, out);
    return out;
}

namespace {

// Copies the listed keys of `from` that are present, in this order.
void copy_keys(const OrderedJson& from, OrderedJson& to, std::initializer_list<const char*> keys) {
    for (const char* k : keys)
        if (from.contains(k)) to[k] = from[k];
}

OrderedJson strict_schema(const OrderedJson& schema) {
    DI_CHECK(schema.is_object() && (schema.contains("type") || schema.contains("anyOf") || schema.contains("$ref")),
             "Invalid tool parameters schema : one of `type`, `anyOf`, `$ref` field is required");
    OrderedJson out = OrderedJson::object();
    if (schema.contains("$ref")) {
        out["$ref"] = schema["$ref"];
        return out;
    }
    if (schema.contains("anyOf")) {
        OrderedJson any = OrderedJson::array();
        for (const auto& sub : schema["anyOf"]) any.push_back(strict_schema(sub));
        out["anyOf"] = any;
        copy_keys(schema, out, {"description"});
        return out;
    }
    const OrderedJson& type = schema["type"];
    out["type"] = type;
    if (type == "object") {
        OrderedJson props = OrderedJson::object();
        if (schema.contains("properties"))
            for (const auto& [key, sub] : schema["properties"].items()) props[key] = strict_schema(sub);
        OrderedJson required = OrderedJson::array();
        for (const auto& [key, sub] : props.items()) required.push_back(key);
        if (schema.contains("required")) {
            for (const auto& r : schema["required"])
                DI_CHECK(r.is_string() && props.contains(r.get<std::string>()), "Required property '",
                         r.is_string() ? r.get<std::string>() : r.dump(), "' not found in object");
            DI_CHECK(schema["required"].size() == props.size(),
                     "Required properties must match all properties in the object");
        }
        DI_CHECK(!schema.contains("additionalProperties") || schema["additionalProperties"] == false,
                 "additionalProperties should not be true");
        out["properties"] = props;
        out["additionalProperties"] = false;
        out["required"] = required;
        copy_keys(schema, out, {"description"});
    } else if (type == "array") {
        if (schema.contains("items")) out["items"] = strict_schema(schema["items"]);
        copy_keys(schema, out, {"description"});
    } else if (type == "string") {
        copy_keys(schema, out, {"description", "pattern", "format", "enum"});
    } else if (type == "number" || type == "integer") {
        copy_keys(schema, out, {"description", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
                                "multipleOf"});
    } else {
        copy_keys(schema, out, {"description"});
    }
    return out;
}

}  // namespace

OrderedJson normalize_strict_schema(const OrderedJson& schema) {
    DI_CHECK(schema.is_object() && (schema.contains("type") || schema.contains("anyOf") || schema.contains("$ref")),
             "Invalid tool parameters schema : one of `type`, `anyOf`, `$ref` field is required");
    DI_CHECK(schema.contains("type") && schema["type"] == "object",
             "The top level of the function parameters schema must be an object.");
    return strict_schema(schema);
}

}  // namespace deepinfer
