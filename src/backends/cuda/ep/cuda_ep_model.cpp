// SPDX-License-Identifier: Apache-2.0
// CudaEpModel: the driver of an expert-parallel replica (cuda_ep_model.h).
#include "backends/cuda/ep/cuda_ep_model.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/ep/batch_split.h"
#include "backends/cuda/ep/nccl_exchange.h"
#include "backends/cuda/ep/rank_threads.h"
#include "deepinfer/check.h"

namespace deepinfer::cuda {
namespace {

// Live sequences per rank (shared with the sequences, which may outlive a forward).
struct RankLoad {
    explicit RankLoad(int ranks) : live(size_t(ranks)) {}
    std::vector<std::atomic<int64_t>> live;
};

// A sequence of the replica: the rank's own sequence, and which rank.
class EpSequenceState final : public SequenceState {
public:
    EpSequenceState(int rank, Sequence inner, std::shared_ptr<RankLoad> load)
        : rank_(rank), inner_(std::move(inner)), load_(std::move(load)) {
        ++load_->live[size_t(rank_)];
    }
    ~EpSequenceState() override { --load_->live[size_t(rank_)]; }
    int rank() const { return rank_; }
    Sequence& inner() { return inner_; }
    int64_t num_tokens() const override { return inner_.num_tokens(); }
    std::unique_ptr<SequenceState> clone() const override {
        return std::make_unique<EpSequenceState>(rank_, inner_.fork(), load_);
    }
    void truncate(int64_t n) override { inner_.truncate(n); }
    size_t bytes() const override { return inner_.state().bytes(); }
    size_t unshared_bytes() const override { return inner_.state().unshared_bytes(); }

private:
    int rank_;
    Sequence inner_;
    std::shared_ptr<RankLoad> load_;
};

class CudaEpModel final : public Model {
public:
    CudaEpModel(const CudaRankLoader& load_rank, const CudaModelOptions& co, const std::vector<int>& devices)
        : exchange_(make_nccl_exchange(devices, co.ep_dispatch, co.ep_routed_min_rows)), threads_(devices), ranks_(devices.size()),
          load_(std::make_shared<RankLoad>(int(devices.size()))) {
        // Every rank loads its slice on its own thread, all at once.
        std::vector<int64_t> max_len(devices.size());
        threads_.run_all([&](int r) {
            CudaModelOptions o = co;
            o.expert_exchange = exchange_.get();
            o.expert_rank = r;
            CudaRank rank = load_rank(o);
            ranks_[size_t(r)] = std::move(rank.model);
            max_len[size_t(r)] = rank.max_len;
        });
        max_len_ = *std::min_element(max_len.begin(), max_len.end());
        idle_.resize(ranks_.size());
        threads_.run_all([&](int r) { idle_[size_t(r)] = std::make_unique<Sequence>(ranks_[size_t(r)]->new_sequence()); });
    }
    ~CudaEpModel() override {
        // The rank models and their idle sequences go on their own threads (their devices current).
        threads_.run_all([&](int r) {
            idle_[size_t(r)].reset();
            ranks_[size_t(r)].reset();
        });
    }

    const ModelInfo& info() const override { return ranks_[0]->info(); }
    Numerics numerics() const override { return ranks_[0]->numerics(); }
    uint64_t estimate_state_bytes(int64_t n, uint64_t page) const override { return ranks_[0]->estimate_state_bytes(n, page); }
    // Sequences spread over the ranks' pools by count: the smallest pool times the ranks.
    uint64_t state_capacity_bytes() const override {
        uint64_t least = UINT64_MAX;
        for (const auto& r : ranks_) least = std::min(least, r->state_capacity_bytes());
        return least * ranks_.size();
    }
    Sequence new_sequence() const override {
        std::vector<int64_t> live(ranks_.size());
        for (size_t r = 0; r < live.size(); ++r) live[r] = load_->live[r].load();
        const int best = least_loaded_rank(live);
        Sequence inner{nullptr};
        threads_.run_one(best, [&] { inner = ranks_[size_t(best)]->new_sequence(); });
        return Sequence(std::make_unique<EpSequenceState>(best, std::move(inner), load_));
    }
    Sequence new_sequence(std::shared_ptr<StatePool>) const override { return new_sequence(); }
    int placement_groups() const override { return static_cast<int>(ranks_.size()); }
    int placement_group(const Sequence& sequence) const override;
    std::vector<float> forward(Sequence& seq, std::span<const int32_t> tokens, bool all_logits) const override {
        SequenceChunk chunk{&seq, tokens, all_logits};
        return std::move(forward_batch(std::span<const SequenceChunk>(&chunk, 1))[0]);
    }
    std::vector<std::vector<float>> forward_batch(std::span<const SequenceChunk> chunks) const override {
        return forward_sampled(chunks, {}, {}).logits;
    }
    bool can_sample_on_device(const DeviceDraw& d) const override { return ranks_[0]->can_sample_on_device(d); }
    ForwardOutputs forward_sampled(std::span<const SequenceChunk> chunks, std::span<const uint8_t> want_logits,
                                   std::span<const DeviceDraw> draws) const override;

    EpExchangeStats exchange_stats() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return exchange_->stats();
    }
    void reset_exchange_stats() const {
        std::lock_guard<std::mutex> lock(mutex_);
        exchange_->reset_stats();
    }
    std::vector<const Model*> ranks() const {
        std::vector<const Model*> v;
        for (const auto& r : ranks_) v.push_back(r.get());
        return v;
    }

private:
    std::unique_ptr<ExpertExchange> exchange_;
    mutable RankThreads threads_;
    std::vector<std::unique_ptr<Model>> ranks_;
    std::shared_ptr<RankLoad> load_;
    std::vector<std::unique_ptr<Sequence>> idle_;  // per rank: one row of work when it has no sequence in a step
    int64_t max_len_ = 0;
    mutable std::mutex mutex_;  // one forward at a time
};

ForwardOutputs CudaEpModel::forward_sampled(std::span<const SequenceChunk> chunks, std::span<const uint8_t> want_logits,
                                            std::span<const DeviceDraw> draws) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const int G = int(ranks_.size());
    const int64_t V = info().vocab_size;
    DI_CHECK(want_logits.empty() || want_logits.size() == chunks.size(), "forward_sampled: ", want_logits.size(),
             " logits flags for ", chunks.size(), " chunks");
    // Everything a rank would refuse is refused here, before any rank starts: a rank that stopped
    // half-way would leave the others waiting for its rows.
    std::vector<EpSequenceState*> states(chunks.size());
    std::vector<int> chunk_rank(chunks.size());
    std::vector<int64_t> chunk_rows(chunks.size());
    for (size_t i = 0; i < chunks.size(); ++i) {
        const SequenceChunk& ch = chunks[i];
        DI_CHECK(ch.sequence != nullptr, "forward_batch: chunk without a sequence");
        // Image spans pass to the rank (V4.1 applies them; a V4 rank would refuse them on its own).
        DI_CHECK(ch.image_span.empty() || info().family == "deepseek_v41",
                 "DeepSeek-V4 has no vision tower: image spans are not accepted");
        DI_CHECK(ch.image_span.empty() || ch.image_span.size() == ch.tokens.size(), "image_span has ",
                 ch.image_span.size(), " flags for ", ch.tokens.size(), " tokens");
        auto* st = dynamic_cast<EpSequenceState*>(&ch.sequence->state());
        DI_CHECK(st != nullptr, "forward: the sequence was not created by this expert-parallel model");
        DI_CHECK(std::find(states.begin(), states.begin() + std::ptrdiff_t(i), st) == states.begin() + std::ptrdiff_t(i),
                 "forward: a sequence appears twice in a batch");
        states[i] = st;
        const int64_t n = static_cast<int64_t>(ch.tokens.size());
        DI_CHECK(n > 0, "forward: chunk ", i, " has no tokens");
        DI_CHECK(st->num_tokens() + n <= max_len_, "sequence of ", st->num_tokens() + n,
                 " tokens exceeds the CUDA model's max_model_len ", max_len_);
        for (int64_t t = 0; t < n; ++t)
            DI_CHECK(ch.tokens[size_t(t)] >= 0 && ch.tokens[size_t(t)] < V, "token id ", ch.tokens[size_t(t)],
                     " at index ", t, " is outside [0, ", V, ")");
        chunk_rank[i] = st->rank();
        chunk_rows[i] = n;
    }
    std::vector<int32_t> draw_chunk(draws.size());
    for (size_t k = 0; k < draws.size(); ++k) {
        const DeviceDraw& d = draws[k];
        DI_CHECK(can_sample_on_device(d), "forward_sampled: the device sampler cannot draw temperature ", d.temperature,
                 ", top_k ", d.top_k, ", top_p ", d.top_p, ", min_p ", d.min_p);
        draw_chunk[k] = d.chunk;
    }
    const EpSplit split = split_ep_batch(G, chunk_rank, chunk_rows, draw_chunk);
    std::vector<std::vector<SequenceChunk>> sub(static_cast<size_t>(G));
    std::vector<std::vector<uint8_t>> sub_want(static_cast<size_t>(G));
    std::vector<std::vector<DeviceDraw>> sub_draws(static_cast<size_t>(G));
    // A rank without sequences in this step still serves its experts: it runs one row of its idle
    // sequence (token 0 at position 0, no logits), which changes no other row.
    static const int32_t kIdleToken = 0;
    for (int r = 0; r < G; ++r) {
        const size_t R = size_t(r);
        for (size_t i : split.chunks[R]) {
            sub[R].push_back({&states[i]->inner(), chunks[i].tokens, chunks[i].all_logits, chunks[i].image_span});
            sub_want[R].push_back(want_logits.empty() || want_logits[i] ? 1 : 0);
        }
        for (size_t k : split.draws[R]) {
            DeviceDraw local = draws[k];
            local.chunk = static_cast<int32_t>(split.chunk[size_t(draws[k].chunk)].index);
            sub_draws[R].push_back(local);
        }
        if (split.idle[R]) {
            idle_[R]->truncate(0);
            sub[R].push_back({idle_[R].get(), std::span<const int32_t>(&kIdleToken, 1), false, {}});
            sub_want[R].push_back(0);
        }
    }
    const std::vector<int64_t>& rows = split.rows;
    // V4.1's bounded replay: the rows each rank's layers run from the cut on (every rank's model answers for its own
    // chunks; the same for all without a cut), set before any rank starts.
    std::vector<int64_t> tails(static_cast<size_t>(G));
    bool cut = false;
    for (int r = 0; r < G; ++r) {
        const auto* rt = dynamic_cast<const CudaModelRuntime*>(ranks_[size_t(r)].get());
        DI_CHECK(rt != nullptr, "expert parallelism: rank ", r, " is not a CUDA model");
        tails[size_t(r)] = rt->replay_tail_rows(sub[size_t(r)], sub_draws[size_t(r)]);
        cut |= tails[size_t(r)] != rows[size_t(r)];
    }
    exchange_->set_rows(rows, cut ? std::span<const int64_t>(tails) : std::span<const int64_t>());
    std::vector<ForwardOutputs> outs(static_cast<size_t>(G));
    threads_.run_all([&](int r) {
        outs[size_t(r)] = ranks_[size_t(r)]->forward_sampled(sub[size_t(r)], sub_want[size_t(r)], sub_draws[size_t(r)]);
    });
    ForwardOutputs out;
    out.logits.resize(chunks.size());
    for (size_t i = 0; i < chunks.size(); ++i)
        out.logits[i] = std::move(outs[size_t(split.chunk[i].rank)].logits[size_t(split.chunk[i].index)]);
    out.tokens.resize(draws.size());
    for (int r = 0; r < G; ++r)
        for (size_t k = 0; k < split.draws[size_t(r)].size(); ++k)
            out.tokens[split.draws[size_t(r)][k]] = outs[size_t(r)].tokens[k];
    return out;
}

const CudaEpModel& as_ep(const Model& model) {
    const auto* m = dynamic_cast<const CudaEpModel*>(&model);
    DI_CHECK(m != nullptr, "not an expert-parallel CUDA model");
    return *m;
}

}  // namespace

std::unique_ptr<Model> load_cuda_ep_model(const CudaRankLoader& load_rank, const CudaModelOptions& cuda_options,
                                          const std::vector<int>& devices) {
    DI_CHECK(!devices.empty(), "expert parallelism over no GPUs");
    DI_CHECK(device_count() >= int(devices.size()), "expert parallelism over ", devices.size(), " GPUs: ",
             device_count(), " CUDA devices are available");
    return std::make_unique<CudaEpModel>(load_rank, cuda_options, devices);
}

std::unique_ptr<Model> load_cuda_ep_model(const std::string& dir, const ModelOptions& options,
                                          const CudaModelOptions& cuda_options, const std::vector<int>& devices) {
    return load_cuda_ep_model(
        [&](const CudaModelOptions& o) {
            auto m = load_cuda_model(dir, options, o);
            const int64_t len = cuda_model_max_len(*m);
            return CudaRank{std::move(m), len};
        },
        cuda_options, devices);
}

bool is_cuda_ep_model(const Model& model) { return dynamic_cast<const CudaEpModel*>(&model) != nullptr; }

std::vector<const Model*> cuda_ep_ranks(const Model& model) { return as_ep(model).ranks(); }

int CudaEpModel::placement_group(const Sequence& sequence) const {
    const auto* st = dynamic_cast<const EpSequenceState*>(&sequence.state());
    DI_CHECK(st != nullptr, "not a sequence of an expert-parallel model");
    return st->rank();
}

int cuda_ep_rank_of(const Model& model, const Sequence& sequence) { return as_ep(model).placement_group(sequence); }

EpExchangeStats cuda_ep_exchange_stats(const Model& model) { return as_ep(model).exchange_stats(); }
void reset_cuda_ep_exchange_stats(const Model& model) { as_ep(model).reset_exchange_stats(); }

}  // namespace deepinfer::cuda
