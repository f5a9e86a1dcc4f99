// SPDX-License-Identifier: Apache-2.0
// One DeepSeek-V4.1 sequence's state on the GPU (the device form of model/v41/state.h): per layer the
// sliding-window K=V ring in its compact FP8 form; per KV source the compressed entries (compact FP4 +
// e4m3 scales) and index keys (compact MXFP4) with capacity max_model_len / ratio, and at ratio > 1
// the f32 compressor projections of the open group in a position-keyed ring; the Engram history on
// the host. Sizes are fixed at creation (no allocation while the sequence runs). Position-keyed like
// the CPU state, so truncate() needs no device work: entries of groups ending at or after the new
// length are no longer visible, ring rows are rewritten before they are read.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "deepinfer/model.h"
#include "deepinfer/model_config_v41.h"

namespace deepinfer::cuda {

// Row formats of the V4.1 caches for a config (kF32 where a length is not a multiple of the block).
struct V41CacheFormats {
    CacheFormat window = CacheFormat::kFp8Ue8m0;  // head_dim values, block 32
    CacheFormat entry = CacheFormat::kFp4E4m3;    // head_dim values, block 16
    CacheFormat key = CacheFormat::kFp4Ue8m0;     // index_head_dim values, block 32 (also the queries)
    static constexpr int64_t kWindowBlock = 32, kEntryBlock = 16, kKeyBlock = 32;
    int64_t window_bytes = 0, entry_bytes = 0, key_bytes = 0;
    static V41CacheFormats of(const V41TextConfig& config);
};

struct V41LayerBuffers {
    std::unique_ptr<DeviceBuffer> window;        // [window_rows, window_bytes]
    std::unique_ptr<DeviceBuffer> entries;       // [capacity, entry_bytes] (KV sources)
    std::unique_ptr<DeviceBuffer> index_keys;    // [capacity, key_bytes] (KV sources)
    std::unique_ptr<DeviceBuffer> pending_kv;    // [ratio + kRingHeadroom, head_dim] f32 (ratio > 1)
    std::unique_ptr<DeviceBuffer> pending_gate;  // [ratio + kRingHeadroom, head_dim] f32 (ratio > 1)
};

class V41DeviceState final : public SequenceState {
public:
    std::vector<V41LayerBuffers> layers;
    std::vector<int64_t> engram_history;  // compressed id of position p in slot p % size (host)
    // The DSpark drafter's context rings when attached (cuda_v41_dspark.cpp): per stage [window_rows,
    // window row bytes] in the window's compact format, position p in slot p % window_rows.
    std::vector<std::unique_ptr<DeviceBuffer>> dspark_rings;
    int64_t length = 0;
    size_t nbytes = 0;
    int device = 0;  // where the buffers live (clone copies there)

    int64_t num_tokens() const override { return length; }
    void truncate(int64_t n) override;
    std::unique_ptr<SequenceState> clone() const override;  // deep copy (device buffers copied)
    size_t bytes() const override { return nbytes; }
    size_t unshared_bytes() const override { return nbytes; }
};

// A fresh state for `config` with room for `max_len` positions.
std::unique_ptr<V41DeviceState> make_v41_device_state(const V41TextConfig& config, int64_t max_len);

}  // namespace deepinfer::cuda
