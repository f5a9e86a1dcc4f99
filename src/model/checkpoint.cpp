// SPDX-License-Identifier: Apache-2.0
// Opening a checkpoint directory: config.json, then the index (if sharded) or the single file.
// The index is untrusted too: shard names may not leave the directory, and the index and the
// shards' own headers must agree tensor by tensor.
#include "deepinfer/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "deepinfer/check.h"
#include "deepinfer/tensor_names.h"

namespace deepinfer {
namespace fs = std::filesystem;

std::string_view naming_scheme_name(NamingScheme scheme) {
    switch (scheme) {
        case NamingScheme::kDeepSeek: return "deepseek";
        case NamingScheme::kTransformers: return "transformers";
        case NamingScheme::kUnknown: return "unknown";
    }
    return "?";
}

namespace {
std::string read_small_file(const std::string& path, size_t limit) {
    std::ifstream in(path, std::ios::binary);
    DI_CHECK(in.good(), path, ": cannot open");
    std::ostringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    DI_CHECK(text.size() <= limit, path, ": ", text.size(), " bytes exceeds the ", limit, "-byte limit");
    return text;
}

// A shard name from the index must be a plain file name inside the checkpoint directory.
void check_shard_name(const std::string& index_path, const std::string& name) {
    DI_CHECK(!name.empty() && name.find('/') == std::string::npos && name.find('\\') == std::string::npos &&
                 name != "." && name != ".." && name.find('\0') == std::string::npos,
             index_path, ": shard name '", name, "' is not a plain file name in the checkpoint directory");
}
}  // namespace

Checkpoint::Checkpoint(const std::string& path, const CheckpointOptions& options) : path_(path) {
    fs::path p(path);
    std::error_code ec;
    DI_CHECK(fs::exists(p, ec), path, ": no such file or directory");
    if (fs::is_regular_file(p, ec)) {
        files_.push_back(std::make_unique<SafetensorsFile>(path));
        add_file_tensors(*files_.back());
    } else {
        DI_CHECK(fs::is_directory(p, ec), path, ": neither a directory nor a file");
        fs::path config = p / "config.json";
        if (options.read_v4_config && fs::exists(config, ec)) {
            config_ = load_model_config(config.string());
            has_config_ = true;
        }
        fs::path index = p / "model.safetensors.index.json";
        fs::path single = p / "model.safetensors";
        if (fs::exists(index, ec)) {
            open_index(index.string());
        } else if (fs::exists(single, ec)) {
            files_.push_back(std::make_unique<SafetensorsFile>(single.string()));
            add_file_tensors(*files_.back());
        } else {
            // Some exports use other file names: take every *.safetensors in the directory, sorted.
            std::vector<std::string> names;
            for (const auto& entry : fs::directory_iterator(p, ec))
                if (entry.is_regular_file() && entry.path().extension() == ".safetensors")
                    names.push_back(entry.path().string());
            DI_CHECK(!names.empty(), path, ": no model.safetensors, model.safetensors.index.json or *.safetensors");
            std::sort(names.begin(), names.end());
            for (const std::string& n : names) {
                files_.push_back(std::make_unique<SafetensorsFile>(n));
                add_file_tensors(*files_.back());
            }
        }
    }
    bool any_ds = false, any_hf = false;
    for (const CheckpointTensor& t : tensors_) {
        NormalizedName n = normalize_tensor_name(t.stored_name);
        any_ds |= n.was_deepseek;
        any_hf |= n.was_transformers;
    }
    // transformers writes some names exactly as DeepSeek does (head.weight), so any rewritten name
    // marks the checkpoint as transformers-written.
    (void)any_ds;
    scheme_ = any_hf ? NamingScheme::kTransformers : tensors_.empty() ? NamingScheme::kUnknown : NamingScheme::kDeepSeek;
}

const ModelConfig& Checkpoint::config() const {
    DI_CHECK(has_config_, path_, ": checkpoint has no config.json");
    return config_;
}

void Checkpoint::open_index(const std::string& index_path) {
    using nlohmann::json;
    std::string text = read_small_file(index_path, 256u << 20);
    json root;
    try {
        root = json::parse(text);
    } catch (const json::exception& e) {
        DI_THROW(index_path, ": not valid JSON: ", e.what());
    }
    DI_CHECK(root.is_object() && root.contains("weight_map") && root["weight_map"].is_object(), index_path,
             ": must be an object with a 'weight_map' object");
    std::map<std::string, std::vector<std::string>> by_file;  // shard -> tensor names, in index order
    for (auto it = root["weight_map"].begin(); it != root["weight_map"].end(); ++it) {
        DI_CHECK(it.value().is_string(), index_path, ": weight_map entry of '", it.key(), "' must be a file name");
        std::string shard = it.value().get<std::string>();
        check_shard_name(index_path, shard);
        by_file[shard].push_back(it.key());
    }
    DI_CHECK(!by_file.empty(), index_path, ": weight_map is empty");
    const fs::path dir = fs::path(index_path).parent_path();
    for (const auto& [shard, names] : by_file) {
        fs::path shard_path = dir / shard;
        std::error_code ec;
        DI_CHECK(fs::is_regular_file(shard_path, ec), index_path, ": shard '", shard, "' (listed for tensor '",
                 names.front(), "') does not exist");
        files_.push_back(std::make_unique<SafetensorsFile>(shard_path.string()));
        const SafetensorsFile& file = *files_.back();
        std::set<std::string> listed(names.begin(), names.end());
        for (const std::string& n : names)
            DI_CHECK(file.find(n) != nullptr, index_path, ": tensor '", n, "' is listed in shard '", shard,
                     "' but that file does not contain it");
        for (const SafetensorsTensorInfo& t : file.tensors())
            DI_CHECK(listed.count(t.name), shard_path.string(), ": tensor '", t.name,
                     "' is in the file but the index does not list it for this shard");
        add_file_tensors(file);
    }
}

void Checkpoint::add_file_tensors(const SafetensorsFile& file) {
    for (const SafetensorsTensorInfo& info : file.tensors()) {
        NormalizedName n = normalize_tensor_name(info.name);
        auto [it, inserted] = index_.emplace(n.canonical, tensors_.size());
        if (!inserted) {
            const CheckpointTensor& other = tensors_[it->second];
            DI_THROW(file.path(), ": tensor '", info.name, "' duplicates '", other.stored_name, "' in ",
                     other.file->path(), " (both are '", n.canonical, "')");
        }
        tensors_.push_back({n.canonical, info.name, &file, &info});
    }
}

const CheckpointTensor* Checkpoint::find(std::string_view canonical_name) const {
    auto it = index_.find(canonical_name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace deepinfer
