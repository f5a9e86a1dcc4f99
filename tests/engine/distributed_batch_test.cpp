// SPDX-License-Identifier: Apache-2.0
// Multi-replica batch runs: the token-balanced contiguous split and the part-file naming. (The runs
// themselves, over mpirun with 2 and 4 ranks, kill and resume: tests/python/test_run_mpi.py.)
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "engine/distributed_batch.h"

namespace deepinfer {
namespace {

TEST(PartitionByWeight, ContiguousAndBalancedWithinOneItem) {
    std::mt19937_64 rng(7);
    for (int trial = 0; trial < 200; ++trial) {
        const int ranks = 1 + int(rng() % 9);
        std::vector<int64_t> w(rng() % 300);
        for (int64_t& x : w) x = 1 + int64_t(rng() % (trial % 2 ? 50 : 5000));  // narrow and wide spreads
        const std::vector<int32_t> owner = partition_by_weight(w, ranks);
        ASSERT_EQ(owner.size(), w.size());
        ASSERT_TRUE(std::is_sorted(owner.begin(), owner.end())) << "each rank gets one contiguous run";
        std::vector<int64_t> load(size_t(ranks), 0);
        for (size_t i = 0; i < w.size(); ++i) {
            ASSERT_GE(owner[i], 0);
            ASSERT_LT(owner[i], ranks);
            load[size_t(owner[i])] += w[i];
        }
        const int64_t total = std::accumulate(w.begin(), w.end(), int64_t(0));
        const int64_t biggest = w.empty() ? 0 : *std::max_element(w.begin(), w.end());
        for (int r = 0; r < ranks; ++r)
            EXPECT_LE(std::abs(double(load[size_t(r)]) - double(total) / ranks), double(biggest))
                << "rank " << r << " of " << ranks << ", " << w.size() << " items";
        EXPECT_EQ(partition_by_weight(w, ranks), owner) << "deterministic";
    }
}

TEST(PartitionByWeight, BalancesTokensNotLines) {
    // Ten long prompts then ninety short ones: by line count rank 0 would get all the long ones.
    std::vector<int64_t> w(10, 1000);
    w.resize(100, 10);
    const std::vector<int32_t> owner = partition_by_weight(w, 2);
    int64_t load0 = 0, lines0 = 0;
    for (size_t i = 0; i < w.size(); ++i)
        if (owner[i] == 0) load0 += w[i], ++lines0;
    EXPECT_EQ(load0, 5000) << "half of the 10,900 tokens (within one item)";
    EXPECT_EQ(lines0, 5);
}

TEST(PartitionByWeight, FewerItemsThanRanks) {
    EXPECT_TRUE(partition_by_weight({}, 4).empty());
    const std::vector<int32_t> owner = partition_by_weight({5, 5}, 4);
    EXPECT_EQ(owner, (std::vector<int32_t>{1, 3})) << "midpoints at 1/4 and 3/4 of the tokens";
    EXPECT_EQ(partition_by_weight({1, 2, 3}, 1), (std::vector<int32_t>{0, 0, 0}));
    EXPECT_THROW(partition_by_weight({1}, 0), Error);
}

TEST(BatchParts, NamesAndDiscovery) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("di_parts_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    const std::string out = (dir / "out.jsonl").string();
    EXPECT_EQ(batch_part_path(out, 3), out + ".part-00003");
    for (const std::string name : {"out.jsonl.part-00003", "out.jsonl.part-00000", "out.jsonl.part-12",
                                   "out.jsonl.part-x", "out.jsonl.part-", "other.jsonl.part-00001", "out.jsonl"})
        std::ofstream(dir / name) << "{}\n";
    const std::vector<std::string> parts = existing_batch_parts(out);
    EXPECT_EQ(parts, (std::vector<std::string>{out + ".part-00000", out + ".part-00003", out + ".part-12"}));
    fs::remove_all(dir);
}

}  // namespace
}  // namespace deepinfer
