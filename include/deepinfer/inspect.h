// SPDX-License-Identifier: Apache-2.0
// The report of `deepinfer inspect`: architecture, per-layer schedule, parameters and bytes by
// dtype, and every missing, unexpected or mismatched tensor. Text for people, JSON for programs.
#pragma once

#include <string>

#include "deepinfer/checkpoint.h"

namespace deepinfer {

std::string inspect_text(const Checkpoint& checkpoint);
std::string inspect_json(const Checkpoint& checkpoint);

}  // namespace deepinfer
