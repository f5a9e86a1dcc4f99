// SPDX-License-Identifier: Apache-2.0
// Device sampling of a step's draws.
#include "backends/cuda/model/device_draws.h"

#include <algorithm>
#include <cstring>

#include "deepinfer/check.h"

namespace deepinfer::cuda {
namespace {
size_t align256(size_t n) { return (n + 255) & ~size_t(255); }
}  // namespace

SampleRow sample_row(const DeviceDraw& d) {
    return {.seed = d.seed, .stream = d.stream, .counter = d.counter, .temperature = d.temperature,
            .top_k = static_cast<int32_t>(std::min<int64_t>(d.top_k, int64_t{1} << 30)), .top_p = d.top_p,
            .min_p = d.min_p};
}

std::vector<uint8_t> check_device_draws(std::span<const DeviceDraw> draws, size_t chunks) {
    std::vector<uint8_t> drawn(chunks, 0);
    for (const DeviceDraw& d : draws) {
        DI_CHECK(d.chunk >= 0 && size_t(d.chunk) < chunks, "forward_sampled: draw of chunk ", d.chunk, " of ", chunks);
        DI_CHECK(device_draw_supported(d), "forward_sampled: the device sampler cannot draw temperature ", d.temperature,
                 ", top_k ", d.top_k, ", top_p ", d.top_p, ", min_p ", d.min_p);
        drawn[size_t(d.chunk)] = 1;
    }
    return drawn;
}

void DeviceDraws::enqueue(const float* logits, int64_t vocab, std::span<const DeviceDraw> draws,
                          std::span<const int32_t> logit_rows, DeviceArena& arena, Stream s) {
    const int64_t D = static_cast<int64_t>(draws.size());
    DI_CHECK(logit_rows.size() == draws.size(), "device draws: ", logit_rows.size(), " logits rows for ", D, " draws");
    if (D == 0) return;
    DI_CHECK(logits != nullptr, "device draws without logits");
    const size_t o_rows = 0, o_lrow = align256(size_t(D) * sizeof(SampleRow)), bytes = o_lrow + size_t(D) * 4;
    // The pinned buffers are reused by the next step only after this one synchronized.
    if (!in_ || in_->nbytes() < bytes) in_ = std::make_unique<PinnedBuffer>(bytes * 2);
    if (!out_ || out_->nbytes() < size_t(D) * 4) out_ = std::make_unique<PinnedBuffer>(size_t(std::max(D, group_)) * 8 + 64);
    auto* pin = static_cast<uint8_t*>(in_->host());
    auto* rows_h = reinterpret_cast<SampleRow*>(pin + o_rows);
    for (int64_t k = 0; k < D; ++k) rows_h[k] = sample_row(draws[size_t(k)]);
    std::memcpy(pin + o_lrow, logit_rows.data(), size_t(D) * 4);
    auto* d_tab = static_cast<uint8_t*>(arena.alloc(bytes));
    copy_to_device(d_tab, pin, bytes, s);
    const auto* d_rows = reinterpret_cast<const SampleRow*>(d_tab + o_rows);
    const auto* d_lrow = reinterpret_cast<const int32_t*>(d_tab + o_lrow);
    const int64_t group = std::min(D, group_);
    double* scratch = arena.alloc_n<double>(group * vocab);
    double* parts = arena.alloc_n<double>(sample_parts(group, vocab));
    int32_t* index_scratch = arena.alloc_n<int32_t>(group * kMaxSampleTopK);
    int32_t* d_tokens = arena.alloc_n<int32_t>(D);
    for (int64_t g0 = 0; g0 < D; g0 += group)
        sample({.logits = logits, .rows = std::min(group, D - g0), .vocab = vocab, .logit_row = d_lrow + g0,
                .row = d_rows + g0, .scratch = scratch, .parts = parts, .index_scratch = index_scratch, .tokens = d_tokens + g0},
               s);
    copy_to_host(out_->host(), d_tokens, size_t(D) * 4, s);
}

std::vector<int32_t> DeviceDraws::tokens(size_t n) const {
    std::vector<int32_t> t(n);
    if (n > 0) std::memcpy(t.data(), out_->host(), n * 4);
    return t;
}

size_t DeviceDraws::workspace_need(int64_t draws, int64_t vocab) const {
    if (draws <= 0) return 0;
    const int64_t group = std::min(draws, group_);
    auto bytes = [](int64_t n) { return align256(static_cast<size_t>(n)) + 256; };
    return bytes(draws * int64_t(sizeof(SampleRow)) + 256 + draws * 4) + bytes(group * vocab * 8) +
           bytes(sample_parts(group, vocab) * 8) + bytes(group * kMaxSampleTopK * 4) + bytes(draws * 4);
}

}  // namespace deepinfer::cuda
