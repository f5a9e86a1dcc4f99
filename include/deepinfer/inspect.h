// SPDX-License-Identifier: Apache-2.0
// The report of `deepinfer inspect`: architecture, per-layer schedule, parameters and bytes by
// dtype, and every missing, unexpected or mismatched tensor. Text for people, JSON for programs.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "deepinfer/checkpoint.h"
#include "deepinfer/weight_inventory.h"

namespace deepinfer {

std::string inspect_text(const Checkpoint& checkpoint);
std::string inspect_json(const Checkpoint& checkpoint);

// The family-independent sections (parameters, bytes by dtype, the tensor check), shared with V4.1.
std::string inspect_inventory_text(const Checkpoint& checkpoint, const InventoryReport& report);
void inspect_inventory_json(const InventoryReport& report, nlohmann::json& out);

}  // namespace deepinfer
