// SPDX-License-Identifier: Apache-2.0
// The Hugging Face cache layout (folder names, refs, relative blob links, what a snapshot lacks),
// repo-id syntax, the HF_* environment, and offline errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "deepinfer/hub.h"
#include "hub/cache.h"

namespace fs = std::filesystem;

namespace deepinfer {
namespace {

fs::path temp_dir(const std::string& name) {
    fs::path d = fs::temp_directory_path() / ("di-hub-" + name + "-" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

void write(const fs::path& p, const std::string& s) {
    fs::create_directories(p.parent_path());
    std::ofstream(p) << s;
}

TEST(HubCache, LayoutAndLinks) {
    const fs::path cache = temp_dir("layout");
    hub::RepoCache repo(cache.string(), "deepseek-ai/DeepSeek-V4.1-Flash-1017");
    EXPECT_EQ(repo.root(), cache / "models--deepseek-ai--DeepSeek-V4.1-Flash-1017");
    const std::string commit = "0123456789abcdef0123456789abcdef01234567";
    EXPECT_FALSE(repo.read_ref("main"));
    repo.write_ref("main", commit);
    EXPECT_EQ(repo.read_ref("main"), commit);
    write(repo.blob_path("e1"), "weights");
    repo.link(commit, "model.safetensors", "e1");
    repo.link(commit, "sub/dir/file.json", "e1");
    EXPECT_EQ(fs::read_symlink(repo.snapshot_dir(commit) / "model.safetensors"), fs::path("../../blobs/e1"));
    EXPECT_EQ(fs::read_symlink(repo.snapshot_dir(commit) / "sub/dir/file.json"), fs::path("../../../../blobs/e1"));
    EXPECT_EQ(fs::file_size(repo.snapshot_dir(commit) / "sub/dir/file.json"), 7u);
    EXPECT_EQ(repo.lock_path("e1"), cache / ".locks" / "models--deepseek-ai--DeepSeek-V4.1-Flash-1017" / "e1.lock");
    EXPECT_EQ(repo.incomplete_path("e1"), repo.root() / "blobs" / "e1.incomplete");
    fs::remove_all(cache);
}

TEST(HubCache, MissingModelFiles) {
    const fs::path d = temp_dir("missing");
    EXPECT_EQ(hub::missing_model_files(d), (std::vector<std::string>{"config.json", "*.safetensors"}));
    write(d / "config.json", "{}");
    write(d / "model.safetensors.index.json",
          R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}})");
    write(d / "model-00001-of-00002.safetensors", "x");
    EXPECT_EQ(hub::missing_model_files(d), (std::vector<std::string>{"model-00002-of-00002.safetensors"}));
    write(d / "model-00002-of-00002.safetensors", "x");
    EXPECT_TRUE(hub::missing_model_files(d).empty());
    fs::remove_all(d);
}

TEST(Hub, RepoIdSyntax) {
    EXPECT_TRUE(is_hub_repo_id("deepseek-ai/DeepSeek-V4.1-Flash-1017"));
    EXPECT_TRUE(is_hub_repo_id("gpt2"));
    EXPECT_TRUE(is_hub_repo_id("org_1/model.v2"));
    for (const char* bad : {"", "/x", "x/", "a/b/c", "a//b", "../etc", "a/..b", "a/b--c", "-a/b", "a/b.", "a b/c", "~/m"})
        EXPECT_FALSE(is_hub_repo_id(bad)) << bad;
    EXPECT_TRUE(hub::is_commit_hash("0123456789abcdef0123456789abcdef01234567"));
    EXPECT_FALSE(hub::is_commit_hash("main"));
    EXPECT_FALSE(hub::is_commit_hash("0123456789ABCDEF0123456789abcdef01234567"));
}

TEST(Hub, Environment) {
    const fs::path home = temp_dir("env");
    write(home / "token", "hf_from_file\n");
    ::setenv("HF_HOME", home.c_str(), 1);
    ::unsetenv("HF_HUB_CACHE");
    ::unsetenv("HUGGINGFACE_HUB_CACHE");
    ::unsetenv("HF_TOKEN");
    ::unsetenv("HF_TOKEN_PATH");
    ::setenv("HF_ENDPOINT", "http://127.0.0.1:5555/", 1);
    ::setenv("HF_HUB_OFFLINE", "TRUE", 1);
    HubOptions o = hub_options_from_environment();
    EXPECT_EQ(o.cache_dir, (home / "hub").string());
    EXPECT_EQ(o.token, "hf_from_file");
    EXPECT_EQ(o.endpoint, "http://127.0.0.1:5555");
    EXPECT_TRUE(o.offline);
    ::setenv("HF_HUB_CACHE", "/somewhere/else", 1);
    ::setenv("HF_TOKEN", "hf_env", 1);
    ::setenv("HF_HUB_OFFLINE", "0", 1);
    o = hub_options_from_environment();
    EXPECT_EQ(o.cache_dir, "/somewhere/else");
    EXPECT_EQ(o.token, "hf_env");
    EXPECT_FALSE(o.offline);
    for (const char* v : {"HF_HOME", "HF_HUB_CACHE", "HF_TOKEN", "HF_ENDPOINT", "HF_HUB_OFFLINE"}) ::unsetenv(v);
    fs::remove_all(home);
}

TEST(Hub, OfflineWithoutTheModelIsAClearError) {
    const fs::path cache = temp_dir("offline");
    HubOptions o;
    o.cache_dir = cache.string();
    o.offline = true;
    try {
        hub_snapshot_download("org/model", "", o);
        FAIL() << "no error";
    } catch (const HubError& e) {
        EXPECT_EQ(e.kind(), HubErrorKind::kOffline);
        EXPECT_NE(e.message().find("HF_HUB_OFFLINE is set"), std::string::npos) << e.message();
    }
    // A complete cached snapshot is used without the network.
    hub::RepoCache repo(o.cache_dir, "org/model");
    const std::string commit = "89abcdef0123456789abcdef0123456789abcdef";
    repo.write_ref("main", commit);
    write(repo.blob_path("c"), "{}");
    write(repo.blob_path("w"), "weights");
    repo.link(commit, "config.json", "c");
    repo.link(commit, "model.safetensors", "w");
    EXPECT_EQ(hub_snapshot_download("org/model", "", o), repo.snapshot_dir(commit).string());
    EXPECT_EQ(resolve_model_dir("org/model", "", o), repo.snapshot_dir(commit).string());
    EXPECT_THROW(resolve_model_dir("not a repo", "", o), Error);
    fs::remove_all(cache);
}

}  // namespace
}  // namespace deepinfer
