// SPDX-License-Identifier: Apache-2.0
// A small libcurl client for the Hub: GET into memory (API JSON) and GET streamed to a callback
// (file downloads, from a byte offset with Range). Redirects are followed; the Authorization header
// goes to the endpoint's host and port only (libcurl drops it on redirects elsewhere, e.g. to an
// LFS CDN). One HttpClient per thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "deepinfer/hub.h"

namespace deepinfer::hub {

struct HttpResponse {
    bool transfer_ok = false;   // false: no complete HTTP exchange (connection refused, reset, timeout...)
    std::string transfer_error; // libcurl's message when !transfer_ok
    long status = 0;            // of the final response (after redirects)
    std::map<std::string, std::string> headers;  // of the final response, names in lower case
    std::string body;           // GET: the body; download: the body of an error response (first 64 KiB)
};

class HttpClient {
public:
    // `cancel`, when set, aborts transfers in progress (checked several times a second).
    HttpClient(const HubOptions& options, const std::atomic<bool>* cancel = nullptr);
    ~HttpClient();
    HttpClient(const HttpClient&) = delete;
    HttpClient& operator=(const HttpClient&) = delete;

    HttpResponse get(const std::string& url);
    // Streams a 200/206 body to `on_data(status, bytes, n)` (return false to abort); asks for bytes
    // from `offset` on when offset > 0 (the server may still answer 200 with the whole file).
    HttpResponse download(const std::string& url, uint64_t offset,
                          const std::function<bool(long status, const char* data, size_t n)>& on_data);

    static std::string escape_path(const std::string& path);  // percent-encodes each '/'-separated part

private:
    HttpResponse perform(const std::string& url, uint64_t offset,
                         const std::function<bool(long, const char*, size_t)>* on_data);
    void* curl_ = nullptr;   // CURL*
    void* headers_ = nullptr;  // curl_slist*
    const HubOptions& options_;
    const std::atomic<bool>* cancel_;
};

}  // namespace deepinfer::hub
