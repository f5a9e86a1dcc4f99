// SPDX-License-Identifier: Apache-2.0
// Code point ranges -> UTF-8 byte-range sequences: [lo, hi] becomes a few sequences of per-byte
// ranges whose concatenations encode exactly the code points of the range (the standard split by
// encoded length and continuation-byte alignment). Used to compile character classes to bytes.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace deepinfer::grammar {

using ByteRangeSeq = std::vector<std::pair<uint8_t, uint8_t>>;

// Appends the sequences for [lo, hi] (surrogates must not be inside the range).
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<ByteRangeSeq>& out);

}  // namespace deepinfer::grammar
