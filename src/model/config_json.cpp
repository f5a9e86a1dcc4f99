// SPDX-License-Identifier: Apache-2.0
// config.json reading helpers (see config_json.h).
#include "model/config_json.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "deepinfer/check.h"

namespace deepinfer::config_json {

std::string short_value(const json& v) {
    std::string s = v.dump();
    if (s.size() > 80) s = s.substr(0, 77) + "...";
    return s;
}

std::string list_str(const std::vector<int64_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
}

const json* Reader::find(std::initializer_list<std::string_view> keys) const {
    const json* found = nullptr;
    std::string_view found_key;
    for (std::string_view k : keys) {
        auto it = obj_.find(std::string(k));
        if (it == obj_.end() || it->is_null()) continue;
        if (found == nullptr) {
            found = &*it;
            found_key = k;
        } else {
            DI_CHECK(*found == *it, source_, ": keys '", prefix_, found_key, "' (", short_value(*found), ") and '",
                     prefix_, k, "' (", short_value(*it), ") disagree");
        }
    }
    return found;
}

int64_t Reader::as_int(const json& v, std::string_view k) const {
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float()) {
        const double d = v.get<double>();
        if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e15) return static_cast<int64_t>(d);
    }
    DI_THROW(source_, ": key '", key(k), "' must be an integer, got ", short_value(v));
}

int64_t Reader::get_int(std::initializer_list<std::string_view> keys, std::optional<int64_t> def) const {
    if (const json* v = find(keys)) return as_int(*v, *keys.begin());
    DI_CHECK(def.has_value(), source_, ": missing required key '", key(*keys.begin()), "'");
    return *def;
}

std::optional<int64_t> Reader::opt_int(std::initializer_list<std::string_view> keys) const {
    const json* v = find(keys);
    if (!v) return std::nullopt;
    return as_int(*v, *keys.begin());
}

double Reader::get_double(std::initializer_list<std::string_view> keys, double def) const {
    const json* v = find(keys);
    if (!v) return def;
    DI_CHECK(v->is_number() && std::isfinite(v->get<double>()), source_, ": key '", key(*keys.begin()),
             "' must be a finite number, got ", short_value(*v));
    return v->get<double>();
}

bool Reader::get_bool(std::initializer_list<std::string_view> keys, bool def) const {
    const json* v = find(keys);
    if (!v) return def;
    DI_CHECK(v->is_boolean(), source_, ": key '", key(*keys.begin()), "' must be true or false, got ", short_value(*v));
    return v->get<bool>();
}

std::string Reader::get_string(std::initializer_list<std::string_view> keys, std::string def) const {
    const json* v = find(keys);
    if (!v) return def;
    DI_CHECK(v->is_string(), source_, ": key '", key(*keys.begin()), "' must be a string, got ", short_value(*v));
    return v->get<std::string>();
}

std::optional<std::vector<int64_t>> Reader::opt_int_list(std::initializer_list<std::string_view> keys) const {
    const json* v = find(keys);
    if (!v) return std::nullopt;
    DI_CHECK(v->is_array(), source_, ": key '", key(*keys.begin()), "' must be a list of integers, got ", short_value(*v));
    std::vector<int64_t> out;
    for (const json& e : *v) out.push_back(as_int(e, *keys.begin()));
    return out;
}

std::vector<int64_t> Reader::get_int_list(std::initializer_list<std::string_view> keys) const {
    auto v = opt_int_list(keys);
    DI_CHECK(v.has_value(), source_, ": missing required key '", key(*keys.begin()), "'");
    return *v;
}

std::string read_config_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    DI_CHECK(in.good(), path, ": cannot open the model config");
    std::ostringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    DI_CHECK(text.size() <= (16u << 20), path, ": config file is ", text.size(), " bytes, over the 16 MiB limit");
    return text;
}

void require_range(std::string_view source, std::string_view key, int64_t value, int64_t lo, int64_t hi) {
    DI_CHECK(value >= lo && value <= hi, source, ": key '", key, "' = ", value, " is out of range [", lo, ", ", hi,
             "]");
}

RopeParams read_rope(const json& obj, std::string_view source, const std::string& prefix, double theta) {
    Reader r(obj, source, prefix);
    RopeParams p;
    p.rope_theta = r.get_double({"rope_theta", "base"}, theta);
    p.rope_type = r.get_string({"rope_type", "type"}, "default");
    DI_CHECK(p.rope_type == "default" || p.rope_type == "yarn", source, ": key '", prefix, "rope_type' = \"",
             p.rope_type, "\" is not supported (expected \"default\" or \"yarn\")");
    if (p.is_yarn()) {
        p.factor = r.get_double({"factor", "rope_factor"}, 1.0);
        p.original_max_position_embeddings = r.get_int({"original_max_position_embeddings", "original_seq_len"}, 0);
        p.beta_fast = r.get_double({"beta_fast"}, 32.0);
        p.beta_slow = r.get_double({"beta_slow"}, 1.0);
        // transformers sets attention_factor 1.0 (no YaRN mscale, spec V4 §2.6); nothing else is supported.
        const double attention_factor = r.get_double({"attention_factor"}, 1.0);
        DI_CHECK(attention_factor == 1.0, source, ": key '", prefix, "attention_factor' = ", attention_factor,
                 " is not supported (V4.1 applies no YaRN magnitude scaling; expected 1.0)");
    }
    return p;
}

}  // namespace deepinfer::config_json
