// SPDX-License-Identifier: Apache-2.0
// Reading safetensors files by mmap, with a strict header check: a checkpoint is untrusted input,
// so every malformed file gives an Error naming the file (and tensor) instead of a crash or an
// out-of-bounds read. Views returned by a SafetensorsFile point into its read-only mapping and
// live as long as the file object. Thread-safe for concurrent reads after construction.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/tensor.h"

namespace deepinfer {

struct SafetensorsTensorInfo {
    std::string name;
    DType dtype = DType::kF32;
    Shape shape;
    uint64_t begin = 0;  // byte offsets relative to the start of the data section
    uint64_t end = 0;
};

struct SafetensorsHeader {
    std::vector<SafetensorsTensorInfo> tensors;  // in header order
    std::map<std::string, std::string> metadata;  // "__metadata__" (string -> string)
};

// Limits on what a header may declare.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;  // 100 MiB of JSON
inline constexpr int64_t kMaxSafetensorsDim = int64_t{1} << 40;

// Parses and validates a header. `data_size` is the size of the data section after it; `file`
// names the file in error messages. Rules: a JSON object of tensor entries {dtype, shape,
// data_offsets} plus an optional "__metadata__" object of strings; no duplicate keys; known dtypes;
// rank <= 8; shape x dtype size == byte range; ranges inside the data, not overlapping, and
// together covering the data section exactly (no holes), as the format requires.
SafetensorsHeader parse_safetensors_header(std::string_view header_json, uint64_t data_size,
                                           std::string_view file);

// A read-only memory mapping of a whole file (RAII).
class MappedFile {
public:
    explicit MappedFile(const std::string& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    const uint8_t* data() const { return data_; }
    uint64_t size() const { return size_; }

private:
    const uint8_t* data_ = nullptr;
    uint64_t size_ = 0;
};

class SafetensorsFile {
public:
    explicit SafetensorsFile(const std::string& path);

    const std::string& path() const { return path_; }
    uint64_t file_size() const { return map_.size(); }
    const std::vector<SafetensorsTensorInfo>& tensors() const { return header_.tensors; }
    const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
    const SafetensorsTensorInfo* find(std::string_view name) const;
    // A view of the tensor's bytes inside the mapping (read-only memory; never write through it).
    TensorView view(const SafetensorsTensorInfo& info) const;

private:
    std::string path_;
    MappedFile map_;
    uint64_t data_offset_ = 0;
    SafetensorsHeader header_;
    std::map<std::string, size_t, std::less<>> index_;
};

}  // namespace deepinfer
