// SPDX-License-Identifier: Apache-2.0
// Hugging Face Hub resolution: options (from the environment), snapshot download with a progress
// callback that also lets Ctrl-C cancel (the GIL is released during transfers), and the HubError
// kinds as Python exception classes.
#include <nanobind/stl/function.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <string>

#include "bindings.h"
#include "deepinfer/hub.h"

namespace nb = nanobind;

namespace deepinfer::python {
namespace {

struct HubErrorTypes {
    PyObject* by_kind[7] = {};
};

PyObject* new_error(nb::module_& m, const char* name, PyObject* base, const char* doc) {
    const std::string qualified = std::string("deepinfer._core.") + name;
    PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base, nullptr);
    m.attr(name) = nb::borrow(type);
    return type;
}

}  // namespace

void register_hub(nb::module_& m) {
    nb::class_<HubProgress>(m, "HubProgress")
        .def_ro("num_files", &HubProgress::num_files)
        .def_ro("num_files_done", &HubProgress::num_files_done)
        .def_ro("bytes_total", &HubProgress::bytes_total)
        .def_ro("bytes_done", &HubProgress::bytes_done);
    nb::class_<HubOptions>(m, "HubOptions", "Hub resolution settings (see hub.h); from_environment() reads HF_*.")
        .def(nb::init<>())
        .def_static("from_environment", &hub_options_from_environment)
        .def_rw("endpoint", &HubOptions::endpoint)
        .def_rw("cache_dir", &HubOptions::cache_dir)
        .def_rw("token", &HubOptions::token)
        .def_rw("offline", &HubOptions::offline)
        .def_rw("max_parallel_downloads", &HubOptions::max_parallel_downloads)
        .def_rw("max_attempts", &HubOptions::max_attempts)
        .def_rw("retry_delay_seconds", &HubOptions::retry_delay_seconds)
        .def_rw("connect_timeout_seconds", &HubOptions::connect_timeout_seconds)
        .def_rw("stall_timeout_seconds", &HubOptions::stall_timeout_seconds)
        .def_rw("allow_patterns", &HubOptions::allow_patterns);
    m.def("is_hub_repo_id", &is_hub_repo_id, nb::arg("spec"));
    m.def(
        "hub_snapshot_download",
        [](const std::string& repo_id, const std::string& revision, HubOptions options, nb::object on_progress) {
            // Borrowed: `on_progress` outlives the call (it is an argument of this frame).
            PyObject* callback = on_progress.is_none() ? nullptr : on_progress.ptr();
            options.on_progress = [callback](const HubProgress& p) {
                nb::gil_scoped_acquire gil;
                if (PyErr_CheckSignals() != 0) throw nb::python_error();
                if (callback != nullptr) nb::handle{callback}(nb::cast(p, nb::rv_policy::copy));
            };
            nb::gil_scoped_release release;
            return hub_snapshot_download(repo_id, revision, options);
        },
        nb::arg("repo_id"), nb::arg("revision"), nb::arg("options"), nb::arg("on_progress") = nb::none(),
        "The local snapshot directory of repo_id at revision ('' = main), downloading missing files.");

    // HubError (a deepinfer._core.Error) and one subclass per kind.
    auto* types = new HubErrorTypes;  // lives as long as the process (the module is never unloaded)
    PyObject* base_error = m.attr("Error").ptr();
    PyObject* hub_error = new_error(m, "HubError", base_error, "A Hugging Face Hub failure.");
    const struct {
        HubErrorKind kind;
        const char* name;
        const char* doc;
    } kinds[] = {
        {HubErrorKind::kRepoNotFound, "RepositoryNotFoundError", "The repository does not exist (or is private)."},
        {HubErrorKind::kRevisionNotFound, "RevisionNotFoundError", "The branch, tag or commit does not exist."},
        {HubErrorKind::kEntryNotFound, "EntryNotFoundError", "A file the model needs is not in the repository."},
        {HubErrorKind::kUnauthorized, "HubAuthError", "HTTP 401/403: private or gated; HF_TOKEN missing or without access."},
        {HubErrorKind::kOffline, "OfflineModeError", "HF_HUB_OFFLINE is set and the cache lacks the model."},
        {HubErrorKind::kIntegrity, "IntegrityError", "A downloaded file's size or sha256 differs from the Hub's."},
        {HubErrorKind::kNetwork, "HubConnectionError", "The Hub could not be reached or answered an error."},
    };
    for (const auto& k : kinds) types->by_kind[static_cast<int>(k.kind)] = new_error(m, k.name, hub_error, k.doc);
    nb::register_exception_translator(
        [](const std::exception_ptr& p, void* payload) {
            try {
                std::rethrow_exception(p);
            } catch (const HubError& e) {
                PyObject* type = static_cast<HubErrorTypes*>(payload)->by_kind[static_cast<int>(e.kind())];
                PyObject* text = PyUnicode_DecodeUTF8(e.message().data(), static_cast<Py_ssize_t>(e.message().size()),
                                                      "replace");
                if (text == nullptr) return;
                PyErr_SetObject(type, text);
                Py_DECREF(text);
            }
        },
        types);
}

}  // namespace deepinfer::python
