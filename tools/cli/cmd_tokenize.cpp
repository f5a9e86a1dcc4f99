// SPDX-License-Identifier: Apache-2.0
// `deepinfer tokenize` and `deepinfer detokenize`: JSONL in, JSONL out, one output line per input
// line and in the same order. Lines are encoded in blocks, each block in parallel.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "deepinfer/check.h"
#include "deepinfer/tokenizer.h"

namespace deepinfer::cli {

namespace {

using json = nlohmann::json;
constexpr size_t kBlockLines = 4096;

// Reads `path` ("-" = stdin) line by line, handing blocks of lines to `fn(first_line_no, lines)`.
template <typename Fn>
void for_each_block(const std::string& path, Fn&& fn) {
    std::ifstream file;
    std::istream* in = &std::cin;
    if (path != "-") {
        file.open(path, std::ios::binary);
        DI_CHECK(file.good(), "cannot open input file ", path);
        in = &file;
    }
    std::vector<std::string> block;
    std::string line;
    size_t line_no = 0, first = 1;
    while (std::getline(*in, line)) {
        ++line_no;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        block.push_back(std::move(line));
        if (block.size() == kBlockLines) {
            fn(first, block);
            block.clear();
            first = line_no + 1;
        }
    }
    if (!block.empty()) fn(first, block);
}

json parse_line(const std::string& line, size_t line_no, const std::string& path) {
    try {
        return json::parse(line);
    } catch (const json::exception& e) {
        DI_THROW(path, ":", line_no, ": not valid JSON (", e.what(), ")");
    }
}

void write_line(std::FILE* out, const json& j) {
    std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
    s.push_back('\n');
    std::fwrite(s.data(), 1, s.size(), out);
}

struct Options {
    std::string tokenizer;
    std::string input;
    bool skip_special = false;
};

std::shared_ptr<Options> add_common(CLI::App* sub) {
    auto opts = std::make_shared<Options>();
    sub->add_option("--tokenizer", opts->tokenizer, "tokenizer.json (Hugging Face format)")->required();
    sub->add_option("--input", opts->input, "JSONL input file ('-' = stdin)")->required();
    return opts;
}

}  // namespace

Command register_tokenize(CLI::App& app) {
    CLI::App* sub = app.add_subcommand(
        "tokenize", "Encode text: each input line is a JSON string (or {\"text\": ...}); each "
                    "output line is {\"ids\": [...]}. Added tokens in the text become their ids.");
    auto opts = add_common(sub);
    return [sub, opts]() -> int {
        if (!sub->parsed()) return -1;
        const Tokenizer tok = Tokenizer::from_file(opts->tokenizer);
        for_each_block(opts->input, [&](size_t first, const std::vector<std::string>& lines) {
            std::vector<std::string> texts(lines.size());
            for (size_t i = 0; i < lines.size(); ++i) {
                json j = parse_line(lines[i], first + i, opts->input);
                if (j.is_object() && j.contains("text")) j = j["text"];
                DI_CHECK(j.is_string(), opts->input, ":", first + i,
                         ": expected a JSON string (or an object with a string \"text\")");
                texts[i] = j.get<std::string>();
            }
            const auto ids = tok.encode_batch(texts);
            for (const auto& v : ids) write_line(stdout, json{{"ids", v}});
        });
        return 0;
    };
}

Command register_detokenize(CLI::App& app) {
    CLI::App* sub = app.add_subcommand(
        "detokenize", "Decode ids: each input line is {\"ids\": [...]} (or a bare array); each "
                      "output line is {\"text\": \"...\"}. Special tokens are kept.");
    auto opts = add_common(sub);
    sub->add_flag("--skip-special-tokens", opts->skip_special, "Drop tokens flagged special");
    return [sub, opts]() -> int {
        if (!sub->parsed()) return -1;
        const Tokenizer tok = Tokenizer::from_file(opts->tokenizer);
        for_each_block(opts->input, [&](size_t first, const std::vector<std::string>& lines) {
            for (size_t i = 0; i < lines.size(); ++i) {
                json j = parse_line(lines[i], first + i, opts->input);
                if (j.is_object() && j.contains("ids")) j = j["ids"];
                DI_CHECK(j.is_array(), opts->input, ":", first + i,
                         ": expected {\"ids\": [...]} with integer ids");
                std::vector<int32_t> ids;
                ids.reserve(j.size());
                for (const auto& v : j) {
                    DI_CHECK(v.is_number_integer(), opts->input, ":", first + i,
                             ": ids must be integers, got ", v.dump());
                    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
                }
                write_line(stdout, json{{"text", tok.decode(ids, opts->skip_special)}});
            }
        });
        return 0;
    };
}

}  // namespace deepinfer::cli
