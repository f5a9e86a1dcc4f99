// SPDX-License-Identifier: Apache-2.0
// Tensor-name normalization: maps the names transformers writes (model.layers.N.self_attn.q_a_proj,
// mlp.experts.gate_up_proj, ...) onto DeepSeek's published names (layers.N.attn.wq_a, ...), which
// are the canonical names inside deepinfer (spec deepseek-v4-model.md §4.12).
#pragma once

#include <string>
#include <string_view>

namespace deepinfer {

struct NormalizedName {
    std::string canonical;
    bool was_transformers = false;  // a transformers-only spelling was rewritten
    bool was_deepseek = false;      // the name is already in DeepSeek's spelling
};

NormalizedName normalize_tensor_name(std::string_view stored_name);

}  // namespace deepinfer
