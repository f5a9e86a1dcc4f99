// SPDX-License-Identifier: Apache-2.0
// The memory effect of the CUDA V4.1 model's paged device state (cuda_v41_state.h), one JSON line per
// measurement.
// 1. Layout (host only, any V4.1 config): a sequence's device state bytes by length with the paged
//    state, against the per-sequence buffers of the state before it (window rings, pending compressor
//    rows, and entries + index keys sized for max_model_len / ratio whatever the length), and how many
//    sequences fit a pool of that size.
// 2. On a GPU (skipped without one): the release-width 3-layer proxy of the CUDA tests (a window-only
//    layer with Engram, a ratio-2 and a ratio-1 KV source; tests/model/v41_flash_fixture.h) at
//    max_model_len: a sequence prefilled to --context tokens, then forks (prefix snapshots / n > 1
//    siblings): the pool's pages before and after a fork and after the fork's first decode step (the
//    copy-on-write), the fork's host time, what the deep copy of the state before cost (allocating the
//    same buffers, copying and waiting, as its clone() did), device allocations, and the decode step
//    after a fork against a steady one.
//   cuda_v41_state_bench --config tests/data/v41/configs/deepseek-v41-flash.json [--max-len 65536]
//                        [--pool-gib 80] [--context 4096] [--dir /tmp/v41-state-bench] [--tokenizer T]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/model/cuda_model.h"
#include "backends/cuda/model/cuda_v41_model.h"
#include "backends/cuda/model/cuda_v41_state.h"
#include "deepinfer/model.h"
#include "deepinfer/model_config_v41.h"
#include "model/v41_flash_fixture.h"

namespace {

using deepinfer::bench::Clock;
using deepinfer::bench::since;

using namespace deepinfer;

constexpr int64_t kHeadroom = 16;  // kRingHeadroom

// The device buffers of one sequence's state before paging (cuda_v41_state.cpp's make_v41_device_state
// at 6e4feda): per layer the window ring; per KV source entries and keys for max_len / r + 1 groups and,
// at r > 1, the pending kv and gate rows.
std::vector<uint64_t> unpaged_buffers(const V41TextConfig& c, int64_t max_len) {
    const cuda::V41CacheFormats f = cuda::V41CacheFormats::of(c);
    std::vector<uint64_t> b;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        b.push_back(uint64_t((c.sliding_window + kHeadroom) * f.window_bytes));
        if (!c.is_kv_source(l)) continue;
        const int64_t r = c.compress_ratio(l);
        b.push_back(uint64_t((max_len / r + 1) * f.entry_bytes));
        b.push_back(uint64_t((max_len / r + 1) * f.key_bytes));
        if (r > 1) b.insert(b.end(), 2, uint64_t((r + kHeadroom) * c.head_dim * 4));
    }
    return b;
}

uint64_t sum(const std::vector<uint64_t>& v) {
    uint64_t s = 0;
    for (uint64_t x : v) s += x;
    return s;
}

void layout_lines(const std::string& name, const V41TextConfig& c, int64_t max_len, double pool_gib) {
    const auto L = cuda::V41StateLayout::plan(c, 0);
    const uint64_t pool = uint64_t(pool_gib * double(uint64_t{1} << 30)), before = sum(unpaged_buffers(c, max_len));
    for (int64_t n : {int64_t(1024), int64_t(4096), int64_t(16384), int64_t(65536)}) {
        if (n > max_len) continue;
        const uint64_t after = L.sequence_bytes(n);
        nlohmann::json j{{"part", "layout"}, {"config", name}, {"layers", c.num_hidden_layers}, {"max_model_len", max_len},
                         {"tokens", n}, {"page_tokens", L.page_tokens}, {"page_bytes", L.page_bytes},
                         {"entry_bytes", L.entry_bytes}, {"ring_pages", L.ring_pages}, {"bytes_before", before},
                         {"bytes_after", after}, {"pool_gib", pool_gib}, {"sequences_before", pool / before},
                         {"sequences_after", pool / after}};
        std::printf("%s\n", j.dump().c_str());
    }
}

void gpu_lines(const std::string& dir, const std::string& tokenizer, int64_t max_len, int64_t context) {
    std::filesystem::create_directories(dir);
    test::write_v41_flash_width_checkpoint(dir);
    ModelOptions mo;
    mo.tokenizer_json = tokenizer;
    mo.max_num_seqs = 64;
    mo.device_state_bytes = uint64_t{4} << 30;
    cuda::CudaModelOptions co;
    co.max_model_len = max_len;
    auto model = cuda::load_cuda_v41_model(dir, mo, co);
    const auto st = [&] { return cuda::cuda_model_stats(*model); };
    std::mt19937 rng(1);
    std::vector<int32_t> prompt(static_cast<size_t>(context));
    for (int32_t& t : prompt) t = int32_t(rng() % 1024);
    const uint64_t alloc0 = cuda::device_allocation_count();
    Sequence seq = model->new_sequence();
    for (int64_t i = 0; i < context; i += 2048)
        model->forward(seq, std::span<const int32_t>(prompt.data() + i, size_t(std::min<int64_t>(2048, context - i))), false);
    const int64_t pages_prefilled = st().state_pages_in_use;
    int32_t tok = 5;
    auto step = [&](Sequence& s) {
        const auto t0 = Clock::now();
        model->forward(s, std::span<const int32_t>(&tok, 1), false);
        return since(t0);
    };
    for (int i = 0; i < 3; ++i) step(seq);
    double steady = 0;
    for (int i = 0; i < 20; ++i) steady += step(seq) / 20;
    const int reps = 200;
    auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) {
        Sequence f = seq.fork();
    }
    const double fork_s = since(t0) / reps;
    Sequence f = seq.fork();
    const int64_t pages_forked = st().state_pages_in_use;
    const double first_step = step(f);  // copies the ring pages and the partly filled entry page
    const int64_t pages_after_step = st().state_pages_in_use;
    double after = 0;
    for (int i = 0; i < 20; ++i) after += step(f) / 20;
    const uint64_t allocs = cuda::device_allocation_count() - alloc0;
    // What clone() did before: a new buffer per buffer of the state (sized for max_model_len), a
    // device copy of each, and a wait; the copy freed again (as a short-lived snapshot's would be).
    const std::vector<uint64_t> old = unpaged_buffers(load_v41_model_config(dir + "/config.json").text, max_len);
    std::vector<std::unique_ptr<cuda::DeviceBuffer>> src;
    for (uint64_t b : old) src.push_back(std::make_unique<cuda::DeviceBuffer>(b));
    auto deep_copy = [&] {
        std::vector<std::unique_ptr<cuda::DeviceBuffer>> dst;
        for (const auto& b : src) {
            dst.push_back(std::make_unique<cuda::DeviceBuffer>(b->nbytes()));
            cuda::copy_on_device(dst.back()->data(), b->data(), b->nbytes(), cuda::Stream{});
        }
        cuda::synchronize_stream(cuda::Stream{});
    };
    deep_copy();
    t0 = Clock::now();
    for (int i = 0; i < 20; ++i) deep_copy();
    const double deep_s = since(t0) / 20;
    const auto s = st();
    nlohmann::json j{{"part", "gpu"}, {"device", cuda::device_description(0)},
                     {"model", "3-layer release-width proxy (window+Engram, ratio-2 source, ratio-1 source)"},
                     {"max_model_len", max_len}, {"context", context}, {"page_bytes", s.state_page_bytes},
                     {"page_tokens", s.state_page_tokens}, {"ring_pages", s.state_ring_pages},
                     {"pages_prefilled", pages_prefilled}, {"pages_after_fork", pages_forked},
                     {"pages_after_fork_first_step", pages_after_step}, {"state_bytes", seq.state_bytes()},
                     {"fork_unshared_bytes", f.state().unshared_bytes()}, {"fork_host_us", fork_s * 1e6},
                     {"deep_copy_before_bytes", sum(old)}, {"deep_copy_before_buffers", old.size()},
                     {"deep_copy_before_us", deep_s * 1e6}, {"decode_ms_steady", steady * 1e3},
                     {"decode_ms_first_after_fork", first_step * 1e3}, {"decode_ms_fork_steady", after * 1e3},
                     {"device_allocations", allocs}};
    std::printf("%s\n", j.dump().c_str());
}

}  // namespace

int main(int argc, char** argv) {
    std::string config_path, dir = "/tmp/deepinfer-v41-state-bench", tokenizer = DI_TOKENIZER_JSON;
    int64_t max_len = 65536, context = 4096;
    double pool_gib = 80;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--config") config_path = v;
        else if (k == "--max-len") max_len = std::stoll(v);
        else if (k == "--pool-gib") pool_gib = std::stod(v);
        else if (k == "--context") context = std::stoll(v);
        else if (k == "--dir") dir = v;
        else if (k == "--tokenizer") tokenizer = v;
        else {
            std::fprintf(stderr, "unknown option %s\n", k.c_str());
            return 2;
        }
    }
    if (!config_path.empty()) {
        std::ifstream in(config_path);
        std::stringstream ss;
        ss << in.rdbuf();
        layout_lines(std::filesystem::path(config_path).filename().string(), parse_v41_model_config(ss.str()).text, max_len,
                     pool_gib);
    }
    if (cuda::device_count() > 0) gpu_lines(dir, tokenizer, max_len, context);
    return 0;
}
