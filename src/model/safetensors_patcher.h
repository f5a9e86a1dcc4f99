// SPDX-License-Identifier: Apache-2.0
// Overwrites tensors of a safetensors file in place, sizes unchanged: the agreeing-drafter rewrites
// (model/dspark_agree.h) and bench/spec_bench's agreeing MTP model. Values are written as bf16, or, for an
// FP8 (e4m3) `<name>.weight`, as the published format's e4m3 codes with one ue8m0 scale per 128 x 128 block
// in `<name>.scale`; a tensor of any format can be zeroed (zero bytes are +0 in bf16, e4m3 and packed e2m1,
// whatever the scales) or copied from another of the same format and size. Errors name the tensor.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include "deepinfer/safetensors.h"

namespace deepinfer {

class SafetensorsPatcher {
public:
    explicit SafetensorsPatcher(const std::string& path);
    bool has(const std::string& name) const { return file_.find(name) != nullptr; }
    const SafetensorsTensorInfo& info(const std::string& name) const;  // throws if missing
    std::vector<float> read_bf16(const std::string& name) const;
    void write(const std::string& name, const std::vector<float>& values);
    void zero(const std::string& name);
    void copy(const std::string& from, const std::string& to);

private:
    void put(const SafetensorsTensorInfo& t, const void* bytes, size_t n);
    void write_fp8(const SafetensorsTensorInfo& t, const std::string& name, const std::vector<float>& values);

    std::string path_;
    SafetensorsFile file_;
    std::fstream out_;
    uint64_t data_ = 0;
};

}  // namespace deepinfer
