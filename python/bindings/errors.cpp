// SPDX-License-Identifier: Apache-2.0
// Exceptions: deepinfer::Error arrives in Python as deepinfer._core.Error (a ValueError: the
// library throws it for invalid input, files and requests) carrying the C++ message; `location`
// holds the "file:line" where it was raised.
#include <string>
#include <string_view>

#include "bindings.h"
#include "deepinfer/check.h"

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
    // The module keeps the type alive; the translator borrows it as its payload.
    nb::register_exception_translator(
        [](const std::exception_ptr& p, void* payload) {
            try {
                std::rethrow_exception(p);
            } catch (const Error& e) {
                raise(static_cast<PyObject*>(payload), e.message(), location_of(e));
            }
        },
        error);
}

}  // namespace deepinfer::python
