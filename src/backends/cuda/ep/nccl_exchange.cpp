// SPDX-License-Identifier: Apache-2.0
// ExpertExchange over NCCL point-to-point calls (the dispatches' transfers and the all-gather's return
// as grouped send/recv pairs with sizes known on the host); the rank's own block is a device-to-device
// copy. The routed dispatch's counts go through page-locked host memory and a host barrier of the
// ranks' threads (they share this process), not through NCCL.
#include "backends/cuda/ep/nccl_exchange.h"

#include <barrier>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/cuda/ep/dispatch_plan.h"

#include "deepinfer/check.h"

#if DI_HAVE_NCCL
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace deepinfer::cuda {

const char* ep_dispatch_name(EpDispatch d) {
    switch (d) {
        case EpDispatch::kAuto: return "auto";
        case EpDispatch::kAllGather: return "all_gather";
        case EpDispatch::kRouted: return "routed";
    }
    return "?";
}

EpDispatch parse_ep_dispatch(const char* name) {
    for (EpDispatch d : {EpDispatch::kAuto, EpDispatch::kAllGather, EpDispatch::kRouted})
        if (std::strcmp(name, ep_dispatch_name(d)) == 0) return d;
    DI_THROW("unknown expert-parallel dispatch '", name, "' (auto | all_gather | routed)");
}

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
    NcclExchange(const std::vector<int>& devices, EpDispatch dispatch, int64_t routed_min_rows)
        : devices_(devices), comms_(devices.size(), nullptr), side_(devices.size()), dispatch_(dispatch),
          routed_min_rows_(routed_min_rows), barrier_(std::ptrdiff_t(devices.size())) {
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
        for (int k = 0; k < 2; ++k) {
            rows_[k].assign(devices.size(), 0);
            first_[k].assign(devices.size(), 0);
        }
        for (auto& t : table_) t.assign(devices.size() * kMaxCounts, 0);
    }
    ~NcclExchange() override {
        for (ncclComm_t c : comms_)
            if (c) (void)ncclCommDestroy(c);
        for (size_t r = 0; r < side_.size(); ++r) {
            Side& d = side_[r];
            if (!d.comm) continue;
            (void)cudaSetDevice(devices_[r]);
            (void)cudaStreamDestroy(d.comm);
            (void)cudaEventDestroy(d.fork);
            (void)cudaEventDestroy(d.join);
            (void)cudaEventDestroy(d.counted);
            (void)cudaFreeHost(d.host_counts);
        }
    }

    int ranks() const override { return static_cast<int>(devices_.size()); }
    int device(int rank) const override { return devices_[size_t(rank)]; }
    void set_rows(std::span<const int64_t> rows, std::span<const int64_t> tail) override {
        DI_CHECK(rows.size() == devices_.size(), "set_rows: ", rows.size(), " counts for ", devices_.size(), " ranks");
        DI_CHECK(tail.empty() || tail.size() == rows.size(), "set_rows: ", tail.size(), " replay tail counts for ", rows.size(),
                 " ranks");
        for (int k = 0; k < 2; ++k) {
            const std::span<const int64_t> n = k == 1 && !tail.empty() ? tail : rows;
            int64_t at = 0;
            for (size_t r = 0; r < n.size(); ++r) {
                DI_CHECK(n[r] >= 0 && (k == 0 || n[r] <= rows[r]), "set_rows: count ", n[r], " of rank ", r);
                rows_[k][r] = n[r];
                first_[k][r] = at;
                at += n[r];
            }
            total_[k] = at;
        }
    }
    int64_t rows(int rank, bool tail) const override { return rows_[tail][size_t(rank)]; }
    int64_t first_row(int rank, bool tail) const override { return first_[tail][size_t(rank)]; }
    int64_t total_rows(bool tail) const override { return total_[tail]; }
    bool routed() const override {
        if (ranks() > kMaxEpRanks) return false;
        switch (dispatch_) {
            case EpDispatch::kRouted: return true;
            case EpDispatch::kAllGather: return false;
            case EpDispatch::kAuto: return ranks() > 1 && total_[0] >= routed_min_rows_;
        }
        return false;
    }

    Stream comm_stream(int rank) override { return Stream{side(rank).comm}; }
    void fork(int rank, Stream s) override {
        Side& d = side(rank);
        DI_CUDART_CHECK(cudaEventRecord(d.fork, static_cast<cudaStream_t>(s.handle)));
        DI_CUDART_CHECK(cudaStreamWaitEvent(d.comm, d.fork, 0));
    }
    void join(int rank, Stream s) override {
        Side& d = side(rank);
        DI_CUDART_CHECK(cudaEventRecord(d.join, d.comm));
        DI_CUDART_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(s.handle), d.join, 0));
    }

    void share_counts_begin(int rank, const int32_t* counts, int n, Stream s) override {
        DI_CHECK(n >= 0 && n <= kMaxCounts, "share_counts: ", n, " counts (at most ", kMaxCounts, ")");
        Side& d = side(rank);
        const auto st = static_cast<cudaStream_t>(s.handle);
        d.n = n;
        DI_CUDART_CHECK(cudaMemcpyAsync(d.host_counts, counts, size_t(n) * sizeof(int32_t), cudaMemcpyDeviceToHost, st));
        DI_CUDART_CHECK(cudaEventRecord(d.counted, st));
    }
    std::span<const int32_t> share_counts_end(int rank) override {
        Side& d = side(rank);
        DI_CUDART_CHECK(cudaEventSynchronize(d.counted));
        // Two tables in turn: a rank writes this table again two calls later, after passing the next
        // call's barrier, which every rank reaches only once done with this call's span.
        std::vector<int32_t>& t = table_[d.parity];
        d.parity ^= 1;
        std::memcpy(t.data() + size_t(rank) * size_t(d.n), d.host_counts, size_t(d.n) * sizeof(int32_t));
        barrier_.arrive_and_wait();
        return std::span<const int32_t>(t.data(), size_t(ranks()) * size_t(d.n));
    }
    void send_recv(int rank, std::span<const EpTransfer> sends, std::span<const EpTransfer> recvs, Stream s) override {
        const auto st = static_cast<cudaStream_t>(s.handle);
        ncclComm_t comm = comms_[size_t(rank)];
        DI_NCCL_CHECK(ncclGroupStart());
        for (const EpTransfer& t : sends) {
            DI_CHECK(t.peer >= 0 && t.peer < ranks() && t.peer != rank, "send_recv: send to rank ", t.peer);
            if (t.bytes > 0) DI_NCCL_CHECK(ncclSend(t.data, t.bytes, ncclUint8, t.peer, comm, st));
        }
        for (const EpTransfer& t : recvs) {
            DI_CHECK(t.peer >= 0 && t.peer < ranks() && t.peer != rank, "send_recv: receive from rank ", t.peer);
            if (t.bytes > 0) DI_NCCL_CHECK(ncclRecv(t.data, t.bytes, ncclUint8, t.peer, comm, st));
        }
        DI_NCCL_CHECK(ncclGroupEnd());
    }

    void add_stats(int rank, const EpExchangeStats& s) override {
        EpExchangeStats& a = side_[size_t(rank)].stats;
        a.layers_routed += s.layers_routed;
        a.layers_all_gather += s.layers_all_gather;
        a.rows_sent += s.rows_sent;
        a.rows_broadcast += s.rows_broadcast;
        a.pairs_returned += s.pairs_returned;
        a.slots_all_gather += s.slots_all_gather;
    }
    EpExchangeStats stats() const override {
        EpExchangeStats sum;
        for (const Side& d : side_) {
            sum.layers_routed += d.stats.layers_routed;
            sum.layers_all_gather += d.stats.layers_all_gather;
            sum.rows_sent += d.stats.rows_sent;
            sum.rows_broadcast += d.stats.rows_broadcast;
            sum.pairs_returned += d.stats.pairs_returned;
            sum.slots_all_gather += d.stats.slots_all_gather;
        }
        return sum;
    }
    void reset_stats() override {
        for (Side& d : side_) d.stats = {};
    }

    void return_rows(int rank, const void* src, void* dst, size_t row_bytes, int64_t per_row, Stream s, bool tail) override {
        const auto st = static_cast<cudaStream_t>(s.handle);
        const auto* in = static_cast<const uint8_t*>(src);
        auto* out = static_cast<uint8_t*>(dst);
        const size_t block = size_t(rows(rank, tail) * per_row) * row_bytes;  // what each rank sends this one
        DI_NCCL_CHECK(ncclGroupStart());
        for (int p = 0; p < ranks(); ++p) {
            if (p == rank) continue;
            const size_t theirs = size_t(rows(p, tail) * per_row) * row_bytes;
            if (theirs > 0)
                DI_NCCL_CHECK(ncclSend(in + size_t(first_row(p, tail) * per_row) * row_bytes, theirs, ncclUint8, p,
                                       comms_[size_t(rank)], st));
            if (block > 0) DI_NCCL_CHECK(ncclRecv(out + size_t(p) * block, block, ncclUint8, p, comms_[size_t(rank)], st));
        }
        DI_NCCL_CHECK(ncclGroupEnd());
        if (block > 0)
            DI_CUDART_CHECK(cudaMemcpyAsync(out + size_t(rank) * block, in + size_t(first_row(rank, tail) * per_row) * row_bytes,
                                            block, cudaMemcpyDeviceToDevice, st));
    }

private:
    static constexpr int kMaxCounts = 2 * kMaxEpRanks;
    // A rank's side stream, its events and its page-locked counts (made on the rank's thread).
    struct Side {
        cudaStream_t comm = nullptr;
        cudaEvent_t fork = nullptr, join = nullptr, counted = nullptr;
        int32_t* host_counts = nullptr;
        int n = 0, parity = 0;
        EpExchangeStats stats;
    };
    Side& side(int rank) {
        Side& d = side_[size_t(rank)];
        if (!d.comm) {
            int cur = -1;
            DI_CUDART_CHECK(cudaGetDevice(&cur));
            DI_CHECK(cur == devices_[size_t(rank)], "expert exchange: rank ", rank, " used on device ", cur);
            DI_CUDART_CHECK(cudaStreamCreateWithFlags(&d.comm, cudaStreamNonBlocking));
            DI_CUDART_CHECK(cudaEventCreateWithFlags(&d.fork, cudaEventDisableTiming));
            DI_CUDART_CHECK(cudaEventCreateWithFlags(&d.join, cudaEventDisableTiming));
            DI_CUDART_CHECK(cudaEventCreateWithFlags(&d.counted, cudaEventDisableTiming));
            DI_CUDART_CHECK(cudaMallocHost(reinterpret_cast<void**>(&d.host_counts), kMaxCounts * sizeof(int32_t)));
        }
        return d;
    }

    std::vector<int> devices_;
    std::vector<ncclComm_t> comms_;
    std::vector<Side> side_;  // each touched only by its rank's thread (stats: between forwards)
    // [0]: the forward's rows per rank, [1]: from the bounded replay's cut on (the same without a cut).
    std::vector<int64_t> rows_[2], first_[2];
    int64_t total_[2] = {0, 0};
    EpDispatch dispatch_;
    int64_t routed_min_rows_;
    std::vector<int32_t> table_[2];  // [ranks · kMaxCounts] the shared counts, in turn
    std::barrier<> barrier_;
};

}  // namespace

bool nccl_available() { return true; }

std::unique_ptr<ExpertExchange> make_nccl_exchange(const std::vector<int>& devices, EpDispatch dispatch,
                                                   int64_t routed_min_rows) {
    return std::make_unique<NcclExchange>(devices, dispatch, routed_min_rows);
}

#else

bool nccl_available() { return false; }

std::unique_ptr<ExpertExchange> make_nccl_exchange(const std::vector<int>& devices, EpDispatch, int64_t) {
    DI_THROW("expert parallelism over ", devices.size(), " GPUs needs NCCL, and this build has none (nccl.h and "
             "libnccl were not found at configure time)");
}

#endif

}  // namespace deepinfer::cuda
