// SPDX-License-Identifier: Apache-2.0
// One repository's folder in the Hugging Face cache, as huggingface_hub lays it out:
//   <cache>/models--<org>--<name>/refs/<revision>          the commit a branch or tag pointed to
//   <cache>/models--<org>--<name>/blobs/<etag>             file contents, named by their etag
//                                                          (sha256 for LFS files, git blob id else)
//   <cache>/models--<org>--<name>/blobs/<etag>.incomplete  a download in progress (resumable)
//   <cache>/models--<org>--<name>/snapshots/<commit>/<path> relative symlinks into blobs/
//   <cache>/.locks/models--<org>--<name>/<etag>.lock      flock while a blob is downloaded
#pragma once

#include <atomic>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::hub {

bool is_commit_hash(std::string_view s);  // 40 lowercase hex digits

class RepoCache {
public:
    RepoCache(const std::string& cache_dir, const std::string& repo_id);
    const std::filesystem::path& root() const { return root_; }
    std::optional<std::string> read_ref(const std::string& revision) const;
    void write_ref(const std::string& revision, const std::string& commit) const;  // atomic replace
    std::filesystem::path snapshot_dir(const std::string& commit) const;
    std::filesystem::path blob_path(const std::string& etag) const;
    std::filesystem::path incomplete_path(const std::string& etag) const;
    std::filesystem::path lock_path(const std::string& etag) const;
    // snapshots/<commit>/<file> -> ../../blobs/<etag> (relative; replaces what was there).
    void link(const std::string& commit, const std::string& file, const std::string& etag) const;

private:
    std::filesystem::path cache_dir_;
    std::string folder_;  // models--org--name
    std::filesystem::path root_;
};

// What a snapshot directory lacks to be loadable: config.json, and the safetensors weights
// (every shard model.safetensors.index.json names, or at least one *.safetensors file).
std::vector<std::string> missing_model_files(const std::filesystem::path& snapshot);

// An exclusive flock on a lock file (compatible with huggingface_hub's filelock on POSIX), waited
// for while `cancel` stays false.
class FileLock {
public:
    FileLock(const std::filesystem::path& path, const std::atomic<bool>& cancel);
    ~FileLock();
    FileLock(const FileLock&) = delete;
    FileLock& operator=(const FileLock&) = delete;
    bool locked() const { return fd_ >= 0; }

private:
    int fd_ = -1;
};

}  // namespace deepinfer::hub
