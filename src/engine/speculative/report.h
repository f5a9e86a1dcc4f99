// SPDX-License-Identifier: Apache-2.0
// The speculative-decoding part of a run summary (deepinfer run, deepinfer bench).
#pragma once

#include <string>

#include "deepinfer/engine.h"

namespace deepinfer {

// One line: mean accepted length, per-position conditional acceptance, verify tokens per step, the
// scheduler's mean draft budget, draft vs target-forward time. Empty when speculation was off.
std::string speculative_summary(const EngineMetrics& metrics);

}  // namespace deepinfer
