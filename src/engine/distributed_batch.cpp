// SPDX-License-Identifier: Apache-2.0
// Multi-replica batch runs: the plan every rank agrees on, each rank's share through the ordinary
// batch loop into its part file, aggregated progress and summary, and rank 0's merge in input order.
#include "engine/distributed_batch.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "core/fnv1a.h"
#include "deepinfer/check.h"
#include "deepinfer/log.h"
#include "engine/batch_request.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;
constexpr size_t kNoLine = size_t(-1);

struct InputLine {
    int64_t line_no = 0;  // 1-based, blank lines counted
    bool duplicate = false;
};

struct Plan {
    std::vector<InputLine> lines;                      // the non-blank lines, in input order
    std::unordered_map<std::string, size_t> claim;     // custom_id -> the first line that has it
    std::vector<int32_t> owner;                        // per line: its rank, -1 when it has a record
    int64_t already_done = 0;
};

size_t index_of_line(const Plan& plan, int64_t line_no) {
    auto it = std::lower_bound(plan.lines.begin(), plan.lines.end(), line_no,
                               [](const InputLine& l, int64_t n) { return l.line_no < n; });
    return it != plan.lines.end() && it->line_no == line_no ? size_t(it - plan.lines.begin()) : kNoLine;
}

// Calls f(text, offset) for every newline-terminated line of `path` (a torn last line is no record).
template <class F>
void for_each_record(const std::string& path, F&& f) {
    std::ifstream in(path, std::ios::binary);
    DI_CHECK(in.good(), path, ": cannot open");
    std::string text;
    uint64_t offset = 0;
    while (std::getline(in, text)) {
        if (in.eof()) break;  // no newline: torn by a kill mid-write
        f(std::string_view(text), offset);
        offset += text.size() + 1;
    }
}

// The input line a record belongs to: an error record names its line; a result, its custom_id.
size_t record_line(const Plan& plan, std::string_view text) {
    const json j = json::parse(text, nullptr, false);
    if (!j.is_object()) return kNoLine;
    if (j.contains("error") && j["error"].is_object() && j["error"].contains("line") &&
        j["error"]["line"].is_number_integer())
        return index_of_line(plan, j["error"]["line"].get<int64_t>());
    if (j.contains("custom_id") && j["custom_id"].is_string()) {
        auto it = plan.claim.find(j["custom_id"].get<std::string>());
        return it == plan.claim.end() ? kNoLine : it->second;
    }
    return kNoLine;
}

// The files that may hold records: the output (a merged or single-process one), then every part.
std::vector<std::string> record_files(const std::string& output) {
    std::vector<std::string> files;
    std::error_code ec;
    if (fs::exists(output, ec)) files.push_back(output);
    for (const std::string& p : existing_batch_parts(output)) files.push_back(p);
    return files;
}

// Cuts a torn last line (no newline) off a part this rank is about to append to.
void cut_torn_tail(const std::string& path) {
    std::error_code ec;
    if (!fs::exists(path, ec)) return;
    const uint64_t size = fs::file_size(path);
    std::ifstream in(path, std::ios::binary);
    uint64_t keep = 0;
    std::string block;
    for (uint64_t end = size; end > 0 && keep == 0;) {
        const uint64_t begin = end > 65536 ? end - 65536 : 0;
        block.resize(size_t(end - begin));
        in.seekg(std::streamoff(begin));
        in.read(block.data(), std::streamsize(block.size()));
        const size_t nl = block.rfind('\n');
        if (nl != std::string::npos) keep = begin + nl + 1;
        end = begin;
    }
    if (keep < size) {
        DI_LOG_WARN("{}: dropping a torn last line of {} bytes (the run was killed mid-write)", path, size - keep);
        fs::resize_file(path, keep);
    }
}

// h extended by v's 8 bytes, least significant first (whatever the host's byte order).
uint64_t fnv(uint64_t h, int64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>((v >> (8 * i)) & 0xff);
    return fnv1a(h, b, sizeof(b));
}

// Every rank reads the input (custom_ids, duplicates, its share of prompt-token counts) and the
// records already written; the counts are all-gathered and the lines without a record split.
Plan make_plan(const BatchRunOptions& o, Communicator& comm, const Tokenizer& tokenizer) {
    const int n = comm.size(), rank = comm.rank();
    Plan plan;
    std::vector<int64_t> my_weights;
    {
        std::ifstream in(o.input_path, std::ios::binary);
        DI_CHECK(in.good(), o.input_path, ": cannot open the input");
        const BatchRequestContext rctx{&tokenizer, o.family, o.default_max_tokens};
        std::string text;
        int64_t line_no = 0;
        while (std::getline(in, text)) {
            ++line_no;
            if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
            const BatchJson j = BatchJson::parse(text, nullptr, false);
            const std::string custom_id = batch_custom_id(j);
            bool duplicate = false;
            if (!custom_id.empty()) duplicate = !plan.claim.emplace(custom_id, plan.lines.size()).second;
            if (plan.lines.size() % size_t(n) == size_t(rank)) {
                int64_t weight = 1;  // a line that fails validation costs (almost) nothing
                try {
                    weight = std::max<int64_t>(1, int64_t(prepare_batch_request(j, duplicate, rctx).prompt.size()));
                } catch (const Error&) {
                }
                my_weights.push_back(weight);
            }
            plan.lines.push_back({line_no, duplicate});
        }
    }
    std::vector<uint8_t> done(plan.lines.size(), 0);
    int64_t unknown = 0;
    for (const std::string& file : record_files(o.output_path))
        for_each_record(file, [&](std::string_view text, uint64_t) {
            const size_t k = record_line(plan, text);
            if (k == kNoLine) ++unknown;
            else done[k] = 1;
        });
    if (unknown > 0 && rank == 0)
        DI_LOG_WARN("{} records in {} and its parts match no line of {} (was the input changed?)", unknown,
                    o.output_path, o.input_path);

    const std::vector<std::vector<int64_t>> gathered = comm.allgather(my_weights);
    std::vector<int64_t> pending_weights;
    std::vector<size_t> pending;
    for (size_t k = 0; k < plan.lines.size(); ++k) {
        if (done[k]) continue;
        const auto& w = gathered[k % size_t(n)];
        DI_CHECK(k / size_t(n) < w.size(), "rank ", k % size_t(n), " counted fewer input lines than rank ", rank,
                 " (is the input file the same on every host?)");
        pending.push_back(k);
        pending_weights.push_back(w[k / size_t(n)]);
    }
    const std::vector<int32_t> owners = partition_by_weight(pending_weights, n);
    plan.owner.assign(plan.lines.size(), -1);
    plan.already_done = int64_t(plan.lines.size() - pending.size());
    uint64_t digest = kIdHashBasis;
    digest = fnv(digest, int64_t(plan.lines.size()));
    for (size_t i = 0; i < pending.size(); ++i) {
        plan.owner[pending[i]] = owners[i];
        digest = fnv(fnv(digest, plan.lines[pending[i]].line_no), owners[i]);
    }
    // Every rank must run the same plan (same input, same records seen): compare digests.
    const auto digests = comm.allgather({int64_t(digest)});
    for (int r = 0; r < n; ++r)
        DI_CHECK(digests[size_t(r)] == digests[0], "rank ", r, " planned a different split than rank 0: the input or "
                 "the output's part files differ between ranks (every rank must see the same files)");
    return plan;
}

// Rank 0's view of the job's progress: the records appended to every part since the start.
class PartsProgress {
public:
    PartsProgress(const std::string& output, int ranks, int64_t total, int64_t skipped) : total_(total), skipped_(skipped) {
        for (int r = 0; r < ranks; ++r) {
            Part p{batch_part_path(output, r), 0};
            std::error_code ec;
            if (fs::exists(p.path, ec)) p.offset = fs::file_size(p.path, ec);
            parts_.push_back(std::move(p));
        }
    }
    void poll() {
        for (Part& p : parts_) {
            std::ifstream in(p.path, std::ios::binary);
            if (!in.good()) continue;
            in.seekg(std::streamoff(p.offset));
            std::string text;
            while (std::getline(in, text)) {
                if (in.eof()) break;  // a line still being written
                p.offset += text.size() + 1;
                const json j = json::parse(text, nullptr, false);
                if (!j.is_object()) continue;
                ++records_;
                static const json::json_pointer tokens("/response/body/usage/completion_tokens");
                if (j.contains("error") && !j["error"].is_null()) ++errors_;
                else if (j.contains(tokens) && j.at(tokens).is_number_integer()) completion_tokens_ += j.at(tokens).get<int64_t>();
            }
        }
    }
    BatchProgressLine line(double seconds) const {
        BatchProgressLine l;
        l.done = skipped_ + records_;
        l.skipped = skipped_;
        l.total = total_;
        l.errors = errors_;
        l.completion_tokens = completion_tokens_;
        l.seconds = seconds;
        return l;
    }

private:
    struct Part {
        std::string path;
        uint64_t offset = 0;
    };
    std::vector<Part> parts_;
    int64_t total_ = 0, skipped_ = 0, records_ = 0, errors_ = 0, completion_tokens_ = 0;
};

// The job's summary: sums over ranks (peaks and wall time: the maximum).
void aggregate(BatchRunSummary& s, Communicator& comm, int64_t num_speculative_tokens) {
    EngineMetrics& m = s.engine;
    std::vector<int64_t> sums = {s.completed, s.errors, s.prompt_tokens, s.completion_tokens, m.steps, m.prompt_tokens,
                                 m.prefix_cache_hit_tokens, m.generated_tokens, m.preemptions, m.spec_steps,
                                 m.spec_verify_steps, m.spec_draft_tokens, m.spec_accepted_tokens, m.spec_verify_tokens,
                                 m.spec_budget_sum, m.spec_plain_steps, m.prefix_cache_entries, m.device_sampled_tokens,
                                 m.device_verified_rows};
    const size_t k = size_t(std::max<int64_t>(0, num_speculative_tokens));
    m.spec_position_verified.resize(k, 0);
    m.spec_position_accepted.resize(k, 0);
    sums.insert(sums.end(), m.spec_position_verified.begin(), m.spec_position_verified.end());
    sums.insert(sums.end(), m.spec_position_accepted.begin(), m.spec_position_accepted.end());
    comm.allreduce(sums, ReduceOp::kSum);
    size_t i = 0;
    for (int64_t* f : {&s.completed, &s.errors, &s.prompt_tokens, &s.completion_tokens, &m.steps, &m.prompt_tokens,
                       &m.prefix_cache_hit_tokens, &m.generated_tokens, &m.preemptions, &m.spec_steps,
                       &m.spec_verify_steps, &m.spec_draft_tokens, &m.spec_accepted_tokens, &m.spec_verify_tokens,
                       &m.spec_budget_sum, &m.spec_plain_steps, &m.prefix_cache_entries, &m.device_sampled_tokens,
                       &m.device_verified_rows})
        *f = sums[i++];
    for (size_t p = 0; p < k; ++p) m.spec_position_verified[p] = sums[i++];
    for (size_t p = 0; p < k; ++p) m.spec_position_accepted[p] = sums[i++];
    std::vector<int64_t> peaks = {int64_t(m.state_bytes_peak), int64_t(m.pool_pages_peak)};
    comm.allreduce(peaks, ReduceOp::kMax);
    m.state_bytes_peak = uint64_t(peaks[0]);
    m.pool_pages_peak = uint64_t(peaks[1]);
    std::vector<double> times = {m.forward_seconds, m.step_seconds, m.draft_seconds};
    comm.allreduce(times, ReduceOp::kSum);
    m.forward_seconds = times[0];
    m.step_seconds = times[1];
    m.draft_seconds = times[2];
    std::vector<double> wall = {s.seconds};
    comm.allreduce(wall, ReduceOp::kMax);
    s.seconds = wall[0];
}

// Rank 0: the output and every part -> one output in input order (temporary file, rename, then the
// parts are removed). A line without a record stops the merge and keeps the parts for --resume.
void merge(const std::string& output, const Plan& plan) {
    struct Loc {
        int32_t file = -1;
        uint32_t length = 0;
        uint64_t offset = 0;
    };
    const std::vector<std::string> files = record_files(output);
    std::vector<Loc> at(plan.lines.size());
    std::vector<std::string> unmatched;
    std::set<std::string> unmatched_seen;
    for (size_t f = 0; f < files.size(); ++f)
        for_each_record(files[f], [&](std::string_view text, uint64_t offset) {
            const size_t k = record_line(plan, text);
            if (k == kNoLine) {
                // Kept (once) after the input's records: a record never disappears in a merge.
                if (unmatched_seen.insert(std::string(text)).second) unmatched.emplace_back(text);
            } else if (at[k].file < 0) {
                DI_CHECK(text.size() < (size_t(1) << 32), files[f], ": a record of ", text.size(), " bytes");
                at[k] = {int32_t(f), uint32_t(text.size()), offset};
            }
        });
    int64_t missing = 0, first_missing = 0;
    for (size_t k = 0; k < at.size(); ++k)
        if (at[k].file < 0 && missing++ == 0) first_missing = plan.lines[k].line_no;
    DI_CHECK(missing == 0, "merge: ", missing, " input lines have no record (the first: line ", first_missing,
             "); the part files are kept: run again with --resume");

    const std::string tmp = output + ".merging";
    std::vector<int> fds;
    for (const std::string& f : files) {
        fds.push_back(::open(f.c_str(), O_RDONLY | O_CLOEXEC));
        DI_CHECK(fds.back() >= 0, f, ": cannot open for the merge");
    }
    std::FILE* out = std::fopen(tmp.c_str(), "wb");
    DI_CHECK(out != nullptr, tmp, ": cannot open for writing");
    std::string buf;
    bool ok = true;
    for (const Loc& l : at) {
        buf.resize(size_t(l.length) + 1);
        ok = ok && ::pread(fds[size_t(l.file)], buf.data(), l.length, off_t(l.offset)) == ssize_t(l.length);
        buf.back() = '\n';
        ok = ok && std::fwrite(buf.data(), 1, buf.size(), out) == buf.size();
    }
    for (const std::string& text : unmatched) {
        ok = ok && std::fwrite(text.data(), 1, text.size(), out) == text.size() && std::fputc('\n', out) != EOF;
    }
    ok = ok && std::fflush(out) == 0 && ::fsync(::fileno(out)) == 0;
    ok = std::fclose(out) == 0 && ok;
    for (int fd : fds) ::close(fd);
    DI_CHECK(ok, tmp, ": the merge failed to read or write (disk full?); the part files are kept");
    fs::rename(tmp, output);
    for (const std::string& p : existing_batch_parts(output)) fs::remove(p);
}

}  // namespace

std::string batch_part_path(const std::string& output, int rank) {
    char suffix[32];
    std::snprintf(suffix, sizeof(suffix), ".part-%05d", rank);
    return output + suffix;
}

std::vector<std::string> existing_batch_parts(const std::string& output) {
    const fs::path out(output);
    const fs::path dir = out.has_parent_path() ? out.parent_path() : fs::path(".");
    const std::string prefix = out.filename().string() + ".part-";
    std::vector<std::pair<long, std::string>> found;
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
        const std::string digits = name.substr(prefix.size());
        if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
        found.emplace_back(std::stol(digits), (dir / name).string());
    }
    std::sort(found.begin(), found.end());
    std::vector<std::string> paths;
    for (auto& [r, p] : found) paths.push_back(std::move(p));
    return paths;
}

void check_no_batch_output(const std::string& output) {
    std::error_code ec;
    const bool exists = fs::exists(output, ec) && fs::file_size(output, ec) > 0;
    DI_CHECK(!exists && existing_batch_parts(output).empty(), output,
             ": the output file or its part files exist; pass --resume to continue them, or remove them");
}

std::vector<int32_t> partition_by_weight(const std::vector<int64_t>& weights, int ranks) {
    DI_CHECK(ranks >= 1, "partition into ", ranks, " ranks");
    __int128 total = 0;
    for (int64_t w : weights) {
        DI_CHECK(w >= 0, "negative weight ", w);
        total += w;
    }
    std::vector<int32_t> owner(weights.size(), 0);
    __int128 before = 0;
    for (size_t i = 0; i < weights.size(); ++i) {
        // The midpoint (before + w/2) in units of total/ranks, all times 2 to stay integral.
        const __int128 mid2 = 2 * before + weights[i];
        const __int128 r = total > 0 ? (mid2 * ranks) / (2 * total) : __int128(i * size_t(ranks) / weights.size());
        owner[i] = static_cast<int32_t>(std::min<__int128>(r, ranks - 1));
        before += weights[i];
    }
    return owner;
}

BatchRunSummary run_batch_distributed(const BatchRunOptions& o, Communicator& comm, std::shared_ptr<const Model> model,
                                      std::shared_ptr<const Tokenizer> tokenizer, const EngineConfig& ecfg) {
    const auto t0 = Clock::now();
    DI_CHECK(tokenizer != nullptr, "deepinfer run needs a tokenizer");
    const int rank = comm.rank(), n = comm.size();
    if (!o.resume) check_no_batch_output(o.output_path);
    // Collective (all-gathers): no rank writes before every rank has read the records.
    const Plan plan = make_plan(o, comm, *tokenizer);
    const int64_t mine = std::count(plan.owner.begin(), plan.owner.end(), rank);
    DI_LOG_INFO("replica {}/{}: {} of {} requests ({} already done)", rank, n, mine, plan.lines.size(),
                plan.already_done);
    const std::string part = batch_part_path(o.output_path, rank);
    cut_torn_tail(part);
    comm.barrier();  // every part is cut before rank 0 notes where the new records start

    const bool show = rank == 0 && o.progress != BatchRunOptions::Progress::kNever;
    const bool tty = o.progress == BatchRunOptions::Progress::kAlways ||
                     (o.progress == BatchRunOptions::Progress::kAuto && ::isatty(STDERR_FILENO));
    const double interval = tty ? 0.1 : o.log_interval_seconds;
    PartsProgress progress(o.output_path, n, int64_t(plan.lines.size()), plan.already_done);
    auto last_report = Clock::now();
    auto report = [&](bool final) {
        progress.poll();
        print_batch_progress(progress.line(std::chrono::duration<double>(Clock::now() - t0).count()), tty, final);
        last_report = Clock::now();
    };

    size_t cursor = 0;
    auto classify = [&](int64_t line_no, const std::string&) {
        DI_ICHECK(cursor < plan.lines.size() && plan.lines[cursor].line_no == line_no);
        const size_t k = cursor++;
        if (plan.owner[k] != rank) return BatchLineAction::kNotMine;
        return plan.lines[k].duplicate ? BatchLineAction::kDuplicate : BatchLineAction::kRun;
    };
    BatchRunOptions local = o;
    local.progress = BatchRunOptions::Progress::kNever;
    local.on_progress = [&](const BatchRunSummary& s) {
        if (o.on_progress) o.on_progress(s);
        if (show && std::chrono::duration<double>(Clock::now() - last_report).count() >= interval) report(false);
    };
    BatchRunSummary sum = run_batch_lines(local, part, true, classify, std::move(model), tokenizer, ecfg);
    comm.barrier_polling(show ? std::function<void()>([&] { report(false); }) : std::function<void()>(), interval);
    if (show) report(true);

    sum.lines = int64_t(plan.lines.size());
    sum.skipped_done = plan.already_done;
    sum.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    aggregate(sum, comm, ecfg.speculative_method == "none" ? 0 : ecfg.num_speculative_tokens);
    if (rank == 0) merge(o.output_path, plan);
    return sum;
}

}  // namespace deepinfer
