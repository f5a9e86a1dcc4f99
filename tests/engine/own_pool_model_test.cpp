// SPDX-License-Identifier: Apache-2.0
// A model that holds its states in a pool of its own (as a GPU model holds device pages): the engine
// admits within that pool's capacity and reserves no host pool of the size of its own budget (the
// CLI's budget on cuda is unbounded: a host pool that size would not even be allocatable).
#include <gtest/gtest.h>

#include <map>

#include "deepinfer/engine.h"
#include "engine/engine_run.h"
#include "engine/forwarding_model.h"
#include "engine/tiny_engine_model.h"
#include "model/paged_rows.h"

namespace deepinfer {
namespace {

// The tiny CPU model, its sequences paged in a pool the wrapper owns (the engine's pool is ignored).
class OwnPoolModel : public test::ForwardingModel {
public:
    OwnPoolModel(std::shared_ptr<const Model> inner, uint64_t capacity)
        : ForwardingModel(std::move(inner)), pool_(std::make_shared<StatePool>(capacity)), capacity_(capacity) {}
    uint64_t estimate_state_bytes(int64_t n, uint64_t) const override { return inner().estimate_state_bytes(n, pool_->page_bytes()); }
    uint64_t state_capacity_bytes() const override { return capacity_; }
    Sequence new_sequence() const override { return inner().new_sequence(pool_); }
    Sequence new_sequence(std::shared_ptr<StatePool>) const override { return inner().new_sequence(pool_); }

private:
    std::shared_ptr<StatePool> pool_;
    uint64_t capacity_;
};

std::shared_ptr<const Model> tiny_model() { return test::tiny_engine_model(); }

std::map<std::string, std::vector<int32_t>> run(std::shared_ptr<const Model> model, const EngineConfig& cfg,
                                                EngineMetrics* metrics) {
    return test::run_random_prompts(std::move(model), cfg,
                                    {.count = 6, .first = 20, .step = 13, .seed = 9, .temperature = 0.8, .max_tokens = 5},
                                    metrics);
}

TEST(EngineOwnPool, AnUnboundedBudgetReservesNoHostPoolAndAdmitsWithinTheModelsPool) {
    const auto plain = run(tiny_model(), EngineConfig{}, nullptr);
    EngineConfig unbounded;
    unbounded.state_memory_bytes = uint64_t{1} << 50;  // 1 PiB: as a host pool, not allocatable
    const uint64_t capacity = uint64_t{4} << 20;
    EngineMetrics m;
    const auto own = run(std::make_shared<OwnPoolModel>(tiny_model(), capacity), unbounded, &m);
    EXPECT_EQ(own, plain);  // same tokens
    EXPECT_GT(m.generated_tokens, 0);
}

}  // namespace
}  // namespace deepinfer
