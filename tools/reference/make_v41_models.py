#!/usr/bin/env python3
"""Tiny random DeepSeek-V4.1 models + transformers reference outputs for deepinfer (issue 6).

Usage:
    python3 tools/reference/make_v41_models.py --out DIR [--device auto|cpu|cuda] [--no-cuda-compare]
                                               [--models v41_tiny_a,v41_tiny_b] [--tokenizer PATH]

Needs a transformers with `models/deepseek_v41` (DeepseekV41ForCausalLM; see tools/reference/README.md,
section "DeepSeek-V4.1"), torch, numpy, sympy, tokenizers, safetensors.

For each model NAME this writes
    DIR/NAME/            save_pretrained, one file (config.json, generation_config.json, model.safetensors)
    DIR/NAME/keys.txt    every tensor of model.safetensors: "<key> <safetensors dtype> [shape]", sorted
    DIR/NAME/ref.json    prompts, greedy continuations, versions, device, diagnostics (README.md)
    DIR/NAME/ref_logits_<i>.f32         logits of the one-shot prefill of prompt i at every position,
                                         little-endian float32, shape [len_i, vocab]
    DIR/NAME/ref_decode_logits_<i>.f32  logits of the 16 greedy steps of model.generate (cache on),
                                         float32 [16, vocab]; row j scored greedy token j
    DIR/NAME/ref_trace_<i>.safetensors  intermediate tensors of the prefill of prompt i (README.md)
    DIR/NAME_sharded/    save_pretrained with a small max_shard_size (>= 3 shards + index), model a only
    DIR/NAME_upstream/   the same weights under DeepSeek's published names (embed, head, norm, layers.N.*) and
                         a composite config.json in the published style (rope_scaling, engram_pad_token_id)

Every model exercises the V4.1 paths of spec deepseek-v41-model.md §1.4: window-only layers; a ratio-2 Full
layer and its Reuse layers; a ratio-1 Full layer (candidate source), a Reindex layer and Reuse layers; index
top-k that really selects and a candidate-block filter that really filters; ring wrap; Engram at a window-only
layer and at a Full layer, with n-grams blocked by position 0. The Engram hash uses the real DeepSeek
tokenizer (compressed vocabulary 99,092), so the engine's ICU token map and PCG64 multipliers are exercised.

NOTE (transformers' DeepseekV41 at 0a2080b4): its `use_cache=False` forward is wrong as soon as a model has two
KV sources (the per-forward `shared` dict concatenates the index keys and compressed KV of every source), so
the reference logits are those of a one-shot prefill WITH a fresh DynamicCache, the path generate() uses.
The script measures and records the difference (`nocache_vs_prefill_max_abs_diff`).

Everything is fp32 with eager attention. Weights are drawn from a fixed-seed CPU generator, so the saved
checkpoints are identical on every machine; the reference outputs are computed on CUDA when available
(--device auto) and, unless --no-cuda-compare, also on the CPU, and the difference is recorded in ref.json.
"""
import argparse
import datetime
import json
import math
import os
import shutil
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fixture_common import safetensors_header, set_determinism  # noqa: E402

import transformers  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402


def _import_deepseek_v41():
    """transformers.models.deepseek_v41 from the installed transformers, or else from the directory named by
    DEEPSEEK_V41_HF_SRC (a copy of that model package; tools/reference/README.md, section DeepSeek-V4.1)."""
    try:
        import transformers.models.deepseek_v41  # noqa: F401
        return
    except ImportError:
        pass
    src = os.environ.get("DEEPSEEK_V41_HF_SRC")
    if not src:
        sys.exit(f"transformers {transformers.__version__} has no models/deepseek_v41 and DEEPSEEK_V41_HF_SRC is "
                 "not set; see tools/reference/README.md, section DeepSeek-V4.1")
    import importlib.util

    name = "transformers.models.deepseek_v41"
    spec = importlib.util.spec_from_file_location(name, os.path.join(src, "__init__.py"),
                                                  submodule_search_locations=[src])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)


_import_deepseek_v41()
from transformers.cache_utils import DynamicCache  # noqa: E402
from transformers.models.deepseek_v41 import modeling_deepseek_v41 as mdv41  # noqa: E402
from transformers.models.deepseek_v41.configuration_deepseek_v41 import DeepseekV41Config  # noqa: E402
from transformers.models.deepseek_v41.modeling_deepseek_v41 import DeepseekV41ForCausalLM  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_TOKENIZER = os.path.join(ROOT, "assets", "tokenizer", "deepseek-v4", "tokenizer.json")
N_GREEDY = 16
MAX_MODEL_BYTES = 3.5 * 1024 * 1024

# --------------------------------------------------------------------------------------------------------------
# model definitions
# --------------------------------------------------------------------------------------------------------------
MODELS = {
    # Spec §1.4's recommended schedule: 0,1 window-only; 2 ratio-2 Full + 3 Reuse; 4 ratio-1 Full (candidate
    # source) + 5 Reuse, 6 Reindex + 7 Reuse. Candidates: 2 blocks of 4 (the filter engages past 8 visible
    # entries); index_topk 4 (<= 2*4 - 3). Engram at 1 (window-only) and 2 (Full), all three n-gram sizes.
    "v41_tiny_a": dict(
        seed=4101,
        prompt_lengths=[37, 96, 61],
        sharded=True,
        text=dict(
            vocab_size=512,
            hidden_size=64,
            num_hidden_layers=8,
            num_attention_heads=4,
            num_key_value_heads=1,
            head_dim=64,
            qk_rope_head_dim=16,
            q_lora_rank=32,
            o_groups=2,
            o_lora_rank=32,
            sliding_window=8,
            compress_ratios=[0, 0, 2, 2, 1, 1, 1, 1],
            kv_source_layer_ids=[2, 4],
            index_source_layer_ids=[2, 4, 6],
            candidate_source_layer_id=4,
            candidate_topk_blocks=2,
            candidate_block_size=4,
            index_n_heads=16,  # testing-notes.md: >= 16 heads, or ReLU ties make top-k device-dependent
            index_head_dim=32,
            index_topk=4,
            n_routed_experts=8,
            num_experts_per_tok=2,
            n_shared_experts=1,
            moe_intermediate_size=16,
            scoring_func="sqrtsoftplus",
            routed_scaling_factor=1.5,
            norm_topk_prob=True,
            swiglu_limit=10.0,
            hc_mult=4,
            hc_sinkhorn_iters=20,
            hc_eps=1e-6,
            rms_norm_eps=1e-20,
            rope_theta=10000.0,
            compress_rope_theta=160000.0,
            max_position_embeddings=4096,
            engram_layer_ids=[1, 2],
            engram_vocab_size=64,
            engram_num_embeddings=None,  # filled from the prime layout
            engram_max_ngram_size=4,
            engram_n_heads=2,
            engram_head_dim=32,
            engram_pad_id=2,
            engram_compressed_vocab_size=99092,
            num_nextn_predict_layers=0,
            dspark_noise_token_id=511,
            tie_word_embeddings=False,
        ),
    ),
    # A second schedule: two ratio-2 groups would need a second ratio-2 KV source, so instead a longer ratio-2
    # run (2 Full, 3-4 Reuse), a ratio-1 Full at 5 with two Reindex layers (7, 9), YaRN on the compressed
    # layers, hc_mult 2, 8 heads x 32 (rope 8), a bigger window, 4 candidate blocks of 8 (filter past 32
    # entries, index_topk 8 <= 32 - 7), Engram n-grams 2..3 with 3 heads at 1 (window-only) and 5 (ratio-1
    # Full), and a SwiGLU clamp that bites.
    "v41_tiny_b": dict(
        seed=4202,
        prompt_lengths=[37, 96, 61],
        sharded=False,
        text=dict(
            vocab_size=512,
            hidden_size=64,
            num_hidden_layers=10,
            num_attention_heads=8,
            num_key_value_heads=1,
            head_dim=32,
            qk_rope_head_dim=8,
            q_lora_rank=32,
            o_groups=4,
            o_lora_rank=16,
            sliding_window=16,
            compress_ratios=[0, 0, 2, 2, 2, 1, 1, 1, 1, 1],
            kv_source_layer_ids=[2, 5],
            index_source_layer_ids=[2, 5, 7, 9],
            candidate_source_layer_id=5,
            candidate_topk_blocks=4,
            candidate_block_size=8,
            index_n_heads=16,
            index_head_dim=32,
            index_topk=8,
            n_routed_experts=4,
            num_experts_per_tok=2,
            n_shared_experts=1,
            moe_intermediate_size=16,
            scoring_func="sqrtsoftplus",
            routed_scaling_factor=1.5,
            norm_topk_prob=True,
            swiglu_limit=1.0,  # small on purpose: the clamp is active for many values
            hc_mult=2,
            hc_sinkhorn_iters=20,
            hc_eps=1e-6,
            rms_norm_eps=1e-20,
            rope_theta=10000.0,
            compress_rope_theta=160000.0,
            # YaRN on ratio>0 layers only. rope dim 8, theta 160000, factor 4, original 1024.
            rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=1024, beta_fast=32.0,
                              beta_slow=1.0),
            max_position_embeddings=4096,  # = factor * original_max_position_embeddings
            engram_layer_ids=[1, 5],
            engram_vocab_size=100,
            engram_num_embeddings=None,
            engram_max_ngram_size=3,
            engram_n_heads=3,
            engram_head_dim=32,
            engram_pad_id=2,
            engram_compressed_vocab_size=99092,
            num_nextn_predict_layers=0,
            dspark_noise_token_id=511,
            tie_word_embeddings=False,
        ),
    ),
}


# --------------------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------------------
def versions():
    import safetensors
    import sympy
    import tokenizers

    return {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "transformers_deepseek_v41": getattr(mdv41, "__file__", None),
        "safetensors": safetensors.__version__,
        "tokenizers": tokenizers.__version__,
        "numpy": np.__version__,
        "sympy": sympy.__version__,
    }


def engram_rows(text):
    """engram_num_embeddings from transformers' own prime layout (spec §5.3)."""
    cfg = mdv41.DeepseekV41TextConfig(**{**text, "engram_num_embeddings": [1] * len(text["engram_layer_ids"])})
    layout = mdv41.EngramLayout.from_config(cfg)
    return [sum(p for per in layer for p in per) for layer in layout.primes]


def make_config(spec):
    text = dict(spec["text"])
    text["engram_num_embeddings"] = engram_rows(text)
    cfg = DeepseekV41Config(text_config=text, vision_config=None, dtype="float32")
    cfg.text_config._attn_implementation = "eager"
    cfg._attn_implementation = "eager"
    return cfg


def param_kind(name, t):
    """Randomization rule (testing-notes.md): matrices N(0, 1/fan_in), norm weights 1 + 0.1 N(0,1), other
    vectors (hc base/scale, sinks, gate bias/bias_vl) 0.3 N(0,1). Engram q/k weights (used only as their
    product, a per-channel gate weight) 1 + 0.3 N(0,1) so the gate is neither constant nor saturated; the Engram
    table scale is unused in a float model and set to 1."""
    if name.endswith("engram.embed.scale"):
        return "ones"
    if name.endswith("engram.q_weight") or name.endswith("engram.k_weight"):
        return "gate_weight"
    if t.dim() >= 2:
        return "matrix"
    leaf = name.split(".")[-2] if name.endswith(".weight") else ""
    if name.endswith(".weight") and leaf.endswith("norm"):
        return "norm"
    return "vector"


@torch.no_grad()
def randomize(model, seed):
    g = torch.Generator(device="cpu").manual_seed(seed)
    sd = model.state_dict()
    kinds = {}
    for name in sorted(sd):
        t = sd[name]
        kind = param_kind(name, t)
        kinds[name] = kind
        if kind == "matrix":
            t.copy_(torch.randn(t.shape, generator=g) / math.sqrt(t.shape[-1]))
        elif kind == "norm":
            t.copy_(1.0 + 0.1 * torch.randn(t.shape, generator=g))
        elif kind == "gate_weight":
            t.copy_(1.0 + 0.3 * torch.randn(t.shape, generator=g))
        elif kind == "ones":
            t.fill_(1.0)
        else:
            t.copy_(0.3 * torch.randn(t.shape, generator=g))
    assert set(kinds) == set(model.state_dict())
    return kinds


def write_keys(model_dir):
    hdr = safetensors_header(os.path.join(model_dir, "model.safetensors"))
    lines = [f"{k} {hdr[k]['dtype']} {json.dumps(hdr[k]['shape'], separators=(',', ''))}"
             for k in sorted(hdr) if k != "__metadata__"]
    with open(os.path.join(model_dir, "keys.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return hdr


MAX_PROMPT_ATTEMPTS = 100
CONDITION_RTOL = 4e-6  # fp32-vs-fp64 logits bound for a prompt to be kept (relative to max |logit|)
MIN_TOPK_GAP = 1e-5  # smallest router gap / relative indexer gap a kept prompt may have


@torch.no_grad()
def make_prompts(model, seed, lengths, vocab, device):
    """Random prompts (ids 3..vocab-1: no bos, eos or pad, so every n-gram position is a real token) that are
    well conditioned: the model's QAT fake quantizers (FP8/FP4 roundings, power-of-two scales) are
    discontinuous, and a prompt where one of their decisions sits within fp32 noise of a rounding boundary
    gives logits that change by up to O(1) between two correct fp32 implementations (transformers' own fp32
    and fp64 runs differ by 2.2 on such a prompt). A prompt is kept only if transformers' fp32 and fp64
    prefills of prompt + its 16 greedy tokens agree within CONDITION_RTOL x max|logit| (the fp32 prefill run on
    the CPU and, when `device` is CUDA, on the GPU too; fp64 on the CPU) and no indexer (relative) or router
    top-k decision of the CPU prefill is within MIN_TOPK_GAP of a tie."""
    import copy

    m64 = copy.deepcopy(model).double()
    m64.model.engram_hash_state = copy.deepcopy(model.model.engram_hash_state)
    rng = np.random.Generator(np.random.PCG64(seed))
    prompts, info = [], []
    for n in lengths:
        for attempt in range(1, MAX_PROMPT_ATTEMPTS + 1):
            ids = [int(v) for v in rng.integers(3, vocab, n)]
            toks, _ = greedy(model, ids, "cpu")
            REC.index_gaps.clear()
            REC.router_gaps.clear()
            REC.active = True
            a = prefill(model, ids + toks, "cpu")
            REC.active = False
            b = prefill(m64, ids + toks, "cpu").float()
            diff = float((a - b).abs().max())
            if device != "cpu":
                model.to(device)
                diff = max(diff, float((prefill(model, ids + toks, device).cpu() - b).abs().max()))
                model.to("cpu")
            gaps = [g for _, _, g in REC.index_gaps] + REC.router_gaps
            if diff <= CONDITION_RTOL * float(a.abs().max()) and min(gaps, default=1.0) >= MIN_TOPK_GAP:
                prompts.append(ids)
                info.append({"length": n, "attempts": attempt, "fp32_vs_fp64_max_abs_diff": diff})
                break
        else:
            sys.exit(f"no well-conditioned prompt of length {n} in {MAX_PROMPT_ATTEMPTS} attempts")
    return prompts, info


def load_tokenizer(path):
    tok = PreTrainedTokenizerFast(tokenizer_file=path)
    assert len(tok) == 129280, len(tok)
    return tok


# --------------------------------------------------------------------------------------------------------------
# diagnostics: what each index source selected, and how close every top-k decision is to a tie
# --------------------------------------------------------------------------------------------------------------
class Recorder:
    def __init__(self):
        self.active = False
        self.topk = {}  # layer -> bool [S, T] selected compressed entries (last call)
        self.candidates = {}  # candidate source layer -> bool [S, T]
        self.index_gaps = []  # (layer, gap, rel_gap)
        self.router_gaps = []
        self.decisions = 0


REC = Recorder()
_orig_indexer_fwd = mdv41.DeepseekV41Indexer.forward
_orig_router_fwd = mdv41.DeepseekV41TopKRouter.forward


@torch.no_grad()
def _index_scores(self, hidden_states, q_residual, position_ids, shared):
    """Recomputes the indexer's masked scores exactly as DeepseekV41Indexer.forward (diagnostics only)."""
    index_k = shared.get("index_k")
    if index_k is None or index_k.shape[2] == 0:
        return None
    batch, seq_len, _ = hidden_states.shape
    cos_q, sin_q = self.rotary_emb(hidden_states, position_ids=position_ids, layer_type="compress")
    q = self.wq_b(q_residual).view(batch, seq_len, self.num_heads, self.head_dim)
    q = mdv41._fake_quant_fp4_block(mdv41.apply_rotary_pos_emb(q, cos_q, sin_q), block_size=32)
    scores = torch.einsum("bshd,btd->bsht", q.float(), index_k[:, 0].float()).relu_() * self.softmax_scale
    weights = self.weights_proj(hidden_states).float() * self.heads_scaling
    s = (scores * weights.unsqueeze(-1)).sum(dim=2)
    n = index_k.shape[2]
    lens = (position_ids.long().unsqueeze(-1) + 1) // self.compress_ratio
    s = s.masked_fill(torch.arange(n, device=s.device).view(1, 1, -1) >= lens, float("-inf"))
    if self.uses_candidates and shared.get("candidates") is not None and not self.is_candidate_source:
        s = s.masked_fill(~shared["candidates"], float("-inf"))
    return s


def _indexer_fwd(self, hidden_states, q_residual, latent, first_group_position, position_ids, cache_layer, shared):
    out = _orig_indexer_fwd(self, hidden_states, q_residual, latent, first_group_position, position_ids,
                            cache_layer, shared)
    if REC.active and shared.get("topk_bias") is not None:
        REC.topk[self.layer_idx] = (shared["topk_bias"][0, 0] == 0).cpu().clone()
        if self.is_candidate_source:
            REC.candidates[self.layer_idx] = shared["candidates"][0].cpu().clone()
        s = _index_scores(self, hidden_states, q_residual, position_ids, shared)
        if s is not None:
            s = s[0].float().cpu()
            for p in range(s.shape[0]):
                v = torch.sort(s[p][torch.isfinite(s[p])], descending=True).values
                if v.numel() > self.index_topk:
                    REC.decisions += 1
                    gap = float(v[self.index_topk - 1] - v[self.index_topk])
                    REC.index_gaps.append((self.layer_idx, gap, gap / max(float(v.abs().max()), 1e-30)))
    return out


def _router_fwd(self, hidden_states, image_mask=None):
    weights, indices = _orig_router_fwd(self, hidden_states, image_mask)
    if REC.active:
        flat = hidden_states.reshape(-1, hidden_states.shape[-1]).float()
        scores = self.score_fn(torch.nn.functional.linear(flat, self.weight.float()) / self.gate_temp) + self.bias
        v = torch.sort(scores, dim=-1, descending=True).values
        REC.router_gaps.append(float((v[:, self.top_k - 1] - v[:, self.top_k]).min()))
    return weights, indices


mdv41.DeepseekV41Indexer.forward = _indexer_fwd
mdv41.DeepseekV41TopKRouter.forward = _router_fwd


# --------------------------------------------------------------------------------------------------------------
# reference computation
# --------------------------------------------------------------------------------------------------------------
@torch.no_grad()
def prefill(model, ids, device):
    """One-shot prefill with a fresh cache (see the NOTE in the module docstring): logits at every position."""
    x = torch.tensor([ids], dtype=torch.long, device=device)
    cache = DynamicCache(config=model.config)
    return model(input_ids=x, past_key_values=cache, use_cache=True).logits[0].float()


@torch.no_grad()
def nocache_forward(model, ids, device):
    x = torch.tensor([ids], dtype=torch.long, device=device)
    return model(input_ids=x, use_cache=False).logits[0].float()


@torch.no_grad()
def greedy(model, ids, device):
    x = torch.tensor([ids], dtype=torch.long, device=device)
    gc = model.generation_config
    gc = type(gc).from_dict(gc.to_dict())
    gc.eos_token_id = None
    gc.pad_token_id = 0
    gc.max_new_tokens = N_GREEDY
    gc.do_sample = False
    gc.use_cache = True
    gc.return_dict_in_generate = True
    gc.output_logits = True
    out = model.generate(x, attention_mask=torch.ones_like(x), generation_config=gc)
    toks = out.sequences[0, len(ids):].tolist()
    assert len(toks) == N_GREEDY
    dec = torch.stack([lg[0].float() for lg in out.logits])
    return toks, dec


@torch.no_grad()
def trace_prefill(model, ids, device, full):
    """Intermediate tensors of the prefill (for localizing engine mismatches)."""
    T = {}
    hooks = []

    def hook(name, fn):
        return lambda mod, args, kwargs, out: T.__setitem__(name, fn(args, kwargs, out))

    m = model.model
    if full:
        hooks.append(m.embed.register_forward_hook(
            lambda mod, a, out: T.__setitem__("embed", out[0].float().cpu().clone())))
        for i, layer in enumerate(m.layers):
            hooks.append(layer.register_forward_hook(
                hook(f"layers.{i}.out", lambda a, k, o: o[0][0].float().cpu().clone()), with_kwargs=True))
            hooks.append(layer.attn.register_forward_hook(
                hook(f"layers.{i}.attn_in", lambda a, k, o: (a[0] if a else k["hidden_states"])[0]
                     .float().cpu().clone()), with_kwargs=True))
            hooks.append(layer.attn.register_forward_hook(
                hook(f"layers.{i}.attn_out", lambda a, k, o: o[0][0].float().cpu().clone()), with_kwargs=True))
            hooks.append(layer.ffn.register_forward_hook(
                hook(f"layers.{i}.ffn_in", lambda a, k, o: (a[0] if a else k["hidden_states"])[0]
                     .float().cpu().clone()), with_kwargs=True))
            hooks.append(layer.ffn.register_forward_hook(
                hook(f"layers.{i}.ffn_out", lambda a, k, o: o[0].float().cpu().clone()), with_kwargs=True))
            if layer.engram is not None:
                hooks.append(layer.engram.register_forward_hook(
                    hook(f"layers.{i}.engram_out", lambda a, k, o: o[0].float().cpu().clone()), with_kwargs=True))
        hooks.append(m.norm.register_forward_hook(
            lambda mod, a, out: T.__setitem__("final_hidden", out[0].float().cpu().clone())))
    x = torch.tensor([ids], dtype=torch.long, device=device)
    cache = DynamicCache(config=model.config)
    REC.topk.clear()
    REC.candidates.clear()
    try:
        logits = model(input_ids=x, past_key_values=cache, use_cache=True).logits[0].float()
    finally:
        for h in hooks:
            h.remove()
    cfg = model.config
    for layer, sel in REC.topk.items():
        # the selected entries of every query as a set: ascending, -1 padded to index_topk
        n = sel.shape[-1]
        idx = torch.where(sel, torch.arange(n).expand_as(sel), torch.full_like(sel, n, dtype=torch.long))
        idx = torch.sort(idx, dim=-1).values[:, : cfg.index_topk]
        if idx.shape[-1] < cfg.index_topk:
            idx = torch.cat([idx, torch.full((idx.shape[0], cfg.index_topk - idx.shape[-1]), n)], dim=-1)
        T[f"layers.{layer}.indexer_topk"] = torch.where(idx == n, -1, idx).to(torch.int32)
    for layer, cand in REC.candidates.items():
        T[f"layers.{layer}.candidates"] = cand.to(torch.uint8)
    if full:
        for i, layer_cache in enumerate(cache.layers):
            if isinstance(layer_cache, mdv41.DeepseekV41CSACache):
                T[f"layers.{i}.compressed_kv"] = layer_cache.compressed_kv["compressor"][0, 0].float().cpu().clone()
                T[f"layers.{i}.index_keys"] = layer_cache.compressed_kv["indexer"][0, 0].float().cpu().clone()
        hs = m.engram_hash_state
        if hs is not None:
            pos = torch.arange(len(ids), device=device).unsqueeze(0)
            # hash ids of this prompt (the state's history was just written by the prefill)
            T["engram_hash_ids"] = hs(x, pos, None)[0].cpu().to(torch.int64).clone()
    return {k: v.contiguous() for k, v in T.items()}, logits


def run_reference(model, prompts, device, want_trace):
    model.to(device)
    res = {"logits": [], "greedy": [], "decode_logits": [], "traces": [], "margins": [],
           "cache_vs_prefill_max_abs_diff": [], "greedy_argmax_consistent": [], "nocache_vs_prefill": []}
    for i, ids in enumerate(prompts):
        REC.index_gaps.clear()
        REC.router_gaps.clear()
        REC.decisions = 0
        REC.active = True
        if want_trace:
            trace, logits = trace_prefill(model, ids, device, full=(i == 0))
        else:
            trace, logits = None, prefill(model, ids, device)
        REC.active = False
        res["nocache_vs_prefill"].append(float((nocache_forward(model, ids, device) - logits).abs().max()))
        toks, dec = greedy(model, ids, device)
        REC.active = True
        ext = prefill(model, ids + toks, device)
        REC.active = False
        ext_rows = ext[len(ids) - 1: len(ids) - 1 + N_GREEDY]
        top2 = torch.topk(ext_rows, 2, dim=-1).values
        gaps = REC.index_gaps
        mg = {
            "indexer_topk_decisions": REC.decisions,
            "indexer_min_gap": min(g for _, g, _ in gaps) if gaps else None,
            "indexer_min_rel_gap": min(r for _, _, r in gaps) if gaps else None,
            "router_min_gap": min(REC.router_gaps) if REC.router_gaps else None,
            "greedy_min_top1_margin": float((top2[:, 0] - top2[:, 1]).min()),
        }
        res["cache_vs_prefill_max_abs_diff"].append(float((ext_rows - dec).abs().max()))
        res["greedy_argmax_consistent"].append(ext_rows.argmax(-1).tolist() == toks)
        res["logits"].append(logits.cpu())
        res["greedy"].append(toks)
        res["decode_logits"].append(dec.cpu())
        res["traces"].append(trace)
        res["margins"].append(mg)
    model.to("cpu")
    return res


# --------------------------------------------------------------------------------------------------------------
# saving
# --------------------------------------------------------------------------------------------------------------
def build_model(spec, tokenizer):
    cfg = make_config(spec)
    torch.manual_seed(spec["seed"])
    model = DeepseekV41ForCausalLM(cfg).eval()
    kinds = randomize(model, spec["seed"])
    model.model.bind_tokenizer(tokenizer)
    assert model.config._attn_implementation == "eager"
    return model, kinds


def save_model(model, out_dir, name, sharded):
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
    nshards = 1
    if sharded:
        model.save_pretrained(ds, max_shard_size=max(size // 4, 1))
        shards = [f for f in os.listdir(ds) if f.endswith(".safetensors")]
        assert len(shards) >= 3 and os.path.exists(os.path.join(ds, "model.safetensors.index.json")), shards
        nshards = len(shards)
    hdr = write_keys(d)
    return d, (ds if sharded else None), size, nshards, hdr


def upstream_name(k):
    """transformers name -> DeepSeek's published name (spec §7.4: only four top-level renames)."""
    if k == "lm_head.weight":
        return "head.weight"
    if k.startswith("model."):
        return k[len("model."):]
    return k


def published_config(hf_cfg_path):
    """config.json in the published composite style (spec §1.1) from the flat text config transformers writes
    for DeepseekV41ForCausalLM: text keys under text_config (rope_theta/compress_rope_theta/rope_scaling instead
    of rope_parameters, no layer_types, engram_pad_token_id), ids and architecture at the root; fp32 weights, so
    no quantization_config."""
    cfg = json.load(open(hf_cfg_path))
    drop = ("rope_parameters", "layer_types", "architectures", "transformers_version", "dtype", "bos_token_id",
            "eos_token_id", "pad_token_id", "use_cache", "output_router_logits", "router_aux_loss_coef",
            "router_jitter_noise", "initializer_range", "rope_scaling")
    text = {k: v for k, v in cfg.items() if k not in drop}
    rp = cfg["rope_parameters"]
    text["rope_theta"] = rp["main"]["rope_theta"]
    text["compress_rope_theta"] = rp["compress"]["rope_theta"]
    if rp["compress"].get("rope_type") == "yarn":
        text["rope_scaling"] = {k: rp["compress"][k] for k in (
            "rope_type", "factor", "beta_fast", "beta_slow", "original_max_position_embeddings")}
    text["engram_pad_token_id"] = text.pop("engram_pad_id")
    return {"architectures": ["DeepseekV41ForCausalLM"], "model_type": "deepseek_v41", "dtype": "float32",
            "bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 2, "image_token_id": 129264, "text_config": text}


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
        json.dump(published_config(os.path.join(src, "config.json")), f, indent=2)
        f.write("\n")
    write_keys(dst)
    return dst


@torch.no_grad()
def check_reload(model, path, probe, tokenizer):
    # transformers saves DeepseekV41ForCausalLM's flat text config; its config_class is the composite
    # DeepseekV41Config, which would ignore a flat file and build the full-size default: wrap it explicitly.
    text_cfg = mdv41.DeepseekV41TextConfig.from_pretrained(path)
    cfg = DeepseekV41Config(text_config=text_cfg.to_dict(), vision_config=None)
    m2 = DeepseekV41ForCausalLM.from_pretrained(path, config=cfg, attn_implementation="eager",
                                                dtype=torch.float32).eval()
    m2.model.bind_tokenizer(tokenizer)
    s1, s2 = model.state_dict(), m2.state_dict()
    assert set(s1) == set(s2), (set(s1) ^ set(s2))
    bad = [k for k in s1 if not torch.equal(s1[k], s2[k])]
    assert not bad, f"{path}: tensors differ after reload: {bad[:5]}"
    b1, b2 = dict(model.named_buffers()), dict(m2.named_buffers())
    assert all(torch.equal(b1[k], b2[k]) for k in b1), "buffers differ after reload"
    # Bit-identical parameters; the logits may still differ in the last bits (CPU GEMM kernels pick their path
    # by pointer alignment, and safetensors-loaded storage is aligned differently).
    diff = float((prefill(model, probe, "cpu") - prefill(m2, probe, "cpu")).abs().max())
    assert diff <= 1e-5, f"{path}: logits differ by {diff} after reload"
    return diff


def engram_info(model):
    hs = model.model.engram_hash_state
    import hashlib

    tm = hs.token_map.cpu().numpy().astype("<i4")
    return {
        "token_map_size": int(len(tm)),
        "compressed_vocab_size": int(tm.max()) + 1,
        "token_map_sha256": hashlib.sha256(tm.tobytes()).hexdigest(),
        "pad_compressed_id": int(hs.pad_id),
        "primes": [[list(map(int, per)) for per in layer] for layer in hs.layout.primes],
        "offsets": hs.offsets.tolist(),
        "multipliers": hs.multipliers.tolist(),
        "num_embeddings": list(model.config.engram_num_embeddings),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--no-cuda-compare", action="store_true")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--tokenizer", default=DEFAULT_TOKENIZER, help="DeepSeek V4/V4.1 tokenizer.json")
    args = ap.parse_args(argv)
    set_determinism()
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = torch.cuda.get_device_name(0) if device == "cuda" else None
    os.makedirs(args.out, exist_ok=True)
    tokenizer = load_tokenizer(args.tokenizer)
    summary = {}
    for name in args.models.split(","):
        t0 = time.time()
        spec = MODELS[name]
        model, kinds = build_model(spec, tokenizer)
        cfg = model.config
        d, ds, size, nshards, hdr = save_model(model, args.out, name, spec["sharded"])
        prompts, prompt_info = make_prompts(model, spec["seed"] + 1, spec["prompt_lengths"], cfg.vocab_size, device)
        du = save_upstream(args.out, name)
        for p in [d] + ([ds] if ds else []):
            check_reload(model, p, prompts[0], tokenizer)
        res = run_reference(model, prompts, device, want_trace=True)
        cmp = None
        if device == "cuda" and not args.no_cuda_compare:
            cpu = run_reference(model, prompts, "cpu", want_trace=False)
            cmp = {
                "cpu_vs_cuda_max_abs_diff": [float((a - b).abs().max()) for a, b in zip(res["logits"], cpu["logits"])],
                "cpu_vs_cuda_decode_max_abs_diff": [float((a - b).abs().max()) for a, b in
                                                    zip(res["decode_logits"], cpu["decode_logits"])],
                "greedy_cpu_equals_cuda": [a == b for a, b in zip(res["greedy"], cpu["greedy"])],
            }
        from safetensors.torch import save_file

        for i, (lg, dec, tr) in enumerate(zip(res["logits"], res["decode_logits"], res["traces"])):
            assert lg.shape == (len(prompts[i]), cfg.vocab_size)
            lg.numpy().astype("<f4").tofile(os.path.join(d, f"ref_logits_{i}.f32"))
            dec.numpy().astype("<f4").tofile(os.path.join(d, f"ref_decode_logits_{i}.f32"))
            if tr:
                save_file(tr, os.path.join(d, f"ref_trace_{i}.safetensors"),
                          metadata={"info": json.dumps({"prompt_index": i, "device": device})})
        schedule = []
        for layer in range(cfg.num_hidden_layers):
            r = cfg.compress_ratios[layer]
            mode = ("window" if r == 0 else "full" if layer in cfg.kv_source_layer_ids else
                    "reindex" if layer in cfg.index_source_layer_ids else "reuse")
            schedule.append({"layer": layer, "ratio": r, "mode": mode,
                             "engram": layer in cfg.engram_layer_ids})
        ref = {
            "model": name,
            "prompts": prompts,
            "greedy": res["greedy"],
            "dtype": "float32",
            "attn_implementation": "eager",
            "device": device if device == "cpu" else f"cuda ({gpu})",
            "versions": versions(),
            "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
            "weight_seed": spec["seed"],
            "prompt_seed": spec["seed"] + 1,
            "prompt_selection": {"rule": f"fp32 (cpu and {device}) vs fp64 prefill of prompt + greedy <= "
                                         f"{CONDITION_RTOL} x max|logit|, "
                                         f"top-k gaps >= {MIN_TOPK_GAP}",
                                 "prompts": prompt_info},
            "vocab_size": cfg.vocab_size,
            "tokenizer": os.path.relpath(os.path.abspath(args.tokenizer), ROOT),
            "logits_files": [{"file": f"ref_logits_{i}.f32", "shape": [len(p), cfg.vocab_size], "dtype": "float32-le",
                              "what": "one-shot prefill with a fresh DynamicCache, every position"}
                             for i, p in enumerate(prompts)],
            "decode_logits_files": [{"file": f"ref_decode_logits_{i}.f32", "shape": [N_GREEDY, cfg.vocab_size],
                                     "dtype": "float32-le",
                                     "what": "model.generate (DynamicCache) scores; row j chose greedy[j]"}
                                    for i in range(len(prompts))],
            "max_abs_logit": [float(lg.abs().max()) for lg in res["logits"]],
            "cache_vs_prefill_max_abs_diff": res["cache_vs_prefill_max_abs_diff"],
            "greedy_argmax_consistent_with_prefill": res["greedy_argmax_consistent"],
            "nocache_vs_prefill_max_abs_diff": res["nocache_vs_prefill"],
            "cpu_vs_cuda_max_abs_diff": cmp["cpu_vs_cuda_max_abs_diff"] if cmp else None,
            "cpu_vs_cuda_decode_max_abs_diff": cmp["cpu_vs_cuda_decode_max_abs_diff"] if cmp else None,
            "greedy_cpu_equals_cuda": cmp["greedy_cpu_equals_cuda"] if cmp else None,
            "topk_margins": res["margins"],
            "param_init": "matrices N(0,1/fan_in) (fan_in = last dim); RMSNorm weights 1+0.1N(0,1); engram "
                          "q_weight/k_weight 1+0.3N(0,1); engram.embed.scale 1 (unused in fp32); hc base/scale, "
                          "sinks, gate bias/bias_vl 0.3N(0,1)",
            "rope_inv_freq": {t: [float(v) for v in getattr(model.model.rotary_emb, f"{t}_inv_freq").tolist()]
                              for t in ("main", "compress")},
            "schedule": schedule,
            "engram": engram_info(model),
            "checkpoint_bytes": size,
            "sharded_files": nshards,
        }
        with open(os.path.join(d, "ref.json"), "w") as f:
            json.dump(ref, f, indent=1)
            f.write("\n")
        for sub in [d, du] + ([ds] if ds else []):
            for fn in os.listdir(sub):
                os.chmod(os.path.join(sub, fn), 0o644)
        summary[name] = ref
        print(f"== {name}: {size} bytes, {len(hdr) - 1} tensors, {nshards} shards, {time.time() - t0:.1f}s on {device}")
        for i, p in enumerate(prompts):
            mg = res["margins"][i]
            print(f"   prompt {i}: len {len(p)}  max|logit| {ref['max_abs_logit'][i]:.3f}  "
                  f"cache-vs-prefill {ref['cache_vs_prefill_max_abs_diff'][i]:.2e}  "
                  f"greedy-consistent {res['greedy_argmax_consistent'][i]}  "
                  f"nocache-vs-prefill {res['nocache_vs_prefill'][i]:.2e}  "
                  f"cpu-vs-cuda {None if not cmp else '%.2e' % cmp['cpu_vs_cuda_max_abs_diff'][i]}")
            print(f"             greedy {res['greedy'][i]}")
            print(f"             margins: indexer min gap {mg['indexer_min_gap']} (rel {mg['indexer_min_rel_gap']}, "
                  f"{mg['indexer_topk_decisions']} decisions), router min gap {mg['router_min_gap']}, "
                  f"greedy top1 margin {mg['greedy_min_top1_margin']:.3e}")
            warn = []
            if mg["indexer_min_rel_gap"] is not None and mg["indexer_min_rel_gap"] < 1e-5:
                warn.append("indexer top-k near-tie")
            if mg["router_min_gap"] is not None and mg["router_min_gap"] < 1e-5:
                warn.append("router top-k near-tie")
            if mg["greedy_min_top1_margin"] < 1e-4:
                warn.append("greedy top-1 near-tie")
            if not res["greedy_argmax_consistent"][i]:
                warn.append("cached greedy differs from the prefill argmax")
            if warn:
                print(f"   WARNING {name} prompt {i}: " + ", ".join(warn))
    return summary


if __name__ == "__main__":
    main()
