// SPDX-License-Identifier: Apache-2.0
// run_batch (`deepinfer run`): an OpenAI Batch API file through the engine. The GIL is released for
// the run; after each engine step the progress callback runs with the GIL held, after Python's
// signal handlers (so Ctrl-C raises KeyboardInterrupt there, stopping the run between steps with
// every finished result already written).
#include <nanobind/stl/function.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>

#include <memory>

#include "bindings.h"
#include "deepinfer/tokenizer.h"
#include "engine/batch_runner.h"

namespace nb = nanobind;

namespace deepinfer::python {

void register_batch(nb::module_& m) {
    nb::enum_<BatchRunOptions::Progress>(m, "BatchProgress")
        .value("auto", BatchRunOptions::Progress::kAuto)
        .value("always", BatchRunOptions::Progress::kAlways)
        .value("never", BatchRunOptions::Progress::kNever);
    nb::class_<BatchRunOptions>(m, "BatchRunOptions")
        .def(nb::init<>())
        .def_rw("input_path", &BatchRunOptions::input_path)
        .def_rw("output_path", &BatchRunOptions::output_path)
        .def_rw("model_name", &BatchRunOptions::model_name)
        .def_rw("resume", &BatchRunOptions::resume)
        .def_rw("family", &BatchRunOptions::family)
        .def_rw("default_max_tokens", &BatchRunOptions::default_max_tokens)
        .def_rw("progress", &BatchRunOptions::progress)
        .def_rw("max_in_flight", &BatchRunOptions::max_in_flight);
    nb::class_<BatchRunSummary>(m, "BatchRunSummary")
        .def_ro("lines", &BatchRunSummary::lines)
        .def_ro("skipped_done", &BatchRunSummary::skipped_done)
        .def_ro("completed", &BatchRunSummary::completed)
        .def_ro("errors", &BatchRunSummary::errors)
        .def_ro("prompt_tokens", &BatchRunSummary::prompt_tokens)
        .def_ro("completion_tokens", &BatchRunSummary::completion_tokens)
        .def_ro("seconds", &BatchRunSummary::seconds)
        .def_ro("engine", &BatchRunSummary::engine);
    m.def(
        "run_batch",
        [](BatchRunOptions options, std::shared_ptr<Model> model, std::shared_ptr<Tokenizer> tokenizer,
           const EngineConfig& engine_config, nb::object on_progress) {
            // Borrowed: `on_progress` outlives the call (it is an argument of this frame).
            PyObject* callback = on_progress.is_none() ? nullptr : on_progress.ptr();
            options.on_progress = [callback](const BatchRunSummary& so_far) {
                nb::gil_scoped_acquire gil;
                if (PyErr_CheckSignals() != 0) throw nb::python_error();
                if (callback != nullptr) nb::handle{callback}(nb::cast(so_far, nb::rv_policy::copy));
            };
            nb::gil_scoped_release release;
            return run_batch(options, std::move(model), std::move(tokenizer), engine_config);
        },
        nb::arg("options"), nb::arg("model"), nb::arg("tokenizer"), nb::arg("engine_config"),
        nb::arg("on_progress") = nb::none(),
        "Runs an OpenAI Batch API input file into an output file; on_progress(summary) after each engine step.");
}

}  // namespace deepinfer::python
