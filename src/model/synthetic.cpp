// SPDX-License-Identifier: Apache-2.0
// Synthetic checkpoint writer: enumerates expected_tensors(config), lays out a safetensors header,
// then streams each tensor's random bytes (no whole-checkpoint buffer; a full-width layer is GBs).
#include "deepinfer/synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>

#include <fcntl.h>
#include <fstream>
#include <map>
#include <unistd.h>
#include <nlohmann/json.hpp>
#include <vector>

#include "deepinfer/check.h"
#include "deepinfer/float_formats.h"
#include "deepinfer/safetensors.h"
#include "deepinfer/weight_inventory.h"
#include "model/dspark_agree.h"

namespace deepinfer {
namespace {

// splitmix64: small, fast, deterministic.
struct Rng {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    float uniform() { return static_cast<float>((next() >> 40) * (1.0 / 16777216.0)); }  // [0, 1)
    // Approximately N(0, 1): sum of 4 uniforms, rescaled (fast, deterministic).
    float normal() { return (uniform() + uniform() + uniform() + uniform() - 2.0f) * 1.7320508f; }
};

// Codes whose values follow N(0, sd²) approximately: code[u] = format(sd · Φ⁻¹((u + 0.5) / 256)).
// One random byte then picks one code (a table lookup instead of per-value float work: a
// full-width layer has billions of values).
struct CodeTables {
    uint8_t e4m3[256];
    uint8_t e2m1[256];
    CodeTables() {
        for (int u = 0; u < 256; ++u) {
            // Inverse normal CDF by bisection on erf (build time only).
            const double p = (u + 0.5) / 256.0;
            double lo = -8, hi = 8;
            for (int it = 0; it < 60; ++it) {
                const double mid = 0.5 * (lo + hi);
                (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
            }
            const float z = static_cast<float>(0.5 * (lo + hi));
            e4m3[u] = f32_to_e4m3_satfinite(z * 64.0f);
            e2m1[u] = f32_to_e2m1(z * 2.0f);
        }
    }
};

struct Planned {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t bytes;
    // how to fill
    enum Fill { kFp8, kFp8Scale, kFp4, kFp4Scale, kBf16Normal, kBf16Norm, kF32Small, kTid2eid } fill;
    float std = 1.0f;
    std::string shard = {};
};

uint64_t numel(const std::vector<int64_t>& s) {
    uint64_t n = 1;
    for (int64_t d : s) n *= static_cast<uint64_t>(d);
    return n;
}

bool is_residual_out(const std::string& name) {
    return name.find("attn.wo_b") != std::string::npos || name.find(".w2.") != std::string::npos;
}

// Appends the next `n` bytes of tensor `p` to buf from rng. A tensor may be filled in pieces: every
// piece but the last must hold whole units (8 bytes for FP8, 4 for FP4 and f32, 2 for bf16; tid2eid
// tensors are filled whole).
void fill_bytes(std::vector<uint8_t>& buf, uint64_t n, const Planned& p, Rng& rng, const SyntheticLayout& layout,
                const CodeTables& codes) {
    uint64_t remaining = n;
    auto put16 = [&](uint16_t v) {
        buf.push_back(static_cast<uint8_t>(v & 0xFF));
        buf.push_back(static_cast<uint8_t>(v >> 8));
    };
    auto put32 = [&](float f) {
        uint32_t v;
        std::memcpy(&v, &f, 4);
        for (int i = 0; i < 4; ++i) buf.push_back(static_cast<uint8_t>(v >> (8 * i)));
    };
    const int64_t K = layout.experts_per_token;
    while (remaining > 0) {
        switch (p.fill) {
            case Planned::kFp8: {
                uint64_t r = rng.next();
                for (int i = 0; i < 8 && remaining > 0; ++i, --remaining) buf.push_back(codes.e4m3[(r >> (8 * i)) & 0xFF]);
                break;
            }
            case Planned::kFp4: {
                uint64_t r = rng.next();
                for (int i = 0; i < 4 && remaining > 0; ++i, --remaining)
                    buf.push_back(static_cast<uint8_t>(codes.e2m1[(r >> (16 * i)) & 0xFF] |
                                                       (codes.e2m1[(r >> (16 * i + 8)) & 0xFF] << 4)));
                break;
            }
            case Planned::kFp8Scale:  // e4m3 values ~ N(0, 64^2): scale = std / 64
            case Planned::kFp4Scale: {  // e2m1 values ~ N(0, 2^2) (saturating at 6): scale = std / 2
                const float div = p.fill == Planned::kFp8Scale ? 64.0f : 2.0f;
                buf.push_back(e8m0_from_exponent(static_cast<int>(std::lround(std::log2(p.std / div)))));
                remaining -= 1;
                break;
            }
            case Planned::kBf16Normal: put16(f32_to_bf16(rng.normal() * p.std)); remaining -= 2; break;
            case Planned::kBf16Norm: put16(f32_to_bf16(1.0f + 0.1f * rng.normal())); remaining -= 2; break;
            case Planned::kF32Small: put32(p.std * rng.normal()); remaining -= 4; break;
            case Planned::kTid2eid: {
                // Row of K distinct experts.
                std::vector<int64_t> row;
                while (static_cast<int64_t>(row.size()) < K) {
                    int64_t e = static_cast<int64_t>(rng.next() % static_cast<uint64_t>(layout.routed_experts));
                    if (std::find(row.begin(), row.end(), e) == row.end()) row.push_back(e);
                }
                for (int64_t e : row)
                    for (int i = 0; i < 8; ++i) buf.push_back(static_cast<uint8_t>(static_cast<uint64_t>(e) >> (8 * i)));
                remaining -= static_cast<uint64_t>(8 * K);
                break;
            }
        }
    }
}

// Streams tensor p into out in 1 MiB pieces from the checkpoint's one random stream.
void fill(std::ofstream& out, const Planned& p, Rng& rng, const SyntheticLayout& layout, const CodeTables& codes) {
    constexpr uint64_t kChunk = 1 << 20;  // whole units of every fill
    std::vector<uint8_t> buf;
    buf.reserve(kChunk + 64);
    const uint64_t piece = p.fill == Planned::kTid2eid ? p.bytes : kChunk;
    for (uint64_t done = 0; done < p.bytes;) {
        const uint64_t n = std::min(piece, p.bytes - done);
        buf.clear();
        fill_bytes(buf, n, p, rng, layout, codes);
        out.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
        done += n;
    }
}

// The parallel form: pieces of 64 MiB, each from its own stream seeded by (seed, tensor, piece), filled
// by OpenMP threads and written at their offsets.
void fill_parallel(const std::string& path, uint64_t data_start, const std::vector<const Planned*>& plan, uint64_t seed,
                   const SyntheticLayout& layout, const CodeTables& codes) {
    constexpr uint64_t kPiece = uint64_t{64} << 20;
    struct Piece {
        const Planned* p;
        uint64_t tensor, index, offset, bytes;
    };
    std::vector<Piece> pieces;
    uint64_t offset = data_start;
    for (size_t t = 0; t < plan.size(); ++t) {
        const Planned* p = plan[t];
        const uint64_t step = p->fill == Planned::kTid2eid ? std::max<uint64_t>(p->bytes, 1) : kPiece;
        for (uint64_t at = 0, k = 0; at < p->bytes; at += step, ++k)
            pieces.push_back({p, t, k, offset + at, std::min(step, p->bytes - at)});
        offset += p->bytes;
    }
    const int fd = ::open(path.c_str(), O_WRONLY);
    DI_CHECK(fd >= 0, path, ": cannot open for writing");
    bool ok = true;
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t i = 0; i < static_cast<int64_t>(pieces.size()); ++i) {
        const Piece& pc = pieces[size_t(i)];
        Rng rng{seed ^ (0x9E3779B97F4A7C15ull * (pc.tensor + 1)) ^ (0xD1B54A32D192ED03ull * (pc.index + 1))};
        std::vector<uint8_t> buf;
        buf.reserve(pc.bytes + 64);
        fill_bytes(buf, pc.bytes, *pc.p, rng, layout, codes);
        uint64_t written = 0;
        while (written < buf.size()) {
            const ssize_t w = ::pwrite(fd, buf.data() + written, buf.size() - written, static_cast<off_t>(pc.offset + written));
            if (w <= 0) break;
            written += static_cast<uint64_t>(w);
        }
        if (written != buf.size()) {
#pragma omp atomic write
            ok = false;
        }
    }
    ::close(fd);
    DI_CHECK(ok, path, ": write failed (disk full?)");
}

bool is_norm_weight(const std::string& name) {
    return name.find("norm.weight") != std::string::npos || name.find("norm1.weight") != std::string::npos ||
           name.find("norm2.weight") != std::string::npos;
}

std::vector<Planned> plan_tensors(const std::vector<ExpectedTensor>& expected, const SyntheticLayout& layout,
                                  const SyntheticCheckpointOptions& o) {
    const int64_t br = layout.block_rows, bc = layout.block_cols;
    std::vector<Planned> plan;
    for (const ExpectedTensor& e : expected) {
        std::vector<int64_t> shape;
        for (int i = 0; i < e.shape.ndim(); ++i) shape.push_back(e.shape[i]);
        const std::string base = e.name.ends_with(".weight") ? e.name.substr(0, e.name.size() - 7) : e.name;
        const float damp = is_residual_out(e.name) ? static_cast<float>(o.residual_damping) : 1.0f;
        const float std = damp / std::sqrt(static_cast<float>(shape.back()));
        const bool expert = e.kind == WeightKind::kExpertLinear;
        const bool linear = e.kind == WeightKind::kLinear || expert;
        const size_t first = plan.size();
        if (expert && o.fp4_experts) {
            std::vector<int64_t> packed{shape[0], shape[1] / 2}, scale{shape[0], shape[1] / 32};
            plan.push_back({e.name, DType::kI8, packed, numel(packed), Planned::kFp4, std});
            plan.push_back({base + ".scale", DType::kF8E8M0, scale, numel(scale), Planned::kFp4Scale, std});
        } else if (linear && o.fp8_linears) {
            std::vector<int64_t> scale{(shape[0] + br - 1) / br, (shape[1] + bc - 1) / bc};
            plan.push_back({e.name, DType::kF8E4M3, shape, numel(shape), Planned::kFp8, std});
            plan.push_back({base + ".scale", DType::kF8E8M0, scale, numel(scale), Planned::kFp8Scale, std});
        } else if (e.kind == WeightKind::kRowTable) {
            // Lookup rows ~ N(0, 1): FP8 codes with one ue8m0 scale per row and 32 columns.
            std::vector<int64_t> scale{shape[0], (shape[1] + 31) / 32};
            plan.push_back({e.name, DType::kF8E4M3, shape, numel(shape), Planned::kFp8, 1.0f});
            plan.push_back({base + ".scale", DType::kF8E8M0, scale, numel(scale), Planned::kFp8Scale, 1.0f});
        } else if (linear) {
            plan.push_back({e.name, DType::kBF16, shape, 2 * numel(shape), Planned::kBf16Normal, std});
        } else if (e.kind == WeightKind::kIndex) {
            plan.push_back({e.name, DType::kI64, shape, 8 * numel(shape), Planned::kTid2eid});
        } else if (is_norm_weight(e.name)) {
            plan.push_back({e.name, DType::kBF16, shape, 2 * numel(shape), Planned::kBf16Norm});
        } else if (e.name.find("hc_") != std::string::npos || e.name.find("attn_sink") != std::string::npos ||
                   e.name.find(".ape") != std::string::npos || e.name.find("gate.bias") != std::string::npos) {
            // hc_*_fn are matrices: scale them like one; other vectors 0.3 N(0,1).
            const bool fn = e.name.find("_fn") != std::string::npos;
            plan.push_back({e.name, DType::kF32, shape, 4 * numel(shape), Planned::kF32Small, fn ? std : 0.3f});
        } else {
            const bool bias = e.name.ends_with(".bias");
            plan.push_back({e.name, DType::kBF16, shape, 2 * numel(shape), Planned::kBf16Normal,
                            e.name == "embed.weight" ? 1.0f : bias ? 0.02f : std});
        }
        const std::string shard = layout.shard_of ? layout.shard_of(e.name) : "model.safetensors";
        for (size_t i = first; i < plan.size(); ++i) plan[i].shard = shard;
    }
    return plan;
}

// Writes one safetensors file holding `plan` (in order); the random stream continues across files
// (parallel: one stream per piece instead).
void write_file(const std::string& path, const std::vector<const Planned*>& plan, uint64_t seed, Rng& rng,
                const SyntheticLayout& layout, const CodeTables& codes, bool parallel) {
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    header["__metadata__"] = {{"format", "pt"}, {"generator", "deepinfer synthetic"}, {"seed", std::to_string(seed)}};
    uint64_t offset = 0;
    for (const Planned* p : plan) {
        header[p->name] = {{"dtype", std::string(dtype_safetensors_name(p->dtype))},
                           {"shape", p->shape},
                           {"data_offsets", {offset, offset + p->bytes}}};
        offset += p->bytes;
    }
    std::string h = header.dump();
    while (h.size() % 8) h.push_back(' ');
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    DI_CHECK(out.good(), path, ": cannot open for writing");
    const uint64_t n = h.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xFF));
    out.write(h.data(), static_cast<std::streamsize>(h.size()));
    if (parallel) {
        out.close();
        DI_CHECK(!out.fail(), path, ": write failed");
        fill_parallel(path, 8 + n, plan, seed, layout, codes);
        return;
    }
    for (const Planned* p : plan) fill(out, *p, rng, layout, codes);
    DI_CHECK(out.good(), path, ": write failed (disk full?)");
}

}  // namespace

void write_synthetic_tensors(const std::string& dir, const std::vector<ExpectedTensor>& expected,
                             const SyntheticLayout& layout, const SyntheticCheckpointOptions& o) {
    std::filesystem::create_directories(dir);
    const std::vector<Planned> plan = plan_tensors(expected, layout, o);
    std::vector<std::string> shards;  // in order of first appearance
    std::map<std::string, std::vector<const Planned*>> by_shard;
    for (const Planned& p : plan) {
        auto& list = by_shard[p.shard];
        if (list.empty()) shards.push_back(p.shard);
        list.push_back(&p);
    }
    Rng rng{o.seed};
    const CodeTables codes;
    if (!layout.shard_of) {
        write_file(dir + "/model.safetensors", by_shard.begin()->second, o.seed, rng, layout, codes, o.parallel);
        return;
    }
    // Shards are renamed model-0000i-of-0000n.safetensors, as the release names them.
    nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
    uint64_t total = 0;
    for (size_t i = 0; i < shards.size(); ++i) {
        const std::string file = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
        for (const Planned* p : by_shard[shards[i]]) {
            weight_map[p->name] = file;
            total += p->bytes;
        }
        write_file(dir + "/" + file, by_shard[shards[i]], o.seed, rng, layout, codes, o.parallel);
    }
    std::ofstream index(dir + "/model.safetensors.index.json", std::ios::trunc);
    index << nlohmann::ordered_json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2);
    DI_CHECK(index.good(), dir, "/model.safetensors.index.json: write failed");
}

std::string v4_flash_config(const V4FlashShape& shape) {
    std::vector<int> cr = shape.compress_ratios;
    cr.push_back(0);  // the MTP entry
    const nlohmann::json j = {
        {"architectures", {"DeepseekV4ForCausalLM"}}, {"model_type", "deepseek_v4"}, {"vocab_size", shape.vocab_size},
        {"hidden_size", 4096}, {"moe_intermediate_size", 2048},
        {"num_hidden_layers", static_cast<int64_t>(shape.compress_ratios.size())}, {"num_attention_heads", 64},
        {"num_key_value_heads", 1}, {"head_dim", 512}, {"qk_rope_head_dim", 64}, {"q_lora_rank", 1024}, {"o_groups", 8},
        {"o_lora_rank", 1024}, {"sliding_window", 128}, {"compress_ratios", cr},
        {"num_hash_layers", shape.num_hash_layers}, {"n_routed_experts", shape.n_routed_experts},
        {"n_shared_experts", 1}, {"num_experts_per_tok", 6}, {"scoring_func", "sqrtsoftplus"},
        {"routed_scaling_factor", 1.5}, {"swiglu_limit", 10.0}, {"rms_norm_eps", 1e-6}, {"hc_mult", 4},
        {"hc_sinkhorn_iters", 20}, {"hc_eps", 1e-6}, {"rope_theta", 10000}, {"compress_rope_theta", 160000},
        {"rope_scaling", {{"type", "yarn"}, {"factor", 16}, {"original_max_position_embeddings", 65536},
                          {"beta_fast", 32}, {"beta_slow", 1}}},
        {"index_n_heads", 64}, {"index_head_dim", 128}, {"index_topk", 512}, {"num_nextn_predict_layers", 0},
        {"max_position_embeddings", 1048576}, {"expert_dtype", "fp4"},
        {"quantization_config", {{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {128, 128}},
                                 {"scale_fmt", "ue8m0"}, {"activation_scheme", "dynamic"}}}};
    return j.dump(2);
}

void write_synthetic_checkpoint(const std::string& dir, const std::string& config_json,
                                const SyntheticCheckpointOptions& o) {
    const ModelConfig c = parse_model_config(config_json, dir + "/config.json");
    std::filesystem::create_directories(dir);
    {
        std::ofstream cfg(dir + "/config.json", std::ios::trunc);
        cfg << config_json;
        DI_CHECK(cfg.good(), dir, "/config.json: write failed");
    }
    SyntheticLayout layout{.block_rows = c.quantization.weight_block_rows,
                           .block_cols = c.quantization.weight_block_cols,
                           .routed_experts = c.n_routed_experts,
                           .experts_per_token = c.num_experts_per_tok};
    std::vector<ExpectedTensor> expected = expected_tensors(c, o.include_drafter && o.dspark_stages == 0);
    if (o.include_drafter && o.dspark_stages > 0) {
        const std::vector<ExpectedTensor> d = expected_dspark_tensors(c, o.dspark_stages);
        expected.insert(expected.end(), d.begin(), d.end());
    }
    write_synthetic_tensors(dir, expected, layout, o);
}

void make_v4_dspark_agree_with_target(const std::string& dir, double noise, uint64_t seed) {
    const ModelConfig c = load_model_config(dir + "/config.json");
    const std::string path = dir + "/model.safetensors";
    DI_CHECK(SafetensorsFile(path).find("mtp.0.main_proj.weight"), dir, ": the checkpoint has no DSpark drafter");
    const DSparkAgreeLayout l = dspark_agree_layout(
        path,
        {.hidden = c.hidden_size, .vocab = c.vocab_size, .rank = c.dspark_markov_rank, .noise_token = c.dspark_noise_token_id,
         .layers = c.num_hidden_layers, .experts = c.n_routed_experts, .stage_experts = c.dspark_n_routed_experts,
         .rms_norm_eps = c.rms_norm_eps},
        "markov_head.markov_w1.weight", "markov_head.markov_w2.weight");
    make_dspark_agree(path, l, noise, seed);
}

}  // namespace deepinfer
