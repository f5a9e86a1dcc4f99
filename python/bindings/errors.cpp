// SPDX-License-Identifier: Apache-2.0
// Exceptions: deepinfer::Error arrives in Python as deepinfer._core.Error (a ValueError: the
// library throws it for invalid input, files and requests) carrying the C++ message; `location`
// holds the "file:line" where it was raised. GrammarError (an invalid constraint) is its subclass.
#include <string>
#include <string_view>

#include "bindings.h"
#include "deepinfer/check.h"
#include "deepinfer/grammar.h"

namespace nb = nanobind;

namespace deepinfer::python {
namespace {

// what() is "file:line: message"; message() is the text alone.
std::string location_of(const Error& e) {
    const std::string_view what = e.what();
    const std::string& msg = e.message();
    if (what.size() > msg.size() + 2 && what.substr(what.size() - msg.size()) == msg)
        return std::string(what.substr(0, what.size() - msg.size() - 2));
    return {};
}

void raise(PyObject* type, const std::string& message, const std::string& location) {
    PyObject* text = PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "replace");
    if (text == nullptr) return;  // the failure is the pending Python error
    PyObject* value = PyObject_CallOneArg(type, text);
    Py_DECREF(text);
    if (value == nullptr) return;
    PyObject* loc = PyUnicode_FromStringAndSize(location.data(), static_cast<Py_ssize_t>(location.size()));
    if (loc != nullptr) {
        PyObject_SetAttrString(value, "location", loc);
        Py_DECREF(loc);
    }
    PyErr_SetObject(type, value);
    Py_DECREF(value);
}

}  // namespace

void register_errors(nb::module_& m) {
    PyObject* error = PyErr_NewExceptionWithDoc(
        "deepinfer._core.Error",
        "An error raised by deepinfer's C++ library (invalid argument, request, file or checkpoint). "
        "`str(e)` is the library's message; `e.location` the source file and line that raised it.",
        PyExc_ValueError, nullptr);
    m.attr("Error") = nb::steal(error);
    PyObject* grammar_error = PyErr_NewExceptionWithDoc(
        "deepinfer._core.GrammarError", "An invalid or unsupported structured-output constraint.", error, nullptr);
    m.attr("GrammarError") = nb::steal(grammar_error);
    // The module keeps the type alive; the translator borrows it as its payload.
    nb::register_exception_translator(
        [](const std::exception_ptr& p, void* payload) {
            PyObject* const* types = static_cast<PyObject* const*>(payload);
            try {
                std::rethrow_exception(p);
            } catch (const GrammarError& e) {
                raise(types[1], e.message(), location_of(e));
            } catch (const Error& e) {
                raise(types[0], e.message(), location_of(e));
            }
        },
        new PyObject*[2]{error, grammar_error});  // lives as long as the process, as the module
}

}  // namespace deepinfer::python
