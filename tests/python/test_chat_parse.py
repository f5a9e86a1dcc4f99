# SPDX-License-Identifier: Apache-2.0
"""`deepinfer parse` (generated ids -> assistant message) against DeepSeek's `deepseek-recipe`
(0.2.0) on generated model outputs: content, reasoning_content, tool calls (name and argument
text) and finish_reason must be identical.

Known divergence, excluded from the generated outputs: deepseek-recipe 0.2.0 takes a DSML parameter
name from after `name=` up to the first space, quotes included, so `name="shipping address"` gives
invalid JSON (and an output cut right after `name=` already has `{` in its arguments). The
recipe's own upstream test (stream_tool_calls.rs, chat-format.md §3.2) expects the name to end at
its closing quote, which is what deepinfer does; names with spaces or quotes are therefore not generated, and outputs cut inside a
parameter tag are not compared."""
import json
import pathlib
import random
import re
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
V4_TOKENIZER = ROOT / "assets" / "tokenizer" / "deepseek-v4" / "tokenizer.json"
TOOLS = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
         for n in ("get_weather", "search", "f")]

WORDS = ["Hello", "world", "日本語", "😀", "é", "\n", "\n\n", " ", "\t", "a\"b", "back\\slash", "<", ">", "｜",
         "</th", "ink>", "```", "json", "{", "}", "[", "]", "END", "STOP", "\u0001", "/", "'", "x" * 30]


def words(rng, lo=0, hi=8):
    return "".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def dsml_block(rng, v41):
    calls_tag, inv, par = (" calls", " invoke", " parameter") if v41 else ("tool_calls", "invoke", "parameter")
    out = f"<｜DSML｜{calls_tag}>\n"
    for _ in range(rng.randint(0, 3)):
        out += f'<｜DSML｜{inv} name="{rng.choice(["get_weather", "search", "f", ""])}">\n'
        for _ in range(rng.randint(0, 3)):
            name = rng.choice(["city", "days", "q", "", "a_b", "名前"])  # no spaces: see module doc
            is_string = rng.random() < 0.6
            value = words(rng, 0, 4) if is_string else rng.choice(["1", "2.5", "true", "null", '{"k": [1, "v"]}',
                                                                   "[1,2]", "not json"])
            out += (f'<｜DSML｜{par} name="{name}" string="{"true" if is_string else "false"}">'
                    f"{value}</｜DSML｜{par}>\n")
        out += f"</｜DSML｜{inv}>\n"
    out += f"</｜DSML｜{calls_tag}>"
    return out


def random_case(rng):
    body = {"messages": [{"role": "user", "content": "json please"}]}
    thinking = rng.random() < 0.6
    if not thinking:
        body["thinking"] = {"type": "disabled"}
    tools = rng.random() < 0.6
    if tools:
        body["tools"] = TOOLS
        r = rng.random()
        if r < 0.15:
            body["tool_choice"] = "none"
        elif r < 0.3 and not thinking:
            body["tool_choice"] = "required"
    if rng.random() < 0.15 and not body.get("tool_choice") == "required":
        body["response_format"] = {"type": "json_object"}
    if rng.random() < 0.25:
        body["stop"] = rng.sample(["END", "STOP", "\n\nQ", "ab"], rng.randint(1, 2))
    if rng.random() < 0.1 and not tools and "response_format" not in body:
        body["messages"].append({"role": "assistant", "content": rng.choice(["", "Sure"]), "prefix": True,
                                 "reasoning_content": rng.choice(["", "partial"])})
    v41 = rng.random() < 0.5
    text = ""
    if thinking:
        text += rng.choice(["", "\n", "\n\n"]) + words(rng)
        if rng.random() < 0.1:
            text += " " + dsml_block(rng, v41)
        elif rng.random() < 0.9:
            text += rng.choice(["", "\n", "\n\n"]) + "</think>"
    text += rng.choice(["", "\n", "\n\n"]) + words(rng)
    if rng.random() < 0.15:
        text += rng.choice(["```json\n", "```\n", "{"]) + words(rng, 0, 3) + rng.choice(["", "\n```"]) + words(rng, 0, 3)
    if rng.random() < 0.5:
        text += rng.choice(["", "\n\n", "\n"]) + dsml_block(rng, v41)
        if rng.random() < 0.2:
            text += words(rng, 1, 3)
    if rng.random() < 0.15:
        text = text[:rng.randint(0, len(text))]  # cut anywhere (length limit)
    finish = rng.choice(["stop", "stop", "length", "content_filter"])
    return body, text, finish


def recipe_message(recipe, body, text, finish):
    req = recipe.ChatCompletionRequest(dict(body, model="DeepSeek-V4-Pro")).convert(recipe.ConversionOptions())
    gen = recipe.ChatCompletionRequest.chunk_generator(req, "r", "m")
    proc = recipe.StreamProcessor(gen, req.parsing_options)
    resp = recipe.ChatCompletionResponse("r", "m", 0, 0, 0)
    chunks = proc.push(recipe.InferenceChunk.ready())
    if text:
        chunks += proc.push(recipe.InferenceChunk.text(text, 1))
    if not proc.finished:
        reason = {"stop": recipe.InferenceFinishReason.Stop, "length": recipe.InferenceFinishReason.Length,
                  "content_filter": recipe.InferenceFinishReason.ContentFilter}[finish]
        chunks += proc.push(recipe.InferenceChunk.finish(reason))
    chunks += proc.finish()
    for c in chunks:
        resp.accumulate(c)
    choice = json.loads(resp.to_json())["choices"][0]
    return choice["message"], choice["finish_reason"]


def comparable(message, finish_reason):
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]
    return {"content": message.get("content"), "reasoning_content": message.get("reasoning_content"),
            "tool_calls": calls, "finish_reason": finish_reason}


@pytest.mark.parametrize("seed", [99, 100])
def test_parse_matches_deepseek_recipe(deepinfer_bin, tmp_path, seed):
    recipe = pytest.importorskip("deepseek_recipe")
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.Tokenizer.from_file(str(V4_TOKENIZER))
    rng = random.Random(seed)
    cases = [random_case(rng) for _ in range(600)]
    rows = []
    for body, text, finish in cases:
        ids = hf.encode(text, add_special_tokens=False).ids  # the model emits </think>, ｜DSML｜ as tokens
        rows.append({"ids": ids, "request": body, "finish": finish})
    inp = tmp_path / "outputs.jsonl"
    inp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    out = subprocess.run([deepinfer_bin, "parse", "--inputs", str(inp)], capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr.decode()
    lines = out.stdout.decode("utf-8").split("\n")[:-1]
    assert len(lines) == len(cases)
    failures, num_calls = [], 0
    for (body, text, finish), row, line in zip(cases, rows, lines):
        ours = json.loads(line)
        assert "error" not in ours, ours
        for c in ours.get("tool_calls", []):
            assert re.fullmatch(r"call_\d\d_[A-Za-z0-9]{24}", c["id"]), c["id"]
        num_calls += len(ours.get("tool_calls", []))
        if re.search(r'parameter name=[^>]*$', text):
            continue  # see the module docstring
        expected = comparable(*recipe_message(recipe, body, hf.decode(row["ids"], skip_special_tokens=False), finish))
        got = comparable(ours, ours["finish_reason"])
        if got != expected:
            failures.append((body, text, finish, expected, got))
    assert not failures, f"{len(failures)}/{len(cases)} differ; first: {failures[0]!r}"[:3000]
    assert num_calls > 100  # the generator exercises tool calls


def test_parse_cli_reports_malformed_tool_calls(deepinfer_bin):
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.Tokenizer.from_file(str(V4_TOKENIZER))
    text = 'Let me check.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="get_weather">\n<｜DSML｜parameter name="city" string="true">Par'
    ids = ",".join(map(str, hf.encode(text, add_special_tokens=False).ids))
    out = subprocess.run([deepinfer_bin, "parse", "--family", "v4", "--thinking", "off", "--ids", ids],
                         capture_output=True)
    assert out.returncode == 0, out.stderr
    msg = json.loads(out.stdout)
    assert msg["content"] == "Let me check."
    assert msg["finish_reason"] == "length"
    assert msg["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"city": "Par'}
    assert any("inside the tool-call block" in e for e in msg["parse_error"])
    out = subprocess.run([deepinfer_bin, "parse", "--family", "v4", "--ids", "1,x"], capture_output=True)
    assert out.returncode == 1 and b'"x" is not an integer' in out.stderr
