// SPDX-License-Identifier: Apache-2.0
// The built-in default models: tiny random-weight models of the real architecture and vocabulary
// (129,280 ids, the DeepSeek tokenizer in assets/), generated deterministically on first use into a
// cache directory. Their text is random by design: they exist so every path runs anywhere.
//
// `embedded:v41` (the default, used when no model is given) is a DeepSeek-V4.1 model: window-only,
// ratio-2 and ratio-1 Full layers, Reuse and Reindex layers, the candidate stage, Engram at a
// window-only and a Full layer with small tables (its token map is derived from the bundled
// DeepSeek-V4 tokenizer.json, which gives exactly the published V4.1 map: 99,092 ids, the published
// SHA-256). `embedded:v4` is the DeepSeek-V4 one (sliding, CSA and HCA layers, a hash-routed layer).
#pragma once

#include <string>
#include <string_view>

namespace deepinfer {

inline constexpr std::string_view kEmbeddedDefault = "embedded:v41";
inline constexpr std::string_view kEmbeddedV4 = "embedded:v4";

// True for the names above (what `--model` accepts besides a directory).
bool is_embedded_model_name(std::string_view name);
// The directory name under the cache directory of an embedded model.
std::string embedded_model_dir_name(std::string_view name = kEmbeddedDefault);
// config.json of an embedded model.
std::string embedded_model_config(std::string_view name = kEmbeddedDefault);
// Ensures `cache_dir`/<dir name>/ holds the embedded checkpoint (writing it if missing or stale) and
// returns that directory.
std::string ensure_embedded_model(const std::string& cache_dir, std::string_view name = kEmbeddedDefault);

}  // namespace deepinfer
