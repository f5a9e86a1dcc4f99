// SPDX-License-Identifier: Apache-2.0
// 64-bit FNV-1a over bytes: the stable, cheap non-cryptographic hash of request ids (seeds, output ids),
// batch plans and benchmark digests. Not for anything an adversary chooses (core/sha256.h for that).
// Two starting values: FNV-1a's offset basis, and kIdHashBasis, the one the engine's ids and seeds have used
// from the start (the standard basis with its last digit missing): still a deterministic hash, and kept,
// because batch output ids (what a resumed run matches records by) and per-request sampling seeds derive
// from it; changing it would change every output and break resume across versions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace deepinfer {

inline constexpr uint64_t kFnv1aBasis = 14695981039346656037ull;  // FNV-1a's offset basis
inline constexpr uint64_t kIdHashBasis = 1469598103934665603ull;  // the engine's ids and seeds (above)
inline constexpr uint64_t kFnv1aPrime = 1099511628211ull;

// h extended by n bytes at data (h = a basis to start).
inline uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * kFnv1aPrime;
    return h;
}
inline uint64_t fnv1a(uint64_t h, const std::string& s) { return fnv1a(h, s.data(), s.size()); }

// h as 16 lowercase hex digits.
inline std::string hex16(uint64_t h) {
    char buf[17];
    std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
    return buf;
}

}  // namespace deepinfer
