// SPDX-License-Identifier: Apache-2.0
// The Engram tables are used in place from the checkpoint's read-only file mapping, so every process
// (every MPI replica) on a host shares one copy: the page cache's. Checked page by page through
// /proc/self/pagemap, with two independent loads of the same checkpoint standing in for two
// processes (the kernel's sharing test is the same: how many mappings map the page).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "deepinfer/model_v41.h"
#include "deepinfer/synthetic_v41.h"
#include "tiny_published_config.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

struct Mapping {
    uintptr_t begin = 0, end = 0;
    std::string perms, path;
};

// The /proc/self/maps entry holding `p`.
Mapping mapping_of(const void* p) {
    std::ifstream maps("/proc/self/maps");
    const auto a = reinterpret_cast<uintptr_t>(p);
    for (std::string line; std::getline(maps, line);) {
        std::istringstream ss(line);
        std::string range, perms, offset, dev, inode, path;
        ss >> range >> perms >> offset >> dev >> inode;
        std::getline(ss >> std::ws, path);
        const size_t dash = range.find('-');
        const uintptr_t b = std::stoull(range.substr(0, dash), nullptr, 16), e = std::stoull(range.substr(dash + 1), nullptr, 16);
        if (a >= b && a < e) return {b, e, perms, path};
    }
    return {};
}

// A page's /proc/self/pagemap entry: bit 63 present, 61 file page (page cache) or shared anonymous,
// 56 exclusively mapped (by one mapping), bits 0-54 the frame number (zero without CAP_SYS_ADMIN).
struct PageInfo {
    bool present = false, file = false, exclusive = false;
    uint64_t pfn = 0;
};
PageInfo page_info(uintptr_t address) {
    const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    EXPECT_GE(fd, 0) << "cannot open /proc/self/pagemap";
    const auto page = uintptr_t(::sysconf(_SC_PAGESIZE));
    uint64_t e = 0;
    EXPECT_EQ(::pread(fd, &e, 8, off_t(address / page * 8)), 8) << "cannot read /proc/self/pagemap";
    ::close(fd);
    return {bool(e >> 63 & 1), bool(e >> 61 & 1), bool(e >> 56 & 1), e & ((uint64_t(1) << 55) - 1)};
}

// Reads every byte (volatile: the reads cannot be optimized away).
uint64_t touch(std::span<const uint8_t> bytes) {
    uint64_t sum = 0;
    for (const uint8_t& b : bytes) sum += *static_cast<const volatile uint8_t*>(&b);
    return sum;
}

class EngramSharedMapping : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        dir_ = (fs::temp_directory_path() / ("deepinfer-v41-engram-shm-" + std::to_string(::getpid()))).string();
        // The shared tiny published config (FP8 Engram tables with row scales) with a larger Engram
        // vocabulary, so that each table spans many pages.
        nlohmann::ordered_json j = tiny_published_config();
        auto& t = j["text_config"];
        t["num_hidden_layers"] = 3;
        t["compress_ratios"] = {0, 0, 2};
        t["kv_source_layer_ids"] = {2};
        t["index_source_layer_ids"] = {2};
        t["candidate_source_layer_id"] = 2;
        t["engram_vocab_size"] = 8192;
        t["num_nextn_predict_layers"] = 0;
        t["dspark_target_layer_ids"] = nlohmann::ordered_json::array();
        j.erase("vision_config");
        set_v41_engram_rows(j);
        write_synthetic_v41_checkpoint(dir_, j.dump(), {.seed = 5, .residual_damping = 0.1, .include_drafter = false});
    }
    static void TearDownTestSuite() { fs::remove_all(dir_); }
    static std::unique_ptr<V41Model> load() {
        ModelOptions o;
        o.tokenizer_json = DI_TOKENIZER_JSON;
        return V41Model::load(dir_, o);
    }
    static std::string dir_;
};
std::string EngramSharedMapping::dir_;

TEST_F(EngramSharedMapping, TablesAreReadInPlaceFromOneSharedCopy) {
    const long page = ::sysconf(_SC_PAGESIZE);
    const auto a = load();
    const auto ta = a->engram_table_bytes();
    ASSERT_EQ(ta.size(), 4u) << "two Engram layers, each a FP8 table and its scales";
    // The control: while only this load maps the file, its table pages are exclusively its own (so
    // the pagemap test below does see exclusivity).
    touch(ta[0]);
    const uintptr_t probe = (reinterpret_cast<uintptr_t>(ta[0].data()) + ta[0].size() / 2) / uintptr_t(page) * uintptr_t(page);
    ASSERT_TRUE(page_info(probe).present);
    EXPECT_TRUE(page_info(probe).exclusive) << "only one mapping of the file exists yet";

    const auto b = load();
    const auto tb = b->engram_table_bytes();
    ASSERT_EQ(tb.size(), ta.size());

    // Both models read their tables, and the first one runs a forward (Engram rows looked up in place).
    std::vector<int32_t> ids(24);
    std::mt19937 rng(1);
    for (int32_t& id : ids) id = int32_t(rng() % 512u);
    const std::vector<float> logits = a->forward(ids);
    ASSERT_EQ(logits.size(), ids.size() * 512u);

    const std::string file = fs::canonical(fs::path(dir_) / "model.safetensors").string();
    int64_t shared_pages = 0;
    bool saw_pfn = false;
    for (size_t i = 0; i < ta.size(); ++i) {
        SCOPED_TRACE("table " + std::to_string(i));
        EXPECT_EQ(touch(ta[i]), touch(tb[i])) << "same contents";
        EXPECT_NE(touch(ta[i]), 0u);
        // Both views lie inside read-only mappings of the checkpoint file, not in private memory.
        for (const auto& t : {ta[i], tb[i]}) {
            const Mapping m = mapping_of(t.data());
            EXPECT_EQ(m.path, file);
            EXPECT_EQ(m.perms.substr(0, 2), "r-") << "a read-only mapping (nothing can write a private copy)";
            EXPECT_LE(reinterpret_cast<uintptr_t>(t.data() + t.size()), m.end);
        }
        EXPECT_NE(mapping_of(ta[i].data()).begin, mapping_of(tb[i].data()).begin) << "two independent mappings";
        // Every whole page of the table: present, a page-cache page, mapped by both loads (not
        // exclusive) and, where the kernel shows frame numbers, the very same frame.
        const auto begin = reinterpret_cast<uintptr_t>(ta[i].data()), end = begin + ta[i].size();
        const auto offset = reinterpret_cast<uintptr_t>(tb[i].data()) - begin;
        for (uintptr_t p = (begin + uintptr_t(page) - 1) / uintptr_t(page) * uintptr_t(page); p + uintptr_t(page) <= end;
             p += uintptr_t(page)) {
            const PageInfo pa = page_info(p), pb = page_info(p + offset);
            ASSERT_TRUE(pa.present && pa.file && !pa.exclusive) << "page at +" << (p - begin);
            ASSERT_TRUE(pb.present && pb.file && !pb.exclusive);
            if (pa.pfn != 0 || pb.pfn != 0) {
                saw_pfn = true;
                ASSERT_EQ(pa.pfn, pb.pfn) << "both mappings map the same physical page";
            }
            ++shared_pages;
        }
    }
    EXPECT_GE(shared_pages, 16) << "the tables should span many pages";
    std::printf("[ engram ] %lld table pages shared by both loads%s\n", (long long)shared_pages,
                saw_pfn ? " (same physical frames)" : "");
}

}  // namespace
}  // namespace deepinfer
