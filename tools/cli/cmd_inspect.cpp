// SPDX-License-Identifier: Apache-2.0
// `deepinfer inspect`: prints what a checkpoint holds and what it lacks.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "deepinfer/checkpoint.h"
#include "deepinfer/inspect.h"

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
        Checkpoint ckpt(opts->model);
        std::string report = opts->json ? inspect_json(ckpt) + "\n" : inspect_text(ckpt);
        std::fwrite(report.data(), 1, report.size(), stdout);
        if (opts->strict && report.find(opts->json ? "\"complete\": false" : "complete    no") != std::string::npos)
            return 3;
        return 0;
    };
}

}  // namespace deepinfer::cli
