// SPDX-License-Identifier: Apache-2.0
// `deepinfer run`: an OpenAI Batch API input file through the engine into an OpenAI batch output
// file. Lines are read as the engine has room (millions of requests need not fit in memory); every
// finished request is appended and flushed at once, so a killed run loses nothing already written,
// and --resume skips custom_ids already in the output (a torn last line is cut off first). A bad
// line gets its own error record and the job goes on.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "deepinfer/chat.h"
#include "deepinfer/engine.h"

namespace deepinfer {

struct BatchRunSummary;

struct BatchRunOptions {
    std::string input_path;
    std::string output_path;
    std::string model_name;   // reported in response bodies
    bool resume = false;
    ChatFamily family = ChatFamily::kV4;
    int64_t default_max_tokens = 256;  // when a body gives none
    enum class Progress { kAuto, kAlways, kNever } progress = Progress::kAuto;
    double log_interval_seconds = 10.0;  // plain progress lines when not on a terminal
    int64_t max_in_flight = 0;           // requests queued in the engine at once (0: 4 x max_num_seqs)
    // Called on the calling thread after every engine step with the counts so far (lines done =
    // completed + errors + skipped_done). It may throw to stop the run: every result already
    // written stays written, and --resume continues from there (the Python frontend's Ctrl-C).
    std::function<void(const BatchRunSummary&)> on_progress;
};

struct BatchRunSummary {
    int64_t lines = 0;
    int64_t skipped_done = 0;  // already in the output (--resume)
    int64_t completed = 0;
    int64_t errors = 0;
    int64_t prompt_tokens = 0;
    int64_t completion_tokens = 0;
    double seconds = 0;
    EngineMetrics engine;
};

BatchRunSummary run_batch(const BatchRunOptions& options, std::shared_ptr<const Model> model,
                          std::shared_ptr<const Tokenizer> tokenizer, const EngineConfig& engine_config);

// What the loop does with an input line (by its 1-based line number and custom_id, "" if none).
enum class BatchLineAction {
    kRun,        // validate and run it (or write its error record)
    kDuplicate,  // an earlier line claimed its custom_id: write the duplicate's error record
    kSkipDone,   // its record is already written (counted in skipped_done)
    kNotMine,    // another replica's line: ignored, not counted
};
using BatchLineClassifier = std::function<BatchLineAction(int64_t line_no, const std::string& custom_id)>;

// The loop behind run_batch (and each MPI replica): the lines `classify` keeps go through the engine
// into `output_path` (appended when `append`); lines are classified once each, in input order.
// summary.lines is the input's request count.
BatchRunSummary run_batch_lines(const BatchRunOptions& options, const std::string& output_path, bool append,
                                const BatchLineClassifier& classify, std::shared_ptr<const Model> model,
                                std::shared_ptr<const Tokenizer> tokenizer, const EngineConfig& engine_config);

// One progress report: a bar on a terminal, else a log line.
struct BatchProgressLine {
    int64_t done = 0;     // lines with a record (including skipped)
    int64_t skipped = 0;  // done before this run started
    int64_t total = 0;
    int64_t errors = 0;
    int64_t completion_tokens = 0;
    double seconds = 0;   // since this run started
};
void print_batch_progress(const BatchProgressLine& line, bool tty, bool final);

// Non-blank lines of an input file (the requests a summary counts).
int64_t count_batch_lines(const std::string& path);

}  // namespace deepinfer
