// SPDX-License-Identifier: Apache-2.0
// The pieces of the deepinfer._core extension: one register_<area> per file. Bindings convert types
// and register functions over include/deepinfer (and the batch runner); the package's behaviour is
// in python/deepinfer/*.py and in the C++ library, never here. Long calls release the GIL.
#pragma once

#include <nanobind/nanobind.h>

namespace deepinfer::python {

void register_errors(nanobind::module_& m);   // deepinfer::Error -> deepinfer._core.Error (ValueError)
void register_model(nanobind::module_& m);    // Model, ModelConfig, Tokenizer, embedded model, logging
void register_engine(nanobind::module_& m);   // SamplingParams, EngineConfig, outputs, Engine
void register_chat(nanobind::module_& m);     // the chat recipe and the output parser
void register_batch(nanobind::module_& m);    // run_batch (`deepinfer run`)
void register_hub(nanobind::module_& m);      // Hugging Face Hub resolution and download

}  // namespace deepinfer::python
