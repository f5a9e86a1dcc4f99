// SPDX-License-Identifier: Apache-2.0
// Test doubles that wrap a real model or drafter and forward every call to it, so a fake overrides only
// what it changes (a device that gives draws up, a drafter whose drafts are wrong, a model with its own pool).
#pragma once

#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "deepinfer/drafter.h"
#include "deepinfer/model.h"

namespace deepinfer::test {

class ForwardingModel : public Model {
public:
    explicit ForwardingModel(std::shared_ptr<const Model> inner) : inner_(std::move(inner)) {}
    const ModelInfo& info() const override { return inner_->info(); }
    Numerics numerics() const override { return inner_->numerics(); }
    uint64_t estimate_state_bytes(int64_t tokens, uint64_t page) const override {
        return inner_->estimate_state_bytes(tokens, page);
    }
    Sequence new_sequence() const override { return inner_->new_sequence(); }
    Sequence new_sequence(std::shared_ptr<StatePool> pool) const override { return inner_->new_sequence(std::move(pool)); }
    std::vector<float> forward(Sequence& seq, std::span<const int32_t> tokens, bool all) const override {
        return inner_->forward(seq, tokens, all);
    }
    std::vector<std::vector<float>> forward_batch(std::span<const SequenceChunk> chunks) const override {
        return inner_->forward_batch(chunks);
    }

protected:
    const Model& inner() const { return *inner_; }

private:
    std::shared_ptr<const Model> inner_;
};

class ForwardingDrafter : public Drafter {
public:
    explicit ForwardingDrafter(const Drafter& inner) : inner_(inner) {}
    std::string_view method() const override { return inner_.method(); }
    int64_t max_drafts() const override { return inner_.max_drafts(); }
    void attach(Sequence& s) const override { inner_.attach(s); }
    uint64_t state_bytes(uint64_t page) const override { return inner_.state_bytes(page); }
    std::vector<Draft> draft(std::span<const DraftRequest> requests) const override { return inner_.draft(requests); }

private:
    const Drafter& inner_;
};

}  // namespace deepinfer::test
