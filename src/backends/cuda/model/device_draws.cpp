// SPDX-License-Identifier: Apache-2.0
// Device sampling of a step's draws.
#include "backends/cuda/model/device_draws.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <utility>

#include "deepinfer/check.h"

namespace deepinfer::cuda {
namespace {
size_t align256(size_t n) { return (n + 255) & ~size_t(255); }
}  // namespace

SampleRow sample_row(const DeviceDraw& d) {
    return {.seed = d.seed, .stream = d.stream, .counter = d.counter, .temperature = d.temperature,
            .top_k = static_cast<int32_t>(std::min<int64_t>(d.top_k, int64_t{1} << 30)), .top_p = d.top_p,
            .min_p = d.min_p, .draft = d.draft, .accept_stream = d.accept_stream, .q = d.draft_probs};
}

std::vector<uint8_t> check_device_draws(std::span<const DeviceDraw> draws, std::span<const SequenceChunk> chunks) {
    std::vector<uint8_t> drawn(chunks.size(), 0);
    for (const DeviceDraw& d : draws) {
        DI_CHECK(d.chunk >= 0 && size_t(d.chunk) < chunks.size(), "forward_sampled: draw of chunk ", d.chunk, " of ",
                 chunks.size());
        const int64_t n = static_cast<int64_t>(chunks[size_t(d.chunk)].tokens.size());
        DI_CHECK(d.row >= -1 && d.row < n, "forward_sampled: draw of row ", d.row, " of chunk ", d.chunk, " (", n, " rows)");
        DI_CHECK(device_draw_supported(d), "forward_sampled: the device sampler cannot draw temperature ", d.temperature,
                 ", top_k ", d.top_k, ", top_p ", d.top_p, ", min_p ", d.min_p, d.draft >= 0 ? " for a verify row" : "");
        const uint8_t kind = d.row >= 0 && d.row + 1 < n ? 2 : 1;
        drawn[size_t(d.chunk)] = std::max(drawn[size_t(d.chunk)], kind);
    }
    return drawn;
}

int32_t device_draw_logit_row(const DeviceDraw& d, int64_t rows, int64_t first_pick, int64_t num_pick) {
    const int64_t row = d.row < 0 ? rows - 1 : d.row, back = rows - 1 - row;  // rows before the chunk's last
    DI_CHECK(first_pick >= 0 && back < num_pick, "device draw: row ", row, " of chunk ", d.chunk, " has no logits");
    return static_cast<int32_t>(first_pick + num_pick - 1 - back);
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
    if (!out_ || out_->nbytes() < size_t(D) * 8) out_ = std::make_unique<PinnedBuffer>(size_t(std::max(D, group_)) * 16 + 64);
    auto* pin = static_cast<uint8_t*>(in_->host());
    auto* rows_h = reinterpret_cast<SampleRow*>(pin + o_rows);
    bool verify = false, nucleus = false;
    for (int64_t k = 0; k < D; ++k) {
        rows_h[k] = sample_row(draws[size_t(k)]);
        verify = verify || draws[size_t(k)].draft >= 0;
        nucleus = nucleus || sample_nucleus_row(rows_h[k]);
    }
    std::memcpy(pin + o_lrow, logit_rows.data(), size_t(D) * 4);
    auto* d_tab = static_cast<uint8_t*>(arena.alloc(bytes));
    copy_to_device(d_tab, pin, bytes, s);
    const auto* d_rows = reinterpret_cast<const SampleRow*>(d_tab + o_rows);
    const auto* d_lrow = reinterpret_cast<const int32_t*>(d_tab + o_lrow);
    const int64_t group = std::min(D, group_);
    double* scratch = arena.alloc_n<double>(group * vocab);
    double* parts = arena.alloc_n<double>(sample_parts(group, vocab));
    int32_t* index_scratch = arena.alloc_n<int32_t>(group * kMaxSampleTopK);
    // Tokens [D] i32, then accepted [D] u8: one copy back.
    auto* d_out = static_cast<uint8_t*>(arena.alloc(size_t(D) * 5));
    auto* d_tokens = reinterpret_cast<int32_t*>(d_out);
    uint8_t* d_accepted = d_out + size_t(D) * 4;
    for (int64_t g0 = 0; g0 < D; g0 += group)
        sample({.logits = logits, .rows = std::min(group, D - g0), .vocab = vocab, .logit_row = d_lrow + g0,
                .row = d_rows + g0, .scratch = scratch, .parts = parts, .index_scratch = index_scratch, .tokens = d_tokens + g0,
                .accepted = d_accepted + g0, .verify_rows = verify, .nucleus_rows = nucleus},
               s);
    copy_to_host(out_->host(), d_out, size_t(D) * 5, s);
}

std::vector<int32_t> DeviceDraws::tokens(size_t n) const {
    std::vector<int32_t> t(n);
    if (n > 0) std::memcpy(t.data(), out_->host(), n * 4);
    return t;
}

std::vector<uint8_t> DeviceDraws::accepted(size_t n) const {
    std::vector<uint8_t> a(n);
    if (n > 0) std::memcpy(a.data(), static_cast<const uint8_t*>(out_->host()) + n * 4, n);
    return a;
}

DeviceDraws::Fallback DeviceDraws::fallback(const float* logits, int64_t vocab, std::span<const DeviceDraw> draws,
                                            std::span<const int32_t> tokens, std::span<const int32_t> logit_rows,
                                            Stream s) const {
    DI_CHECK(draws.size() == tokens.size() && logit_rows.size() == tokens.size(), "device draws: ", tokens.size(),
             " tokens for ", draws.size(), " draws");
    Fallback out;
    out.logits.resize(tokens.size());
    out.probs.resize(tokens.size());
    // Rows to copy: each given-up draw's logits, and a verify row's draft distribution (a one-hot draft needs none).
    auto wants_probs = [&](size_t k) { return draws[k].draft >= 0 && draws[k].draft_probs != nullptr; };
    size_t rows = 0;
    for (size_t k = 0; k < tokens.size(); ++k)
        if (tokens[k] < 0) rows += 1 + (wants_probs(k) ? 1 : 0);
    if (rows == 0) return out;
    const size_t row_bytes = static_cast<size_t>(vocab) * sizeof(float);
    if (!staging_ || staging_->nbytes() < rows * row_bytes) staging_ = std::make_unique<PinnedBuffer>(rows * row_bytes);
    float* h = static_cast<float*>(staging_->host());
    size_t at = 0;
    std::vector<std::pair<size_t, size_t>> slots(tokens.size(), {SIZE_MAX, SIZE_MAX});  // (logits, probs) rows
    for (size_t k = 0; k < tokens.size(); ++k) {
        if (tokens[k] >= 0) continue;
        slots[k].first = at;
        copy_to_host(h + at++ * size_t(vocab), logits + static_cast<int64_t>(logit_rows[k]) * vocab, row_bytes, s);
        if (wants_probs(k)) {
            slots[k].second = at;
            copy_to_host(h + at++ * size_t(vocab), draws[k].draft_probs, row_bytes, s);
        }
    }
    synchronize_stream(s);
    for (size_t k = 0; k < tokens.size(); ++k) {
        if (slots[k].first != SIZE_MAX) out.logits[k].assign(h + slots[k].first * size_t(vocab), h + (slots[k].first + 1) * size_t(vocab));
        if (slots[k].second != SIZE_MAX) out.probs[k].assign(h + slots[k].second * size_t(vocab), h + (slots[k].second + 1) * size_t(vocab));
    }
    return out;
}

size_t DeviceDraws::workspace_need(int64_t draws, int64_t vocab) const {
    if (draws <= 0) return 0;
    const int64_t group = std::min(draws, group_);
    auto bytes = [](int64_t n) { return align256(static_cast<size_t>(n)) + 256; };
    return bytes(draws * int64_t(sizeof(SampleRow)) + 256 + draws * 4) + bytes(group * vocab * 8) +
           bytes(sample_parts(group, vocab) * 8) + bytes(group * kMaxSampleTopK * 4) + bytes(draws * 5);
}

}  // namespace deepinfer::cuda
