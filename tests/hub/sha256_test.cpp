// SPDX-License-Identifier: Apache-2.0
// SHA-256 against the FIPS 180-4 / NIST example digests, and incremental hashing in any pieces.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "core/sha256.h"

namespace deepinfer {
namespace {

TEST(Sha256, NistVectors) {
    EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    EXPECT_EQ(sha256_hex(two_blocks.data(), two_blocks.size()),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    const std::string million(1000000, 'a');
    EXPECT_EQ(sha256_hex(million.data(), million.size()),
              "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalEqualsOneShotForEverySplit) {
    std::mt19937 rng(7);
    std::string data(300, '\0');
    for (char& c : data) c = static_cast<char>(rng());
    // Lengths around the 55/56/64-byte padding boundaries, split at every point.
    for (size_t len : {0, 1, 55, 56, 63, 64, 65, 119, 120, 128, 300}) {
        const std::string want = sha256_hex(data.data(), len);
        for (size_t cut = 0; cut <= len; ++cut) {
            Sha256 h;
            h.update(data.data(), cut);
            h.update(data.data() + cut, len - cut);
            ASSERT_EQ(h.hex_digest(), want) << len << " " << cut;
        }
        Sha256 bytewise;
        for (size_t i = 0; i < len; ++i) bytewise.update(data.data() + i, 1);
        EXPECT_EQ(bytewise.hex_digest(), want);
    }
}

}  // namespace
}  // namespace deepinfer
