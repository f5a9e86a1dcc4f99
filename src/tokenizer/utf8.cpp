// SPDX-License-Identifier: Apache-2.0
// UTF-8 stepping with the maximal-subpart rule (Unicode 15, §3.9 "U+FFFD Substitution of Maximal
// Subparts"), and the byte-level alphabet of GPT-2-style BPE vocabularies.
#include "tokenizer/utf8.h"

#include "deepinfer/tokenizer.h"

namespace deepinfer::utf8 {

Step step(const unsigned char* p, size_t n) {
    const unsigned char b0 = p[0];
    if (b0 < 0x80) return {Step::kValid, 1, b0};
    // Expected length and the allowed range of the second byte (Table 3-7 of the standard).
    int len = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    uint32_t cp = 0;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
        len = 2;
        cp = b0 & 0x1F;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
        len = 3;
        cp = b0 & 0x0F;
        if (b0 == 0xE0) lo = 0xA0;
        if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
        len = 4;
        cp = b0 & 0x07;
        if (b0 == 0xF0) lo = 0x90;
        if (b0 == 0xF4) hi = 0x8F;
    } else {
        return {Step::kInvalid, 1, 0};
    }
    for (int i = 1; i < len; ++i) {
        if (static_cast<size_t>(i) >= n) return {Step::kIncomplete, static_cast<uint8_t>(i), 0};
        const unsigned char b = p[i];
        const unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h) return {Step::kInvalid, static_cast<uint8_t>(i), 0};
        cp = (cp << 6) | (b & 0x3F);
    }
    return {Step::kValid, static_cast<uint8_t>(len), cp};
}

size_t valid_prefix_length(std::string_view s) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const size_t n = s.size();
    size_t i = 0;
    while (i < n) {
        // ASCII fast path, 8 bytes at a time.
        while (i + 8 <= n) {
            uint64_t w;
            __builtin_memcpy(&w, p + i, 8);
            if (w & 0x8080808080808080ull) break;
            i += 8;
        }
        if (i >= n) break;
        if (p[i] < 0x80) {
            ++i;
            continue;
        }
        Step st = step(p + i, n - i);
        if (st.kind != Step::kValid) return i;
        i += st.len;
    }
    return n;
}

void append_sanitized(std::string_view s, std::string& out) {
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const size_t n = s.size();
    size_t i = 0;
    while (i < n) {
        size_t good = valid_prefix_length(s.substr(i));
        out.append(s.data() + i, good);
        i += good;
        if (i >= n) break;
        Step st = step(p + i, n - i);
        out.append(kReplacement);
        i += st.len;
    }
}

void append_code_point(uint32_t cp, std::string& out) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

bool is_white_space(uint32_t cp) {
    if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0D);
    if (cp < 0x85) return false;
    switch (cp) {
        case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
        case 0x3000:
            return true;
        default:
            return cp >= 0x2000 && cp <= 0x200A;
    }
}

namespace {

struct ByteMap {
    std::array<uint16_t, 256> to_cp{};
    std::array<int16_t, 512> to_byte{};
    ByteMap() {
        to_byte.fill(-1);
        int next = 256;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
            to_cp[b] = static_cast<uint16_t>(printable ? b : next++);
            to_byte[to_cp[b]] = static_cast<int16_t>(b);
        }
    }
};

const ByteMap& byte_map() {
    static const ByteMap map;
    return map;
}

}  // namespace

const std::array<uint16_t, 256>& byte_to_code_point() { return byte_map().to_cp; }

int code_point_to_byte(uint32_t cp) { return cp < 512 ? byte_map().to_byte[cp] : -1; }

}  // namespace deepinfer::utf8

namespace deepinfer {

std::string sanitize_utf8(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size());
    utf8::append_sanitized(bytes, out);
    return out;
}

bool is_valid_utf8(std::string_view bytes) { return utf8::valid_prefix_length(bytes) == bytes.size(); }

}  // namespace deepinfer
