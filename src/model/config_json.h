// SPDX-License-Identifier: Apache-2.0
// Typed, aliased access to config.json objects, shared by the V4 and V4.1 config parsers: each field
// lists its Hugging Face key first and its other spellings after; values found under two spellings
// must agree; every error names the file, the key and the value.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/model_config.h"

namespace deepinfer::config_json {

using nlohmann::json;

// A value for messages: its JSON text, cut at 80 characters.
std::string short_value(const json& v);
// "[1, 2, 3]"
std::string list_str(const std::vector<int64_t>& v);

class Reader {
public:
    Reader(const json& obj, std::string_view source, std::string prefix = "")
        : obj_(obj), source_(source), prefix_(std::move(prefix)) {}

    // The value under the first spelling present (null counts as absent).
    const json* find(std::initializer_list<std::string_view> keys) const;
    std::string key(std::string_view k) const { return prefix_ + std::string(k); }
    int64_t as_int(const json& v, std::string_view k) const;
    int64_t get_int(std::initializer_list<std::string_view> keys, std::optional<int64_t> def = std::nullopt) const;
    std::optional<int64_t> opt_int(std::initializer_list<std::string_view> keys) const;
    double get_double(std::initializer_list<std::string_view> keys, double def) const;
    bool get_bool(std::initializer_list<std::string_view> keys, bool def) const;
    std::string get_string(std::initializer_list<std::string_view> keys, std::string def) const;
    std::optional<std::vector<int64_t>> opt_int_list(std::initializer_list<std::string_view> keys) const;
    std::vector<int64_t> get_int_list(std::initializer_list<std::string_view> keys) const;
    std::string_view source() const { return source_; }
    const std::string& prefix() const { return prefix_; }

private:
    const json& obj_;
    std::string_view source_;
    std::string prefix_;
};

// The text of a config file (at most 16 MiB); errors name the path.
std::string read_config_file(const std::string& path);

void require_range(std::string_view source, std::string_view key, int64_t value, int64_t lo, int64_t hi);

// One RoPE parameter set (HF "rope_type"/"factor"/... or legacy "type"/"rope_factor"/"original_seq_len");
// `theta` when the object has no rope_theta. Only YaRN without magnitude scaling is accepted.
RopeParams read_rope(const json& obj, std::string_view source, const std::string& prefix, double theta);

}  // namespace deepinfer::config_json
