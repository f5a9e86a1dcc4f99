// SPDX-License-Identifier: Apache-2.0
// UTF-8 range splitting (see utf8_ranges.h).
#include "grammar/utf8_ranges.h"

namespace deepinfer::grammar {
namespace {

int encoded_length(uint32_t c) { return c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4; }

void encode(uint32_t c, uint8_t* out) {
    switch (encoded_length(c)) {
        case 1: out[0] = uint8_t(c); break;
        case 2:
            out[0] = uint8_t(0xC0 | (c >> 6));
            out[1] = uint8_t(0x80 | (c & 0x3F));
            break;
        case 3:
            out[0] = uint8_t(0xE0 | (c >> 12));
            out[1] = uint8_t(0x80 | ((c >> 6) & 0x3F));
            out[2] = uint8_t(0x80 | (c & 0x3F));
            break;
        default:
            out[0] = uint8_t(0xF0 | (c >> 18));
            out[1] = uint8_t(0x80 | ((c >> 12) & 0x3F));
            out[2] = uint8_t(0x80 | ((c >> 6) & 0x3F));
            out[3] = uint8_t(0x80 | (c & 0x3F));
    }
}

}  // namespace

void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<ByteRangeSeq>& out) {
    if (lo > hi) return;
    // Split where the encoded length changes.
    for (uint32_t boundary : {0x7Fu, 0x7FFu, 0xFFFFu}) {
        if (lo <= boundary && hi > boundary) {
            utf8_sequences(lo, boundary, out);
            utf8_sequences(boundary + 1, hi, out);
            return;
        }
    }
    const int n = encoded_length(lo);
    // Split until every byte position is an independent range.
    for (int i = 1; i < n; ++i) {
        const uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) {
                utf8_sequences(lo, lo | m, out);
                utf8_sequences((lo | m) + 1, hi, out);
                return;
            }
            if ((hi & m) != m) {
                utf8_sequences(lo, (hi & ~m) - 1, out);
                utf8_sequences(hi & ~m, hi, out);
                return;
            }
        }
    }
    uint8_t a[4], b[4];
    encode(lo, a);
    encode(hi, b);
    ByteRangeSeq seq;
    for (int i = 0; i < n; ++i) seq.emplace_back(a[i], b[i]);
    out.push_back(std::move(seq));
}

}  // namespace deepinfer::grammar
