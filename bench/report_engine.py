#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Issue 9's end-to-end table from one cuda_engine_bench run and the ceilings of the same call
(cuda_gemm_bench --only none): measured prefill and decode throughput beside the roofline of the same
configuration, per layer and scaled to the 43 layers of V4-Flash, and a PNG of decode tokens/s
against the batch with the roofline drawn.
   python3 bench/report_engine.py ENGINE.jsonl CEILINGS.jsonl [--out-md F.md] [--out-png F.png]

Roofline model (arithmetic on the published shapes; the bench measures, this only bounds):
- bytes of a decode step = per layer (its non-expert weights + the routed experts the batch touches,
  256 * (1 - (1 - 6/256)^B) in expectation for uniform routing, each 3 x 2048 x 4096 FP4 + ue8m0 scales)
  + the BF16 LM head + the state the step reads (an estimate: CSA layers read all 1,024 index keys
  and 512 selected entries of a 4K context plus the 128-token window, HCA layers their 32 entries
  plus the window, sliding layers the window; 576-byte entries, 132-byte index keys);
- FLOPs per token = 2 x active parameters (per layer ~142 M dense + 6 x 25.2 M expert) + sparse
  attention (64 heads x 512 dims x 2 matmuls over the candidates) + the LM head;
- a step's floor = max(bytes / measured copy bandwidth, FLOPs / measured FP8 dense rate).
With G GPUs (expert parallelism, `gpus` in the rows) the floor is one GPU's: each holds the non-expert
weights and the LM head (replicated), 1/G of the experts the batch touches and the state of ceil(B/G)
sequences, and does 1/G of the FLOPs; prefill's ceiling is G times one GPU's FP8 rate.
The per-layer non-expert bytes come from the checkpoint's size: (checkpoint - embedding - head) / layers
- 256 experts' bytes.

`family: v41` rows (cuda_engine_bench --family v41, the default model DeepSeek-V4.1-Flash): the same
model with its shapes (hidden 5120, 384 experts top-6 x 2304, 40 layers published) and its layer
schedule from the rows (`schedule`: ratios 0 / 2 / 1, KV and index sources, Engram layers); a layer's
state reads are its 128 window entries (528 B, FP8) plus, at ratio r > 0, the min(512, C/r) selected
compressed entries (288 B, FP4) and at index sources all C/r index keys (68 B) (spec deepseek-v41-model.md
§3.6, §10.1); its FLOPs per token are its linears' (as tools/cli/bench_v41_layers.cpp counts them) plus
the sparse attention and the indexer's scores. The floor counts the published formats' bytes (FP8 dense
linears); the engine uploads those as bf16 by default (CudaModelOptions::v41_fp8_native), which the
rows' weight_device_bytes shows. The Engram tables (pinned host memory, a few rows per token) are not
counted.
"""
import argparse
import json

HIDDEN, VOCAB, EXPERTS, TOPK, MOE_INTER = 4096, 129280, 256, 6, 2048
EXPERT_BYTES = 3 * MOE_INTER * HIDDEN * (0.5 + 1 / 32)  # FP4 values + one ue8m0 byte per 32
EMBED_BYTES = HEAD_BYTES = VOCAB * HIDDEN * 2
DENSE_PARAMS = 142e6          # wq_a, wq_b, wkv, wo_a, wo_b, shared expert, compressors, indexer (approx.)
EXPERT_PARAMS = 3 * MOE_INTER * HIDDEN
ENTRY, INDEX_KEY, WINDOW = 576, 132, 128


def flash_ratios(n):
    r = [0, 0] + [4, 128] * 20 + [4]
    return r[:n]


def state_read_bytes(ratios, context):
    b = 0
    for r in ratios:
        if r == 4:
            b += (context // 4) * INDEX_KEY + min(512, context // 4) * ENTRY
        elif r == 128:
            b += (context // 128) * ENTRY
        b += WINDOW * ENTRY
    return b


def attention_flops(ratios, context):
    f = 0
    for r in ratios:
        cand = WINDOW + (min(512, context // 4) if r == 4 else context // 128 if r == 128 else 0)
        f += 2 * 2 * 64 * 512 * cand
    return f


# DeepSeek-V4.1-Flash (family v41).
V41 = dict(hidden=5120, vocab=129280, experts=384, topk=6, inter=2304, layers=40, q=1280, heads=64, head_dim=512,
           o_rank=1024, o_groups=8, index_heads=32, index_dim=128, hc=4, engram_cols=3 * 8, engram_dim=256)
V41_WINDOW_ENTRY, V41_ENTRY, V41_INDEX_KEY = 528, 288, 68


def v41_published_schedule():
    return {"ratios": [0, 0] + [2] * 18 + [1] * 20, "kv_sources": [2, 8, 14, 20],
            "index_sources": [2, 8, 14, 20, 24, 28, 32, 36], "engram": [1, 14]}


def v41_layers(sched, context):
    """Per layer: (state bytes read at decode, attention + indexer FLOPs per token, linear MACs per token)."""
    c = V41
    D, Q, HD, Dh = c["hidden"], c["q"], c["heads"] * c["head_dim"], c["head_dim"]
    out = []
    for l, r in enumerate(sched["ratios"]):
        by = WINDOW * V41_WINDOW_ENTRY
        cand = WINDOW
        fl = 0
        m = D * Q + Q * HD + D * Dh + HD * c["o_rank"] + c["o_groups"] * c["o_rank"] * D
        if r > 0:
            sel = min(512, context // r)
            by += sel * V41_ENTRY
            cand += sel
        if l in sched["kv_sources"]:
            m += D * Dh * (2 if r > 1 else 1) + Dh * c["index_dim"] / r
        if l in sched["index_sources"]:
            by += (context // r) * V41_INDEX_KEY
            fl += 2 * c["index_heads"] * c["index_dim"] * (context // r)
            m += Q * c["index_heads"] * c["index_dim"] + D * c["index_heads"]
        if l in sched["engram"]:
            m += (c["hc"] + 1) * D * c["engram_cols"] * c["engram_dim"]
        m += (c["topk"] + 1) * 3 * D * c["inter"] + D * c["experts"]
        fl += 2 * 2 * c["heads"] * Dh * cand
        out.append((by, fl, m))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("engine")
    ap.add_argument("ceilings")
    ap.add_argument("--out-md")
    ap.add_argument("--out-png")
    a = ap.parse_args()
    rows = [json.loads(l) for l in open(a.engine) if l.startswith("{")]
    ceil = {json.loads(l)["impl"]: json.loads(l) for l in open(a.ceilings) if l.startswith("{")}
    copy_bw = ceil["cudaMemcpy_d2d"]["gbps"] * 1e9
    fp8 = ceil["cublaslt_fp8_tensor"]["tflops"] * 1e12
    n = rows[0]["num_layers"]
    v41 = rows[0].get("family", "v4") == "v41"
    gpus = int(rows[0].get("gpus", 1))
    if v41:
        hidden, vocab, experts, topk, total = V41["hidden"], V41["vocab"], V41["experts"], V41["topk"], V41["layers"]
        expert_bytes = 3 * V41["inter"] * hidden * (0.5 + 1 / 32)
        sched, sched_full = rows[0]["schedule"], v41_published_schedule()

        def state_read(sc, context):
            return sum(x[0] for x in v41_layers(sc, context))

        def flops_token(sc, context):  # all layers' and the head's FLOPs of one token
            return sum(x[1] + 2 * x[2] for x in v41_layers(sc, context)) + 2 * vocab * hidden
        model_name = "V4.1-Flash"
    else:
        hidden, vocab, experts, topk, total, expert_bytes = HIDDEN, VOCAB, EXPERTS, TOPK, 43, EXPERT_BYTES
        sched = rows[0].get("ratios") or (flash_ratios(n) if str(rows[0]["layers"]).startswith("flash") else None)
        sched_full = flash_ratios(43)

        def state_read(sc, context):
            return state_read_bytes(sc, context)

        def flops_token(sc, context):
            return len(sc) * 2 * (DENSE_PARAMS + TOPK * EXPERT_PARAMS) + attention_flops(sc, context) + 2 * VOCAB * HIDDEN
        model_name = "V4-Flash"
    head_bytes = vocab * hidden * 2  # (the embedding: as many bytes, not read by a step)
    weights = rows[0]["checkpoint_bytes"] - rows[0].get("engram_table_bytes", 0)
    layer_bytes = (weights - 2 * head_bytes) / n
    nonexpert = layer_bytes - experts * expert_bytes

    def floor_ms(batch, context, sc):
        layers = len(sc["ratios"]) if v41 else len(sc)
        touched = experts * (1 - (1 - topk / experts) ** batch) / gpus
        own = -(-batch // gpus)  # the sequences of the busiest GPU
        by = layers * (nonexpert + touched * expert_bytes) + head_bytes + own * state_read(sc, context)
        fl = batch * flops_token(sc, context) / gpus
        return 1e3 * max(by / copy_bw, fl / fp8), by, fl

    out = []
    out.append(f"Ceilings (same call, one GPU): copy {copy_bw / 1e9:,.0f} GB/s, cuBLASLt FP8 {fp8 / 1e12:,.0f} TFLOP/s. "
               f"GPUs: {gpus}{' (expert parallelism; floors are per GPU, see the header of bench/report_engine.py)' if gpus > 1 else ''}. "
               f"Model: {model_name}, {n} layers ({rows[0]['layers']}), {weights / 1e9:.1f} GB"
               f"{' (without the Engram tables)' if v41 else ''}; "
               f"{layer_bytes / 1e9:.3f} GB per layer ({nonexpert / 1e9:.3f} GB outside the routed experts).")
    out.append("")
    out.append(f"| measurement | measured | floor (roofline) | measured / floor | per layer | scaled to {total} layers |")
    out.append("|---|---|---|---|---|---|")
    pts = []
    routings = sorted({r.get("routing", "model") for r in rows if r["mode"] == "engine_decode"})
    for r in rows:
        if r["mode"] == "engine_prefill":
            ctx = r["prompt"] // 2  # mean context over a prompt's tokens
            fl_tok = flops_token(sched, ctx) - 2 * vocab * hidden + 2 * vocab * hidden / r["prompt"]
            ceil_tok = gpus * fp8 / fl_tok
            out.append(f"| prefill {r['requests']} x {r['prompt']} tokens | {r['tok_s']:,.0f} tok/s | {ceil_tok:,.0f} tok/s (FP8) | "
                       f"{r['tok_s'] / ceil_tok:.1%} of the ceiling | {r['tok_s'] * n:,.0f} layer-tok/s | {r['tok_s'] * n / total:,.0f} tok/s |")
        elif r["mode"] == "engine_decode":
            b, ctx = r["batch"], r["context"]
            f_ms, _, _ = floor_ms(b, ctx, sched)
            f43, _, _ = floor_ms(b, ctx, sched_full)
            ms = r["ms_per_step"]
            per_layer = ms / n
            steps, per_req = r["decode_steps"], r["tokens"] / b
            note = "" if steps <= 1.05 * per_req + 0.5 else f" ({steps} steps for {per_req:.1f} tokens each: staggered starts)"
            how = f", {r.get('routing', 'model')} routing" if len(routings) > 1 else ""
            out.append(f"| decode b{b}, {ctx} context{how} | {ms:.2f} ms/step, {r['tok_s']:,.0f} tok/s{note} | {f_ms:.2f} ms | "
                       f"{ms / f_ms:.1f}x | {per_layer:.3f} ms | {per_layer * total:.1f} ms/step, {r['tok_s'] * n / total:,.0f} tok/s "
                       f"(floor {f43:.2f} ms) |")
            pts.append((b, r["tok_s"], b / (f_ms * 1e-3), r.get("gpu_idle_fraction", 0), r.get("routing", "model"),
                        r.get("experts_touched_frac"), r.get("expert_max_over_mean")))
    # Beside SGLang's published 4xH200 figure for V4-Flash (4,550 total tok/s per GPU at 8K input / 1K
    # output): the same mix derived from this run's separate prefill and best decode rates per GPU
    # (not a mixed-workload measurement; scaled to 43 layers by the per-layer times).
    pre = [r for r in rows if r["mode"] == "engine_prefill"]
    dec = [r for r in rows if r["mode"] == "engine_decode"]
    for routing in routings if pre and dec and not v41 else []:
        p43 = pre[0]["tok_s_per_gpu"] * n / 43
        d43 = max(r["tok_s_per_gpu"] * n / 43 for r in dec if r.get("routing", "model") == routing)
        mix = (8192 + 1024) / (8192 / p43 + 1024 / d43)
        how = f" ({routing} routing at decode)" if len(routings) > 1 else ""
        out.append("")
        out.append(f"8K-in / 1K-out mix{how}, derived (not measured as a mix), 43 layers, per GPU ({gpus} GPU{'s' if gpus > 1 else ''}): "
                   f"{mix:,.0f} total tok/s (prefill {p43:,.0f}, best decode {d43:,.0f} tok/s per GPU); "
                   f"SGLang's published 4xH200 figure: 4,550 total tok/s per GPU.")
    out.append("")
    out.append("GPU idle fraction between steps (CUDA events): " +
               ", ".join(f"b{p[0]}{'/' + p[4] if len(routings) > 1 else ''} {p[3]:.2%}" for p in pts) + ".")
    # (rows from cuda_engine_bench since session 37: sequences preempted inside the timed decode steps)
    pre_rows = [r for r in dec if "preemptions" in r]
    if pre_rows:
        # (the engine's host state pool: a CUDA model keeps its pages on the device, so its peak stays 0 there;
        # rows since session 38 carry the device pool's pages, peak since load)
        pool = [r for r in pre_rows if r.get("pool_pages_peak", 0) > 0]
        dev_pool = [r for r in pre_rows if r.get("device_state_pages", 0) > 0]
        out.append("Preemptions inside the timed decode steps (a step with any is not one decode step of the whole "
                   "batch): " + ", ".join(f"b{r['batch']} {r['preemptions']}" for r in pre_rows) +
                   ("; host state-pool peak / capacity pages: " +
                    ", ".join(f"b{r['batch']} {r['pool_pages_peak']:,} / {r['pool_pages_capacity']:,}" for r in pool) if pool else "") +
                   ("; device state-pool pages, most in use since load / all: " +
                    ", ".join(f"b{r['batch']} {r['device_state_pages_peak']:,} / {r['device_state_pages']:,}" for r in dev_pool)
                    if dev_pool else "") + ".")
    # (rows since session 38: whether every timed step decoded the whole batch, tokens == batch x steps; before
    # it the timed window could start while the last prompts' tails were still in prefill)
    full_rows = [r for r in dec if "full_batch_steps" in r]
    if full_rows:
        out.append("Timed decode steps of the whole batch (tokens = batch x steps): " +
                   ", ".join(f"b{r['batch']} {'yes' if r['full_batch_steps'] else 'NO'} ({r['tokens']:,} tokens in "
                             f"{r['decode_steps']} steps)" for r in full_rows) + ".")
    loads = [p for p in pts if p[5] is not None]
    if loads:
        out.append("Expert load at decode (share of each layer's experts given rows; busiest expert's rows over the "
                   "mean, 1 = even): " + ", ".join(f"b{p[0]} {p[4]} {p[5]:.0%} / {p[6]:.1f}x" for p in loads) +
                   ". The floors assume a trained model's balanced routing (every expert's share even); `model` is the "
                   "random router's choice, `even` spreads the rows evenly (cuda_engine_bench --routing).")
    if pre and pre[0].get("experts_touched_frac") is not None:
        out.append(f"Expert load at prefill: {pre[0]['experts_touched_frac']:.0%} of the experts given rows, busiest "
                   f"{pre[0]['expert_max_over_mean']:.1f}x the mean.")
    out.append("Scaled to {t} layers = measured per-layer time x {t} (LM head and sampling counted {t}/{n} times: an "
               "upper bound on the step time); tok/s scaled = measured tok/s x {n}/{t} (tokens over the timed "
               "wall time, so staggered starts count against it).".format(t=total, n=n))
    if v41:
        out.append("V4.1: the measured layers mix the published layer kinds in proportion (v41_flash_layers in synthetic_v41.h); "
                   "their per-layer mean stands for the 40 published layers' (the floors use each schedule's own "
                   "kinds). Device weight bytes as run: {:.1f} GB (dense FP8 linears uploaded as bf16).".format(
                       rows[0].get("weight_device_bytes", 0) / 1e9))
    text = "\n".join(out)
    print(text)
    if a.out_md:
        open(a.out_md, "w").write(text + "\n")
    if a.out_png and pts:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4.5))
        xs = [p[0] for p in pts]
        for routing in routings:
            sel = [p for p in pts if p[4] == routing]
            ax.plot([p[0] for p in sel], [p[1] for p in sel], marker="o",
                    label="measured (offline engine)" + (f", {routing} routing" if len(routings) > 1 else ""))
        fine = sorted(set([1] + [2 ** k for k in range(0, 10)] + xs))
        ax.plot(fine, [b / (floor_ms(b, pts[0] and rows[-1]["context"], sched)[0] * 1e-3) for b in fine],
                ls="--", color="k", label="roofline (max of HBM and FP8 floors)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("decode batch (sequences, 4K-token contexts)")
        ax.set_ylabel("decode tokens/s (one H200)" if gpus == 1 else f"decode tokens/s ({gpus} H200s together)")
        ax.set_title(f"{model_name}-shaped model, {n} full-width layers, {gpus} x H200")
        if gpus > 1 and n == 43 and not v41:
            # SGLang's published V4-Flash figure on 4xH200 (8K in / 1K out, total tokens/s per GPU) times G:
            # a mixed-workload figure, drawn for scale only.
            ax.axhline(4550 * gpus, color="tab:red", ls=":", label=f"SGLang 4xH200 mix: 4,550 tok/s per GPU x {gpus}")
        ax.grid(alpha=0.3, which="both")
        ax.legend()
        fig.tight_layout()
        fig.savefig(a.out_png, dpi=120)


if __name__ == "__main__":
    main()
