// SPDX-License-Identifier: Apache-2.0
// `deepinfer download`: a Hub model into the Hugging Face cache (or found there); prints the
// snapshot directory that `--model` would use.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "deepinfer/hub.h"

namespace deepinfer::cli {

Command register_download(CLI::App& app) {
    struct Options {
        std::string repo_id, revision;
        std::vector<std::string> include;
        int max_workers = 8;
    };
    auto o = std::make_shared<Options>();
    CLI::App* sub = app.add_subcommand("download", "Download a Hugging Face model into the HF cache; print its directory");
    sub->add_option("repo_id", o->repo_id, "org/name")->required();
    sub->add_option("--revision", o->revision, "Branch, tag or commit (default main)");
    sub->add_option("--include", o->include, "File patterns (default: *.json *.safetensors)");
    sub->add_option("--max-workers", o->max_workers, "Parallel downloads")->capture_default_str()->check(CLI::Range(1, 64));
    return [sub, o]() -> int {
        if (!sub->parsed()) return -1;
        HubOptions options = hub_options_from_environment();
        options.max_parallel_downloads = o->max_workers;
        if (!o->include.empty()) options.allow_patterns = o->include;
        std::printf("%s\n", hub_snapshot_download(o->repo_id, o->revision, options).c_str());
        return 0;
    };
}

}  // namespace deepinfer::cli
