// SPDX-License-Identifier: Apache-2.0
// ExpertExchange over NCCL point-to-point calls (all-gather and return as grouped send/recv pairs
// with sizes known on the host); the rank's own block is a device-to-device copy.
#include "backends/cuda/ep/nccl_exchange.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "deepinfer/check.h"

#if DI_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace deepinfer::cuda {

#if DI_HAVE_NCCL
namespace {

#define DI_NCCL_CHECK(expr)                                                                               \
    do {                                                                                                  \
        const ncclResult_t r_ = (expr);                                                                   \
        DI_CHECK(r_ == ncclSuccess, "NCCL: ", #expr, " failed: ", ncclGetErrorString(r_));                \
    } while (0)

#define DI_CUDART_CHECK(expr)                                                                             \
    do {                                                                                                  \
        const cudaError_t e_ = (expr);                                                                    \
        DI_CHECK(e_ == cudaSuccess, "CUDA: ", #expr, " failed: ", cudaGetErrorString(e_));                \
    } while (0)

class NcclExchange final : public ExpertExchange {
public:
    explicit NcclExchange(const std::vector<int>& devices) : devices_(devices), comms_(devices.size(), nullptr) {
        DI_CHECK(!devices.empty(), "expert parallelism over no GPUs");
        // NVLink multicast can take a shared host's GPUs out of service: never on.
        if (const char* v = std::getenv("NCCL_NVLS_ENABLE"); v == nullptr) ::setenv("NCCL_NVLS_ENABLE", "0", 1);
        else DI_CHECK(std::strcmp(v, "0") == 0, "NCCL_NVLS_ENABLE=", v, ": deepinfer runs NCCL with NVLink multicast off (set it to 0)");
        int count = 0;
        DI_CUDART_CHECK(cudaGetDeviceCount(&count));
        for (size_t i = 0; i < devices.size(); ++i) {
            DI_CHECK(devices[i] >= 0 && devices[i] < count, "expert parallelism: CUDA device ", devices[i],
                     " not available (", count, " devices)");
            for (size_t j = 0; j < i; ++j) DI_CHECK(devices[i] != devices[j], "expert parallelism: device ", devices[i], " twice");
        }
        int prev = 0;
        DI_CUDART_CHECK(cudaGetDevice(&prev));
        DI_NCCL_CHECK(ncclCommInitAll(comms_.data(), static_cast<int>(devices.size()), devices.data()));
        DI_CUDART_CHECK(cudaSetDevice(prev));
        rows_.assign(devices.size(), 0);
        first_.assign(devices.size(), 0);
    }
    ~NcclExchange() override {
        for (ncclComm_t c : comms_)
            if (c) (void)ncclCommDestroy(c);
    }

    int ranks() const override { return static_cast<int>(devices_.size()); }
    int device(int rank) const override { return devices_[size_t(rank)]; }
    void set_rows(std::span<const int64_t> rows) override {
        DI_CHECK(rows.size() == devices_.size(), "set_rows: ", rows.size(), " counts for ", devices_.size(), " ranks");
        int64_t at = 0;
        for (size_t r = 0; r < rows.size(); ++r) {
            DI_CHECK(rows[r] >= 0, "set_rows: negative count");
            rows_[r] = rows[r];
            first_[r] = at;
            at += rows[r];
        }
        total_ = at;
    }
    int64_t rows(int rank) const override { return rows_[size_t(rank)]; }
    int64_t first_row(int rank) const override { return first_[size_t(rank)]; }
    int64_t total_rows() const override { return total_; }

    void all_gather_rows(int rank, const void* src, void* dst, size_t row_bytes, Stream s) override {
        const auto st = static_cast<cudaStream_t>(s.handle);
        auto* out = static_cast<uint8_t*>(dst);
        const size_t mine = size_t(rows(rank)) * row_bytes;
        DI_NCCL_CHECK(ncclGroupStart());
        for (int p = 0; p < ranks(); ++p) {
            if (p == rank) continue;
            if (mine > 0) DI_NCCL_CHECK(ncclSend(src, mine, ncclUint8, p, comms_[size_t(rank)], st));
            const size_t theirs = size_t(rows(p)) * row_bytes;
            if (theirs > 0)
                DI_NCCL_CHECK(ncclRecv(out + size_t(first_row(p)) * row_bytes, theirs, ncclUint8, p, comms_[size_t(rank)], st));
        }
        DI_NCCL_CHECK(ncclGroupEnd());
        if (mine > 0)
            DI_CUDART_CHECK(cudaMemcpyAsync(out + size_t(first_row(rank)) * row_bytes, src, mine, cudaMemcpyDeviceToDevice, st));
    }

    void return_rows(int rank, const void* src, void* dst, size_t row_bytes, int64_t per_row, Stream s) override {
        const auto st = static_cast<cudaStream_t>(s.handle);
        const auto* in = static_cast<const uint8_t*>(src);
        auto* out = static_cast<uint8_t*>(dst);
        const size_t block = size_t(rows(rank) * per_row) * row_bytes;  // what each rank sends this one
        DI_NCCL_CHECK(ncclGroupStart());
        for (int p = 0; p < ranks(); ++p) {
            if (p == rank) continue;
            const size_t theirs = size_t(rows(p) * per_row) * row_bytes;
            if (theirs > 0)
                DI_NCCL_CHECK(ncclSend(in + size_t(first_row(p) * per_row) * row_bytes, theirs, ncclUint8, p,
                                       comms_[size_t(rank)], st));
            if (block > 0) DI_NCCL_CHECK(ncclRecv(out + size_t(p) * block, block, ncclUint8, p, comms_[size_t(rank)], st));
        }
        DI_NCCL_CHECK(ncclGroupEnd());
        if (block > 0)
            DI_CUDART_CHECK(cudaMemcpyAsync(out + size_t(rank) * block, in + size_t(first_row(rank) * per_row) * row_bytes,
                                            block, cudaMemcpyDeviceToDevice, st));
    }

private:
    std::vector<int> devices_;
    std::vector<ncclComm_t> comms_;
    std::vector<int64_t> rows_, first_;
    int64_t total_ = 0;
};

}  // namespace

bool nccl_available() { return true; }

std::unique_ptr<ExpertExchange> make_nccl_exchange(const std::vector<int>& devices) {
    return std::make_unique<NcclExchange>(devices);
}

#else

bool nccl_available() { return false; }

std::unique_ptr<ExpertExchange> make_nccl_exchange(const std::vector<int>& devices) {
    DI_THROW("expert parallelism over ", devices.size(), " GPUs needs NCCL, and this build has none (nccl.h and "
             "libnccl were not found at configure time)");
}

#endif

}  // namespace deepinfer::cuda
