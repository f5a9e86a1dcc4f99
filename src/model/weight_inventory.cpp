// SPDX-License-Identifier: Apache-2.0
// Expected tensor list of DeepseekV4ForCausalLM and the check of a checkpoint against it.
// Shapes follow deepseek-v4-model.md §4.2-4.5 with every dimension read from ModelConfig.
#include "deepinfer/weight_inventory.h"

#include <set>

#include "deepinfer/check.h"

namespace deepinfer {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// A target layer, the preview's MTP block, or a 0731 DSpark stage (both sliding-window, score-routed).
enum class Block : uint8_t { kLayer, kMtp, kDSparkStage };

void add_block(std::vector<ExpectedTensor>& out, const ModelConfig& c, const std::string& p, int64_t layer,
               Block block) {
    const bool is_mtp = block != Block::kLayer;
    const int64_t D = c.hidden_size, H = c.num_attention_heads, Dh = c.head_dim, hc = c.hc_mult;
    const int64_t E = c.n_routed_experts, I = c.moe_intermediate_size;
    auto add = [&](std::string name, Shape shape, WeightKind kind) { out.push_back({p + name, shape, kind}); };
    add("attn_norm.weight", {D}, WeightKind::kFloat);
    add("ffn_norm.weight", {D}, WeightKind::kFloat);
    for (const char* which : {"attn", "ffn"}) {
        std::string w(which);
        add("hc_" + w + "_fn", {(2 + hc) * hc, hc * D}, WeightKind::kFloat);
        add("hc_" + w + "_base", {(2 + hc) * hc}, WeightKind::kFloat);
        add("hc_" + w + "_scale", {3}, WeightKind::kFloat);
    }
    add("attn.attn_sink", {H}, WeightKind::kFloat);
    add("attn.q_norm.weight", {c.q_lora_rank}, WeightKind::kFloat);
    add("attn.kv_norm.weight", {Dh}, WeightKind::kFloat);
    add("attn.wq_a.weight", {c.q_lora_rank, D}, WeightKind::kLinear);
    add("attn.wq_b.weight", {H * Dh, c.q_lora_rank}, WeightKind::kLinear);
    add("attn.wkv.weight", {Dh, D}, WeightKind::kLinear);
    add("attn.wo_a.weight", {c.o_groups * c.o_lora_rank, H * Dh / c.o_groups}, WeightKind::kLinear);
    add("attn.wo_b.weight", {D, c.o_groups * c.o_lora_rank}, WeightKind::kLinear);

    const int64_t ratio = is_mtp ? 0 : c.compress_ratio(layer);
    if (ratio != 0) {
        const bool csa = c.layer_types[static_cast<size_t>(layer)] == AttentionType::kCsa;
        const int64_t width = csa ? 2 * Dh : Dh;  // CSA's overlapping windows use two series
        add("attn.compressor.wkv.weight", {width, D}, WeightKind::kFloat);
        add("attn.compressor.wgate.weight", {width, D}, WeightKind::kFloat);
        add("attn.compressor.ape", {ratio, width}, WeightKind::kFloat);
        add("attn.compressor.norm.weight", {Dh}, WeightKind::kFloat);
        if (csa) {
            const int64_t ih = c.index_n_heads, id = c.index_head_dim;
            add("attn.indexer.wq_b.weight", {ih * id, c.q_lora_rank}, WeightKind::kLinear);
            add("attn.indexer.weights_proj.weight", {ih, D}, WeightKind::kFloat);
            add("attn.indexer.compressor.wkv.weight", {2 * id, D}, WeightKind::kFloat);
            add("attn.indexer.compressor.wgate.weight", {2 * id, D}, WeightKind::kFloat);
            add("attn.indexer.compressor.ape", {ratio, 2 * id}, WeightKind::kFloat);
            add("attn.indexer.compressor.norm.weight", {id}, WeightKind::kFloat);
        }
    }

    add("ffn.gate.weight", {E, D}, WeightKind::kFloat);
    const bool hash = !is_mtp && c.mlp_layer_types[static_cast<size_t>(layer)] == MlpType::kHashMoe;
    if (hash) add("ffn.gate.tid2eid", {c.vocab_size, c.num_experts_per_tok}, WeightKind::kIndex);
    else add("ffn.gate.bias", {E}, WeightKind::kFloat);
    add("ffn.shared_experts.w1.weight", {I, D}, WeightKind::kLinear);
    add("ffn.shared_experts.w3.weight", {I, D}, WeightKind::kLinear);
    add("ffn.shared_experts.w2.weight", {D, I}, WeightKind::kLinear);
    for (int64_t e = 0; e < E; ++e) {
        std::string ep = "ffn.experts." + std::to_string(e) + ".";
        add(ep + "w1.weight", {I, D}, WeightKind::kExpertLinear);
        add(ep + "w3.weight", {I, D}, WeightKind::kExpertLinear);
        add(ep + "w2.weight", {D, I}, WeightKind::kExpertLinear);
    }
    if (block == Block::kMtp) {
        add("e_proj.weight", {D, D}, WeightKind::kLinear);
        add("h_proj.weight", {D, D}, WeightKind::kLinear);
        add("enorm.weight", {D}, WeightKind::kFloat);
        add("hnorm.weight", {D}, WeightKind::kFloat);
        add("norm.weight", {D}, WeightKind::kFloat);
        add("hc_head_fn", {hc, hc * D}, WeightKind::kFloat);
        add("hc_head_base", {hc}, WeightKind::kFloat);
        add("hc_head_scale", {1}, WeightKind::kFloat);
    }
}

std::string strip_weight(const std::string& name) {
    const std::string suffix = ".weight";
    if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
        return name.substr(0, name.size() - suffix.size());
    return name;
}

bool is_dense_float(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }

std::string describe(DType d, const Shape& s) { return std::string(dtype_name(d)) + s.str(); }

}  // namespace

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c, bool include_mtp) {
    std::vector<ExpectedTensor> out;
    const int64_t D = c.hidden_size, hc = c.hc_mult;
    out.push_back({"embed.weight", {c.vocab_size, D}, WeightKind::kFloat});
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) add_block(out, c, "layers." + std::to_string(l) + ".", l, Block::kLayer);
    out.push_back({"norm.weight", {D}, WeightKind::kFloat});
    out.push_back({"head.weight", {c.vocab_size, D}, WeightKind::kFloat});
    out.push_back({"hc_head_fn", {hc, hc * D}, WeightKind::kFloat});
    out.push_back({"hc_head_base", {hc}, WeightKind::kFloat});
    out.push_back({"hc_head_scale", {1}, WeightKind::kFloat});
    if (include_mtp)
        for (int64_t m = 0; m < c.num_nextn_predict_layers; ++m)
            add_block(out, c, "mtp." + std::to_string(m) + ".", -1, Block::kMtp);
    return out;
}

std::vector<ExpectedTensor> expected_dspark_tensors(const ModelConfig& c, int64_t stages) {
    const int64_t D = c.hidden_size, hc = c.hc_mult, V = c.vocab_size, r = c.dspark_markov_rank;
    const int64_t taps = static_cast<int64_t>(c.dspark_target_layer_ids.size());
    ModelConfig sc = c;  // the stages' own expert count
    sc.n_routed_experts = c.dspark_n_routed_experts;
    sc.num_experts_per_tok = c.dspark_num_experts_per_tok;
    std::vector<ExpectedTensor> out;
    for (int64_t s = 0; s < stages; ++s) add_block(out, sc, "mtp." + std::to_string(s) + ".", -1, Block::kDSparkStage);
    if (stages == 0) return out;
    const std::string last = "mtp." + std::to_string(stages - 1) + ".";
    out.push_back({"mtp.0.main_proj.weight", {D, taps * D}, WeightKind::kLinear});
    out.push_back({"mtp.0.main_norm.weight", {D}, WeightKind::kFloat});
    out.push_back({last + "norm.weight", {D}, WeightKind::kFloat});
    out.push_back({last + "hc_head_fn", {hc, hc * D}, WeightKind::kFloat});
    out.push_back({last + "hc_head_base", {hc}, WeightKind::kFloat});
    out.push_back({last + "hc_head_scale", {1}, WeightKind::kFloat});
    out.push_back({last + "markov_head.markov_w1.weight", {V, r}, WeightKind::kFloat});
    out.push_back({last + "markov_head.markov_w2.weight", {V, r}, WeightKind::kFloat});
    out.push_back({last + "confidence_head.proj.weight", {1, D + r}, WeightKind::kFloat});
    return out;
}

InventoryChecker::InventoryChecker(const Checkpoint& checkpoint, int64_t block_rows, int64_t block_cols)
    : ckpt_(checkpoint), block_rows_(block_rows), block_cols_(block_cols) {}

void InventoryChecker::check_scale(const ExpectedTensor& e, const Shape& want, bool e8m0_only) {
    const std::string scale_name = strip_weight(e.name) + ".scale";
    const CheckpointTensor* s = ckpt_.find(scale_name);
    if (!s) {
        report_.missing.push_back(scale_name);
        return;
    }
    consumed_.insert(scale_name);
    const DType sd = s->info->dtype;
    const bool dtype_ok =
        e8m0_only ? sd == DType::kF8E8M0 : (sd == DType::kF8E8M0 || sd == DType::kF32 || sd == DType::kBF16);
    if (!dtype_ok || !(s->info->shape == want))
        report_.mismatched.push_back(s->stored_name + ": is " + describe(sd, s->info->shape) + ", expected " +
                                     (e8m0_only ? "ue8m0" : "ue8m0|f32") + want.str());
}

void InventoryChecker::check(const ExpectedTensor& e) {
    const CheckpointTensor* t = ckpt_.find(e.name);
    if (!t) {
        report_.missing.push_back(e.name);
        return;
    }
    consumed_.insert(e.name);
    const DType dt = t->info->dtype;
    const Shape& shape = t->info->shape;
    auto mismatch = [&](const std::string& why) { report_.mismatched.push_back(t->stored_name + ": " + why); };
    switch (e.kind) {
        case WeightKind::kFloat:
            if (!is_dense_float(dt) || !(shape == e.shape))
                mismatch("is " + describe(dt, shape) + ", expected a float tensor " + e.shape.str());
            break;
        case WeightKind::kIndex:
            if (!(dt == DType::kI64 || dt == DType::kI32) || !(shape == e.shape))
                mismatch("is " + describe(dt, shape) + ", expected i64|i32" + e.shape.str());
            break;
        case WeightKind::kRowTable: {
            const int64_t rows = e.shape[0], cols = e.shape[1];
            if (dt == DType::kF8E4M3) {
                if (!(shape == e.shape)) mismatch("is " + describe(dt, shape) + ", expected fp8_e4m3" + e.shape.str());
                check_scale(e, {rows, ceil_div(cols, 32)}, true);
            } else if (!is_dense_float(dt) || !(shape == e.shape)) {
                mismatch("is " + describe(dt, shape) + ", expected " + e.shape.str() + " (fp8 or float)");
            } else if (const CheckpointTensor* s = ckpt_.find(strip_weight(e.name) + ".scale")) {
                // A float table may carry its (unit) row scales, as transformers saves them.
                consumed_.insert(s->name);
                const Shape& ss = s->info->shape;
                const bool ok = is_dense_float(s->info->dtype) && ss.ndim() == 2 && ss[0] == rows &&
                                (ss[1] == 1 || ss[1] == ceil_div(cols, 32));
                if (!ok)
                    report_.mismatched.push_back(s->stored_name + ": is " + describe(s->info->dtype, ss) +
                                                 ", expected a float [" + std::to_string(rows) + ", 1|" +
                                                 std::to_string(ceil_div(cols, 32)) + "]");
            }
            break;
        }
        case WeightKind::kLinear:
        case WeightKind::kExpertLinear: {
            const int64_t out = e.shape[0], in = e.shape[1];
            if (dt == DType::kF8E4M3) {
                if (!(shape == e.shape)) mismatch("is " + describe(dt, shape) + ", expected fp8_e4m3" + e.shape.str());
                check_scale(e, {ceil_div(out, block_rows_), ceil_div(in, block_cols_)}, false);
            } else if (e.kind == WeightKind::kExpertLinear &&
                       (dt == DType::kI8 || dt == DType::kU8 || dt == DType::kF4E2M1)) {
                Shape want = dt == DType::kF4E2M1 ? e.shape : Shape{out, in / 2};
                if (in % 32 != 0 || !(shape == want))
                    mismatch("is " + describe(dt, shape) + ", expected packed fp4 " + want.str());
                check_scale(e, {out, in / 32}, true);
            } else if (!is_dense_float(dt) || !(shape == e.shape)) {
                mismatch("is " + describe(dt, shape) + ", expected " + e.shape.str() +
                         (e.kind == WeightKind::kExpertLinear ? " (fp4, fp8 or float)" : " (fp8 or float)"));
            }
            break;
        }
    }
}

InventoryReport InventoryChecker::finish() {
    for (const CheckpointTensor& t : ckpt_.tensors()) {
        const DType dt = t.info->dtype;
        const bool is_scale = t.name.size() > 6 && t.name.compare(t.name.size() - 6, 6, ".scale") == 0;
        int64_t elements = t.info->shape.numel();
        if (dt == DType::kI8 || dt == DType::kU8) {
            // Packed fp4 expert weights hold two parameters per byte.
            if (t.name.find(".ffn.experts.") != std::string::npos && !is_scale) elements *= 2;
        }
        if (is_scale) report_.num_scale_elements += elements;
        else report_.num_parameters += elements;
        const std::string dn(dtype_name(dt));
        report_.bytes_by_dtype[dn] += t.info->end - t.info->begin;
        report_.tensors_by_dtype[dn] += 1;
        if (!consumed_.count(t.name)) report_.unexpected.push_back(t.stored_name);
    }
    return std::move(report_);
}

InventoryReport check_inventory(const Checkpoint& ckpt, const ModelConfig& c) {
    InventoryChecker checker(ckpt, c.quantization.weight_block_rows, c.quantization.weight_block_cols);
    InventoryReport& report = checker.report();
    for (const CheckpointTensor& t : ckpt.tensors()) {
        report.has_mtp |= t.name.rfind("mtp.", 0) == 0;
        report.merged_experts |= t.name.find(".ffn.experts.gate_up_proj") != std::string::npos;
    }
    // The drafter is told apart by names (0731's DSpark has main_proj, no e_proj) and counted by blocks.
    int64_t stages = 0;
    while (ckpt.find("mtp." + std::to_string(stages) + ".attn_norm.weight")) ++stages;
    report.has_dspark = ckpt.find("mtp.0.main_proj.weight") != nullptr && !ckpt.find("mtp.0.e_proj.weight");
    std::vector<ExpectedTensor> expected = expected_tensors(c, report.has_mtp && !report.has_dspark);
    if (report.has_dspark) {
        const std::vector<ExpectedTensor> d = expected_dspark_tensors(c, stages);
        expected.insert(expected.end(), d.begin(), d.end());
    }
    for (const ExpectedTensor& e : expected) {
        // transformers' merged layout replaces every per-expert w1/w3/w2 of a layer by two tensors.
        const size_t pos = e.name.find(".ffn.experts.");
        if (pos != std::string::npos) {
            const std::string layer = e.name.substr(0, pos);
            const std::string merged_gate_up = layer + ".ffn.experts.gate_up_proj";
            const std::string merged_down = layer + ".ffn.experts.down_proj";
            if (ckpt.find(merged_gate_up) || ckpt.find(merged_down)) {
                if (checker.consumed(merged_gate_up) || checker.consumed(merged_down)) continue;
                const int64_t E = c.n_routed_experts, I = c.moe_intermediate_size, D = c.hidden_size;
                checker.check({merged_gate_up, {E, 2 * I, D}, WeightKind::kFloat});
                checker.check({merged_down, {E, D, I}, WeightKind::kFloat});
                continue;
            }
        }
        checker.check(e);
    }
    return checker.finish();
}

}  // namespace deepinfer
