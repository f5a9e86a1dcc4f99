// SPDX-License-Identifier: Apache-2.0
// Launchers of V4.1's cache-format ops: QAT rows (fake quantization / compact codes), byte row copies,
// compressor pooling.
#include "backends/cuda/common/cuda_check.h"
#include "backends/cuda/kernels/v41_cache.cuh"

namespace deepinfer::cuda {
namespace {
cudaStream_t raw(Stream s) { return static_cast<cudaStream_t>(s.handle); }
}  // namespace

void qat_rows(const QatRowsParams& p, Stream s) {
    if (p.rows == 0 || p.n == 0) return;
    DI_CHECK(p.x, "qat_rows: null x");
    if (p.format != CacheFormat::kF32)
        DI_CHECK(p.block > 0 && p.block % 2 == 0 && p.n % p.block == 0, "qat_rows: ", p.n, " values in blocks of ", p.block);
    // Four values per thread where a scale block's lanes fit a warp's aligned group (every V4.1 cache format:
    // blocks of 16 and 32); else (and f32 rows: a copy) one thread per block.
    const int64_t lanes = p.block / 4;
    if (p.format != CacheFormat::kF32 && p.block % 4 == 0 && lanes <= 32 && (lanes & (lanes - 1)) == 0) {
        const int64_t threads = p.rows * (p.n / 4);
        kernels::qat_rows_quad_kernel<<<static_cast<unsigned>((threads + kernels::kQatQuadThreads - 1) / kernels::kQatQuadThreads),
                                        kernels::kQatQuadThreads, 0, raw(s)>>>(p);
    } else {
        kernels::qat_rows_kernel<<<static_cast<unsigned>(p.rows), 64, 0, raw(s)>>>(p);
    }
    DI_CUDA_CHECK(cudaGetLastError());
}

void decode_rows(const DecodeRowsParams& p, Stream s) {
    if (p.rows == 0 || p.n == 0) return;
    DI_CHECK(p.src && p.out, "decode_rows: null src or out");
    DI_CHECK(!p.two_step || p.by16, "decode_rows: two_step reads 16 values at a time (by16)");
    DI_CHECK(!p.by16 || (p.n % 16 == 0 && (p.format == CacheFormat::kF32 || p.block % 16 == 0)), "decode_rows: ", p.n,
             " values in blocks of ", p.block, " cannot be read 16 at a time");
    kernels::decode_rows_kernel<<<static_cast<unsigned>(p.rows), 128, 0, raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void copy_rows(const CopyRowsParams& p, Stream s) {
    if (p.rows == 0 || p.row_bytes == 0) return;
    DI_CHECK(p.src && p.dst, "copy_rows: null src or dst");
    kernels::copy_rows_kernel<<<static_cast<unsigned>(p.rows), 128, 0, raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void compress_pool(const CompressPoolParams& p, Stream s) {
    if (p.groups == 0) return;
    DI_CHECK(p.kv_rows && p.out && p.ratio >= 1 && (p.gate_rows || p.ratio == 1), "compress_pool: ratio ", p.ratio,
             " needs kv and gate rows");
    kernels::compress_pool_kernel<<<static_cast<unsigned>(p.groups), 128, 0, raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace deepinfer::cuda
