// SPDX-License-Identifier: Apache-2.0
// Batch runner: input lines -> engine requests -> output lines, with resume and progress.
#include "engine/batch_runner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>

#include "deepinfer/chat_parser.h"
#include "deepinfer/check.h"
#include "deepinfer/grammar.h"
#include "deepinfer/log.h"
#include "deepinfer/tokenizer.h"
#include "engine/batch_request.h"
#include "engine/distributed_batch.h"

namespace deepinfer {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Appends whole lines to the output and flushes each one (a kill loses nothing already written).
class OutputFile {
public:
    OutputFile(const std::string& path, bool append) {
        f_ = std::fopen(path.c_str(), append ? "ab" : "wb");
        DI_CHECK(f_ != nullptr, path, ": cannot open for writing");
    }
    ~OutputFile() {
        if (f_) std::fclose(f_);
    }
    void write_line(const json& j) {
        std::string line = j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
        DI_CHECK(std::fwrite(line.data(), 1, line.size(), f_) == line.size() && std::fflush(f_) == 0,
                 "output write failed (disk full?)");
    }

private:
    std::FILE* f_ = nullptr;
};

// Reads the custom_ids (and the line numbers of error records without one) already in an output
// file, and cuts off a torn last line.
struct ResumeState {
    std::set<std::string> done_ids;
    std::set<int64_t> done_lines;
};

ResumeState scan_output(const std::string& path) {
    ResumeState st;
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return st;
    std::ifstream in(path, std::ios::binary);
    std::string content((std::istreambuf_iterator<char>(in)), {});
    const size_t last_nl = content.rfind('\n');
    const size_t keep = last_nl == std::string::npos ? 0 : last_nl + 1;
    if (keep < content.size()) {
        DI_LOG_WARN("{}: dropping a torn last line of {} bytes (the run was killed mid-write)", path,
                    content.size() - keep);
        std::filesystem::resize_file(path, keep);
    }
    size_t pos = 0;
    while (pos < keep) {
        const size_t nl = content.find('\n', pos);
        std::string_view line(content.data() + pos, nl - pos);
        pos = nl + 1;
        json j = json::parse(line, nullptr, false);
        if (!j.is_object()) continue;
        if (j.contains("custom_id") && j["custom_id"].is_string()) st.done_ids.insert(j["custom_id"].get<std::string>());
        else if (j.contains("error") && j["error"].is_object() && j["error"].contains("line"))
            st.done_lines.insert(j["error"]["line"].get<int64_t>());
    }
    return st;
}

}  // namespace

int64_t count_batch_lines(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    DI_CHECK(in.good(), path, ": cannot open the input");
    int64_t n = 0;
    std::string line;
    while (std::getline(in, line))
        if (line.find_first_not_of(" \t\r") != std::string::npos) ++n;
    return n;
}

namespace {

// The assistant message of one completion: the recipe's parser splits reasoning, content and DSML
// tool calls (a malformed tool call stays in content, with a parse_error).
json assistant_message(const std::string& text, const std::string& finish_reason, ChatParseOptions options,
                       int64_t index) {
    options.stop.clear();  // the engine already cut the text at the stop string
    options.response_id.append(1, '-').append(std::to_string(index));
    ParsedMessage m = parse_chat_output(text, options, finish_reason == "length" ? BackendFinish::kLength
                                                                                 : BackendFinish::kStop);
    json out = json::parse(m.to_json());
    out.erase("finish_reason");
    out["role"] = "assistant";
    out["__finish_reason"] = m.finish_reason;
    return out;
}

json logprobs_json(const CompletionOutput& c, const Tokenizer* tok) {
    json content = json::array();
    for (const TokenLogprob& lp : c.logprobs) {
        auto piece = [&](int32_t id) { return tok ? tok->decode(std::span<const int32_t>(&id, 1)) : std::to_string(id); };
        json top = json::array();
        for (const auto& [id, l] : lp.top) top.push_back({{"token", piece(id)}, {"logprob", l}, {"id", id}});
        content.push_back({{"token", piece(lp.token)}, {"logprob", lp.logprob}, {"id", lp.token}, {"top_logprobs", top}});
    }
    return {{"content", content}};
}

struct Pending {
    std::string custom_id;
    std::string url;
    ChatParseOptions parse;  // chat only
    int64_t line = 0;
};

}  // namespace

void print_batch_progress(const BatchProgressLine& p, bool tty, bool final) {
    const double tps = p.seconds > 0 ? double(p.completion_tokens) / p.seconds : 0;
    const double rps = p.seconds > 0 ? double(p.done - p.skipped) / p.seconds : 0;
    const int64_t left = p.total - p.done;
    const double eta = rps > 0 ? double(left) / rps : 0;
    if (tty) {
        const int width = 30;
        const int filled = p.total ? static_cast<int>(double(width) * double(p.done) / double(p.total)) : width;
        std::fprintf(stderr, "\r[%-*s] %lld/%lld requests  %.1f tok/s  ETA %.0fs   %s", width,
                     std::string(size_t(std::clamp(filled, 0, width)), '#').c_str(), (long long)p.done,
                     (long long)p.total, tps, eta, final ? "\n" : "");
    } else {
        DI_LOG_INFO("{}/{} requests done, {} errors, {:.1f} completion tok/s, ETA {:.0f}s", p.done, p.total, p.errors,
                    tps, eta);
    }
}

BatchRunSummary run_batch(const BatchRunOptions& o, std::shared_ptr<const Model> model,
                          std::shared_ptr<const Tokenizer> tokenizer, const EngineConfig& ecfg) {
    DI_CHECK(tokenizer != nullptr, "deepinfer run needs a tokenizer");
    // Part files of a multi-replica run: --resume finishes that job in this process (and merges).
    if (!existing_batch_parts(o.output_path).empty()) {
        DI_CHECK(o.resume, o.output_path, ": part files of a multi-replica run exist (", o.output_path,
                 ".part-*); pass --resume to finish that job, or remove them");
        SingleProcessCommunicator one;
        return run_batch_distributed(o, one, std::move(model), std::move(tokenizer), ecfg);
    }
    std::error_code ec;
    const bool exists = std::filesystem::exists(o.output_path, ec) && std::filesystem::file_size(o.output_path, ec) > 0;
    DI_CHECK(o.resume || !exists, o.output_path, ": the output file exists; pass --resume to continue it, or remove it");
    const ResumeState resume = o.resume ? scan_output(o.output_path) : ResumeState{};
    std::set<std::string> seen;
    // Today's single-process rules: a custom_id (or, for an id-less error record, a line) already in
    // the output is done; the first line with a custom_id claims it, later ones are duplicates.
    auto classify = [&](int64_t line_no, const std::string& custom_id) {
        if (!custom_id.empty() ? resume.done_ids.count(custom_id) : resume.done_lines.count(line_no)) {
            seen.insert(custom_id);
            return BatchLineAction::kSkipDone;
        }
        if (!custom_id.empty() && !seen.insert(custom_id).second) return BatchLineAction::kDuplicate;
        return BatchLineAction::kRun;
    };
    return run_batch_lines(o, o.output_path, o.resume, classify, std::move(model), std::move(tokenizer), ecfg);
}

BatchRunSummary run_batch_lines(const BatchRunOptions& o, const std::string& output_path, bool append,
                                const BatchLineClassifier& classify, std::shared_ptr<const Model> model,
                                std::shared_ptr<const Tokenizer> tokenizer, const EngineConfig& ecfg) {
    const auto t0 = Clock::now();
    BatchRunSummary sum;
    DI_CHECK(tokenizer != nullptr, "deepinfer run needs a tokenizer");
    sum.lines = count_batch_lines(o.input_path);
    OutputFile out(output_path, append);
    std::ifstream in(o.input_path, std::ios::binary);
    DI_CHECK(in.good(), o.input_path, ": cannot open the input");
    const BatchRequestContext rctx{tokenizer.get(), o.family, o.default_max_tokens};

    Engine engine(model, tokenizer, ecfg);
    std::unordered_map<std::string, Pending> pending;
    const int64_t cap = o.max_in_flight > 0 ? o.max_in_flight : 4 * ecfg.max_num_seqs;
    int64_t line_no = 0, done_lines = 0;
    bool eof = false;
    const std::string model_name = o.model_name;
    const bool tty = o.progress == BatchRunOptions::Progress::kAlways ||
                     (o.progress == BatchRunOptions::Progress::kAuto && ::isatty(STDERR_FILENO));
    auto last_report = Clock::now();

    auto error_record = [&](const std::string& custom_id, int64_t line, const std::string& code, const std::string& msg) {
        json e = {{"id", "batch_req_" + batch_hex_id(custom_id.empty() ? std::to_string(line) : custom_id)},
                  {"custom_id", custom_id.empty() ? json(nullptr) : json(custom_id)},
                  {"response", nullptr},
                  {"error", {{"code", code}, {"message", msg}, {"line", line}}}};
        out.write_line(e);
        ++sum.errors;
        ++done_lines;
    };

    auto feed_one = [&]() -> bool {
        std::string line;
        while (std::getline(in, line)) {
            ++line_no;
            if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
            const std::string where = o.input_path + ":" + std::to_string(line_no);
            const BatchJson j = BatchJson::parse(line, nullptr, false);
            const std::string custom_id = batch_custom_id(j);
            const BatchLineAction action = classify(line_no, custom_id);
            if (action == BatchLineAction::kNotMine) continue;
            if (action == BatchLineAction::kSkipDone) {
                ++sum.skipped_done;
                ++done_lines;
                continue;
            }
            try {
                BatchRequest r = prepare_batch_request(j, action == BatchLineAction::kDuplicate, rctx);
                engine.add_request(custom_id, std::move(r.prompt), std::move(r.sampling));
                pending[custom_id] = {custom_id, r.url, std::move(r.parse), line_no};
                return true;
            } catch (const GrammarError& e) {
                error_record(custom_id, line_no, "invalid_grammar", where + ": " + e.message());
            } catch (const Error& e) {
                error_record(custom_id, line_no, "invalid_request", where + ": " + e.message());
            }
        }
        eof = true;
        return false;
    };

    auto write_result = [&](RequestOutput&& r) {
        Pending p = std::move(pending.at(r.request_id));
        pending.erase(r.request_id);
        json choices = json::array();
        int64_t completion_tokens = 0;
        const bool chat = p.url == "/v1/chat/completions";
        for (CompletionOutput& c : r.completions) {
            completion_tokens += static_cast<int64_t>(c.token_ids.size());
            json choice = {{"index", c.index}, {"finish_reason", c.finish_reason}};
            if (chat) {
                json message = assistant_message(c.text, c.finish_reason, p.parse, c.index);
                choice["finish_reason"] = message["__finish_reason"];
                message.erase("__finish_reason");
                choice["message"] = std::move(message);
            } else {
                choice["text"] = c.text;
            }
            choice["logprobs"] = c.logprobs.empty() ? json(nullptr) : logprobs_json(c, tokenizer.get());
            choices.push_back(std::move(choice));
        }
        const std::string rid = "batch_req_" + batch_hex_id(p.custom_id);
        json body = {{"id", (chat ? "chatcmpl-" : "cmpl-") + batch_hex_id(p.custom_id)},
                     {"object", chat ? "chat.completion" : "text_completion"},
                     {"created", static_cast<int64_t>(std::time(nullptr))},
                     {"model", model_name},
                     {"choices", choices},
                     {"usage", {{"prompt_tokens", r.prompt_tokens},
                                {"completion_tokens", completion_tokens},
                                {"total_tokens", r.prompt_tokens + completion_tokens},
                                {"prompt_tokens_details", {{"cached_tokens", r.cached_prompt_tokens}}}}}};
        out.write_line({{"id", rid},
                        {"custom_id", p.custom_id},
                        {"response", {{"status_code", 200}, {"request_id", rid}, {"body", body}}},
                        {"error", nullptr}});
        ++sum.completed;
        ++done_lines;
        sum.prompt_tokens += r.prompt_tokens;
        sum.completion_tokens += completion_tokens;
    };

    auto report = [&](bool final) {
        BatchProgressLine line;
        line.done = done_lines;
        line.skipped = sum.skipped_done;
        line.total = sum.lines;
        line.errors = sum.errors;
        line.completion_tokens = sum.completion_tokens;
        line.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        print_batch_progress(line, tty, final);
    };

    while (true) {
        while (!eof && engine.num_unfinished() < cap) feed_one();
        if (!engine.has_unfinished()) break;
        for (RequestOutput& r : engine.step()) write_result(std::move(r));
        if (o.on_progress) o.on_progress(sum);
        const double since = std::chrono::duration<double>(Clock::now() - last_report).count();
        if (o.progress != BatchRunOptions::Progress::kNever && since >= (tty ? 0.1 : o.log_interval_seconds)) {
            report(false);
            last_report = Clock::now();
        }
    }
    if (o.progress != BatchRunOptions::Progress::kNever) report(true);
    sum.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    sum.engine = engine.metrics();
    return sum;
}

}  // namespace deepinfer
