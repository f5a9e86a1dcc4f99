// SPDX-License-Identifier: Apache-2.0
// core/fnv1a.h against the published FNV-1a 64-bit test vectors (the IETF draft's table): the byte loop and
// the prime that request seeds, batch output ids and plan digests run through (from kIdHashBasis).
#include <gtest/gtest.h>

#include <string>

#include "core/fnv1a.h"

namespace deepinfer {

TEST(Fnv1a, PublishedVectors) {
    EXPECT_EQ(kFnv1aBasis, 0xcbf29ce484222325ull);
    EXPECT_EQ(fnv1a(kFnv1aBasis, std::string()), 0xcbf29ce484222325ull);
    EXPECT_EQ(fnv1a(kFnv1aBasis, std::string("a")), 0xaf63dc4c8601ec8cull);
    EXPECT_EQ(fnv1a(kFnv1aBasis, std::string("foobar")), 0x85944171f73967e8ull);
    EXPECT_EQ(hex16(fnv1a(kFnv1aBasis, std::string("foobar"))), "85944171f73967e8");
    EXPECT_EQ(hex16(1), "0000000000000001");
}

TEST(Fnv1a, PiecesChainLikeOneRun) {
    const std::string s = "custom-id-17";
    uint64_t h = kIdHashBasis;
    h = fnv1a(h, s.data(), 5);
    h = fnv1a(h, s.data() + 5, s.size() - 5);
    EXPECT_EQ(h, fnv1a(kIdHashBasis, s));
}

}  // namespace deepinfer
