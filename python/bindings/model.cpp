// SPDX-License-Identifier: Apache-2.0
// Models (DeepSeek-V4 and V4.1), what the engine knows of them, the tokenizer, the built-in tiny model, logging and CPU threads.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/string_view.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "deepinfer/embedded.h"
#include "deepinfer/log.h"
#include "deepinfer/model.h"
#include "deepinfer/parallel.h"
#include "deepinfer/tokenizer.h"

namespace nb = nanobind;

namespace deepinfer::python {

void register_model(nb::module_& m) {
    nb::class_<ModelInfo>(m, "ModelInfo", "What the engine needs to know of a loaded model.")
        .def_ro("family", &ModelInfo::family, "'deepseek_v4' | 'deepseek_v41'")
        .def_ro("vocab_size", &ModelInfo::vocab_size)
        .def_ro("eos_token_ids", &ModelInfo::eos_token_ids)
        .def_ro("max_position_embeddings", &ModelInfo::max_position_embeddings);

    nb::class_<Model>(m, "Model", "A loaded checkpoint (immutable; shared by engines).")
        .def_static(
            "load",
            [](const std::string& checkpoint_dir, std::optional<std::string> numerics, const std::string& tokenizer_json,
               std::string_view device, int64_t max_model_len, int64_t max_batch_tokens, int64_t max_num_seqs,
               bool cuda_graphs, int64_t gpus) {
                ModelOptions options;
                if (numerics) {
                    options.numerics_from_checkpoint = false;
                    options.numerics = parse_numerics(*numerics);
                }
                options.tokenizer_json = tokenizer_json;
                options.device = parse_device(device);
                options.max_model_len = max_model_len;
                options.max_batch_tokens = max_batch_tokens;
                options.max_num_seqs = max_num_seqs;
                options.cuda_graphs = cuda_graphs;
                options.gpus = gpus;
                return std::shared_ptr<Model>(Model::load(checkpoint_dir, options));
            },
            nb::arg("checkpoint_dir"), nb::arg("numerics") = nb::none(), nb::arg("tokenizer_json") = "",
            nb::arg("device") = "cpu", nb::arg("max_model_len") = 0, nb::arg("max_batch_tokens") = 2048,
            nb::arg("max_num_seqs") = 256, nb::arg("cuda_graphs") = true, nb::arg("gpus") = 1,
            nb::call_guard<nb::gil_scoped_release>(),
            "Loads a checkpoint directory (DeepSeek-V4 or V4.1). `numerics`: 'exact' | 'official' (default: "
            "official for FP8/FP4 checkpoints, exact otherwise); `tokenizer_json`: V4.1's Engram token map source; "
            "`device`: 'cpu' | 'cuda'; cuda: `max_batch_tokens` / `max_num_seqs` size the device workspace (the "
            "engine's limits), `cuda_graphs` replays decode steps from CUDA graphs, `gpus` > 1 shards the routed "
            "experts across that many GPUs (expert parallelism over NCCL; same outputs as one GPU).")
        .def_prop_ro("info", &Model::info, nb::rv_policy::reference_internal)
        .def_prop_ro("numerics", [](const Model& model) { return std::string(numerics_name(model.numerics())); });

    nb::class_<Tokenizer>(m, "Tokenizer", "Byte-level BPE tokenizer from a Hugging Face tokenizer.json.")
        .def_static(
            "from_file", [](const std::string& path) { return std::make_shared<Tokenizer>(Tokenizer::from_file(path)); },
            nb::arg("path"), nb::call_guard<nb::gil_scoped_release>())
        .def("encode", &Tokenizer::encode, nb::arg("text"), nb::call_guard<nb::gil_scoped_release>(),
             "Text -> ids (added tokens in the text become their ids; no BOS is added).")
        .def(
            "decode",
            [](const Tokenizer& t, const std::vector<int32_t>& ids, bool skip_special_tokens) {
                return t.decode(ids, skip_special_tokens);
            },
            nb::arg("ids"), nb::arg("skip_special_tokens") = false, nb::call_guard<nb::gil_scoped_release>())
        .def("token_to_id", &Tokenizer::token_to_id, nb::arg("token"))
        .def("added_token_id", &Tokenizer::added_token_id, nb::arg("content"))
        .def("id_to_token", &Tokenizer::id_to_token, nb::arg("id"))
        .def_prop_ro("vocab_size", &Tokenizer::vocab_size);

    m.attr("EMBEDDED_DEFAULT") = std::string(kEmbeddedDefault);
    m.def("is_embedded_model_name", &is_embedded_model_name, nb::arg("name"), "'embedded:v41' or 'embedded:v4'");
    m.def(
        "ensure_embedded_model",
        [](const std::string& cache_dir, const std::string& name) { return ensure_embedded_model(cache_dir, name); },
        nb::arg("cache_dir"), nb::arg("name") = std::string(kEmbeddedDefault), nb::call_guard<nb::gil_scoped_release>(),
        "Writes a built-in tiny random-weight model (default embedded:v41) under cache_dir if missing; returns its "
        "directory.");
    m.def(
        "set_log_level", [](std::string_view level) { set_log_level(parse_log_level(level)); }, nb::arg("level"),
        "'debug' | 'info' | 'warn' | 'error' | 'off' (messages go to stderr).");
    m.def("set_num_threads", &set_cpu_num_threads, nb::arg("num_threads"), "CPU threads (0: one per core).");
    m.def("num_threads", &cpu_num_threads);
}

}  // namespace deepinfer::python
