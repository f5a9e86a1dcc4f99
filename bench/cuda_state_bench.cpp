// SPDX-License-Identifier: Apache-2.0
// The memory effect of the CUDA V4 model's paged device state (device_sequence_state.h), one JSON line
// per measurement.
// 1. Layout (host only, any config): a sequence's device state bytes by length with the paged state,
//    against the per-sequence buffers of the state before it (rings + entries and indexer keys sized
//    for max_model_len / ratio, whatever the length), and how many sequences fit a pool of that size.
// 2. On a GPU (skipped without one): a 2-layer full-width proxy (one CSA + one HCA layer) at
//    max_model_len: a sequence prefilled to --context tokens, then forks (prefix snapshots / n > 1
//    siblings): the pool's pages before and after a fork and after the fork's first decode step (the
//    copy-on-write), the fork's host time, the device-to-device copy the deep copy of the state before
//    made (the old state's bytes, copied and waited for as clone() did), device allocations, and the
//    decode step after a fork against a steady one.
//   cuda_state_bench --config tests/data/configs/deepseek-v4-flash.config.json [--max-len 65536]
//                    [--pool-gib 80] [--context 4096] [--dir /tmp/state-bench]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/model/cuda_model.h"
#include "backends/cuda/model/device_state_layout.h"
#include "deepinfer/model.h"
#include "deepinfer/model_config.h"
#include "deepinfer/synthetic.h"

namespace {

using deepinfer::bench::Clock;
using deepinfer::bench::since;

using namespace deepinfer;

constexpr int64_t kHeadroom = 16;  // kRingHeadroom

// The per-sequence buffers of the state before paging (cuda_model.cpp's new_sequence at 5ec98e1).
uint64_t unpaged_bytes(const ModelConfig& c, int64_t max_len) {
    uint64_t f = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        f += uint64_t((c.sliding_window + kHeadroom) * c.head_dim);
        const AttentionType t = c.layer_types[size_t(l)];
        if (t == AttentionType::kSliding) continue;
        const int64_t m = c.compress_ratio(l);
        const bool csa = t == AttentionType::kCsa;
        const int64_t ring = (csa ? 2 : 1) * m + kHeadroom;
        f += uint64_t(2 * ring * (csa ? 2 : 1) * c.head_dim + (max_len / m + 1) * c.head_dim);
        if (csa) f += uint64_t(2 * ring * 2 * c.index_head_dim + (max_len / m + 1) * c.index_head_dim);
    }
    return f * sizeof(float);
}

void layout_lines(const std::string& name, const ModelConfig& c, int64_t max_len, double pool_gib) {
    const auto L = cuda::v4::DeviceStateLayout::plan(c, 0, kHeadroom, 0);
    const uint64_t pool = uint64_t(pool_gib * double(uint64_t{1} << 30)), before = unpaged_bytes(c, max_len);
    for (int64_t n : {int64_t(1024), int64_t(4096), int64_t(16384), int64_t(65536)}) {
        if (n > max_len) continue;
        const uint64_t after = L.sequence_bytes(n);
        nlohmann::json j{{"part", "layout"}, {"config", name}, {"layers", c.num_hidden_layers}, {"max_model_len", max_len},
                         {"tokens", n}, {"page_tokens", L.page_tokens}, {"page_bytes", L.page_bytes},
                         {"ring_pages", L.ring_pages}, {"bytes_before", before}, {"bytes_after", after},
                         {"pool_gib", pool_gib}, {"sequences_before", pool / before}, {"sequences_after", pool / after}};
        std::printf("%s\n", j.dump().c_str());
    }
}

void gpu_lines(const std::string& dir, int64_t max_len, int64_t context) {
    const std::string cfg = v4_flash_config({.compress_ratios = {4, 128}, .num_hash_layers = 1, .n_routed_experts = 16,
                                             .vocab_size = 1024});
    std::filesystem::create_directories(dir);
    write_synthetic_checkpoint(dir, cfg, {.seed = 7, .residual_damping = 0.25});
    ModelOptions mo;
    mo.max_num_seqs = 64;
    mo.device_state_bytes = uint64_t{8} << 30;
    cuda::CudaModelOptions co;
    co.max_model_len = max_len;
    auto model = cuda::load_cuda_model(dir, mo, co);
    const auto st = [&] { return cuda::cuda_model_stats(*model); };
    std::mt19937 rng(1);
    std::vector<int32_t> prompt(static_cast<size_t>(context));
    for (int32_t& t : prompt) t = int32_t(rng() % 1024);
    const uint64_t alloc0 = cuda::device_allocation_count();
    Sequence seq = model->new_sequence();
    for (int64_t i = 0; i < context; i += 2048)
        model->forward(seq, std::span<const int32_t>(prompt.data() + i, size_t(std::min<int64_t>(2048, context - i))), false);
    const int64_t pages_prefilled = st().state_pages_in_use;
    // Steady decode steps of the original.
    int32_t tok = 5;
    auto step = [&](Sequence& s) {
        const auto t0 = Clock::now();
        model->forward(s, std::span<const int32_t>(&tok, 1), false);
        return since(t0);
    };
    for (int i = 0; i < 3; ++i) step(seq);
    double steady = 0;
    for (int i = 0; i < 20; ++i) steady += step(seq) / 20;
    // Forks: host time, pages.
    const int reps = 200;
    auto t0 = Clock::now();
    for (int i = 0; i < reps; ++i) {
        Sequence f = seq.fork();
    }
    const double fork_s = since(t0) / reps;
    Sequence f = seq.fork();
    const int64_t pages_forked = st().state_pages_in_use;
    const double first_step = step(f);  // copies the rings and the partly filled entry page
    const int64_t pages_after_step = st().state_pages_in_use;
    double after = 0;
    for (int i = 0; i < 20; ++i) after += step(f) / 20;
    const uint64_t allocs = cuda::device_allocation_count() - alloc0;
    // What clone() did before: a device copy of every buffer of the state (sized for max_model_len).
    const ModelConfig c = parse_model_config(cfg);
    const uint64_t old_bytes = unpaged_bytes(c, max_len);
    cuda::DeviceBuffer a(old_bytes), b(old_bytes);
    cuda::copy_on_device(b.data(), a.data(), old_bytes, cuda::Stream{});
    cuda::synchronize_stream(cuda::Stream{});
    t0 = Clock::now();
    for (int i = 0; i < 20; ++i) {
        cuda::copy_on_device(b.data(), a.data(), old_bytes, cuda::Stream{});
        cuda::synchronize_stream(cuda::Stream{});
    }
    const double deep_s = since(t0) / 20;
    const auto s = st();
    nlohmann::json j{{"part", "gpu"}, {"device", cuda::device_description(0)}, {"model", "2-layer full-width proxy (csa,hca)"},
                     {"max_model_len", max_len}, {"context", context}, {"page_bytes", s.state_page_bytes},
                     {"page_tokens", s.state_page_tokens}, {"ring_pages", s.state_ring_pages},
                     {"pages_prefilled", pages_prefilled}, {"pages_after_fork", pages_forked},
                     {"pages_after_fork_first_step", pages_after_step}, {"state_bytes", seq.state_bytes()},
                     {"fork_unshared_bytes", f.state().unshared_bytes()},
                     {"fork_host_us", fork_s * 1e6}, {"deep_copy_before_bytes", old_bytes}, {"deep_copy_before_us", deep_s * 1e6},
                     {"decode_ms_steady", steady * 1e3}, {"decode_ms_first_after_fork", first_step * 1e3},
                     {"decode_ms_fork_steady", after * 1e3}, {"device_allocations", allocs}};
    std::printf("%s\n", j.dump().c_str());
}

}  // namespace

int main(int argc, char** argv) {
    std::string config_path, dir = "/tmp/deepinfer-state-bench";
    int64_t max_len = 65536, context = 4096;
    double pool_gib = 80;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--config") config_path = v;
        else if (k == "--max-len") max_len = std::stoll(v);
        else if (k == "--pool-gib") pool_gib = std::stod(v);
        else if (k == "--context") context = std::stoll(v);
        else if (k == "--dir") dir = v;
        else {
            std::fprintf(stderr, "unknown option %s\n", k.c_str());
            return 2;
        }
    }
    if (!config_path.empty()) {
        std::ifstream in(config_path);
        std::stringstream ss;
        ss << in.rdbuf();
        layout_lines(std::filesystem::path(config_path).filename().string(), parse_model_config(ss.str()), max_len, pool_gib);
    }
    if (cuda::device_count() > 0) gpu_lines(dir, max_len, context);
    return 0;
}
