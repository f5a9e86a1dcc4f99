// SPDX-License-Identifier: Apache-2.0
// The speculative-decoding part of a run summary (deepinfer run, deepinfer bench), and the confidence
// scheduler's trace as JSON lines (deepinfer run --spec-trace, spec_bench --trace).
#pragma once

#include <string>

#include "deepinfer/engine.h"

namespace deepinfer {

// One line: mean accepted length, per-position conditional acceptance, verify tokens per step, the
// scheduler's mean draft budget, draft vs target-forward time. Empty when speculation was off.
std::string speculative_summary(const EngineMetrics& metrics);

// One step of EngineConfig::speculative_trace as a JSON object on one line (no newline): step, decode_only,
// decode_rows, rows,
// tapped, drafted, verifying, drafts, accepted, step_s, draft_s, predicted_step_s, predicted_draft_s,
// expected_gain.
std::string speculative_trace_line(const SpeculativeTraceStep& step);

}  // namespace deepinfer
