// SPDX-License-Identifier: Apache-2.0
// The Hugging Face cache layout (see cache.h).
#include "hub/cache.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <thread>

#include "deepinfer/check.h"

namespace fs = std::filesystem;

namespace deepinfer::hub {

bool is_commit_hash(std::string_view s) {
    if (s.size() != 40) return false;
    for (char c : s)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    return true;
}

RepoCache::RepoCache(const std::string& cache_dir, const std::string& repo_id) : cache_dir_(cache_dir) {
    folder_ = "models";
    size_t start = 0;
    while (true) {
        const size_t slash = repo_id.find('/', start);
        folder_ += "--" + repo_id.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
        if (slash == std::string::npos) break;
        start = slash + 1;
    }
    root_ = cache_dir_ / folder_;
}

std::optional<std::string> RepoCache::read_ref(const std::string& revision) const {
    std::ifstream in(root_ / "refs" / revision);
    if (!in) return std::nullopt;
    std::string commit;
    in >> commit;
    if (!is_commit_hash(commit)) return std::nullopt;
    return commit;
}

void RepoCache::write_ref(const std::string& revision, const std::string& commit) const {
    const fs::path path = root_ / "refs" / revision;
    fs::create_directories(path.parent_path());
    const fs::path tmp = path.string() + ".tmp-" + std::to_string(::getpid());
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out << commit;
        DI_CHECK(out.good(), tmp.string(), ": cannot write");
    }
    fs::rename(tmp, path);
}

fs::path RepoCache::snapshot_dir(const std::string& commit) const { return root_ / "snapshots" / commit; }
fs::path RepoCache::blob_path(const std::string& etag) const { return root_ / "blobs" / etag; }
fs::path RepoCache::incomplete_path(const std::string& etag) const {
    return root_ / "blobs" / (etag + ".incomplete");
}
fs::path RepoCache::lock_path(const std::string& etag) const {
    return cache_dir_ / ".locks" / folder_ / (etag + ".lock");
}

void RepoCache::link(const std::string& commit, const std::string& file, const std::string& etag) const {
    const fs::path dst = snapshot_dir(commit) / file;
    fs::create_directories(dst.parent_path());
    // The link is relative to the snapshot file's own directory: ../../blobs/<etag> from
    // snapshots/<commit>/, one more ../ per subdirectory of `file`.
    const fs::path target = fs::relative(blob_path(etag), dst.parent_path());
    const fs::path tmp = dst.string() + ".tmp-link-" + std::to_string(::getpid());
    std::error_code ec;
    fs::remove(tmp, ec);
    fs::create_symlink(target, tmp);
    fs::rename(tmp, dst);
}

std::vector<std::string> missing_model_files(const fs::path& snapshot) {
    std::vector<std::string> missing;
    std::error_code ec;
    if (!fs::exists(snapshot / "config.json", ec)) missing.push_back("config.json");
    const fs::path index = snapshot / "model.safetensors.index.json";
    if (fs::exists(index, ec)) {
        std::ifstream in(index);
        const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
        if (j.is_discarded() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
            missing.push_back("model.safetensors.index.json (unreadable)");
            return missing;
        }
        std::vector<std::string> shards;
        for (const auto& [name, shard] : j["weight_map"].items())
            if (shard.is_string()) shards.push_back(shard.get<std::string>());
        std::sort(shards.begin(), shards.end());
        shards.erase(std::unique(shards.begin(), shards.end()), shards.end());
        for (const std::string& s : shards)
            if (!fs::exists(snapshot / s, ec)) missing.push_back(s);
        return missing;
    }
    bool any = false;
    if (fs::is_directory(snapshot, ec))
        for (const auto& e : fs::directory_iterator(snapshot, ec))
            if (e.path().extension() == ".safetensors" && fs::exists(e.path(), ec)) any = true;
    if (!any) missing.push_back("*.safetensors");
    return missing;
}

FileLock::FileLock(const fs::path& path, const std::atomic<bool>& cancel) {
    fs::create_directories(path.parent_path());
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    DI_CHECK(fd_ >= 0, path.string(), ": cannot open the lock file");
    while (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
        if (cancel.load()) {
            ::close(fd_);
            fd_ = -1;
            return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
}

FileLock::~FileLock() {
    if (fd_ >= 0) {
        ::flock(fd_, LOCK_UN);
        ::close(fd_);
    }
}

}  // namespace deepinfer::hub
