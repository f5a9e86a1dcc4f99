// SPDX-License-Identifier: Apache-2.0
// Sampling on the device for the CUDA models (Model::forward_sampled's DeviceDraws), shared by the
// V4 and V4.1 models: the check of a step's draws, and the enqueued work that samples them from the
// step's logits rows with the `sample` kernel (the engine's counter-based random streams, so tokens
// equal the host sampler's) and copies only the token ids back (verify rows: and whether each accepted its draft).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "deepinfer/model.h"

namespace deepinfer::cuda {

// The sampler row of a draw.
SampleRow sample_row(const DeviceDraw& d);
// Whether the device sampler serves the draw (Model::can_sample_on_device).
inline bool device_draw_supported(const DeviceDraw& d) { return sample_supported(sample_row(d)); }
// Checks a step's draws against its chunks (chunk and row in range, supported); per chunk: 0 no draw,
// 1 draws from its last row only, 2 draws from earlier rows too (verify rows: every row's logits).
std::vector<uint8_t> check_device_draws(std::span<const DeviceDraw> draws, std::span<const SequenceChunk> chunks);
// The logits row of draw `d` among the step's picked rows: its chunk's picked rows are
// [first_pick, first_pick + num_pick) and end with the chunk's last row (`rows` in the chunk).
int32_t device_draw_logit_row(const DeviceDraw& d, int64_t rows, int64_t first_pick, int64_t num_pick);

class DeviceDraws {
public:
    // `group`: draws per sampling launch (they share one [group, vocab] f64 scratch).
    explicit DeviceDraws(int64_t group) : group_(std::max<int64_t>(1, group)) {}
    // Enqueues on `s`: the draw table's copy, the sampling of draw k from logits row logit_rows[k]
    // ([*, vocab] f32, device), and the copy of the token ids into pinned memory. Scratch from `arena`
    // (returned by the caller's reset after the step). tokens() reads them once `s` has synchronized.
    void enqueue(const float* logits, int64_t vocab, std::span<const DeviceDraw> draws,
                 std::span<const int32_t> logit_rows, DeviceArena& arena, Stream s);
    std::vector<int32_t> tokens(size_t n) const;
    std::vector<uint8_t> accepted(size_t n) const;  // per draw: it verified its draft and accepted it
    // After `s` synchronized, while `logits` (and the drafts' distributions) are still valid: per draw the
    // device could not make (token -1), its logits row (ForwardOutputs::draw_logits) and, for a verify row
    // with a draft distribution, that row (ForwardOutputs::draw_probs); else empty. Copies through a pinned
    // staging buffer (kept, grown to the largest step's rows) and waits on `s` once.
    struct Fallback {
        std::vector<std::vector<float>> logits, probs;  // per draw: [vocab] or empty
    };
    Fallback fallback(const float* logits, int64_t vocab, std::span<const DeviceDraw> draws, std::span<const int32_t> tokens,
                      std::span<const int32_t> logit_rows, Stream s) const;
    // Arena bytes enqueue() takes for `draws` draws (an upper bound, alignment included).
    size_t workspace_need(int64_t draws, int64_t vocab) const;

private:
    int64_t group_;
    std::unique_ptr<PinnedBuffer> in_, out_;
    mutable std::unique_ptr<PinnedBuffer> staging_;  // fallback(): the given-up rows, [rows, vocab] f32
};

}  // namespace deepinfer::cuda
