// SPDX-License-Identifier: Apache-2.0
// SHA-256 (FIPS 180-4), one-shot or incremental, as lowercase hex. Verifies derived V4.1 data (the
// Engram token map) against published digests and Hub downloads (LFS files) against their oids.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace deepinfer {

// Incremental hashing: update() with the bytes in any pieces, then hex_digest() once.
class Sha256 {
public:
    Sha256();
    void update(const void* data, size_t num_bytes);
    std::string hex_digest();  // finalizes; the object must not be updated afterwards

private:
    void compress(const uint8_t* block);  // one 64-byte block
    std::array<uint32_t, 8> state_;
    std::array<uint8_t, 64> pending_{};  // bytes of an incomplete block
    size_t num_pending_ = 0;
    uint64_t num_bytes_ = 0;
};

std::string sha256_hex(const void* data, size_t num_bytes);

}  // namespace deepinfer
