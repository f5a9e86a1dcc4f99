// SPDX-License-Identifier: Apache-2.0
// Host API of the CUDA backend (no CUDA types here). Functions taking TensorViews expect device
// memory (Device::kCuda) and run on the default stream unless a stream handle is given.
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>
#include <string>

#include "backends/cuda/ops.h"
#include "deepinfer/check.h"
#include "deepinfer/dequant.h"

namespace deepinfer::cuda {

// Number of usable CUDA devices; 0 when there is no driver or no GPU (never throws).
int device_count();
// "NVIDIA H200 (sm_90, 132 SMs, 139 GiB)" for device `index`.
std::string device_description(int index);
// The calling thread's current device (every allocation, stream and launch of the thread uses it).
void set_current_device(int index);
int current_device();
// Dynamic shared memory one block may use on the current device after opting in (227 KiB on sm_90,
// 163 KiB on sm_80, 99 KiB on sm_86/sm_89): kernels with large staging buffers pick their shapes by it.
int64_t max_shared_memory_per_block();
// Streaming multiprocessors of the current device (launchers size grids by it; results never depend on it).
int64_t multiprocessor_count();
// The current device's compute capability as major * 10 + minor (90: Hopper, wgmma and thread-block clusters);
// 0 without a device.
int compute_capability();

// Device memory owned RAII. Every device allocation of the backend goes through it (weights, tables,
// sequence state, the workspace arena), so device_allocation_count() sees them all.
class DeviceBuffer {
public:
    explicit DeviceBuffer(size_t nbytes);
    ~DeviceBuffer();
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    void* data() const { return data_; }
    size_t nbytes() const { return nbytes_; }
    void copy_from_host(const void* src, size_t nbytes);
    void copy_from_device(const void* src, size_t nbytes);  // src: a device (or device-mapped) address
    void copy_to_host(void* dst, size_t nbytes) const;

private:
    void* data_ = nullptr;
    size_t nbytes_ = 0;
};

// cudaMalloc + cudaFree calls made by DeviceBuffer in this process so far (a diagnostic counter:
// tests assert that decode steps allocate nothing).
uint64_t device_allocation_count();
// Free memory of the current device now (cudaMemGetInfo).
size_t device_free_bytes();

// A stream-ordered bump allocator over one device allocation made at start-up: a forward takes its
// scratch with alloc() and gives it back with reset(mark) once the stream has finished with it, so a
// decode step never calls cudaMalloc. Not thread-safe; one owner (the model's forward thread).
class DeviceArena {
public:
    explicit DeviceArena(size_t capacity_bytes);
    void* alloc(size_t nbytes);  // 256-byte aligned; throws when the arena is exhausted
    template <class T>
    T* alloc_n(int64_t n) {
        return static_cast<T*>(alloc(static_cast<size_t>(n) * sizeof(T)));
    }
    size_t mark() const { return used_; }
    void reset(size_t mark) { used_ = mark; }
    size_t capacity() const { return buffer_.nbytes(); }
    size_t high_water() const { return high_water_; }

private:
    DeviceBuffer buffer_;
    size_t used_ = 0;
    size_t high_water_ = 0;
};

// An owned CUDA stream.
class OwnedStream {
public:
    OwnedStream();
    ~OwnedStream();
    OwnedStream(const OwnedStream&) = delete;
    OwnedStream& operator=(const OwnedStream&) = delete;
    Stream get() const { return stream_; }
    void set_pdl(bool on) { stream_.pdl = on; }  // Stream::pdl of every get()
    void synchronize() const;

private:
    Stream stream_;
};

// The scratch one call takes from an arena from `mark` on: if the call throws (this is destroyed armed),
// drains the stream and the side streams the call enqueues on (up to kMaxSides), so no enqueued work still
// uses the scratch, and returns the arena to `mark`. The normal path disarms it and resets the arena itself.
class ArenaRollback {
public:
    static constexpr size_t kMaxSides = 4;
    ArenaRollback(DeviceArena& arena, size_t mark, const OwnedStream& stream, std::initializer_list<const OwnedStream*> sides = {})
        : arena_(arena), mark_(mark), stream_(stream) {
        DI_CHECK(sides.size() <= kMaxSides, "ArenaRollback: ", sides.size(), " side streams (at most ", kMaxSides, ")");
        for (const OwnedStream* side : sides) sides_[num_sides_++] = side;
    }
    ~ArenaRollback() {
        if (!armed_) return;
        try {
            stream_.synchronize();
            for (size_t i = 0; i < num_sides_; ++i) sides_[i]->synchronize();
        } catch (...) {
        }
        arena_.reset(mark_);
    }
    ArenaRollback(const ArenaRollback&) = delete;
    ArenaRollback& operator=(const ArenaRollback&) = delete;
    void disarm() { armed_ = false; }

private:
    DeviceArena& arena_;
    size_t mark_;
    const OwnedStream& stream_;
    std::array<const OwnedStream*, kMaxSides> sides_{};
    size_t num_sides_ = 0;
    bool armed_ = true;
};

// Page-locked host memory mapped into the device's address space (zero-copy): kernels read it over
// the bus through device_pointer(). For large read-mostly tables kept off the GPU (V4.1's Engram).
class PinnedBuffer {
public:
    explicit PinnedBuffer(size_t nbytes);
    ~PinnedBuffer();
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;
    void* host() const { return host_; }
    const void* device_pointer() const { return device_; }
    size_t nbytes() const { return nbytes_; }

private:
    void* host_ = nullptr;
    void* device_ = nullptr;
    size_t nbytes_ = 0;
};

// Host memory that already exists (a read-only file mapping) page-locked in place and mapped into the
// device's address space: no copy, so every process that maps the same file shares one page-cache copy
// (V4.1's Engram tables, issue 12). The range is widened to whole pages; it must outlive this object.
class HostRegistration {
public:
    // True when the current device can map read-only host memory (cudaDevAttrHostRegisterReadOnlySupported).
    static bool read_only_supported();
    HostRegistration(const void* begin, size_t nbytes);  // throws deepinfer::Error when registration fails
    ~HostRegistration();
    HostRegistration(const HostRegistration&) = delete;
    HostRegistration& operator=(const HostRegistration&) = delete;
    bool contains(const void* p, size_t n) const;
    const void* device_pointer(const void* host) const;  // host must lie in the range
    size_t nbytes() const { return nbytes_; }

private:
    const char* begin_ = nullptr;  // page-aligned
    size_t nbytes_ = 0;
    const char* device_ = nullptr;
};

// An owned CUDA event (timing disabled) for ordering work between streams.
class OwnedEvent {
public:
    OwnedEvent();
    ~OwnedEvent();
    OwnedEvent(const OwnedEvent&) = delete;
    OwnedEvent& operator=(const OwnedEvent&) = delete;
    void record(Stream s);         // completes when the work queued on s so far has completed
    void wait(Stream s) const;     // later work on s waits for the recorded point

private:
    void* event_ = nullptr;
};

// A CUDA event with timing (step spans and the idle gaps between steps).
class DeviceEvent {
public:
    DeviceEvent();
    ~DeviceEvent();
    DeviceEvent(const DeviceEvent&) = delete;
    DeviceEvent& operator=(const DeviceEvent&) = delete;
    void record(Stream s);
    // Milliseconds from `start` to `end` (both recorded and complete).
    static float elapsed_ms(const DeviceEvent& start, const DeviceEvent& end);

private:
    void* event_ = nullptr;
};

// A captured and instantiated CUDA graph: begin_capture(s), enqueue work on s (no allocation, no
// synchronization), end_capture(s); then launch(s) replays exactly that work. Capture is
// thread-local: other threads may keep using the device meanwhile.
class CudaGraph {
public:
    CudaGraph() = default;
    ~CudaGraph();
    CudaGraph(const CudaGraph&) = delete;
    CudaGraph& operator=(const CudaGraph&) = delete;
    static void begin_capture(Stream s);
    void end_capture(Stream s);  // instantiates; on failure the stream leaves capture mode and this throws
    static void abort_capture(Stream s) noexcept;  // ends a capture that failed midway (work discarded)
    void launch(Stream s) const;
    bool ready() const { return exec_ != nullptr; }

private:
    void* graph_ = nullptr;
    void* exec_ = nullptr;
};

void synchronize_stream(Stream s);  // the host waits for s (null: the legacy default stream)

void copy_to_device(void* dst, const void* src, size_t nbytes, Stream s);    // async on s
void copy_to_host(void* dst, const void* src, size_t nbytes, Stream s);      // async on s
void copy_on_device(void* dst, const void* src, size_t nbytes, Stream s);    // async on s
void fill_zero(void* dst, size_t nbytes, Stream s);

// Same contracts as the CPU ops in deepinfer/dequant.h; outputs f32 or bf16; ue8m0 or f32 scales.
void dequant_fp8_block(const DequantFp8BlockParams& p);
void dequant_fp4(const DequantFp4Params& p);
void synchronize();

}  // namespace deepinfer::cuda
