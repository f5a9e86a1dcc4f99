// SPDX-License-Identifier: Apache-2.0
// libcurl easy handles, one per HttpClient (and so per download thread).
#include "hub/http.h"

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <mutex>

#include "deepinfer/check.h"

namespace deepinfer::hub {
namespace {

// curl_global_init is not thread-safe: once per process, before the first handle.
void global_init() {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct Transfer {
    HttpResponse* response = nullptr;
    CURL* curl = nullptr;
    const std::function<bool(long, const char*, size_t)>* on_data = nullptr;
    const std::atomic<bool>* cancel = nullptr;
    bool aborted_by_sink = false;
};

size_t on_header(char* data, size_t size, size_t count, void* user) {
    auto* t = static_cast<Transfer*>(user);
    const size_t n = size * count;
    std::string line(data, n);
    while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.pop_back();
    if (line.rfind("HTTP/", 0) == 0) {
        t->response->headers.clear();  // a new response (after a redirect or a 100 Continue)
        return n;
    }
    const size_t colon = line.find(':');
    if (colon == std::string::npos) return n;
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    size_t v = colon + 1;
    while (v < line.size() && (line[v] == ' ' || line[v] == '\t')) ++v;
    t->response->headers[name] = line.substr(v);
    return n;
}

size_t on_body(char* data, size_t size, size_t count, void* user) {
    auto* t = static_cast<Transfer*>(user);
    const size_t n = size * count;
    long status = 0;
    curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
    if (t->on_data != nullptr && (status == 200 || status == 206)) {
        if (!(*t->on_data)(status, data, n)) {
            t->aborted_by_sink = true;
            return 0;  // aborts the transfer
        }
        return n;
    }
    std::string& body = t->response->body;
    constexpr size_t kMaxErrorBody = 64u << 10;
    if (t->on_data == nullptr) body.append(data, n);
    else if (body.size() < kMaxErrorBody) body.append(data, std::min(n, kMaxErrorBody - body.size()));
    return n;
}

int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    auto* t = static_cast<Transfer*>(user);
    return t->cancel != nullptr && t->cancel->load() ? 1 : 0;
}

}  // namespace

HttpClient::HttpClient(const HubOptions& options, const std::atomic<bool>* cancel) : options_(options), cancel_(cancel) {
    global_init();
    curl_ = curl_easy_init();
    DI_CHECK(curl_ != nullptr, "libcurl: cannot create a handle");
    curl_slist* h = nullptr;
    if (!options.token.empty()) h = curl_slist_append(h, ("Authorization: Bearer " + options.token).c_str());
    headers_ = h;
}

HttpClient::~HttpClient() {
    curl_slist_free_all(static_cast<curl_slist*>(headers_));
    curl_easy_cleanup(static_cast<CURL*>(curl_));
}

std::string HttpClient::escape_path(const std::string& path) {
    global_init();
    std::string out;
    size_t start = 0;
    while (true) {
        const size_t slash = path.find('/', start);
        const std::string part = path.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
        char* e = curl_easy_escape(nullptr, part.c_str(), static_cast<int>(part.size()));
        out += e;
        curl_free(e);
        if (slash == std::string::npos) break;
        out += '/';
        start = slash + 1;
    }
    return out;
}

HttpResponse HttpClient::get(const std::string& url) { return perform(url, 0, nullptr); }

HttpResponse HttpClient::download(const std::string& url, uint64_t offset,
                                  const std::function<bool(long, const char*, size_t)>& on_data) {
    return perform(url, offset, &on_data);
}

HttpResponse HttpClient::perform(const std::string& url, uint64_t offset,
                                 const std::function<bool(long, const char*, size_t)>* on_data) {
    CURL* c = static_cast<CURL*>(curl_);
    curl_easy_reset(c);
    HttpResponse response;
    Transfer t{&response, c, on_data, cancel_};
    char error[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "deepinfer/0.1.0");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, static_cast<curl_slist*>(headers_));
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, options_.connect_timeout_seconds);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, options_.stall_timeout_seconds);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &t);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
    const std::string range = std::to_string(offset) + "-";
    if (offset > 0) curl_easy_setopt(c, CURLOPT_RANGE, range.c_str());
    const CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &response.status);
    response.transfer_ok = rc == CURLE_OK;
    if (!response.transfer_ok)
        response.transfer_error = t.aborted_by_sink ? "aborted" : (error[0] ? error : curl_easy_strerror(rc));
    return response;
}

}  // namespace deepinfer::hub
