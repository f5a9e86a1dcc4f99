// SPDX-License-Identifier: Apache-2.0
// The CLI's subcommands. Each registers its options on the app and returns the function to run.
#pragma once

#include <CLI/CLI.hpp>

#include <functional>

#include "deepinfer/hub.h"

namespace deepinfer::cli {

using Command = std::function<int()>;

// `deepinfer inspect --model DIR [--json]`
Command register_inspect(CLI::App& app);
// `deepinfer logits --model DIR --ids 5,17,3 --output FILE [--numerics exact|official]`
Command register_logits(CLI::App& app);
// `deepinfer generate --model DIR --ids 5,17,3 --max-tokens N [--temperature T] [--seed S]`
Command register_generate(CLI::App& app);
// `deepinfer bench (--model DIR | --synthetic flash-csa|flash-hca|flash-sliding) [--prefill N] [--decode M]`
Command register_bench(CLI::App& app);
// `deepinfer run [--model DIR] --input requests.jsonl --output results.jsonl [--resume]`
Command register_run(CLI::App& app);
// `deepinfer download org/name [--revision R] [--include PATTERN]...` (prints the snapshot directory)
Command register_download(CLI::App& app);
// The HF_* environment's Hub options, with download progress lines on stderr (download and run).
HubOptions cli_hub_options();

// `deepinfer tokenize --tokenizer FILE --input F.jsonl` (JSON strings in, {"ids": [...]} out)
Command register_tokenize(CLI::App& app);
// `deepinfer detokenize --tokenizer FILE --input F.jsonl` ({"ids": [...]} in, {"text": ...} out)
Command register_detokenize(CLI::App& app);
// `deepinfer render --family v4|v41 --request FILE` ({"prompt": ..., "ids": [...]})
Command register_render(CLI::App& app);
// `deepinfer parse --family v4|v41 --ids 1,2,3` (the assistant message as JSON)
Command register_parse(CLI::App& app);

}  // namespace deepinfer::cli
