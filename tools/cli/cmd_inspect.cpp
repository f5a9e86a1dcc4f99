// SPDX-License-Identifier: Apache-2.0
// `deepinfer inspect`: prints what a checkpoint holds and what it lacks.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "commands.h"
#include "deepinfer/checkpoint.h"
#include "deepinfer/inspect.h"
#include "deepinfer/inspect_v41.h"
#include "deepinfer/model_config_v41.h"

namespace deepinfer::cli {

Command register_inspect(CLI::App& app) {
    struct Options {
        std::string model;
        bool json = false;
        bool strict = false;
    };
    auto opts = std::make_shared<Options>();
    CLI::App* sub = app.add_subcommand("inspect", "Print a checkpoint's architecture, layer schedule, "
                                                  "parameter counts and missing/unexpected tensors");
    sub->add_option("--model", opts->model, "Checkpoint directory (config.json + safetensors) ")->required();
    sub->add_flag("--json", opts->json, "Print JSON instead of text");
    sub->add_flag("--strict", opts->strict, "Exit with status 3 when tensors are missing, unexpected or mismatched");
    return [sub, opts]() -> int {
        if (!sub->parsed()) return -1;
        // The family is read off config.json: V4.1's composite layout, else V4.
        const std::filesystem::path config = std::filesystem::path(opts->model) / "config.json";
        std::string text;
        if (std::ifstream in(config); in && std::filesystem::is_regular_file(config))
            text.assign(std::istreambuf_iterator<char>(in), {});
        std::string report;
        if (!text.empty() && is_v41_config(text)) {
            const V41ModelConfig c = parse_v41_model_config(text, config.string());
            Checkpoint ckpt(opts->model, {.read_v4_config = false});
            report = opts->json ? inspect_v41_json(ckpt, c) + "\n" : inspect_v41_text(ckpt, c);
        } else {
            Checkpoint ckpt(opts->model);
            report = opts->json ? inspect_json(ckpt) + "\n" : inspect_text(ckpt);
        }
        std::fwrite(report.data(), 1, report.size(), stdout);
        if (opts->strict && report.find(opts->json ? "\"complete\": false" : "complete    no") != std::string::npos)
            return 3;
        return 0;
    };
}

}  // namespace deepinfer::cli
