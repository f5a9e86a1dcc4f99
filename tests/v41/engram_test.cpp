// SPDX-License-Identifier: Apache-2.0
// Engram data (spec §5.2-5.3): the compressed token map built with ICU from the DeepSeek
// tokenizer.json matches the published size and SHA-256; NumPy PCG64 draws and the hash
// multipliers match NumPy (values printed by NumPy 2.4.6; tests/python/test_v41_numpy_rng.py
// compares many more against the installed NumPy); the prime layout reproduces the released
// engram_num_embeddings; the rolling hash matches transformers' DeepseekV41NgramHashState on a
// small layout (expected rows computed with its algorithm in Python).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "deepinfer/check.h"
#include "deepinfer/engram.h"
#include "deepinfer/engram_numpy_rng.h"

namespace deepinfer {
namespace {

// The DeepSeek V4 tokenizer.json (assets/tokenizer/README.md): same decodes as V4.1's for every id.
const std::string kTokenizerJson = DI_TOKENIZER_JSON;

TEST(EngramNormalize, FollowsTheSpecOrder) {
    EXPECT_EQ(engram_normalize(" The"), "the");
    EXPECT_EQ(engram_normalize("THE"), "the");
    EXPECT_EQ(engram_normalize("\xC3\x9C" "n\xC3\xAF" "c\xC3\xB6" "d\xC3\xA9"), "unicode");  // Ünïcödé
    EXPECT_EQ(engram_normalize("\xEF\xAC\x81"), "fi");                                // U+FB01 ligature (NFKC)
    EXPECT_EQ(engram_normalize("\xC4\xB0"), "i");                                     // İ: NFD + strip accents
    EXPECT_EQ(engram_normalize("\xCE\xA3"), "\xCF\x83");                              // Σ -> σ (no final-sigma rule)
    EXPECT_EQ(engram_normalize("a\t\r\n  b"), "a b");
    EXPECT_EQ(engram_normalize(" "), " ");   // exactly one space survives the strip
    EXPECT_EQ(engram_normalize("  "), " ");  // collapsed to one space first
    EXPECT_EQ(engram_normalize("\n\n"), " ");
    EXPECT_EQ(engram_normalize("\xCC\x81"), "");  // a lone combining accent strips to empty
    EXPECT_EQ(engram_normalize("\xE3\x80\x80x\xE3\x80\x80"), "x");  // ideographic spaces: NFKC -> ' ', stripped
}

TEST(EngramTokenMap, MatchesThePublishedSizeAndHash) {
    const EngramTokenMap map = load_engram_token_map(kTokenizerJson);
    ASSERT_EQ(map.compressed_ids.size(), 129280u);
    EXPECT_EQ(map.num_compressed, kV41EngramCompressedVocabSize);
    EXPECT_EQ(map.sha256(), kV41EngramTokenMapSha256);
    EXPECT_EQ(map.compressed_ids[2], 2);  // the compressed pad id
    EXPECT_NO_THROW(verify_engram_token_map(map, 99092, kV41EngramTokenMapSha256, "test"));
    try {
        verify_engram_token_map(map, 99091, "", "config.json");
        FAIL() << "a wrong size must throw";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("engram_compressed_vocab_size is 99091"), std::string::npos) << e.what();
    }
    EXPECT_THROW(verify_engram_token_map(map, 99092, std::string(64, '0'), "test"), Error);
}

TEST(EngramTokenMap, RejectsWhatIsNotATokenizer) {
    EXPECT_THROW(build_engram_token_map("{\"model\": {}}", "x.json"), Error);
    EXPECT_THROW(build_engram_token_map("not json", "x.json"), Error);
    EXPECT_THROW(build_engram_token_map(R"({"model": {"vocab": {"a": 0, "b": 2}}, "decoder": {"type": "ByteLevel"}})", "x.json"),
                 Error);  // id 1 missing
}

TEST(NumpyRng, MatchesNumpy) {
    // np.random.default_rng(0).bit_generator.random_raw(3)
    NumpyPcg64 rng(0);
    EXPECT_EQ(rng.next_uint64(), 11749869230777074271ULL);
    EXPECT_EQ(rng.next_uint64(), 4976686463289251617ULL);
    EXPECT_EQ(rng.next_uint64(), 755828109848996024ULL);
    // SeedSequence(10007).generate_state(8)
    const std::vector<uint32_t> want = {0x8ad70d07, 0x77d32a34, 0xb84a4fa5, 0x993ed609,
                                        0xc8698e49, 0xd5f972de, 0xbcf148de, 0x7d79ebae};
    EXPECT_EQ(numpy_seed_sequence_state(10007, 8), want);
}

TEST(EngramLayout, HashMultipliersOfTheReleasedLayers) {
    // compute_hash_multipliers((1, 14), 4, 99092), printed by NumPy 2.4.6.
    EXPECT_EQ(engram_hash_multipliers(1, 4, 99092),
              (std::vector<int64_t>{76632096046245, 4839876093313, 35959672319349, 73987337458391}));
    EXPECT_EQ(engram_hash_multipliers(14, 4, 99092),
              (std::vector<int64_t>{67716810739261, 51510806800915, 30921347202721, 82619226485591}));
}

TEST(EngramLayout, ReproducesTheReleasedRowCounts) {
    const std::vector<int64_t> layers = {1, 14};
    const EngramLayout layout = EngramLayout::build(layers, 16000000, 4, 8, 99092);
    EXPECT_EQ(layout.num_cols(), 24);
    EXPECT_EQ(layout.num_rows(0), 384006168);
    EXPECT_EQ(layout.num_rows(1), 384016682);
    const std::vector<int64_t> released = {384006168, 384016682};
    EXPECT_NO_THROW(layout.check_num_embeddings(released, "config.json"));
    const std::vector<int64_t> wrong = {384006168, 384016681};
    try {
        layout.check_num_embeddings(wrong, "config.json");
        FAIL() << "a wrong row count must throw";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("engram_num_embeddings[1] (layer 14) = 384016681"), std::string::npos)
            << e.what();
    }
    // 48 distinct primes, each above 15,999,999.
    std::vector<int64_t> all;
    for (int64_t l = 0; l < 2; ++l)
        for (int64_t c = 0; c < 24; ++c) all.push_back(layout.prime(l, c));
    std::sort(all.begin(), all.end());
    EXPECT_EQ(std::unique(all.begin(), all.end()), all.end());
    EXPECT_GT(all.front(), 15999999);
}

TEST(EngramLayout, RowHashMatchesTransformers) {
    const std::vector<int64_t> layers = {1, 2};
    const EngramLayout layout = EngramLayout::build(layers, 64, 4, 2, 99092);
    EXPECT_EQ(layout.prime(0, 0), 67);
    EXPECT_EQ(layout.prime(1, 5), 113);
    EXPECT_EQ(layout.offset(1, 5), 517);
    EXPECT_EQ(layout.num_rows(0), 462);
    EXPECT_EQ(layout.num_rows(1), 630);
    // History with a DEAD (image) token at position 3; pad id 2.
    const std::vector<int64_t> history = {5, 17, 99091, kEngramDead, 42, 7, 7};
    const std::vector<std::vector<int64_t>> want_tokens = {
        {5, 2, 2, 2}, {17, 5, 2, 2}, {99091, 17, 5, 2}, {2, 2, 2, 2}, {42, 2, 2, 2}, {7, 42, 2, 2}, {7, 7, 42, 2}};
    const std::vector<std::vector<std::vector<int64_t>>> want_rows = {
        {{54, 113, 180, 259, 350, 407}, {60, 173, 213, 393, 455, 532}},
        {{2, 79, 188, 218, 348, 413}, {24, 173, 204, 407, 505, 597}},
        {{45, 86, 164, 249, 349, 455}, {56, 122, 237, 341, 423, 545}},
        {{46, 96, 207, 268, 364, 455}, {2, 145, 213, 339, 479, 549}},
        {{7, 116, 174, 246, 299, 390}, {18, 121, 226, 352, 508, 548}},
        {{3, 96, 200, 254, 319, 461}, {82, 127, 256, 301, 424, 607}},
        {{13, 125, 179, 265, 363, 412}, {9, 174, 282, 370, 472, 581}}};
    for (int64_t p = 0; p < 7; ++p) {
        std::vector<int64_t> tokens(4), rows(6);
        engram_lookback(history, p, 2, tokens);
        EXPECT_EQ(tokens, want_tokens[size_t(p)]) << "position " << p;
        for (int64_t l = 0; l < 2; ++l) {
            layout.rows(l, tokens, rows);
            EXPECT_EQ(rows, want_rows[size_t(p)][size_t(l)]) << "position " << p << " layer " << l;
        }
    }
}

TEST(EngramLayout, PrimalityIsExact) {
    EXPECT_FALSE(engram_is_prime(1));
    EXPECT_TRUE(engram_is_prime(2));
    EXPECT_TRUE(engram_is_prime(16000057));
    EXPECT_FALSE(engram_is_prime(3215031751ULL));  // strong pseudoprime to bases 2, 3, 5, 7
    EXPECT_TRUE(engram_is_prime(18446744073709551557ULL));
}

}  // namespace
}  // namespace deepinfer
