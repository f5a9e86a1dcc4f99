// SPDX-License-Identifier: Apache-2.0
// deepinfer._core: the compiled half of the Python package (see bindings.h).
#include "bindings.h"

NB_MODULE(_core, m) {
    m.doc() = "deepinfer's C++ library: models, tokenizer, engine, chat recipe, batch runner. "
              "Use the `deepinfer` package (LLM, SamplingParams) rather than this module directly.";
    deepinfer::python::register_errors(m);
    deepinfer::python::register_model(m);
    deepinfer::python::register_engine(m);
    deepinfer::python::register_chat(m);
    deepinfer::python::register_batch(m);
    deepinfer::python::register_hub(m);
}
