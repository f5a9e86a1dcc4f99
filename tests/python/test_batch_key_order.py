# SPDX-License-Identifier: Apache-2.0
"""`deepinfer run` renders a request as the client wrote it: a tool's parameter schema keeps its key
order (DeepSeek's recipe prints the schema JSON as given), so the prompt the batch runner builds equals
deepseek-recipe's. `render --batch` runs each line through the batch runner's own request preparation."""
import json
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
V4_TOKENIZER = ROOT / "assets" / "tokenizer" / "deepseek-v4" / "tokenizer.json"

# Keys deliberately out of alphabetical order at every level of the tool and of the schema.
TOOL = {"type": "function", "function": {
    "parameters": {"required": ["zeta"], "type": "object",
                   "properties": {"zeta": {"type": "string", "description": "first"},
                                  "alpha": {"type": "integer", "minimum": 0, "description": "second"},
                                  "mid": {"type": "object", "properties": {"y": {"type": "boolean"}, "b": {"type": "number"}}}}},
    "name": "lookup", "description": "Looks things up."}}


def body():
    return {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Oslo?"}],
            "tools": [TOOL], "max_tokens": 2, "temperature": 0}


def recipe_prompt(recipe):
    enc = recipe.DeepseekV4Encoding().with_tokenizer(recipe.Tokenizer.from_file(str(V4_TOKENIZER)))
    conv = recipe.ChatCompletionRequest(dict(body(), model="DeepSeek-V4-Pro")).convert(recipe.ConversionOptions())
    return enc.render_conversation(conv.conversation).prompt, enc.encode(conv.conversation)


def test_tool_schema_keeps_the_clients_key_order(deepinfer_bin, tmp_path):
    recipe = pytest.importorskip("deepseek_recipe")
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"custom_id": "t", "method": "POST", "url": "/v1/chat/completions", "body": body()}) + "\n")
    out = subprocess.run([deepinfer_bin, "render", "--family", "v4", "--tokenizer", str(V4_TOKENIZER), "--batch",
                          str(inp)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    prompt, ids = recipe_prompt(recipe)
    # The order is visible in the prompt (a sorted dump would put "alpha" first).
    assert prompt.index('"zeta"') < prompt.index('"alpha"') < prompt.index('"mid"')
    assert prompt.index('"required"') < prompt.index('"type": "object"')
    assert got["custom_id"] == "t"
    assert got["prompt"] == prompt
    assert got["ids"] == ids


def test_run_uses_the_same_prompt(deepinfer_bin, tmp_path):
    recipe = pytest.importorskip("deepseek_recipe")
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"custom_id": "t", "method": "POST", "url": "/v1/chat/completions", "body": body()}) + "\n")
    out = tmp_path / "out.jsonl"
    proc = subprocess.run([deepinfer_bin, "run", "--input", str(inp), "--output", str(out), "--cache-dir",
                           str(tmp_path / "cache"), "--model", "embedded:v4", "--progress", "never"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(out.read_text())
    assert rec["error"] is None
    assert rec["response"]["body"]["usage"]["prompt_tokens"] == len(recipe_prompt(recipe)[1])
