// SPDX-License-Identifier: Apache-2.0
// `deepinfer run` over several replicas (MPI ranks: one engine each, on one or many hosts).
//
// Every rank reads the whole input and computes the same plan: the lines without a record yet
// (records are looked up in the output and in every part file, whatever rank count wrote them), each
// line's prompt-token count (every rank tokenizes a 1/N share, then the counts are all-gathered), and
// a split of those lines into N contiguous runs of nearly equal prompt tokens (contiguous: requests
// that share a prefix stay on one replica's prefix cache). The ranks check that their plans agree.
// Rank r appends its records to `<output>.part-<r>` (flushed per request, as in one process); after
// a barrier rank 0 merges the output and all parts into `<output>` in input order (written to a
// temporary file, renamed into place, then the parts are removed). A killed job leaves its parts;
// --resume (any rank count, or one process) runs only the lines without a record and merges again.
// Paths must be visible to every rank (a shared filesystem across hosts).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "engine/batch_runner.h"

namespace deepinfer {

// The part file rank `rank` appends to: "<output>.part-NNNNN".
std::string batch_part_path(const std::string& output, int rank);
// The part files next to `output` from runs of any rank count, in rank order.
std::vector<std::string> existing_batch_parts(const std::string& output);

// Throws unless a fresh (not --resume) job may start: no non-empty output, no part files.
void check_no_batch_output(const std::string& output);

// Contiguous split of `weights` (in order) into `ranks` runs of nearly equal sums: item i goes to the
// rank whose share [r*T/n, (r+1)*T/n) holds its weight's midpoint. Each rank's sum is within one
// item's weight of T/n. Deterministic (integer arithmetic).
std::vector<int32_t> partition_by_weight(const std::vector<int64_t>& weights, int ranks);

// Runs this rank's share and (rank 0) merges. Every rank returns the job's summary (the sums over
// ranks; seconds: the slowest). Collective: every rank of `comm` calls it with the same options.
BatchRunSummary run_batch_distributed(const BatchRunOptions& options, Communicator& comm,
                                      std::shared_ptr<const Model> model, std::shared_ptr<const Tokenizer> tokenizer,
                                      const EngineConfig& engine_config);

}  // namespace deepinfer
