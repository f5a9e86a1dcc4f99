// SPDX-License-Identifier: Apache-2.0
// A checkpoint directory: config.json plus safetensors weights, single-file or sharded through
// model.safetensors.index.json. Tensor names are normalized to DeepSeek's published naming
// (embed.weight, layers.N.attn.wq_a.weight, ...) whichever scheme the files use; the stored name is
// kept for messages. Owns the mappings; views stay valid while the Checkpoint lives.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/model_config.h"
#include "deepinfer/safetensors.h"

namespace deepinfer {

enum class NamingScheme : uint8_t {
    kDeepSeek,      // published layout: embed.weight, layers.N.attn.wq_a.weight, mtp.0.*
    kTransformers,  // names written by transformers (model.layers.N..., model.embed_tokens.weight, ...)
    kUnknown,
};
std::string_view naming_scheme_name(NamingScheme scheme);

struct CheckpointTensor {
    std::string name;         // canonical (DeepSeek) name
    std::string stored_name;  // as written in the file
    const SafetensorsFile* file = nullptr;
    const SafetensorsTensorInfo* info = nullptr;
};

struct CheckpointOptions {
    // Parse config.json as a DeepSeek-V4 config (config() then serves it). Off for other families
    // (V4.1), whose loaders read the config themselves; the tensors are opened either way.
    bool read_v4_config = true;
};

class Checkpoint {
public:
    // `path` is a directory (with config.json and *.safetensors) or a single .safetensors file.
    // Validates every file's header, the index (file names confined to the directory, every listed
    // tensor present in its shard, no tensor in two shards) and the uniqueness of canonical names.
    explicit Checkpoint(const std::string& path, const CheckpointOptions& options = {});

    const std::string& path() const { return path_; }
    bool has_config() const { return has_config_; }
    const ModelConfig& config() const;  // throws if the directory has no config.json
    NamingScheme naming_scheme() const { return scheme_; }
    const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
    const std::vector<CheckpointTensor>& tensors() const { return tensors_; }
    const CheckpointTensor* find(std::string_view canonical_name) const;
    TensorView view(const CheckpointTensor& tensor) const { return tensor.file->view(*tensor.info); }

private:
    void open_index(const std::string& index_path);
    void add_file_tensors(const SafetensorsFile& file);

    std::string path_;
    bool has_config_ = false;
    ModelConfig config_;
    NamingScheme scheme_ = NamingScheme::kUnknown;
    std::vector<std::unique_ptr<SafetensorsFile>> files_;
    std::vector<CheckpointTensor> tensors_;
    std::map<std::string, size_t, std::less<>> index_;
};

}  // namespace deepinfer
