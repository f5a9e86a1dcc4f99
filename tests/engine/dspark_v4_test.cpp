// SPDX-License-Identifier: Apache-2.0
// The DSpark drafter of DeepSeek-V4-Flash-0731 on the V4 backbone (model/dspark_v4.h), drafter level, on
// the tiny checkpoints of dspark_v4_fixtures.h:
//   * detection by tensor names (MTP vs DSpark vs neither), the stage count from the stored blocks,
//     the inventory and `inspect`, and clear errors naming a missing or misshaped drafter tensor;
//   * against the reference's formulas: the context rows come from the mean stream LEAVING each tapped
//     layer (capture-after, not the layer's input), with the reference's rounding steps in official
//     numerics; a block attends to exactly the last window of context rows; the drafts and confidences
//     follow the Markov and confidence heads; the shared attention core is the closed-form sink softmax;
//   * rollback without undo (all, some, no drafts accepted), batch invariance, state bytes.
// Through the engine: dspark_v4_engine_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>

#include "deepinfer/inspect.h"
#include "deepinfer/weight_inventory.h"
#include "engine/dspark_v4_fixtures.h"
#include "model/compressor.h"
#include "model/forward.h"

namespace deepinfer {
namespace {

using namespace dspark_v4_test;

// ---- detection, loading, errors ----

TEST(DSparkV4Load, TensorNamesTellMtpFromDSpark) {
    const OneThread one_thread;
    const std::string mtp = temp_dir("mtp"), ds = temp_dir("ds"), none = temp_dir("none");
    SyntheticCheckpointOptions o = drafter_options(3, false);
    write_synthetic_checkpoint(ds, tiny_config().dump(2), o);
    o.dspark_stages = 0;
    write_synthetic_checkpoint(mtp, tiny_config().dump(2), o);
    o.include_drafter = false;
    write_synthetic_checkpoint(none, tiny_config().dump(2), o);
    int64_t stages = -1;
    EXPECT_EQ(detect_v4_drafter(Checkpoint(ds), &stages), V4DrafterKind::kDSpark);
    EXPECT_EQ(stages, 3);  // the stored blocks, not num_nextn_predict_layers (1)
    EXPECT_EQ(detect_v4_drafter(Checkpoint(mtp), &stages), V4DrafterKind::kMtp);
    EXPECT_EQ(stages, 1);
    EXPECT_EQ(detect_v4_drafter(Checkpoint(none), &stages), V4DrafterKind::kNone);
    const InventoryReport inv = check_inventory(Checkpoint(ds), load_model_config(ds + "/config.json"));
    EXPECT_TRUE(inv.complete()) << (inv.missing.empty() ? "" : inv.missing[0])
                                << (inv.mismatched.empty() ? "" : inv.mismatched[0])
                                << (inv.unexpected.empty() ? "" : inv.unexpected[0]);
    EXPECT_TRUE(inv.has_dspark);
    EXPECT_FALSE(check_inventory(Checkpoint(mtp), load_model_config(mtp + "/config.json")).has_dspark);
    const std::string text = inspect_text(Checkpoint(ds));  // `deepinfer inspect`: the stored stages
    EXPECT_NE(text.find("mtp.2"), std::string::npos) << text;
    EXPECT_NE(text.find("4 experts top-2, DSpark stage"), std::string::npos) << text;
    EXPECT_NE(text.find("taps = outputs of layers [3, 4, 5]"), std::string::npos) << text;
    const auto m_ds = load_and_remove(ds), m_mtp = load_and_remove(mtp), m_none = load_and_remove(none);
    ASSERT_NE(m_ds->drafter(), nullptr);
    EXPECT_EQ(m_ds->drafter()->method(), "dspark");
    EXPECT_EQ(m_ds->drafter()->max_drafts(), 5);
    EXPECT_EQ(dspark_of(*m_ds).dspark().stages.size(), 3u);
    EXPECT_EQ(dspark_of(*m_ds).dspark().stages[0].ffn.experts.size(), 4u);  // dspark_n_routed_experts
    ASSERT_NE(m_mtp->drafter(), nullptr);
    EXPECT_EQ(m_mtp->drafter()->method(), "mtp");
    EXPECT_EQ(m_none->drafter(), nullptr);
    // The engine picks the drafter the names say; asking for the other one is an error.
    EngineConfig c;
    c.speculative_method = "mtp";
    EXPECT_THROW(Engine(m_ds, nullptr, c), Error);
    c.speculative_method = "dspark";
    EXPECT_THROW(Engine(m_mtp, nullptr, c), Error);
}

// Writes a tiny DSpark checkpoint whose tensor list is `edit`ed first; returns the load error.
std::string load_error(const std::string& name, const std::function<void(std::vector<ExpectedTensor>&)>& edit,
                       const nlohmann::json& config = tiny_config()) {
    const std::string dir = temp_dir(name);
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/config.json") << config.dump(2);
    const ModelConfig c = load_model_config(dir + "/config.json");
    std::vector<ExpectedTensor> expected = expected_tensors(c, false);
    const std::vector<ExpectedTensor> d = expected_dspark_tensors(c, 3);
    expected.insert(expected.end(), d.begin(), d.end());
    edit(expected);
    SyntheticCheckpointOptions o = drafter_options(5, false);
    write_synthetic_tensors(dir, expected, {.block_rows = 128, .block_cols = 128, .routed_experts = c.n_routed_experts, .experts_per_token = c.num_experts_per_tok},
                            o);
    std::string message;
    try {
        Model::load(dir, {});
    } catch (const Error& e) {
        message = e.what();
    }
    std::filesystem::remove_all(dir);
    return message;
}

TEST(DSparkV4Load, MissingOrMisshapedTensorsAreNamed) {
    const OneThread one_thread;
    auto drop = [](const std::string& name) {
        return [name](std::vector<ExpectedTensor>& e) {
            std::erase_if(e, [&](const ExpectedTensor& t) { return t.name == name; });
        };
    };
    auto reshape = [](const std::string& name, Shape shape) {
        return [name, shape](std::vector<ExpectedTensor>& e) {
            for (ExpectedTensor& t : e)
                if (t.name == name) t.shape = shape;
        };
    };
    std::string m = load_error("conf", drop("mtp.2.confidence_head.proj.weight"));
    EXPECT_NE(m.find("mtp.2.confidence_head.proj.weight"), std::string::npos) << m;
    m = load_error("w2", reshape("mtp.2.markov_head.markov_w2.weight", {512, 8}));
    EXPECT_NE(m.find("mtp.2.markov_head.markov_w2.weight"), std::string::npos) << m;
    m = load_error("hc", drop("mtp.2.hc_head_base"));
    EXPECT_NE(m.find("mtp.2.hc_head_base"), std::string::npos) << m;
    m = load_error("expert", drop("mtp.1.ffn.experts.3.w2.weight"));
    EXPECT_NE(m.find("mtp.1.ffn.experts.3.w2.weight"), std::string::npos) << m;
    // Without main_proj (and without e_proj) mtp.0 is no known drafter.
    m = load_error("main", drop("mtp.0.main_proj.weight"));
    EXPECT_NE(m.find("mtp.0.main_proj.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("neither"), std::string::npos) << m;
    // Two taps in the config, three in the checkpoint: main_proj's width is wrong.
    nlohmann::json two = tiny_config();
    two["dspark_target_layer_ids"] = {4, 5};
    m = load_error("taps", [](std::vector<ExpectedTensor>& e) {
        for (ExpectedTensor& t : e)
            if (t.name == "mtp.0.main_proj.weight") t.shape = {64, 3 * 64};
    }, two);
    EXPECT_NE(m.find("mtp.0.main_proj"), std::string::npos) << m;
}

// ---- the reference's formulas, exact numerics ----

// The streams leaving layer `l` of `model`'s target: a model truncated after layer l (the same tensors,
// a config with l + 1 layers) runs the prompt.
std::vector<float> streams_leaving(int64_t l, const std::vector<int32_t>& prompt, bool official = false) {
    const std::string dir = temp_dir("cut" + std::to_string(l));
    nlohmann::json j = config_for(official);
    write_synthetic_checkpoint(dir, j.dump(2), drafter_options(17, official));  // the tiny_model(official) weights
    j["num_hidden_layers"] = l + 1;
    std::vector<int64_t> ratios = j["compress_ratios"].get<std::vector<int64_t>>();
    ratios.resize(size_t(l + 1));
    j["compress_ratios"] = ratios;
    j["num_hash_layers"] = std::min<int64_t>(3, l + 1);
    j["dspark_target_layer_ids"] = {l - 2, l - 1, l};  // valid for the cut model; unused here
    std::ofstream(dir + "/config.json") << j.dump(2);
    const auto cut = load_and_remove(dir);
    auto& cpu = dynamic_cast<const CpuModel&>(*cut);
    Sequence s = cpu.new_sequence();
    return cpu.forward_streams(CpuModel::state_of(s), prompt);
}

TEST(DSparkV4Formula, ContextRowsComeFromTheMeanStreamLeavingTheTargetLayers) {
    const OneThread one_thread;
    const auto model = tiny_model(false);
    const V4DSparkModel& dm = dspark_of(*model);
    const ModelConfig& c = *dm.config;
    ASSERT_EQ(c.dspark_target_layer_ids, (std::vector<int64_t>{3, 4, 5}));  // the default: the last three
    const int64_t D = c.hidden_size, hc = c.hc_mult, hd = c.head_dim, T = dm.num_taps(), W = c.sliding_window;
    std::mt19937 rng(41);
    const std::vector<int32_t> prompt = random_prompt(rng, 21, c.vocab_size);
    Sequence s = attached(*model, prompt, 5);
    std::map<int64_t, std::vector<float>> leaving;
    for (int64_t l = 2; l <= 5; ++l) leaving[l] = streams_leaving(l, prompt);
    const DSparkV4Weights& w = dm.dspark();
    const auto& st = dynamic_cast<const V4SequenceState&>(s.state());
    const int64_t P = int64_t(prompt.size());
    for (bool after : {true, false}) {  // the layer's output (0731) vs its input (V4.1's rule: must differ)
        int64_t same = 0, rows = 0;
        for (int64_t p = P - W; p < P; ++p) {
            std::vector<float> taps(static_cast<size_t>(T * D)), main(static_cast<size_t>(D)), kv(static_cast<size_t>(hd));
            for (int64_t j = 0; j < T; ++j) {
                const int64_t l = c.dspark_target_layer_ids[size_t(j)] - (after ? 0 : 1);
                const float* x = leaving.at(l).data() + p * hc * D;
                for (int64_t d = 0; d < D; ++d) {
                    float sum = 0;
                    for (int64_t k = 0; k < hc; ++k) sum += x[k * D + d];
                    taps[size_t(j * D + d)] = sum / float(hc);
                }
            }
            cpu::linear_rows(w.main_proj, taps.data(), 1, main.data());
            cpu::rms_norm(main.data(), w.main_norm.ptr(), float(c.rms_norm_eps), D, main.data());
            for (size_t stage = 0; stage < w.stages.size(); ++stage) {
                cpu::linear_rows(w.stages[stage].attn.wkv, main.data(), 1, kv.data());
                cpu::rms_norm(kv.data(), w.stages[stage].attn.kv_norm.ptr(), float(c.rms_norm_eps), hd, kv.data());
                dm.rope_main->apply(kv.data(), hd, p);  // main RoPE set; exact numerics: no FP8 simulation
                const float* ring = st.dspark.stages[stage].row(p % st.dspark.rows);
                same += std::equal(kv.begin(), kv.end(), ring);
                ++rows;
            }
        }
        if (after) {
            EXPECT_EQ(same, rows);
        } else {
            EXPECT_EQ(same, 0);
        }
    }
}

TEST(DSparkV4Formula, OfficialContextRowsRoundLikeTheReference) {
    // Official numerics (FP8 checkpoint): tap = bf16(mean of the streams leaving the layer); main_x =
    // bf16(main_norm(bf16(main_proj(e4m3 act_quant per 128 of the taps)))); the K=V row as the target's
    // cache row: bf16(kv_norm(bf16(wkv(act_quant(main_x))))), RoPE with the rotated dims rounded, and the
    // FP8 simulation of the nope dims in blocks of 64 (the reference's act_quant(kv[..., :-rd], 64)).
    // Built here from the primitives; without the FP8 step no row matches.
    const OneThread one_thread;
    const auto model = tiny_model(true);
    const V4DSparkModel& dm = dspark_of(*model);
    ASSERT_EQ(dm.numerics, Numerics::kOfficial);
    const ModelConfig& c = *dm.config;
    const int64_t D = c.hidden_size, hc = c.hc_mult, hd = c.head_dim, T = dm.num_taps(), W = c.sliding_window;
    const int64_t R = c.qk_rope_head_dim;
    std::mt19937 rng(42);
    const std::vector<int32_t> prompt = random_prompt(rng, 19, c.vocab_size);
    Sequence s = attached(*model, prompt, 6);
    std::map<int64_t, std::vector<float>> leaving;
    for (int64_t l : c.dspark_target_layer_ids) leaving[l] = streams_leaving(l, prompt, true);
    const DSparkV4Weights& w = dm.dspark();
    const auto& st = dynamic_cast<const V4SequenceState&>(s.state());
    auto official_linear = [](const cpu::LinearWeight& wt, const float* x, float* y) {
        cpu::linear({.x = TensorView(const_cast<float*>(x), DType::kF32, {1, wt.in_features}), .weight = &wt,
                     .y = TensorView(y, DType::kF32, {1, wt.out_features}), .quantize_activations = true,
                     .activation_block = 128, .round_output_bf16 = true});
    };
    const int64_t P = int64_t(prompt.size());
    for (bool qat : {true, false}) {
        int64_t same = 0, rows = 0;
        for (int64_t p = P - W; p < P; ++p) {
            std::vector<float> taps(static_cast<size_t>(T * D)), main(static_cast<size_t>(D)), kv(static_cast<size_t>(hd));
            for (int64_t j = 0; j < T; ++j) {
                const float* x = leaving.at(c.dspark_target_layer_ids[size_t(j)]).data() + p * hc * D;
                for (int64_t d = 0; d < D; ++d) {
                    float sum = 0;
                    for (int64_t k = 0; k < hc; ++k) sum += x[k * D + d];
                    taps[size_t(j * D + d)] = cpu::round_bf16(sum / float(hc));
                }
            }
            official_linear(w.main_proj, taps.data(), main.data());
            cpu::rms_norm(main.data(), w.main_norm.ptr(), float(c.rms_norm_eps), D, main.data());
            cpu::round_bf16_inplace(main.data(), D);
            for (size_t stage = 0; stage < w.stages.size(); ++stage) {
                official_linear(w.stages[stage].attn.wkv, main.data(), kv.data());
                cpu::rms_norm(kv.data(), w.stages[stage].attn.kv_norm.ptr(), float(c.rms_norm_eps), hd, kv.data());
                cpu::round_bf16_inplace(kv.data(), hd);
                dm.rope_main->apply(kv.data(), hd, p);
                cpu::round_bf16_inplace(kv.data() + hd - R, R);
                if (qat) fp8_simulate_nope(kv.data(), hd - R);
                const float* ring = st.dspark.stages[stage].row(p % st.dspark.rows);
                same += std::equal(kv.begin(), kv.end(), ring);
                ++rows;
            }
        }
        if (qat) {
            EXPECT_EQ(same, rows);
        } else {
            EXPECT_EQ(same, 0);
        }
    }
}

TEST(DSparkV4Formula, BlockAttendsToExactlyTheLastWindowOfContextRows) {
    const OneThread one_thread;
    const auto model = tiny_model(false);
    const V4DSparkModel& dm = dspark_of(*model);
    const int64_t W = dm.config->sliding_window, hd = dm.config->head_dim;
    std::mt19937 rng(43);
    const int64_t P = 25;  // > W + 1, < the ring (W + headroom): every position has its own slot
    Sequence s = attached(*model, random_prompt(rng, P, dm.config->vocab_size), 64);
    auto block = [&](Sequence& q) {
        V4SequenceState* st = &dynamic_cast<V4SequenceState&>(q.state());
        const int32_t anchor = 9;
        return v4_dspark_block_forward(dm, std::span<V4SequenceState* const>(&st, 1), std::span(&anchor, 1));
    };
    const DSparkBlockOutput base = block(s);
    for (int64_t p : {P - W - 2, P - W - 1, P - W, P - 1}) {
        Sequence f = s.fork();
        auto& st = dynamic_cast<V4SequenceState&>(f.state());
        ASSERT_GT(st.dspark.rows, P);
        for (PagedRing& ring : st.dspark.stages) std::fill_n(ring.mutable_row(p % st.dspark.rows), hd, 0.5f);
        EXPECT_EQ(block(f).y != base.y, p >= P - W) << "context position " << p;
    }
    EXPECT_EQ(block(s).y, base.y);  // the forks wrote their own pages
}

TEST(DSparkV4Formula, DraftsFollowTheMarkovAndConfidenceHeads) {
    const OneThread one_thread;
    const auto model = tiny_model(false);
    const V4DSparkModel& dm = dspark_of(*model);
    const ModelConfig& c = *dm.config;
    const DSparkV4Weights& w = dm.dspark();
    const int64_t D = c.hidden_size, V = c.vocab_size, r = c.dspark_markov_rank, G = dm.block_size();
    std::mt19937 rng(47);
    Sequence s = attached(*model, random_prompt(rng, 10, V), 64);
    const int32_t anchor = 77;
    const double T = 0.8;
    const std::vector<double> u = {0.25, 0.5, 0.75, 0.1, 0.9};
    const DraftRequest req{.sequence = &s, .anchor = anchor, .num_drafts = G, .temperature = T, .uniforms = u};
    const Draft d = model->drafter()->draft({&req, 1})[0];
    V4SequenceState* st = &dynamic_cast<V4SequenceState&>(s.state());
    const DSparkBlockOutput b = v4_dspark_block_forward(dm, std::span<V4SequenceState* const>(&st, 1), std::span(&anchor, 1));
    // y is the last stage's HC head over its streams, U = head(norm(y)).
    std::vector<float> yn(static_cast<size_t>(D)), U(static_cast<size_t>(V));
    for (int64_t k = 0; k < G; ++k) {
        cpu::rms_norm(b.y.data() + k * D, w.norm.ptr(), float(c.rms_norm_eps), D, yn.data());
        cpu::linear_rows(dm.weights->head, yn.data(), 1, U.data());
        for (int64_t v = 0; v < V; ++v) ASSERT_NEAR(U[size_t(v)], b.U[size_t(k * V + v)], 1e-4) << k;
    }
    drafter_checks::expect_markov_and_confidence_heads({.markov_embed = &w.markov_w1, .markov_head = &w.markov_w2,
                                                        .confidence = w.confidence.ptr(), .hidden = D, .rank = r,
                                                        .vocab = V, .block = G},
                                                       b, d, anchor, T);
}

TEST(DSparkCore, AttentionIsTheSinkSoftmaxOverTheWindowAndTheBlock) {
    // dspark_attention_core (shared by both drafters) against the closed form
    // o = Σ_j e^{s_j} v_j / (e^{sink} + Σ_j e^{s_j}) over the ring's positions P-W .. P-1 and all block rows
    // (double precision, both softmax forms); in official numerics each form rounds what it multiplies V
    // with: V4's kernel bf16(e^{s - m}) then / den, V4.1's bf16(e^{s - m} / den).
    const int64_t H = 2, hd = 8, W = 4, G = 3, stages = 1;
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.f, 1.f);
    DSparkRings rings;
    attach_dspark_rings(rings, stages, W, hd, nullptr);
    for (int64_t slot = 0; slot < rings.rows; ++slot)
        for (int64_t d = 0; d < hd; ++d) rings.stages[0].mutable_row(slot)[d] = nd(rng);
    const int64_t P = 7;  // context rows of positions 3 .. 6
    std::vector<float> q(size_t(G * H * hd)), kv(size_t(G * hd)), sink = {0.3f, -0.7f};
    for (float& x : q) x = nd(rng);
    for (float& x : kv) x = nd(rng);
    const DSparkRings* ring_ptr = &rings;
    const int64_t anchor = P;
    for (auto form : {DSparkSoftmaxForm::kProbsThenSum, DSparkSoftmaxForm::kSumThenDivide}) {
        for (bool official : {false, true}) {
            std::vector<float> o(q.size());
            dspark_attention_core({.q = q.data(), .block_kv = kv.data(), .rings = std::span(&ring_ptr, 1),
                                   .anchor_positions = std::span(&anchor, 1), .stage = 0, .block = G, .heads = H,
                                   .head_dim = hd, .window = W, .sink = sink.data(), .form = form,
                                   .round_bf16 = official, .o = o.data()});
            for (int64_t t = 0; t < G; ++t)
                for (int64_t h = 0; h < H; ++h) {
                    std::vector<const float*> keys;
                    for (int64_t p = P - W; p < P; ++p) keys.push_back(rings.stages[0].row(p % rings.rows));
                    for (int64_t k = 0; k < G; ++k) keys.push_back(kv.data() + k * hd);
                    const float* qh = q.data() + (t * H + h) * hd;
                    std::vector<double> e;
                    double mx = sink[size_t(h)], den = 0;
                    for (const float* k : keys) {
                        double sdot = 0;
                        for (int64_t d = 0; d < hd; ++d) sdot += double(qh[d]) * k[d];
                        e.push_back(sdot / std::sqrt(double(hd)));
                        mx = std::max(mx, e.back());
                    }
                    den = std::exp(sink[size_t(h)] - mx);
                    for (double& x : e) den += (x = std::exp(x - mx));
                    for (int64_t d = 0; d < hd; ++d) {
                        double want = 0;
                        for (size_t j = 0; j < keys.size(); ++j) {
                            double wj = e[j] / den;
                            if (official)
                                wj = form == DSparkSoftmaxForm::kSumThenDivide ? cpu::round_bf16(float(e[j])) / den
                                                                               : cpu::round_bf16(float(e[j] / den));
                            want += wj * keys[j][d];
                        }
                        EXPECT_NEAR(o[size_t((t * H + h) * hd + d)], want, 1e-5)
                            << "form " << int(form) << " official " << official << " row " << t << " head " << h;
                    }
                }
        }
    }
}

// ---- rollback and batching, both numerics ----

class DSparkV4Drafting : public ::testing::TestWithParam<bool> {  // official numerics?
    OneThread one_thread_;
};

TEST_P(DSparkV4Drafting, RollbackNeedsNoUndoAndChunkingDoesNotMatter) {
    // Prompts around and beyond the window (16) and the ring (16 + headroom), so context rows wrap.
    const int64_t lens[] = {3, 17, 45};
    drafter_checks::check_rollback_needs_no_undo(*tiny_model(GetParam()), lens);
}

TEST_P(DSparkV4Drafting, DraftingIsBatchInvariantAndStateBytesAreCounted) {
    const auto model = tiny_model(GetParam());
    const Drafter& d = *model->drafter();
    const int64_t lens[] = {2, 16, 21, 40};
    for (const Draft& draft : drafter_checks::check_drafting_batch_invariant(*model, lens))
        for (float c : draft.confidence) EXPECT_TRUE(c > 0.0f && c < 1.0f) << c;
    std::mt19937 rng(13);
    // The rings are what attaching adds to a sequence's state.
    const uint64_t page = 1024;
    auto pool = std::make_shared<StatePool>(uint64_t{64} << 20, page);
    const std::vector<int32_t> prompt = random_prompt(rng, 19, model->info().vocab_size);
    Sequence plain = model->new_sequence(pool), s = model->new_sequence(pool);
    d.attach(s);
    model->forward(plain, prompt, false);
    model->forward(s, prompt, false);
    EXPECT_GT(d.state_bytes(page), 0u);
    EXPECT_EQ(plain.state_bytes(), model->estimate_state_bytes(int64_t(prompt.size()), page));
    EXPECT_EQ(s.state_bytes(), plain.state_bytes() + d.state_bytes(page));
}

INSTANTIATE_TEST_SUITE_P(SpeculativeEngine, DSparkV4Drafting, ::testing::Values(true, false),
                         [](const auto& p) { return p.param ? "official" : "exact"; });

}  // namespace
}  // namespace deepinfer
