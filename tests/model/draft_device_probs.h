// SPDX-License-Identifier: Apache-2.0
// Checks of the distributions a GPU drafter keeps on its device (Draft::device_probs, DraftRequest::
// host_probs), shared by the MTP and DSpark drafter tests: sampled draft calls of several request counts
// (graph buckets with padding slots when the model has graphs), argmax requests among them, each made
// three times: every request with host_probs (its device rows copied back equal its probs bit for bit),
// none (the same drafts and confidences, probs empty, the device rows still those distributions), and
// every other one (probs only where asked).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/model/cuda_model.h"
#include "deepinfer/drafter.h"
#include "deepinfer/model.h"

namespace deepinfer::test {

// Draft d's distributions as the drafter left them on the device, copied back: [num_drafts, vocab].
inline std::vector<float> device_rows(const Draft& d, int64_t vocab) {
    std::vector<float> h(d.tokens.size() * size_t(vocab));
    for (size_t k = 0; k < d.tokens.size(); ++k)
        cuda::copy_to_host(h.data() + k * size_t(vocab), d.device_probs + int64_t(k) * d.device_probs_stride,
                           size_t(vocab) * sizeof(float), cuda::Stream{});
    cuda::synchronize_stream(cuda::Stream{});
    return h;
}

inline bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Draft calls on `model` (a GPU model whose drafter the sequences are attached to, each past its prompt)
// of 3, 1, 5, 3 and 2 requests (fewer when `seqs` has fewer), drafts 1 .. max_drafts. `graphs`: the model
// replays a draft graph per call.
inline void check_device_probs(const Model& model, std::vector<Sequence>& seqs, bool graphs, uint32_t seed,
                               const std::string& name) {
    const Drafter& drafter = *model.drafter();
    const int64_t V = model.info().vocab_size, N = static_cast<int64_t>(seqs.size());
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> u01(0.0, 1.0);
    const int64_t sizes[] = {3, 1, 5, 3, 2};
    for (int round = 0; round < 5; ++round) {
        const int64_t n = std::min(sizes[round], N);
        const std::string what = name + " round " + std::to_string(round) + " (" + std::to_string(n) + " requests)";
        // Request j: drafts 1 .. max_drafts; argmax when j % 3 == 1 (a call of one request samples).
        std::vector<std::vector<double>> uniforms(static_cast<size_t>(n));
        std::vector<DraftRequest> reqs;
        for (int64_t j = 0; j < n; ++j) {
            const int64_t nd = 1 + (j * 2 + round) % drafter.max_drafts();
            const bool smp = j % 3 != 1;
            if (smp)
                for (int64_t k = 0; k < nd; ++k) uniforms[size_t(j)].push_back(u01(rng));
            reqs.push_back({.sequence = &seqs[size_t((j + round) % N)],
                            .anchor = static_cast<int32_t>(rng() % uint32_t(V)),
                            .num_drafts = nd,
                            .temperature = smp ? 0.6 + 0.3 * double(j) : 0.0,
                            .uniforms = uniforms[size_t(j)]});
        }
        auto call = [&](auto host) {
            for (int64_t j = 0; j < n; ++j) reqs[size_t(j)].host_probs = host(j);
            const auto before = cuda::cuda_model_stats(model);
            std::vector<Draft> d = drafter.draft(reqs);
            EXPECT_EQ(cuda::cuda_model_stats(model).draft_graph_replays - before.draft_graph_replays, graphs ? 1 : 0)
                << what;
            EXPECT_EQ(d.size(), size_t(n)) << what;
            return d;
        };
        // Every request wants its distributions on the host: the device rows are the same bits.
        const std::vector<Draft> a = call([](int64_t) { return true; });
        std::vector<std::vector<float>> want(static_cast<size_t>(n));
        for (int64_t j = 0; j < n && j < int64_t(a.size()); ++j) {
            const Draft& d = a[size_t(j)];
            const bool smp = !reqs[size_t(j)].uniforms.empty();
            EXPECT_EQ(int64_t(d.tokens.size()), reqs[size_t(j)].num_drafts) << what << " request " << j;
            if (!smp) {
                EXPECT_EQ(d.device_probs, nullptr) << what << " request " << j << " (argmax)";
                EXPECT_TRUE(d.probs.empty()) << what << " request " << j << " (argmax)";
                continue;
            }
            ASSERT_NE(d.device_probs, nullptr) << what << " request " << j;
            EXPECT_EQ(d.device_probs_stride % V, 0) << what;
            EXPECT_GE(d.device_probs_stride, n * V) << what;  // [steps, slots >= requests, vocab]
            ASSERT_EQ(int64_t(d.probs.size()), int64_t(d.tokens.size()) * V) << what << " request " << j;
            want[size_t(j)] = d.probs;
            EXPECT_TRUE(same_floats(device_rows(d, V), d.probs)) << what << " request " << j;
        }
        // None wants them on the host: the same drafts and confidences, no probs, the same device rows.
        const std::vector<Draft> b = call([](int64_t) { return false; });
        for (int64_t j = 0; j < n && j < int64_t(b.size()) && j < int64_t(a.size()); ++j) {
            const Draft& d = b[size_t(j)];
            EXPECT_EQ(d.tokens, a[size_t(j)].tokens) << what << " request " << j << " (device only)";
            EXPECT_TRUE(same_floats(d.confidence, a[size_t(j)].confidence)) << what << " request " << j << " (device only)";
            EXPECT_TRUE(d.probs.empty()) << what << " request " << j << " (device only)";
            EXPECT_EQ(d.device_probs == nullptr, want[size_t(j)].empty()) << what << " request " << j << " (device only)";
            if (d.device_probs) {
                EXPECT_TRUE(same_floats(device_rows(d, V), want[size_t(j)])) << what << " request " << j << " (device only)";
            }
        }
        // Every other one: probs where asked only; the device rows of all.
        const std::vector<Draft> c = call([](int64_t j) { return j % 2 == 0; });
        for (int64_t j = 0; j < n && j < int64_t(c.size()) && j < int64_t(a.size()); ++j) {
            const Draft& d = c[size_t(j)];
            EXPECT_EQ(d.tokens, a[size_t(j)].tokens) << what << " request " << j << " (mixed)";
            EXPECT_TRUE(same_floats(d.confidence, a[size_t(j)].confidence)) << what << " request " << j << " (mixed)";
            EXPECT_TRUE(same_floats(d.probs, j % 2 == 0 ? want[size_t(j)] : std::vector<float>()))
                << what << " request " << j << " (mixed)";
            EXPECT_EQ(d.device_probs == nullptr, want[size_t(j)].empty()) << what << " request " << j << " (mixed)";
            if (d.device_probs) {
                EXPECT_TRUE(same_floats(device_rows(d, V), want[size_t(j)])) << what << " request " << j << " (mixed)";
            }
        }
    }
}

}  // namespace deepinfer::test
