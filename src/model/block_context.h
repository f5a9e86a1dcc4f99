// SPDX-License-Identifier: Apache-2.0
// What every block of the forward needs besides its weights and state: the config, the numerics
// mode and the two RoPE tables.
#pragma once

#include "backends/cpu/primitives.h"
#include "deepinfer/model.h"
#include "deepinfer/model_config.h"

namespace deepinfer {

struct BlockContext {
    const ModelConfig& config;
    Numerics numerics;
    const cpu::RopeTable& rope_main;      // sliding layers, MTP
    const cpu::RopeTable& rope_compress;  // CSA/HCA layers, their compressors and indexer
    bool official() const { return numerics == Numerics::kOfficial; }
};

}  // namespace deepinfer
