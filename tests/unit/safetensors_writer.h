// SPDX-License-Identifier: Apache-2.0
// Test helper: writes safetensors files, well-formed or deliberately broken.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "deepinfer/tensor.h"

namespace deepinfer::test {

struct TensorBytes {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
};

// A valid file: header JSON padded with spaces to a multiple of 8, then the tensors' bytes in order.
void write_safetensors(const std::string& path, const std::vector<TensorBytes>& tensors);
// Writes exactly: u64 `header_len` (little endian), `header`, `data` (for malformed files).
void write_raw(const std::string& path, uint64_t header_len, const std::string& header, const std::string& data);
void write_text(const std::string& path, const std::string& text);
std::string temp_dir(const std::string& name);  // fresh empty directory under the test temp root

}  // namespace deepinfer::test
