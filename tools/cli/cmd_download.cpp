// SPDX-License-Identifier: Apache-2.0
// `deepinfer download`: a Hub model into the Hugging Face cache (or found there); prints the
// snapshot directory that `--model` would use.
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "deepinfer/hub.h"

namespace deepinfer::cli {

HubOptions cli_hub_options() {
    HubOptions options = hub_options_from_environment();
    // A line on stderr every few seconds while files download, and one when they are all there.
    auto last = std::make_shared<std::chrono::steady_clock::time_point>();
    options.on_progress = [last](const HubProgress& p) {
        if (p.bytes_total == 0) return;
        const auto now = std::chrono::steady_clock::now();
        const bool done = p.num_files_done == p.num_files;
        if (!done && now - *last < std::chrono::seconds(3)) return;
        *last = now;
        std::fprintf(stderr, "download: %lld/%lld files, %.1f of %.1f MiB%s\n", (long long)p.num_files_done,
                     (long long)p.num_files, double(p.bytes_done) / (1 << 20), double(p.bytes_total) / (1 << 20),
                     done ? " (done)" : "");
    };
    return options;
}

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
        HubOptions options = cli_hub_options();
        options.max_parallel_downloads = o->max_workers;
        if (!o->include.empty()) options.allow_patterns = o->include;
        std::printf("%s\n", hub_snapshot_download(o->repo_id, o->revision, options).c_str());
        return 0;
    };
}

}  // namespace deepinfer::cli
