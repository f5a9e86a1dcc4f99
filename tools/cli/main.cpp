// SPDX-License-Identifier: Apache-2.0
// The `deepinfer` command line: a thin frontend over include/deepinfer. Every error reaches the
// user as one "error: ..." line on stderr and a non-zero exit status, never as a signal.
#include <cstdio>
#include <exception>
#include <vector>

#include "commands.h"
#include "deepinfer/check.h"
#include "deepinfer/log.h"
#include "deepinfer/parallel.h"

int main(int argc, char** argv) {
    CLI::App app{"deepinfer: offline batch inference for DeepSeek-V4-family models"};
    app.require_subcommand(1);
    app.set_version_flag("--version", "deepinfer 0.1.0");
    std::string log_level = "info";
    int threads = 0;
    app.add_option("--log-level", log_level, "debug, info, warn, error or off")->capture_default_str();
    app.add_option("--threads", threads, "CPU threads (0 = one per core)")->capture_default_str();
    std::vector<deepinfer::cli::Command> commands;
    commands.push_back(deepinfer::cli::register_inspect(app));
    commands.push_back(deepinfer::cli::register_tokenize(app));
    commands.push_back(deepinfer::cli::register_detokenize(app));
    commands.push_back(deepinfer::cli::register_render(app));
    commands.push_back(deepinfer::cli::register_parse(app));
    commands.push_back(deepinfer::cli::register_logits(app));
    commands.push_back(deepinfer::cli::register_generate(app));
    commands.push_back(deepinfer::cli::register_bench(app));
    commands.push_back(deepinfer::cli::register_run(app));
    commands.push_back(deepinfer::cli::register_download(app));
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    try {
        deepinfer::set_log_level(deepinfer::parse_log_level(log_level));
        deepinfer::set_cpu_num_threads(threads);
        for (auto& run : commands) {
            int rc = run();
            if (rc >= 0) return rc;
        }
        std::fprintf(stderr, "error: no command ran\n");
        return 2;
    } catch (const deepinfer::Error& e) {
        std::fprintf(stderr, "error: %s\n", e.message().c_str());
        deepinfer::log(deepinfer::LogLevel::kDebug, "raised at {}", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 1;
    }
}
