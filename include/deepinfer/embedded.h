// SPDX-License-Identifier: Apache-2.0
// The built-in default model: a tiny random-weight DeepSeek-V4 model of the real architecture and
// vocabulary (129,280 ids, the DeepSeek tokenizer in assets/), generated deterministically on first
// use into a cache directory. Its text is random by design: it exists so every path runs anywhere.
#pragma once

#include <string>

namespace deepinfer {

inline constexpr const char* kEmbeddedModelName = "deepinfer-embedded-v4-tiny";

// config.json of the embedded model.
std::string embedded_model_config();
// Ensures `cache_dir`/<name>/ holds the embedded checkpoint (writing it if missing or stale) and
// returns that directory.
std::string ensure_embedded_model(const std::string& cache_dir);

}  // namespace deepinfer
