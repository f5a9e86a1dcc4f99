// SPDX-License-Identifier: Apache-2.0
// The model options of the DeepSeek-V4.1 GPU tests (tests/model/cuda_v41_*_test.cpp): the numerics as given
// (not the checkpoint's), the repository's tokenizer (the Engram token map; DI_TOKENIZER_JSON is a compile
// definition of cuda_v41_model_tests), CUDA graphs and bounded replay as asked.
#pragma once

#include "deepinfer/model.h"

namespace deepinfer::test {

inline ModelOptions v41_options(Numerics n, bool graphs = true, bool replay = false) {
    ModelOptions o;
    o.numerics_from_checkpoint = false;
    o.numerics = n;
    o.tokenizer_json = DI_TOKENIZER_JSON;
    o.cuda_graphs = graphs;
    o.v41_bounded_replay = replay;
    return o;
}

}  // namespace deepinfer::test
