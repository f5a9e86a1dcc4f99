// SPDX-License-Identifier: Apache-2.0
// Device discovery and the RAII device buffer.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>

#include <unistd.h>

#include "backends/cuda/common/cuda_check.h"
#include "backends/cuda/cuda_backend.h"

namespace deepinfer::cuda {

void set_current_device(int index) {
    DI_CHECK(index >= 0 && index < device_count(), "CUDA device ", index, " not available (", device_count(),
             " devices)");
    DI_CUDA_CHECK(cudaSetDevice(index));
}

int current_device() {
    int d = 0;
    DI_CUDA_CHECK(cudaGetDevice(&d));
    return d;
}

int64_t max_shared_memory_per_block() {
    int v = 0;
    DI_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, current_device()));
    return v;
}

int64_t multiprocessor_count() {
    int v = 0;
    DI_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, current_device()));
    return v;
}

int compute_capability() {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
        return 0;
    return major * 10 + minor;
}

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();  // clear the sticky "no driver" error
        return 0;
    }
    return n;
}

std::string device_description(int index) {
    cudaDeviceProp prop{};
    DI_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
    return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
           std::to_string(prop.multiProcessorCount) + " SMs, " +
           std::to_string(prop.totalGlobalMem >> 30) + " GiB)";
}

namespace {
std::atomic<uint64_t> g_device_allocations{0};  // diagnostic counter only (device_allocation_count)
}  // namespace

uint64_t device_allocation_count() { return g_device_allocations.load(std::memory_order_relaxed); }

size_t device_free_bytes() {
    size_t free = 0, total = 0;
    DI_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return free;
}

DeviceBuffer::DeviceBuffer(size_t nbytes) : nbytes_(nbytes) {
    if (nbytes) {
        g_device_allocations.fetch_add(1, std::memory_order_relaxed);
        DI_CUDA_CHECK(cudaMalloc(&data_, nbytes));
    }
}

DeviceBuffer::~DeviceBuffer() {
    if (data_) {
        g_device_allocations.fetch_add(1, std::memory_order_relaxed);
        (void)cudaFree(data_);
    }
}

DeviceEvent::DeviceEvent() {
    cudaEvent_t e = nullptr;
    DI_CUDA_CHECK(cudaEventCreate(&e));
    event_ = e;
}

DeviceEvent::~DeviceEvent() {
    if (event_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

void DeviceEvent::record(Stream s) {
    DI_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event_), static_cast<cudaStream_t>(s.handle)));
}

float DeviceEvent::elapsed_ms(const DeviceEvent& start, const DeviceEvent& end) {
    float ms = 0;
    DI_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.event_), static_cast<cudaEvent_t>(end.event_)));
    return ms;
}

CudaGraph::~CudaGraph() {
    if (exec_) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
    if (graph_) (void)cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
}

void CudaGraph::begin_capture(Stream s) {
    DI_CUDA_CHECK(cudaStreamBeginCapture(static_cast<cudaStream_t>(s.handle), cudaStreamCaptureModeThreadLocal));
}

void CudaGraph::end_capture(Stream s) {
    cudaGraph_t g = nullptr;
    DI_CUDA_CHECK(cudaStreamEndCapture(static_cast<cudaStream_t>(s.handle), &g));
    graph_ = g;
    cudaGraphExec_t e = nullptr;
    DI_CUDA_CHECK(cudaGraphInstantiate(&e, g, 0));
    exec_ = e;
}

void CudaGraph::abort_capture(Stream s) noexcept {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(static_cast<cudaStream_t>(s.handle), &status) == cudaSuccess &&
        status != cudaStreamCaptureStatusNone) {
        cudaGraph_t g = nullptr;
        (void)cudaStreamEndCapture(static_cast<cudaStream_t>(s.handle), &g);
        if (g) (void)cudaGraphDestroy(g);
    }
    (void)cudaGetLastError();
}

void CudaGraph::launch(Stream s) const {
    DI_CHECK(exec_ != nullptr, "CUDA graph launched before it was captured");
    DI_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), static_cast<cudaStream_t>(s.handle)));
}

void synchronize_stream(Stream s) { DI_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(s.handle))); }

void DeviceBuffer::copy_from_device(const void* src, size_t nbytes) {
    DI_CHECK(nbytes <= nbytes_, "copy of ", nbytes, " bytes into a device buffer of ", nbytes_);
    DI_CUDA_CHECK(cudaMemcpy(data_, src, nbytes, cudaMemcpyDeviceToDevice));
}

void DeviceBuffer::copy_from_host(const void* src, size_t nbytes) {
    DI_CHECK(nbytes <= nbytes_, "copy of ", nbytes, " bytes into a device buffer of ", nbytes_);
    DI_CUDA_CHECK(cudaMemcpy(data_, src, nbytes, cudaMemcpyHostToDevice));
}

void DeviceBuffer::copy_to_host(void* dst, size_t nbytes) const {
    DI_CHECK(nbytes <= nbytes_, "copy of ", nbytes, " bytes from a device buffer of ", nbytes_);
    DI_CUDA_CHECK(cudaMemcpy(dst, data_, nbytes, cudaMemcpyDeviceToHost));
}

void synchronize() { DI_CUDA_CHECK(cudaDeviceSynchronize()); }

DeviceArena::DeviceArena(size_t capacity_bytes) : buffer_(capacity_bytes) {}

void* DeviceArena::alloc(size_t nbytes) {
    const size_t begin = (used_ + 255) & ~size_t(255);
    DI_CHECK(begin + nbytes <= buffer_.nbytes(), "device workspace exhausted: need ", begin + nbytes, " of ",
             buffer_.nbytes(), " bytes (raise the CUDA workspace size)");
    used_ = begin + nbytes;
    if (used_ > high_water_) high_water_ = used_;
    return static_cast<uint8_t*>(buffer_.data()) + begin;
}

OwnedStream::OwnedStream() {
    cudaStream_t s = nullptr;
    DI_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    stream_.handle = s;
}

OwnedStream::~OwnedStream() {
    if (stream_.handle) (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream_.handle));
}

void OwnedStream::synchronize() const { DI_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_.handle))); }

void copy_to_device(void* dst, const void* src, size_t nbytes, Stream s) {
    if (nbytes) DI_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, static_cast<cudaStream_t>(s.handle)));
}
void copy_to_host(void* dst, const void* src, size_t nbytes, Stream s) {
    if (nbytes) DI_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, static_cast<cudaStream_t>(s.handle)));
}
void copy_on_device(void* dst, const void* src, size_t nbytes, Stream s) {
    if (nbytes) DI_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, static_cast<cudaStream_t>(s.handle)));
}
void fill_zero(void* dst, size_t nbytes, Stream s) {
    if (nbytes) DI_CUDA_CHECK(cudaMemsetAsync(dst, 0, nbytes, static_cast<cudaStream_t>(s.handle)));
}

PinnedBuffer::PinnedBuffer(size_t nbytes) : nbytes_(nbytes) {
    if (nbytes == 0) return;
    DI_CUDA_CHECK(cudaHostAlloc(&host_, nbytes, cudaHostAllocMapped | cudaHostAllocPortable));
    DI_CUDA_CHECK(cudaHostGetDevicePointer(&device_, host_, 0));
}

PinnedBuffer::~PinnedBuffer() {
    if (host_) (void)cudaFreeHost(host_);
}

bool HostRegistration::read_only_supported() {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrHostRegisterReadOnlySupported, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return v != 0;
}

HostRegistration::HostRegistration(const void* begin, size_t nbytes) {
    DI_CHECK(begin != nullptr && nbytes > 0, "HostRegistration: empty range");
    const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
    const uintptr_t lo = uintptr_t(begin) / page * page;
    const uintptr_t hi = (uintptr_t(begin) + nbytes + page - 1) / page * page;
    void* p = reinterpret_cast<void*>(lo);
    const cudaError_t e =
        cudaHostRegister(p, hi - lo, cudaHostRegisterMapped | cudaHostRegisterReadOnly | cudaHostRegisterPortable);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        DI_CHECK(false, "cudaHostRegister of ", hi - lo, " bytes of mapped host memory failed: ", cudaGetErrorString(e));
    }
    void* d = nullptr;
    const cudaError_t g = cudaHostGetDevicePointer(&d, p, 0);
    if (g != cudaSuccess) {
        (void)cudaGetLastError();
        (void)cudaHostUnregister(p);
        DI_CHECK(false, "cudaHostGetDevicePointer of registered host memory failed: ", cudaGetErrorString(g));
    }
    begin_ = reinterpret_cast<const char*>(lo);
    nbytes_ = hi - lo;
    device_ = static_cast<const char*>(d);
}

HostRegistration::~HostRegistration() {
    if (begin_) (void)cudaHostUnregister(const_cast<char*>(begin_));
}

bool HostRegistration::contains(const void* p, size_t n) const {
    const char* c = static_cast<const char*>(p);
    return c >= begin_ && c + n <= begin_ + nbytes_;
}

const void* HostRegistration::device_pointer(const void* host) const {
    DI_CHECK(contains(host, 0), "pointer outside the registered host range");
    return device_ + (static_cast<const char*>(host) - begin_);
}

OwnedEvent::OwnedEvent() {
    cudaEvent_t e = nullptr;
    DI_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    event_ = e;
}

OwnedEvent::~OwnedEvent() {
    if (event_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

void OwnedEvent::record(Stream s) {
    DI_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event_), static_cast<cudaStream_t>(s.handle)));
}

void OwnedEvent::wait(Stream s) const {
    DI_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(s.handle), static_cast<cudaEvent_t>(event_), 0));
}

}  // namespace deepinfer::cuda
