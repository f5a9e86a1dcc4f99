// SPDX-License-Identifier: Apache-2.0
// hub_snapshot_download: the revision's file list from the Hub API, then every missing file into
// the cache (parallel workers, resumable, verified), then the snapshot directory.
//
// Protocol (the Hub's public HTTP API, as huggingface_hub uses it):
//   GET {endpoint}/api/models/{repo}/revision/{revision}?blobs=true
//       -> {"sha": commit, "siblings": [{"rfilename", "blobId", "size", "lfs": {"sha256", "size"}}]}
//   GET {endpoint}/{repo}/resolve/{commit}/{path}   (LFS files redirect to a CDN; Range honoured)
// Errors carry X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo) and
// X-Error-Message headers.
#include <fnmatch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/sha256.h"
#include "deepinfer/hub.h"
#include "deepinfer/log.h"
#include "hub/cache.h"
#include "hub/http.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace deepinfer {
namespace {

#define DI_HUB_THROW(kind, ...) throw HubError(kind, __FILE__, __LINE__, ::deepinfer::detail::concat(__VA_ARGS__))

struct RepoFile {
    std::string path;
    std::string etag;  // the blob's name: the LFS sha256, else the git blob id
    uint64_t size = 0;
    bool lfs = false;
};

std::string header(const hub::HttpResponse& r, const std::string& name) {
    auto it = r.headers.find(name);
    return it == r.headers.end() ? std::string() : it->second;
}

std::string server_message(const hub::HttpResponse& r) {
    std::string m = header(r, "x-error-message");
    if (m.empty()) {
        const json j = json::parse(r.body, nullptr, false);
        if (j.is_object() && j.contains("error") && j["error"].is_string()) m = j["error"].get<std::string>();
    }
    return m.empty() ? std::string() : " (" + m + ")";
}

[[noreturn]] void throw_for_status(const hub::HttpResponse& r, const HubOptions& o, const std::string& repo,
                                   const std::string& revision, const std::string& file) {
    const std::string code = header(r, "x-error-code");
    const std::string msg = server_message(r);
    const std::string token_hint = o.token.empty()
                                       ? "no token is set: set HF_TOKEN (or log in with `hf auth login`) to a token "
                                         "that can read it"
                                       : "the token in use (HF_TOKEN or the saved token) has no access to it";
    if (code == "RepoNotFound" || (r.status == 404 && code.empty() && file.empty()))
        DI_HUB_THROW(HubErrorKind::kRepoNotFound, repo, ": repository not found on ", o.endpoint, " (HTTP ",
                     r.status, ")", msg, "; check the name, or if it is private, ", token_hint);
    if (r.status == 401 || r.status == 403 || code == "GatedRepo")
        DI_HUB_THROW(HubErrorKind::kUnauthorized, repo, ": HTTP ", r.status,
                     r.status == 401 ? " Unauthorized" : " Forbidden", msg,
                     ": the repository is private or gated; ", token_hint,
                     code == "GatedRepo" ? " (and accept its conditions on its Hub page)" : "");
    if (code == "RevisionNotFound" || (r.status == 404 && file.empty()))
        DI_HUB_THROW(HubErrorKind::kRevisionNotFound, repo, ": revision '", revision, "' not found", msg);
    if (r.status == 404)
        DI_HUB_THROW(HubErrorKind::kEntryNotFound, repo, "@", revision, ": file '", file, "' not found", msg);
    DI_HUB_THROW(HubErrorKind::kNetwork, repo, file.empty() ? "" : ": " + file, ": HTTP ", r.status, msg);
}

// An HTTP answer worth retrying (a transfer that broke off is always retried).
bool transient(const hub::HttpResponse& r) { return r.status == 408 || r.status == 429 || r.status >= 500; }

bool wanted(const std::string& path, const std::vector<std::string>& patterns) {
    for (const std::string& p : patterns)
        if (::fnmatch(p.c_str(), path.c_str(), FNM_PATHNAME) == 0) return true;
    return false;
}

// A complete cached snapshot of the revision, if any.
std::optional<fs::path> cached_snapshot(const hub::RepoCache& cache, const std::string& revision,
                                        std::vector<std::string>* missing) {
    std::optional<std::string> commit = hub::is_commit_hash(revision) ? revision : cache.read_ref(revision);
    if (!commit) {
        if (missing) missing->push_back("refs/" + revision);
        return std::nullopt;
    }
    const fs::path dir = cache.snapshot_dir(*commit);
    std::vector<std::string> m = hub::missing_model_files(dir);
    if (m.empty()) return dir;
    if (missing) *missing = std::move(m);
    return std::nullopt;
}

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
}

// ---- downloads ---------------------------------------------------------------------------------

struct Shared {
    std::atomic<bool> cancel{false};
    std::atomic<uint64_t> bytes_done{0};
    std::atomic<int64_t> files_done{0};
    std::atomic<int64_t> workers_left{0};
    std::mutex mu;
    std::condition_variable cv;
    std::exception_ptr error;
};

// Hashes the bytes already in a partial file (a resumed LFS download is verified whole).
void hash_prefix(const fs::path& path, uint64_t bytes, Sha256& hasher) {
    std::FILE* f = std::fopen(path.c_str(), "rb");
    DI_CHECK(f != nullptr, path.string(), ": cannot read");
    std::vector<char> buf(1 << 20);
    while (bytes > 0) {
        const size_t n = std::fread(buf.data(), 1, std::min<uint64_t>(bytes, buf.size()), f);
        if (n == 0) break;
        hasher.update(buf.data(), n);
        bytes -= n;
    }
    std::fclose(f);
}

void download_file(const RepoFile& file, const std::string& repo, const std::string& commit,
                   const hub::RepoCache& cache, const HubOptions& o, hub::HttpClient& http, Shared& shared) {
    fs::create_directories(cache.blob_path(file.etag).parent_path());
    hub::FileLock lock(cache.lock_path(file.etag), shared.cancel);
    if (!lock.locked()) return;  // cancelled while another process held the blob
    std::error_code ec;
    if (fs::exists(cache.blob_path(file.etag), ec) && fs::file_size(cache.blob_path(file.etag), ec) == file.size) {
        shared.bytes_done += file.size;
        cache.link(commit, file.path, file.etag);
        return;  // another process finished it meanwhile
    }
    const fs::path part = cache.incomplete_path(file.etag);
    const std::string url = o.endpoint + "/" + repo + "/resolve/" + commit + "/" + hub::HttpClient::escape_path(file.path);
    std::string last_error;
    bool complete = false;
    Sha256 hasher;
    double delay = o.retry_delay_seconds;
    for (int attempt = 1; attempt <= o.max_attempts && !complete; ++attempt) {
        uint64_t offset = fs::exists(part, ec) ? fs::file_size(part, ec) : 0;
        if (offset > file.size) {
            fs::resize_file(part, 0);
            offset = 0;
        }
        hasher = Sha256();
        if (file.lfs && offset > 0) hash_prefix(part, offset, hasher);
        if (offset == file.size && file.size > 0) {
            complete = true;
            shared.bytes_done += offset;
            break;
        }
        std::FILE* f = std::fopen(part.c_str(), offset > 0 ? "r+b" : "wb");
        DI_CHECK(f != nullptr, part.string(), ": cannot write");
        std::fseek(f, static_cast<long>(offset), SEEK_SET);
        shared.bytes_done += offset;
        uint64_t received = offset;
        bool first = true, write_failed = false;
        hub::HttpResponse r = http.download(url, offset, [&](long status, const char* data, size_t n) {
            if (first) {
                first = false;
                if (status == 200 && offset > 0) {  // the server ignored the Range: start over
                    shared.bytes_done -= offset;
                    received = offset = 0;
                    hasher = Sha256();
                    std::fflush(f);
                    std::fseek(f, 0, SEEK_SET);
                    fs::resize_file(part, 0);
                }
            }
            if (std::fwrite(data, 1, n, f) != n) {
                write_failed = true;
                return false;
            }
            if (file.lfs) hasher.update(data, n);
            received += n;
            shared.bytes_done += n;
            return received <= file.size;  // more than announced: stop and fail the size check
        });
        const bool flushed = std::fclose(f) == 0;
        DI_CHECK(!write_failed && flushed, part.string(), ": write failed (disk full?)");
        if (shared.cancel.load()) return;
        if (r.transfer_ok && (r.status == 200 || r.status == 206)) {
            complete = true;
        } else if (r.status == 416 && offset == file.size) {
            complete = true;
        } else if (r.transfer_ok && !transient(r)) {
            throw_for_status(r, o, repo, commit, file.path);
        } else if (received > file.size) {
            break;
        } else {
            last_error = r.transfer_ok ? "HTTP " + std::to_string(r.status) : r.transfer_error;
            DI_LOG_WARN("{}: {} (attempt {} of {}, {} of {} bytes received){}", file.path, last_error, attempt,
                        o.max_attempts, received, file.size, attempt < o.max_attempts ? "; resuming" : "");
            shared.bytes_done -= received;  // counted again from the partial file's size on resume
            if (attempt < o.max_attempts) {
                std::this_thread::sleep_for(std::chrono::duration<double>(delay));
                delay *= 2;
            }
        }
    }
    if (!complete)
        DI_HUB_THROW(HubErrorKind::kNetwork, repo, ": ", file.path, ": download failed after ", o.max_attempts,
                     " attempts: ", last_error, " (the partial file stays in the cache; run again to resume)");
    const uint64_t size = fs::file_size(part, ec);
    if (size != file.size) {
        fs::remove(part, ec);
        DI_HUB_THROW(HubErrorKind::kIntegrity, repo, ": ", file.path, ": received ", size, " bytes, the Hub says ",
                     file.size, "; the partial file was removed");
    }
    if (file.lfs) {
        const std::string got = hasher.hex_digest();
        if (got != file.etag) {
            fs::remove(part, ec);
            DI_HUB_THROW(HubErrorKind::kIntegrity, repo, ": ", file.path, ": sha256 mismatch: got ", got,
                         ", the Hub says ", file.etag, "; the corrupted download was removed");
        }
    }
    fs::rename(part, cache.blob_path(file.etag));
    cache.link(commit, file.path, file.etag);
}

void download_all(const std::vector<RepoFile>& files, const std::string& repo, const std::string& commit,
                  const hub::RepoCache& cache, const HubOptions& o, int64_t num_files, int64_t num_present) {
    Shared shared;
    shared.files_done = num_present;
    uint64_t bytes_total = 0;
    for (const RepoFile& f : files) bytes_total += f.size;
    auto report = [&] {
        if (o.on_progress)
            o.on_progress(HubProgress{num_files, shared.files_done.load(), bytes_total, shared.bytes_done.load()});
    };
    if (files.empty()) {
        report();
        return;
    }
    DI_LOG_INFO("{}@{}: downloading {} files ({:.1f} MiB) into {}", repo, commit.substr(0, 12), files.size(),
                double(bytes_total) / (1 << 20), cache.root().string());
    std::atomic<size_t> next{0};
    const int num_workers = std::max(1, std::min<int>(o.max_parallel_downloads, static_cast<int>(files.size())));
    shared.workers_left = num_workers;
    std::vector<std::thread> workers;
    for (int w = 0; w < num_workers; ++w) {
        workers.emplace_back([&] {
            try {
                hub::HttpClient http(o, &shared.cancel);
                for (size_t i; !shared.cancel.load() && (i = next++) < files.size();) {
                    download_file(files[i], repo, commit, cache, o, http, shared);
                    if (!shared.cancel.load()) ++shared.files_done;
                }
            } catch (...) {
                std::lock_guard<std::mutex> lock(shared.mu);
                if (!shared.error) shared.error = std::current_exception();
                shared.cancel = true;
            }
            std::lock_guard<std::mutex> lock(shared.mu);
            --shared.workers_left;
            shared.cv.notify_all();
        });
    }
    std::exception_ptr progress_error;
    {
        std::unique_lock<std::mutex> lock(shared.mu);
        while (shared.workers_left.load() > 0) {
            shared.cv.wait_for(lock, std::chrono::milliseconds(100));
            if (progress_error || shared.cancel.load()) continue;
            lock.unlock();
            try {
                report();
            } catch (...) {
                progress_error = std::current_exception();
                shared.cancel = true;
            }
            lock.lock();
        }
    }
    for (std::thread& t : workers) t.join();
    if (progress_error) std::rethrow_exception(progress_error);
    if (shared.error) std::rethrow_exception(shared.error);
    report();
}

}  // namespace

std::string hub_snapshot_download(const std::string& repo_id, const std::string& revision_in, const HubOptions& o) {
    if (!is_hub_repo_id(repo_id))
        DI_HUB_THROW(HubErrorKind::kRepoNotFound, "'", repo_id, "' is neither a directory nor a Hub repo id (org/name)");
    DI_CHECK(!o.cache_dir.empty(), "no Hugging Face cache directory (set HF_HUB_CACHE or HF_HOME)");
    const std::string revision = revision_in.empty() ? "main" : revision_in;
    DI_CHECK(revision.find("..") == std::string::npos, "invalid revision '", revision, "'");
    hub::RepoCache cache(o.cache_dir, repo_id);
    std::vector<std::string> missing;
    if (o.offline) {
        if (auto dir = cached_snapshot(cache, revision, &missing)) return dir->string();
        DI_HUB_THROW(HubErrorKind::kOffline, repo_id, "@", revision, ": HF_HUB_OFFLINE is set and the cache at ",
                     cache.root().string(), " does not hold this revision's model (missing: ", join(missing),
                     "); download it first (unset HF_HUB_OFFLINE) or pass a local directory");
    }
    std::atomic<bool> no_cancel{false};
    hub::HttpClient http(o, &no_cancel);
    const std::string api = o.endpoint + "/api/models/" + repo_id + "/revision/" +
                            hub::HttpClient::escape_path(revision) + "?blobs=true";
    hub::HttpResponse r = http.get(api);
    if (!r.transfer_ok || r.status >= 500 || r.status == 429) {
        const std::string why = r.transfer_ok ? "HTTP " + std::to_string(r.status) : r.transfer_error;
        if (auto dir = cached_snapshot(cache, revision, nullptr)) {
            DI_LOG_WARN("{}: cannot reach {} ({}); using the cached snapshot {}", repo_id, o.endpoint, why, dir->string());
            return dir->string();
        }
        DI_HUB_THROW(HubErrorKind::kNetwork, repo_id, ": cannot reach ", o.endpoint, " (", why,
                     ") and the cache holds no complete snapshot of '", revision, "' (check the network, HF_ENDPOINT "
                     "or a proxy; HF_HUB_OFFLINE=1 uses the cache only)");
    }
    if (r.status != 200) throw_for_status(r, o, repo_id, revision, "");
    const json info = json::parse(r.body, nullptr, false);
    if (!info.is_object() || !info.contains("sha") || !info["sha"].is_string() || !info.contains("siblings") ||
        !info["siblings"].is_array())
        DI_HUB_THROW(HubErrorKind::kNetwork, repo_id, ": unexpected answer from ", api, " (no sha / siblings)");
    const std::string commit = info["sha"].get<std::string>();
    if (!hub::is_commit_hash(commit))
        DI_HUB_THROW(HubErrorKind::kNetwork, repo_id, ": the Hub answered an invalid commit id '", commit, "'");

    std::vector<RepoFile> needed;
    for (const json& s : info["siblings"]) {
        if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string()) continue;
        RepoFile f;
        f.path = s["rfilename"].get<std::string>();
        if (!wanted(f.path, o.allow_patterns)) continue;
        if (f.path.find("..") != std::string::npos || f.path.front() == '/')
            DI_HUB_THROW(HubErrorKind::kIntegrity, repo_id, ": refusing the file path '", f.path, "'");
        if (s.contains("lfs") && s["lfs"].is_object()) {
            f.lfs = true;
            f.etag = s["lfs"].value("sha256", "");
            f.size = s["lfs"].value("size", s.value("size", uint64_t{0}));
        } else {
            f.etag = s.value("blobId", "");
            f.size = s.value("size", uint64_t{0});
        }
        if (f.etag.empty() || f.etag.find('/') != std::string::npos)
            DI_HUB_THROW(HubErrorKind::kNetwork, repo_id, ": the Hub listed '", f.path,
                         "' without a blob id / sha256 (is the endpoint a Hugging Face Hub?)");
        needed.push_back(std::move(f));
    }
    if (std::none_of(needed.begin(), needed.end(), [](const RepoFile& f) { return f.path == "config.json"; }))
        DI_HUB_THROW(HubErrorKind::kEntryNotFound, repo_id, "@", revision, ": the repository has no config.json: "
                     "not a model deepinfer can load");

    std::vector<RepoFile> to_download;
    int64_t present = 0;
    std::error_code ec;
    for (const RepoFile& f : needed) {
        const fs::path in_snapshot = cache.snapshot_dir(commit) / f.path;
        const fs::path blob = cache.blob_path(f.etag);
        if (fs::exists(in_snapshot, ec) && fs::file_size(in_snapshot, ec) == f.size) {
            ++present;
        } else if (fs::exists(blob, ec) && fs::file_size(blob, ec) == f.size) {
            cache.link(commit, f.path, f.etag);  // same content in another revision
            ++present;
        } else {
            to_download.push_back(f);
        }
    }
    // Largest first: the long transfers start early and the workers finish together.
    std::stable_sort(to_download.begin(), to_download.end(), [](const RepoFile& a, const RepoFile& b) { return a.size > b.size; });
    download_all(to_download, repo_id, commit, cache, o, static_cast<int64_t>(needed.size()), present);
    if (revision != commit) cache.write_ref(revision, commit);
    const fs::path dir = cache.snapshot_dir(commit);
    missing = hub::missing_model_files(dir);
    if (!missing.empty())
        DI_HUB_THROW(HubErrorKind::kEntryNotFound, repo_id, "@", revision, ": the repository lacks ", join(missing),
                     " (with the file patterns ", join(o.allow_patterns), ")");
    return dir.string();
}

std::string resolve_model_dir(const std::string& model, const std::string& revision, const HubOptions& options) {
    std::error_code ec;
    if (fs::is_directory(model, ec)) {
        DI_CHECK(revision.empty(), "a revision ('", revision, "') applies to Hub repo ids, but '", model,
                 "' is a local directory");
        return model;
    }
    if (!is_hub_repo_id(model) || model.find('/') == std::string::npos)
        DI_THROW("'", model, "': no such directory, and not a Hub repo id (org/name)");
    return hub_snapshot_download(model, revision, options);
}

}  // namespace deepinfer
