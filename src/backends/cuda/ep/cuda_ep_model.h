// SPDX-License-Identifier: Apache-2.0
// Expert parallelism on the GPUs of one host (DeepSeek-V4 and V4.1): one process drives G GPUs, one host
// thread and one CudaModel "rank" per GPU. Every rank holds the non-expert weights (attention,
// shared experts, router, embeddings, LM head: replicated) and E/G of each layer's routed experts;
// a sequence lives on one rank (chosen when it is created: the rank with the fewest live sequences),
// so attention and its state are data-parallel with no replicated KV. A forward splits the batch by
// rank and runs the ranks together; in each MoE layer the ranks exchange rows over NCCL
// (expert_exchange.h). Logits equal the single-GPU model's bit for bit (same kernels per row, same
// combine order), in every numerics and GEMM mode.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/model/cuda_model.h"

namespace deepinfer::cuda {

// One rank's model, loaded on the rank's thread from options whose expert_exchange and expert_rank are
// set, and the longest sequence it holds.
struct CudaRank {
    std::unique_ptr<Model> model;
    int64_t max_len = 0;
};
using CudaRankLoader = std::function<CudaRank(const CudaModelOptions&)>;

// An expert-parallel model across `devices` (CUDA device indices, one rank each; at least one) whose
// ranks `load_rank` makes (DeepSeek-V4: load_cuda_model; DeepSeek-V4.1: load_cuda_v41_model).
std::unique_ptr<Model> load_cuda_ep_model(const CudaRankLoader& load_rank, const CudaModelOptions& cuda_options,
                                          const std::vector<int>& devices);
// DeepSeek-V4 checkpoints.
std::unique_ptr<Model> load_cuda_ep_model(const std::string& dir, const ModelOptions& options,
                                          const CudaModelOptions& cuda_options, const std::vector<int>& devices);

// Whether `model` was made by load_cuda_ep_model.
bool is_cuda_ep_model(const Model& model);
// The rank models of a model made by load_cuda_ep_model (for their CudaModelStats); throws for others.
std::vector<const Model*> cuda_ep_ranks(const Model& model);
// The rank a sequence of such a model lives on.
int cuda_ep_rank_of(const Model& model, const Sequence& sequence);
// What its MoE layers' exchange moved since load or the last reset (between forwards).
EpExchangeStats cuda_ep_exchange_stats(const Model& model);
void reset_cuda_ep_exchange_stats(const Model& model);

}  // namespace deepinfer::cuda
