// SPDX-License-Identifier: Apache-2.0
// CudaV41Model's declaration, shared by its translation units (cuda_v41_model.cpp: load, batch,
// mHC, MoE, Engram, head; cuda_v41_attention.cpp: the CSA2 attention of one layer).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <span>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/model/cuda_model.h"
#include "backends/cuda/model/cuda_v41_state.h"
#include "backends/cuda/model/cuda_v41_weights.h"
#include "deepinfer/check.h"
#include "deepinfer/engram.h"
#include "deepinfer/model.h"
#include "deepinfer/model_config_v41.h"

namespace deepinfer::cuda {

// Host staging for the small per-forward tables (row pointers, positions, index rows): packed into
// page-locked memory and copied asynchronously into the workspace. Reset at the start of a forward
// (the previous forward has synchronized).
class HostStaging {
public:
    explicit HostStaging(size_t capacity) : buffer_(capacity) {}
    void reset() { used_ = 0; }
    // Copies `n` objects to the device memory `dst` on stream `s` through the staging buffer.
    template <class T>
    void upload(T* dst, const T* src, size_t n, Stream s) {
        const size_t bytes = n * sizeof(T), begin = (used_ + 255) & ~size_t(255);
        DI_CHECK(begin + bytes <= buffer_.nbytes(), "CUDA host staging exhausted (", begin + bytes, " of ",
                 buffer_.nbytes(), " bytes)");
        std::memcpy(static_cast<uint8_t*>(buffer_.host()) + begin, src, bytes);
        copy_to_device(dst, static_cast<uint8_t*>(buffer_.host()) + begin, bytes, s);
        used_ = begin + bytes;
    }

private:
    PinnedBuffer buffer_;
    size_t used_ = 0;
};

class CudaV41Model final : public Model {
public:
    CudaV41Model(const std::string& dir, const ModelOptions& options, const CudaModelOptions& cuda_options);

    const ModelInfo& info() const override { return info_; }
    Numerics numerics() const override { return numerics_; }
    uint64_t estimate_state_bytes(int64_t, uint64_t) const override { return state_bytes_; }
    Sequence new_sequence() const override { return new_sequence(nullptr); }
    Sequence new_sequence(std::shared_ptr<StatePool>) const override;
    std::vector<float> forward(Sequence& seq, std::span<const int32_t> tokens, bool all_logits) const override;
    std::vector<std::vector<float>> forward_batch(std::span<const SequenceChunk> chunks) const override;

    // Engram table bytes read in place from the checkpoint's mapping (shared by every process on the
    // host) and bytes copied into this process's pinned buffers (devices without read-only mapping).
    size_t engram_shared_bytes() const { return weights_.shared_host_bytes; }
    size_t engram_copied_bytes() const { return weights_.host_bytes; }
    int64_t max_len() const { return max_len_; }

    // What source layers publish within one forward for one segment (model/v41/attention.h SharedState).
    struct Shared {
        int64_t kv_source = -1;  // layer of the latest KV source
        bool has_topk = false;
        bool has_candidates = false;
        int64_t candidate_entries = 0;
    };
    struct Batch {
        int64_t rows = 0, max_position = 0, max_rows = 0;
        std::vector<V41DeviceState*> states;
        std::vector<int64_t> row_begin, num_rows, first_position;  // per segment
        const int32_t* positions = nullptr;    // [rows] device
        const int32_t* row_segment = nullptr;  // [rows] device
        std::vector<Shared> shared;            // per segment
        int32_t* topk = nullptr;               // [rows, index_topk] published top-k (device)
        uint8_t* mask = nullptr;               // [rows, mask_ld] candidate mask (device)
        int64_t mask_ld = 0;
    };

private:
    bool official() const { return numerics_ == Numerics::kOfficial; }
    // Device copy of a host vector (workspace memory, via the staging buffer), on `s` (default: main).
    template <class T>
    T* upload(const std::vector<T>& v, Stream s = {}) const {
        T* d = workspace_.alloc_n<T>(std::max<int64_t>(1, static_cast<int64_t>(v.size())));
        staging_.upload(d, v.data(), v.size(), s.handle ? s : stream_.get());
        return d;
    }
    // y = x · Wᵀ with V4.1's rounding points: official = act_quant per 32 before FP8/FP4 weights, bf16 output.
    // `keep_scratch`: the act_quant scratch stays allocated (work on the side stream).
    void project(const DeviceLinear& w, const float* x, int64_t rows, float* y, Stream s = {}, bool keep_scratch = false) const;
    // A linear the reference runs in bf16 (no activation quantization; bf16 output in official numerics).
    void project_bf16(const DeviceLinear& w, const float* x, int64_t rows, float* y) const;
    void attention(int64_t layer, Batch& b, const float* a, float* out) const;
    void compress(int64_t layer, Batch& b, const float* a) const;
    void index(int64_t layer, Batch& b, const float* a, const float* qr) const;
    void moe(int64_t layer, const Batch& b, const float* a, float* out) const;
    // Engram rows of every chunk's tokens (host), history rings updated: [n_engram, rows, cols].
    std::vector<int64_t> engram_rows(std::span<const SequenceChunk> chunks, const Batch& b) const;

    int device_;  // made current first (the streams, events, buffers below live there) and by every forward
    ExpertExchange* ep_ = nullptr;  // expert parallelism (cuda_model.h CudaModelOptions), else null
    int64_t ep_rank_ = 0;
    V41ModelConfig config_;
    ModelInfo info_;
    Numerics numerics_ = Numerics::kExact;
    int64_t max_len_ = 0;
    uint64_t state_bytes_ = 0;
    V41CacheFormats formats_;
    EngramTokenMap token_map_;
    EngramLayout engram_layout_;
    int64_t engram_pad_ = 0;
    std::unique_ptr<const v41::Weights> host_;  // the checkpoint mapping the shared Engram tables live in
    V41DeviceWeights weights_;
    std::vector<std::unique_ptr<DeviceBuffer>> tables_;
    const float* rope_main_ = nullptr;
    const float* rope_comp_ = nullptr;
    OwnedStream stream_, side_stream_;
    mutable OwnedEvent engram_ready_;
    mutable DeviceArena workspace_;
    mutable HostStaging staging_;
    mutable std::mutex mutex_;  // one forward at a time (workspace, staging and streams are shared)
};

}  // namespace deepinfer::cuda
