// SPDX-License-Identifier: Apache-2.0
// SHA-256 (FIPS 180-4) of a byte range, as lowercase hex. Used to verify derived V4.1 data (the
// Engram token map) against published digests; not performance critical.
#pragma once

#include <cstddef>
#include <string>

namespace deepinfer::v41 {

std::string sha256_hex(const void* data, size_t num_bytes);

}  // namespace deepinfer::v41
