// SPDX-License-Identifier: Apache-2.0
// The Hugging Face environment variables (the only place deepinfer reads them) and repo-id syntax.
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "deepinfer/hub.h"

namespace deepinfer {
namespace {

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr ? std::string(v) : std::string();
}

bool truthy(std::string v) {
    for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return v == "1" || v == "true" || v == "yes" || v == "on";
}

std::string trim(std::string s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    size_t i = 0;
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    return s.substr(i);
}

}  // namespace

const char* hub_error_kind_name(HubErrorKind kind) {
    switch (kind) {
        case HubErrorKind::kRepoNotFound: return "repository not found";
        case HubErrorKind::kRevisionNotFound: return "revision not found";
        case HubErrorKind::kEntryNotFound: return "file not found";
        case HubErrorKind::kUnauthorized: return "unauthorized";
        case HubErrorKind::kOffline: return "offline";
        case HubErrorKind::kIntegrity: return "integrity";
        case HubErrorKind::kNetwork: return "network";
    }
    return "unknown";
}

HubOptions hub_options_from_environment() {
    HubOptions o;
    if (std::string e = env("HF_ENDPOINT"); !e.empty()) {
        while (!e.empty() && e.back() == '/') e.pop_back();
        o.endpoint = e;
    }
    std::string home = env("HF_HOME");
    if (home.empty()) {
        const std::string xdg = env("XDG_CACHE_HOME");
        home = !xdg.empty() ? xdg + "/huggingface" : env("HOME") + "/.cache/huggingface";
    }
    o.cache_dir = env("HF_HUB_CACHE");
    if (o.cache_dir.empty()) o.cache_dir = env("HUGGINGFACE_HUB_CACHE");  // the older name
    if (o.cache_dir.empty()) o.cache_dir = home + "/hub";
    o.token = trim(env("HF_TOKEN"));
    if (o.token.empty()) {
        std::string path = env("HF_TOKEN_PATH");
        if (path.empty()) path = home + "/token";
        if (std::ifstream in(path); in) o.token = trim(std::string(std::istreambuf_iterator<char>(in), {}));
    }
    o.offline = truthy(env("HF_HUB_OFFLINE"));
    return o;
}

bool is_hub_repo_id(std::string_view spec) {
    auto valid_part = [](std::string_view p) {
        if (p.empty() || p.size() > 96 || p.front() == '-' || p.front() == '.' || p.back() == '-' || p.back() == '.')
            return false;
        if (p.find("--") != std::string_view::npos || p.find("..") != std::string_view::npos) return false;
        for (char c : p)
            if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) return false;
        return true;
    };
    const size_t slash = spec.find('/');
    if (slash == std::string_view::npos) return valid_part(spec);
    return valid_part(spec.substr(0, slash)) && valid_part(spec.substr(slash + 1));
}

}  // namespace deepinfer
