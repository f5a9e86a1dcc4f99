#!/usr/bin/env python3
"""Tiny random DeepSeek-V4 models + transformers reference outputs for deepinfer.

Usage:
    python3 tools/reference/make_v4_models.py --out DIR [--device auto|cpu|cuda] [--no-cuda-compare]
                                              [--models v4_tiny_a,v4_tiny_b]

For each model NAME this writes
    DIR/NAME/            save_pretrained, one file (config.json, generation_config.json, model.safetensors)
    DIR/NAME/keys.txt    every tensor of model.safetensors: "<key> <safetensors dtype> [shape]", file order
    DIR/NAME/ref.json    prompts, greedy continuations, versions, device, diagnostics (see README.md)
    DIR/NAME/ref_logits_<i>.f32         no-cache full-forward logits of prompt i at every position,
                                         little-endian float32, shape [len_i, vocab]
    DIR/NAME/ref_decode_logits_<i>.f32  logits of the 16 greedy steps of model.generate (cache on),
                                         float32 [16, vocab]; row j scored greedy token j
    DIR/NAME/ref_trace_<i>.safetensors  intermediate tensors of the no-cache forward of prompt i (README.md)
    DIR/NAME_sharded/    save_pretrained with a small max_shard_size (>= 3 shards + model.safetensors.index.json)
    DIR/NAME_upstream/   the same weights under DeepSeek's own checkpoint names + a legacy-style config.json
                         (compress_ratios, num_hash_layers, rope_scaling), as in the real V4-Flash files

Everything is fp32 with eager attention. Weights are drawn from a fixed-seed CPU generator, so the saved
checkpoints are identical on every machine; the reference outputs are computed on CUDA when available
(--device auto), and, unless --no-cuda-compare, also on the CPU, and the difference is recorded in ref.json.
"""
import argparse
import datetime
import json
import math
import os
import re
import shutil
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_common import safetensors_header, set_determinism  # noqa: E402

import transformers  # noqa: E402
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM  # noqa: E402
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as mdv4  # noqa: E402

S, CSA, HCA = "sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention"
N_GREEDY = 16
MAX_MODEL_BYTES = 3.5 * 1024 * 1024

# --------------------------------------------------------------------------------------------------------------
# model definitions
# --------------------------------------------------------------------------------------------------------------
MODELS = {
    # Flash-like schedule: 2 sliding, then CSA/HCA alternating; 3 hash-routed layers (0, 1, 2) like Flash.
    "v4_tiny_a": dict(
        seed=1001,
        prompt_lengths=[37, 300, 250],
        config=dict(
            vocab_size=512,
            hidden_size=64,
            num_hidden_layers=6,
            layer_types=[S, S, CSA, HCA, CSA, HCA],
            mlp_layer_types=["hash_moe", "hash_moe", "hash_moe", "moe", "moe", "moe"],
            compress_rates={CSA: 4, HCA: 128},
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=64,
            qk_rope_head_dim=16,
            q_lora_rank=32,
            o_groups=2,
            o_lora_rank=16,
            n_routed_experts=8,
            num_experts_per_tok=3,
            n_shared_experts=1,
            moe_intermediate_size=32,
            scoring_func="sqrtsoftplus",
            routed_scaling_factor=1.5,
            norm_topk_prob=True,
            swiglu_limit=10.0,
            hc_mult=4,
            hc_sinkhorn_iters=20,
            hc_eps=1e-6,
            rms_norm_eps=1e-6,
            rope_theta=10000.0,
            compress_rope_theta=160000.0,
            sliding_window=16,
            index_n_heads=16,
            index_head_dim=32,
            index_topk=8,
            max_position_embeddings=4096,
            tie_word_embeddings=False,
            num_nextn_predict_layers=0,
        ),
    ),
    # Same kinds, YaRN on the compressed layers, hc_mult 2, wider hidden, rope 32 of 64, clamp that bites.
    "v4_tiny_b": dict(
        seed=2002,
        prompt_lengths=[37, 300, 250],
        config=dict(
            vocab_size=512,
            hidden_size=128,
            num_hidden_layers=6,
            layer_types=[S, S, CSA, HCA, CSA, HCA],
            mlp_layer_types=["hash_moe", "hash_moe", "hash_moe", "moe", "moe", "moe"],
            compress_rates={CSA: 4, HCA: 128},
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=64,
            qk_rope_head_dim=32,
            q_lora_rank=32,
            o_groups=2,
            o_lora_rank=32,
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_shared_experts=1,
            moe_intermediate_size=16,
            scoring_func="sqrtsoftplus",
            routed_scaling_factor=1.5,
            norm_topk_prob=True,
            swiglu_limit=1.0,  # small on purpose: the SwiGLU clamp is active for a good fraction of values
            hc_mult=2,
            hc_sinkhorn_iters=20,
            hc_eps=1e-6,
            rms_norm_eps=1e-6,
            rope_theta=10000.0,
            compress_rope_theta=160000.0,
            # YaRN on CSA/HCA layers only (transformers folds this into rope_parameters["compress"] and forces
            # attention_factor=1.0). With rope dim 32 and theta 160000: low=floor(3.10)=3, high=ceil(7.73)=8,
            # so pairs 0..3 keep their frequency, 4..7 blend, 8..15 are divided by 4.
            rope_parameters=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=2048,
                                 beta_fast=32.0, beta_slow=1.0),
            sliding_window=32,
            index_n_heads=16,
            index_head_dim=64,
            index_topk=16,
            max_position_embeddings=8192,  # = factor * original_max_position_embeddings (as in Flash)
            tie_word_embeddings=False,
            num_nextn_predict_layers=0,  # transformers has no MTP block: nothing would be saved for it
        ),
    ),
}


# --------------------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------------------
def versions():
    import safetensors

    try:
        import ml_dtypes

        mlv = ml_dtypes.__version__
    except ImportError:
        mlv = None
    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "safetensors": safetensors.__version__,
        "numpy": np.__version__,
        "ml_dtypes": mlv,
    }


def make_config(spec):
    # experts_implementation: transformers 5.17 defaults to "grouped_mm" (torch grouped GEMM, top-k-order
    # sum). "eager" loops over experts in ascending id and index_adds each one: the official accumulation order.
    cfg = DeepseekV4Config(**spec["config"], dtype="float32", attn_implementation="eager",
                           experts_implementation="eager")
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = "eager"
    return cfg


def param_kind(name, t):
    """Randomization rule (testing-notes.md): matrices N(0, 1/fan_in), norm weights 1 + 0.1 N(0,1), other
    vectors (hc base/scale, sinks, position_bias/ape, gate bias) 0.3 N(0,1); tid2eid random distinct experts."""
    if name.endswith("tid2eid"):
        return "tid2eid"
    if name.endswith("position_bias"):
        return "vector"  # ape: [ratio, width], counted with the "other" parameters
    if t.dim() >= 2:
        return "matrix"
    leaf = name.split(".")[-2] if name.endswith(".weight") else ""
    if name.endswith(".weight") and (leaf.endswith("norm") or leaf.endswith("layernorm")):
        return "norm"
    return "vector"


@torch.no_grad()
def randomize(model, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    sd = model.state_dict()  # persistent params + buffers (tid2eid, e_score_correction_bias)
    E = model.config.n_routed_experts
    kinds = {}
    for name in sorted(sd):
        t = sd[name]
        kind = param_kind(name, t)
        kinds[name] = kind
        if kind == "tid2eid":
            V, k = t.shape
            rows = torch.rand(V, E, generator=g).argsort(dim=1)[:, :k]
            t.copy_(rows.to(t.dtype))
        elif kind == "matrix":
            fan_in = t.shape[-1]
            t.copy_(torch.randn(t.shape, generator=g) / math.sqrt(fan_in))
        elif kind == "norm":
            t.copy_(1.0 + 0.1 * torch.randn(t.shape, generator=g))
        else:
            t.copy_(0.3 * torch.randn(t.shape, generator=g))
    # every persistent tensor must have been overwritten
    assert set(kinds) == set(model.state_dict())
    return kinds


def write_keys(model_dir):
    """keys.txt: one line per tensor of model_dir/model.safetensors, sorted by name: "<key> <dtype> [shape]"."""
    hdr = safetensors_header(os.path.join(model_dir, "model.safetensors"))
    lines = [f"{k} {hdr[k]['dtype']} {json.dumps(hdr[k]['shape'], separators=(',', ''))}"
             for k in sorted(hdr) if k != "__metadata__"]
    with open(os.path.join(model_dir, "keys.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return hdr


def make_prompts(seed, lengths, vocab):
    rng = np.random.Generator(np.random.PCG64(seed))
    # ids 2..vocab-1: avoid bos (0) and eos (1) so no prompt token is "special"
    return [[int(v) for v in rng.integers(2, vocab, n)] for n in lengths]


# --------------------------------------------------------------------------------------------------------------
# diagnostics: top-k margins (how close a reference's discrete choices are to a tie)
# --------------------------------------------------------------------------------------------------------------
class Recorder:
    def __init__(self):
        self.indexer_scores = {}  # layer -> [B, S, T] raw indexer scores (no-cache forward)
        self.router = {}  # layer -> (scores+bias [T, E], k)
        self.active = False


REC = Recorder()
_orig_scorer_fwd = mdv4.DeepseekV4IndexerScorer.forward
_orig_router_fwd = mdv4.DeepseekV4TopKRouter.forward


def _scorer_fwd(self, q, compressed_kv, hidden_states):
    out = _orig_scorer_fwd(self, q, compressed_kv, hidden_states)
    if REC.active:
        REC.indexer_scores[self._ref_layer] = out.detach().float().cpu()
    return out


def _router_fwd(self, hidden_states):
    logits, weights, indices = _orig_router_fwd(self, hidden_states)
    if REC.active:
        scores = self.score_fn(logits) + self.e_score_correction_bias
        REC.router[self._ref_layer] = (scores.detach().float().cpu(), self.top_k)
    return logits, weights, indices


mdv4.DeepseekV4IndexerScorer.forward = _scorer_fwd
mdv4.DeepseekV4TopKRouter.forward = _router_fwd


def tag_layers(model):
    for i, layer in enumerate(model.model.layers):
        for m in layer.modules():
            m._ref_layer = i


def margins(cfg, seq_len):
    """Smallest gap between the k-th and (k+1)-th candidate of every top-k decision in the no-cache forward."""
    out = {}
    ratio = cfg.compress_rates[CSA]
    gaps, rel = [], []
    for layer, sc in REC.indexer_scores.items():
        sc = sc[0]  # [S, T]
        for p in range(seq_len):
            vis = (p + 1) // ratio
            if vis <= cfg.index_topk:
                continue
            v = torch.sort(sc[p, :vis], descending=True).values
            gap = float(v[cfg.index_topk - 1] - v[cfg.index_topk])
            gaps.append(gap)
            rel.append(gap / max(float(v.abs().max()), 1e-30))
    out["indexer_topk_decisions"] = len(gaps)
    out["indexer_min_gap"] = min(gaps) if gaps else None
    out["indexer_min_rel_gap"] = min(rel) if rel else None
    rg = []
    for layer, (sc, k) in REC.router.items():
        v = torch.sort(sc, dim=-1, descending=True).values
        rg.append(float((v[:, k - 1] - v[:, k]).min()))
    out["router_min_gap"] = min(rg) if rg else None
    return out


# --------------------------------------------------------------------------------------------------------------
# reference computation
# --------------------------------------------------------------------------------------------------------------
@torch.no_grad()
def full_forward(model, ids, device):
    x = torch.tensor([ids], dtype=torch.long, device=device)
    return model(input_ids=x, use_cache=False).logits[0].float()


@torch.no_grad()
def greedy(model, ids, device):
    x = torch.tensor([ids], dtype=torch.long, device=device)
    gc = model.generation_config
    gc = type(gc).from_dict(gc.to_dict())
    gc.eos_token_id = None  # never stop early: always N_GREEDY tokens
    gc.pad_token_id = 0
    gc.max_new_tokens = N_GREEDY
    gc.do_sample = False
    gc.use_cache = True
    gc.return_dict_in_generate = True
    gc.output_logits = True  # raw logits, before any logits processor
    out = model.generate(x, generation_config=gc)
    toks = out.sequences[0, len(ids):].tolist()
    assert len(toks) == N_GREEDY
    dec = torch.stack([lg[0].float() for lg in out.logits])  # [N_GREEDY, V]
    return toks, dec


@torch.no_grad()
def trace_forward(model, ids, device, full):
    """Intermediate tensors of the no-cache forward (for localizing engine mismatches)."""
    T = {}
    hooks = []

    def hook(name, fn):
        return lambda mod, args, kwargs, out: T.__setitem__(name, fn(args, kwargs, out))

    m = model.model
    if full:
        hooks.append(m.embed_tokens.register_forward_hook(
            lambda mod, a, out: T.__setitem__("embed", out[0].float().cpu().clone())))
    for i, layer in enumerate(m.layers):
        if full:
            hooks.append(layer.register_forward_hook(
                hook(f"layers.{i}.out", lambda a, k, o: o[0].float().cpu().clone()), with_kwargs=True))
            hooks.append(layer.self_attn.register_forward_hook(
                hook(f"layers.{i}.attn_in", lambda a, k, o: (a[0] if a else k["hidden_states"])[0]
                     .float().cpu().clone()), with_kwargs=True))
            hooks.append(layer.self_attn.register_forward_hook(
                hook(f"layers.{i}.attn_out", lambda a, k, o: o[0][0].float().cpu().clone()), with_kwargs=True))
            hooks.append(layer.mlp.register_forward_hook(
                hook(f"layers.{i}.mlp_in", lambda a, k, o: (a[0] if a else k["hidden_states"])[0]
                     .float().cpu().clone()), with_kwargs=True))
            hooks.append(layer.mlp.register_forward_hook(
                hook(f"layers.{i}.mlp_out", lambda a, k, o: o[0].float().cpu().clone()), with_kwargs=True))
        comp = layer.self_attn.compressor
        if isinstance(comp, mdv4.DeepseekV4CSACompressor):
            hooks.append(comp.indexer.register_forward_hook(
                hook(f"layers.{i}.indexer_topk", lambda a, k, o: o[0].cpu().clone()), with_kwargs=True))
        if comp is not None and full:
            hooks.append(comp.register_forward_hook(
                hook(f"layers.{i}.compressed_kv", lambda a, k, o: o[0][0, 0].float().cpu().clone()),
                with_kwargs=True))
    if full:
        hooks.append(m.norm.register_forward_hook(
            lambda mod, a, out: T.__setitem__("final_hidden", out[0].float().cpu().clone())))
    try:
        logits = full_forward(model, ids, device)
    finally:
        for h in hooks:
            h.remove()
    out = {}
    for k, v in T.items():
        if k.endswith("indexer_topk"):
            # top-k picks of each query as a set: ascending, invalid (-1) picks at the end
            v = v.to(torch.int64)
            big = torch.iinfo(torch.int64).max
            s = torch.sort(torch.where(v < 0, torch.full_like(v, big), v), dim=-1).values
            v = torch.where(s == big, torch.full_like(s, -1), s).to(torch.int32)
        out[k] = v.contiguous()
    return out, logits


def run_reference(model, prompts, device, want_trace):
    model.to(device)
    res = {"logits": [], "greedy": [], "decode_logits": [], "traces": [], "margins": [],
           "cache_vs_nocache_max_abs_diff": [], "greedy_argmax_consistent": []}
    cfg = model.config
    for i, ids in enumerate(prompts):
        REC.indexer_scores.clear()
        REC.router.clear()
        REC.active = True
        if want_trace:
            trace, logits = trace_forward(model, ids, device, full=(i == 0))
        else:
            trace, logits = None, full_forward(model, ids, device)
        REC.active = False
        toks, dec = greedy(model, ids, device)
        # consistency: no-cache forward over prompt + greedy tokens must reproduce the cached decode
        REC.indexer_scores.clear()
        REC.router.clear()
        REC.active = True
        ext = full_forward(model, ids + toks, device)
        REC.active = False
        mg = margins(cfg, len(ids) + N_GREEDY)
        ext_rows = ext[len(ids) - 1: len(ids) - 1 + N_GREEDY]
        top2 = torch.topk(ext_rows, 2, dim=-1).values
        mg["greedy_min_top1_margin"] = float((top2[:, 0] - top2[:, 1]).min())
        res["cache_vs_nocache_max_abs_diff"].append(float((ext_rows - dec).abs().max()))
        res["greedy_argmax_consistent"].append(ext_rows.argmax(-1).tolist() == toks)
        res["logits"].append(logits.cpu())
        res["greedy"].append(toks)
        res["decode_logits"].append(dec.cpu())
        res["traces"].append(trace)
        res["margins"].append(mg)
    model.to("cpu")
    return res


# --------------------------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------------------------
def build_model(name, spec):
    cfg = make_config(spec)
    torch.manual_seed(spec["seed"])
    model = DeepseekV4ForCausalLM(cfg).eval()
    kinds = randomize(model, spec["seed"])
    tag_layers(model)
    assert model.config._experts_implementation == "eager" and model.config._attn_implementation == "eager"
    return model, kinds


def save_model(model, out_dir, name):
    d = os.path.join(out_dir, name)
    ds = os.path.join(out_dir, name + "_sharded")
    for p in (d, ds):
        if os.path.isdir(p):
            shutil.rmtree(p)
    model.save_pretrained(d)
    files = sorted(os.listdir(d))
    assert "model.safetensors" in files and not any(f.endswith(".index.json") for f in files), files
    size = os.path.getsize(os.path.join(d, "model.safetensors"))
    assert size <= MAX_MODEL_BYTES, f"{name}: {size} bytes > {MAX_MODEL_BYTES}"
    model.save_pretrained(ds, max_shard_size=max(size // 4, 1))
    shards = [f for f in os.listdir(ds) if f.endswith(".safetensors")]
    assert len(shards) >= 3 and os.path.exists(os.path.join(ds, "model.safetensors.index.json")), shards
    hdr = write_keys(d)
    return d, ds, size, len(shards), hdr


UPSTREAM_TOP = {
    "embed_tokens.weight": "embed.weight",
    "hc_head.hc_fn": "hc_head_fn",
    "hc_head.hc_base": "hc_head_base",
    "hc_head.hc_scale": "hc_head_scale",
}


def upstream_name(k):
    """transformers 5.17 save_pretrained name -> DeepSeek's own checkpoint name (as in the real Flash files)."""
    if k.startswith("model."):
        k = k[len("model."):]
    k = UPSTREAM_TOP.get(k, k)
    # save_pretrained writes the main attention's kv_norm as "attn.norm" (reversed "\.norm\." rename);
    # upstream calls it "attn.kv_norm" (compressor norms stay "...compressor.norm").
    k = re.sub(r"^(layers\.\d+\.attn)\.norm\.weight$", r"\1.kv_norm.weight", k)
    return k


def legacy_config(hf_cfg_path):
    """config.json in the style of the real DeepSeek-V4-Flash root config (legacy keys), built from the
    transformers-written one: compress_ratios / num_hash_layers / qk_rope_head_dim / rope_scaling instead of
    layer_types / mlp_layer_types / partial_rotary_factor / rope_parameters."""
    cfg = json.load(open(hf_cfg_path))
    ratio = {S: 0, CSA: cfg["compress_rates"][CSA], HCA: cfg["compress_rates"][HCA]}
    mlp = cfg["mlp_layer_types"]
    n_hash = mlp.count("hash_moe")
    assert mlp == ["hash_moe"] * n_hash + ["moe"] * (len(mlp) - n_hash), "legacy config needs leading hash layers"
    out = {k: v for k, v in cfg.items() if k not in (
        "layer_types", "mlp_layer_types", "compress_rates", "rope_parameters", "partial_rotary_factor")}
    out["compress_ratios"] = [ratio[t] for t in cfg["layer_types"]]
    out["num_hash_layers"] = n_hash
    out["qk_rope_head_dim"] = cfg["qk_rope_head_dim"]
    rp = cfg["rope_parameters"]["compress"]
    if rp.get("rope_type") == "yarn":
        out["rope_scaling"] = {"type": "yarn", "factor": rp["factor"],
                               "original_max_position_embeddings": rp["original_max_position_embeddings"],
                               "beta_fast": rp["beta_fast"], "beta_slow": rp["beta_slow"]}
    return out


def save_upstream(out_dir, name):
    from safetensors.torch import load_file, save_file

    src = os.path.join(out_dir, name)
    dst = os.path.join(out_dir, name + "_upstream")
    if os.path.isdir(dst):
        shutil.rmtree(dst)
    os.makedirs(dst)
    sd = load_file(os.path.join(src, "model.safetensors"))
    usd = {upstream_name(k): v for k, v in sd.items()}
    assert len(usd) == len(sd)
    save_file(usd, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(dst, "config.json"), "w") as f:
        json.dump(legacy_config(os.path.join(src, "config.json")), f, indent=2)
        f.write("\n")
    write_keys(dst)
    return dst


@torch.no_grad()
def check_reload(model, path, probe):
    m2 = DeepseekV4ForCausalLM.from_pretrained(path, attn_implementation="eager", experts_implementation="eager",
                                               dtype=torch.float32).eval()
    assert m2.config._experts_implementation == "eager" and m2.config._attn_implementation == "eager"
    s1, s2 = model.state_dict(), m2.state_dict()
    assert set(s1) == set(s2), (set(s1) ^ set(s2))
    bad = [k for k in s1 if not torch.equal(s1[k], s2[k])]
    assert not bad, f"{path}: tensors differ after reload: {bad[:5]}"
    # non-persistent buffers (rotary inv_freq incl. YaRN) are recomputed at load: compare them too
    b1 = dict(model.named_buffers())
    b2 = dict(m2.named_buffers())
    assert all(torch.equal(b1[k], b2[k]) for k in b1), "buffers differ after reload"
    l1 = full_forward(model, probe, "cpu")
    l2 = full_forward(m2, probe, "cpu")
    assert torch.equal(l1, l2), f"{path}: logits differ after reload"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--no-cuda-compare", action="store_true",
                    help="do not run the CPU-vs-CUDA comparison (only matters when the device is cuda)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--self-compare", action="store_true", help=argparse.SUPPRESS)  # test the compare path on CPU
    args = ap.parse_args(argv)
    set_determinism()
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = torch.cuda.get_device_name(0) if device == "cuda" else None
    os.makedirs(args.out, exist_ok=True)
    summary = {}
    for name in args.models.split(","):
        t0 = time.time()
        spec = MODELS[name]
        model, kinds = build_model(name, spec)
        cfg = model.config
        d, ds, size, nshards, hdr = save_model(model, args.out, name)
        prompts = make_prompts(spec["seed"] + 1, spec["prompt_lengths"], cfg.vocab_size)
        du = save_upstream(args.out, name)
        for p in (d, ds, du):
            check_reload(model, p, prompts[0])
        res = run_reference(model, prompts, device, want_trace=True)
        cmp = None
        if (device == "cuda" and not args.no_cuda_compare) or args.self_compare:
            cpu = run_reference(model, prompts, "cpu", want_trace=False)
            cmp = {
                "cpu_vs_cuda_max_abs_diff": [float((a - b).abs().max()) for a, b in zip(res["logits"],
                                                                                        cpu["logits"])],
                "cpu_vs_cuda_decode_max_abs_diff": [float((a - b).abs().max()) for a, b in
                                                    zip(res["decode_logits"], cpu["decode_logits"])],
                "greedy_cpu_equals_cuda": [a == b for a, b in zip(res["greedy"], cpu["greedy"])],
            }
        files = []
        for i, (lg, dec, tr) in enumerate(zip(res["logits"], res["decode_logits"], res["traces"])):
            assert lg.shape == (len(prompts[i]), cfg.vocab_size)
            lg.numpy().astype("<f4").tofile(os.path.join(d, f"ref_logits_{i}.f32"))
            dec.numpy().astype("<f4").tofile(os.path.join(d, f"ref_decode_logits_{i}.f32"))
            files += [f"ref_logits_{i}.f32", f"ref_decode_logits_{i}.f32"]
            if tr:
                from safetensors.torch import save_file

                save_file(tr, os.path.join(d, f"ref_trace_{i}.safetensors"),
                          metadata={"info": json.dumps({"prompt_index": i, "device": device})})
                files.append(f"ref_trace_{i}.safetensors")
        ref = {
            "model": name,
            "prompts": prompts,
            "greedy": res["greedy"],
            "dtype": "float32",
            "attn_implementation": model.config._attn_implementation,
            "experts_implementation": model.config._experts_implementation,
            "device": device if device == "cpu" else f"cuda ({gpu})",
            "versions": versions(),
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
            "weight_seed": spec["seed"],
            "prompt_seed": spec["seed"] + 1,
            "vocab_size": cfg.vocab_size,
            "logits_files": [{"file": f"ref_logits_{i}.f32", "shape": [len(p), cfg.vocab_size],
                              "dtype": "float32-le", "what": "no-cache forward, every position"}
                             for i, p in enumerate(prompts)],
            "decode_logits_files": [{"file": f"ref_decode_logits_{i}.f32", "shape": [N_GREEDY, cfg.vocab_size],
                                     "dtype": "float32-le",
                                     "what": "model.generate (DynamicCache) scores; row j chose greedy[j]"}
                                    for i in range(len(prompts))],
            "max_abs_logit": [float(lg.abs().max()) for lg in res["logits"]],
            "cache_vs_nocache_max_abs_diff": res["cache_vs_nocache_max_abs_diff"],
            "greedy_argmax_consistent_with_nocache": res["greedy_argmax_consistent"],
            "cpu_vs_cuda_max_abs_diff": cmp["cpu_vs_cuda_max_abs_diff"] if cmp else None,
            "cpu_vs_cuda_decode_max_abs_diff": cmp["cpu_vs_cuda_decode_max_abs_diff"] if cmp else None,
            "greedy_cpu_equals_cuda": cmp["greedy_cpu_equals_cuda"] if cmp else None,
            "compared_devices": [device, "cpu"] if cmp else None,
            "topk_margins": res["margins"],
            "param_init": "matrices N(0,1/fan_in) (fan_in = last dim); RMSNorm weights 1+0.1N(0,1); "
                          "hc base/scale, sinks, position_bias (ape), gate bias 0.3N(0,1); tid2eid rows = "
                          "distinct random experts",
            "rope_inv_freq": {t: [float(v) for v in getattr(model.model.rotary_emb, f"{t}_inv_freq").tolist()]
                              for t in ("main", "compress")},
            "layer_types": cfg.layer_types,
            "mlp_layer_types": cfg.mlp_layer_types,
            "checkpoint_bytes": size,
            "sharded_files": nshards,
        }
        with open(os.path.join(d, "ref.json"), "w") as f:
            json.dump(ref, f, indent=1)
            f.write("\n")
        for sub in (d, ds, du):
            for fn in os.listdir(sub):
                os.chmod(os.path.join(sub, fn), 0o644)
        summary[name] = ref
        dt = time.time() - t0
        print(f"== {name}: {size} bytes, {len(hdr) - 1} tensors, {nshards} shards, {dt:.1f}s on {device}")
        for i, p in enumerate(prompts):
            mg = res["margins"][i]
            print(f"   prompt {i}: len {len(p)}  max|logit| {ref['max_abs_logit'][i]:.3f}  "
                  f"cache-vs-nocache {ref['cache_vs_nocache_max_abs_diff'][i]:.2e}  "
                  f"greedy-consistent {ref['greedy_argmax_consistent_with_nocache'][i]}  "
                  f"cpu-vs-cuda {None if not cmp else '%.2e' % cmp['cpu_vs_cuda_max_abs_diff'][i]}")
            print(f"             greedy {res['greedy'][i]}")
            print(f"             margins: indexer min gap {mg['indexer_min_gap']} (rel {mg['indexer_min_rel_gap']}, "
                  f"{mg['indexer_topk_decisions']} decisions), router min gap {mg['router_min_gap']}, "
                  f"greedy top1 margin {mg['greedy_min_top1_margin']:.3e}")
        for i, mg in enumerate(res["margins"]):
            warn = []
            if mg["indexer_min_rel_gap"] is not None and mg["indexer_min_rel_gap"] < 1e-5:
                warn.append("indexer top-k near-tie")
            if mg["router_min_gap"] is not None and mg["router_min_gap"] < 1e-5:
                warn.append("router top-k near-tie")
            if mg["greedy_min_top1_margin"] < 1e-4:
                warn.append("greedy top-1 near-tie")
            if not res["greedy_argmax_consistent"][i]:
                warn.append("cached greedy differs from no-cache argmax")
            if warn:
                print(f"   WARNING {name} prompt {i}: " + ", ".join(warn))
    return summary


if __name__ == "__main__":
    main()
