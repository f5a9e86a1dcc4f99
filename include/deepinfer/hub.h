// SPDX-License-Identifier: Apache-2.0
// Models from the Hugging Face Hub: "org/name" (at a revision) -> a local snapshot directory in the
// standard Hugging Face cache (<cache>/models--org--name/{refs,blobs,snapshots/<commit>}), so a model
// that huggingface_hub already downloaded is used in place and what deepinfer downloads is found
// by huggingface_hub. Missing files are downloaded with libcurl: several at once, resumed from a
// partial `.incomplete` blob (HTTP Range), LFS files checked against their sha256.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/check.h"

namespace deepinfer {

enum class HubErrorKind {
    kRepoNotFound,      // 404 on the repository (or a name that cannot be a repository)
    kRevisionNotFound,  // 404 on the branch, tag or commit
    kEntryNotFound,     // 404 on a file the repository lists
    kUnauthorized,      // 401/403: private or gated; HF_TOKEN missing, wrong, or without access
    kOffline,           // HF_HUB_OFFLINE is set and the cache lacks what is needed
    kIntegrity,         // a downloaded file's size or sha256 differs from the Hub's
    kNetwork,           // the endpoint could not be reached (after retries), or answered 5xx
};
const char* hub_error_kind_name(HubErrorKind kind);

// What every Hub failure throws: a deepinfer::Error whose message names the repository, the file
// and what to do.
class HubError : public Error {
public:
    HubError(HubErrorKind kind, std::string_view file, int line, std::string_view message)
        : Error(file, line, message), kind_(kind) {}
    HubErrorKind kind() const { return kind_; }

private:
    HubErrorKind kind_;
};

struct HubProgress {
    int64_t num_files = 0;       // files the snapshot needs
    int64_t num_files_done = 0;  // present (cached or downloaded)
    uint64_t bytes_total = 0;    // bytes of the files still to download when the download started
    uint64_t bytes_done = 0;     // of those, received so far (resumed bytes included)
};

// Every switch of Hub resolution (the environment's values come from hub_options_from_environment).
struct HubOptions {
    std::string endpoint = "https://huggingface.co";
    std::string cache_dir;  // the hub cache directory itself (holds models--org--name/)
    std::string token;      // sent as "Authorization: Bearer" to the endpoint only ("" = anonymous)
    bool offline = false;   // never touch the network: the cache must hold the snapshot
    int max_parallel_downloads = 8;
    int max_attempts = 5;   // per file; each retry resumes from the bytes already received
    double retry_delay_seconds = 0.5;  // doubled after every failed attempt
    long connect_timeout_seconds = 20;
    long stall_timeout_seconds = 60;  // abort a transfer that received nothing for this long
    // Repository files a model needs (fnmatch patterns on the repository path; '*' stops at '/').
    std::vector<std::string> allow_patterns = {"*.json", "*.safetensors"};
    // Called on the calling thread about ten times a second during downloads, and once at the end.
    // It may throw to cancel (the transfers stop; partial blobs stay for the next resume).
    std::function<void(const HubProgress&)> on_progress;
};

// The Hugging Face environment: HF_ENDPOINT; HF_HUB_CACHE, else HF_HOME/hub, else
// XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub; HF_TOKEN, else the file at
// HF_TOKEN_PATH or HF_HOME/token; HF_HUB_OFFLINE (1/true/yes/on). The one place that reads them.
HubOptions hub_options_from_environment();

// "org/name" (or "name"): the shape of a Hub model id (letters, digits, '-', '_', '.').
bool is_hub_repo_id(std::string_view spec);

// The local snapshot directory of `repo_id` at `revision` (branch, tag or commit; "" = "main"):
// offline, the cached snapshot (refs/<revision> -> snapshots/<commit>) if it holds the model's
// files; online, the revision's file list from the Hub API, every missing file downloaded into
// blobs/ and linked into snapshots/<commit>/, and refs/<revision> updated. If the endpoint cannot be
// reached, a complete cached snapshot of the revision is used (with a warning). Throws HubError.
std::string hub_snapshot_download(const std::string& repo_id, const std::string& revision,
                                  const HubOptions& options);

// A model argument: an existing directory as given, else a Hub repo id through
// hub_snapshot_download. Throws if it is neither.
std::string resolve_model_dir(const std::string& model, const std::string& revision, const HubOptions& options);

}  // namespace deepinfer
