// SPDX-License-Identifier: Apache-2.0
// Launchers of the routed expert-parallel dispatch kernels (ep/ep_dispatch_ops.h).
#include <algorithm>

#include "backends/cuda/common/cuda_check.h"
#include "backends/cuda/kernels/ep_dispatch.cuh"

namespace deepinfer::cuda {
namespace {
cudaStream_t raw(Stream s) { return static_cast<cudaStream_t>(s.handle); }
}  // namespace

void ep_route_plan(const EpRoutePlanParams& p, Stream s) {
    DI_CHECK(p.ranks >= 1 && p.ranks <= kMaxEpRanks && p.experts_per_rank > 0 && p.top_k >= 1 && p.top_k <= 32 &&
                 p.rows >= 0 && p.rows * p.top_k < (int64_t(1) << 31),
             "ep_route_plan: ", p.rows, " rows, top ", p.top_k, ", ", p.ranks, " ranks of ", p.experts_per_rank, " experts");
    kernels::ep_route_plan_kernel<<<1, kernels::kEpPlanThreads, 0, raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void ep_local_slots(const EpLocalSlotsParams& p, Stream s) {
    if (p.n == 0) return;
    DI_CHECK(p.experts_per_rank > 0 && p.n < (int64_t(1) << 31), "ep_local_slots: ", p.n, " slots");
    kernels::ep_local_slots_kernel<<<1, kernels::kEpPlanThreads, 0, raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void ep_compose(const EpComposeParams& p, Stream s) {
    if (p.n == 0) return;
    kernels::ep_compose_kernel<<<static_cast<unsigned>((p.n + 255) / 256), 256, 0, raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void ep_gather_bf16_rows(const EpGatherBf16Params& p, Stream s) {
    if (p.n == 0) return;
    DI_CHECK(p.n < (int64_t(1) << 31), "ep_gather_bf16_rows: ", p.n, " rows");
    kernels::ep_gather_bf16_kernel<<<static_cast<unsigned>(p.n), 256, 0, raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void ep_pack(const EpPackParams& p, Stream s) {
    DI_CHECK(p.ranks >= 1 && p.ranks <= kMaxEpRanks && p.num_planes >= 0 && p.num_planes <= 4, "ep_pack: ", p.ranks,
             " ranks, ", p.num_planes, " planes");
    for (int k = 0; k < p.num_planes; ++k) DI_CHECK(p.planes[k].width % 4 == 0, "ep_pack: plane width ", p.planes[k].width);
    int64_t most = 0;
    for (int r = 0; r < p.ranks; ++r) most = std::max(most, p.count[r]);
    if (most == 0 || p.num_planes == 0) return;
    DI_CHECK(most <= p.rows && most < (int64_t(1) << 31), "ep_pack: ", most, " rows of ", p.rows);
    const dim3 grid(static_cast<unsigned>(most), static_cast<unsigned>(p.ranks));
    kernels::ep_pack_kernel<<<grid, 256, 0, raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace deepinfer::cuda
