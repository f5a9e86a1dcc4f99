// SPDX-License-Identifier: Apache-2.0
// The engine tests' model: the v4_tiny_a fixture in exact numerics, loaded once per test binary.
#pragma once

#include <memory>

#include "deepinfer/model.h"
#include "unit/fixtures.h"

namespace deepinfer::test {

inline ModelOptions exact_numerics() {
    ModelOptions o;
    o.numerics_from_checkpoint = false;
    o.numerics = Numerics::kExact;
    return o;
}

inline std::shared_ptr<const Model> tiny_engine_model() {
    static const std::shared_ptr<const Model> m = Model::load(data_path("models/v4_tiny_a"), exact_numerics());
    return m;
}

}  // namespace deepinfer::test
