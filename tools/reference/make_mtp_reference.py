# SPDX-License-Identifier: Apache-2.0
"""Reference for the MTP (next-n prediction) block, built from transformers' own modules.

transformers has no MTP block, so this script assembles one from DeepseekV4 pieces exactly as
deepseek-v4-model.md §2.17 describes it: e = enorm(embed(t')), hs = hnorm(X) per stream,
Xm = e_proj(e) + h_proj(hs), Xm = DecoderLayer(Xm) (sliding attention, score-routed MoE),
logits = head(norm(hc_head(Xm))). X is the main model's final HC state (before its hc_head), taken
with a forward hook; the pairing is the V3 convention: state of position i + token at i+1, RoPE
position i.

Reads the committed fixture tests/data/models/v4_tiny_a (DeepSeek-named copy: v4_tiny_a_upstream),
adds a random `mtp.0.*` block and writes DIR/v4_tiny_a_mtp/ (config.json with
num_nextn_predict_layers=1, model.safetensors, mtp_ref.json, mtp_logits.f32 [S-1, vocab]).

Run: python3 tools/reference/make_mtp_reference.py --fixtures tests/data/models --out DIR
"""
import argparse
import json
import math
import os
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_v4_models as mv  # noqa: E402
from transformers import DeepseekV4Config, DeepseekV4ForCausalLM  # noqa: E402
from transformers.models.deepseek_v4.modeling_deepseek_v4 import (  # noqa: E402
    DeepseekV4HyperHead, DeepseekV4RMSNorm)

SEED = 4242


@torch.no_grad()
def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--fixtures", required=True, help="tests/data/models")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    mv.set_determinism()
    src = os.path.join(args.fixtures, "v4_tiny_a")
    main_model = DeepseekV4ForCausalLM.from_pretrained(src, attn_implementation="eager",
                                                       experts_implementation="eager", dtype=torch.float32).eval()
    cfg = main_model.config
    D, hc, V = cfg.hidden_size, cfg.hc_mult, cfg.vocab_size
    ref = json.load(open(os.path.join(src, "ref.json")))
    ids = torch.tensor([ref["prompts"][1]])  # 300 tokens: the window fills
    S = ids.shape[1]

    # The MTP block: a one-layer model's layer (sliding attention, score-routed MoE), randomized.
    c1 = dict(cfg.to_dict())
    for k in ("layer_types", "mlp_layer_types", "num_hidden_layers", "architectures", "transformers_version",
              "model_type", "_name_or_path", "dtype", "torch_dtype"):
        c1.pop(k, None)
    c1.update(num_hidden_layers=1, layer_types=["sliding_attention"], mlp_layer_types=["moe"])
    one = DeepseekV4ForCausalLM(DeepseekV4Config(**c1, dtype="float32", attn_implementation="eager",
                                                 experts_implementation="eager")).eval()
    one.config._attn_implementation = "eager"
    one.config._experts_implementation = "eager"
    mv.randomize(one, SEED)
    layer = one.model.layers[0]

    g = torch.Generator().manual_seed(SEED + 1)
    extra = {
        "e_proj.weight": torch.randn(D, D, generator=g) / math.sqrt(D),
        "h_proj.weight": torch.randn(D, D, generator=g) / math.sqrt(D),
        "enorm.weight": 1 + 0.1 * torch.randn(D, generator=g),
        "hnorm.weight": 1 + 0.1 * torch.randn(D, generator=g),
        "norm.weight": 1 + 0.1 * torch.randn(D, generator=g),
        "hc_head_fn": torch.randn(hc, hc * D, generator=g) / math.sqrt(hc * D),
        "hc_head_base": 0.3 * torch.randn(hc, generator=g),
        "hc_head_scale": 0.3 * torch.randn(1, generator=g),
    }

    # Main model's final HC streams (output of the last decoder layer).
    captured = {}
    main_model.model.layers[-1].register_forward_hook(lambda m, i, o: captured.__setitem__("x", o))
    main_model(ids, use_cache=False)
    X = captured["x"][:, : S - 1]  # [1, S-1, hc, D]
    t_next = ids[:, 1:]
    pos = torch.arange(S - 1).unsqueeze(0)

    def rms(w, x):
        n = DeepseekV4RMSNorm(D, eps=cfg.rms_norm_eps)
        n.weight.copy_(w)
        return n(x)

    e = rms(extra["enorm.weight"], main_model.model.embed_tokens(t_next))
    hs = rms(extra["hnorm.weight"], X)
    xm = (e @ extra["e_proj.weight"].T).unsqueeze(2) + hs @ extra["h_proj.weight"].T
    pe = {k: main_model.model.rotary_emb(e, position_ids=pos, layer_type=k) for k in ("main", "compress")}
    q = torch.arange(S - 1)
    allowed = (q[:, None] >= q[None, :]) & (q[:, None] - q[None, :] < cfg.sliding_window)
    mask = torch.zeros(1, 1, S - 1, S - 1).masked_fill(~allowed, float("-inf"))
    xm = layer(xm, position_embeddings=pe, position_ids=pos, attention_mask=mask, input_ids=t_next,
               past_key_values=None)
    head = DeepseekV4HyperHead(cfg)
    head.hc_fn.copy_(extra["hc_head_fn"])
    head.hc_base.copy_(extra["hc_head_base"])
    head.hc_scale.copy_(extra["hc_head_scale"])
    y = rms(extra["norm.weight"], head(xm))
    logits = main_model.lm_head(y)[0].contiguous()  # [S-1, V]

    # Checkpoint: the DeepSeek-named main weights + mtp.0.* (layer names from a save_pretrained round trip).
    out = os.path.join(args.out, "v4_tiny_a_mtp")
    os.makedirs(out, exist_ok=True)
    tensors = load_file(os.path.join(args.fixtures, "v4_tiny_a_upstream", "model.safetensors"))
    with tempfile.TemporaryDirectory() as tmp:
        one.save_pretrained(tmp)
        for k, v in load_file(os.path.join(tmp, "model.safetensors")).items():
            name = mv.upstream_name(k)
            if name.startswith("layers.0."):
                tensors["mtp.0." + name[len("layers.0."):]] = v.contiguous()
    for k, v in extra.items():
        tensors["mtp.0." + k] = v.contiguous()
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    config = json.load(open(os.path.join(args.fixtures, "v4_tiny_a_upstream", "config.json")))
    config["num_nextn_predict_layers"] = 1
    config["compress_ratios"] = config["compress_ratios"] + [0]
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    logits.numpy().astype("<f4").tofile(os.path.join(out, "mtp_logits.f32"))
    with open(os.path.join(out, "mtp_ref.json"), "w") as f:
        json.dump({"prompt": ids[0].tolist(), "pairing": "state of position i + token i+1, rope position i",
                   "rows": S - 1, "vocab": V, "max_abs_logit": float(logits.abs().max()),
                   "versions": mv.versions(), "seed": SEED}, f, indent=1)
    print("wrote", out, "rows", S - 1, "max|logit|", float(logits.abs().max()))


if __name__ == "__main__":
    main()
