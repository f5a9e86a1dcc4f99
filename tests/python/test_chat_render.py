# SPDX-License-Identifier: Apache-2.0
"""`deepinfer render` against the golden prompts of chat-format.md §2.9 and against DeepSeek's own
`deepseek-recipe` (0.2.0) on many generated requests: identical prompt text, identical token ids,
and an error exactly where the recipe rejects the request."""
import json
import pathlib
import random
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
CHAT_DATA = ROOT / "tests" / "data" / "chat"
V4_TOKENIZER = ROOT / "assets" / "tokenizer" / "deepseek-v4" / "tokenizer.json"
MODEL = {"v4": "DeepSeek-V4-Pro", "v41": "DeepSeek-V4.1-Flash"}
# V4.1's tokenizer.json is not public; the one the tests use is V4's with <｜System｜> at 128799
# (where a third-party V4.1 fixture puts it). Both sides encode with the same file, so the
# comparison is exact whatever the real id is.
V41_SYSTEM_ID = 128799


@pytest.fixture(scope="module")
def v41_tokenizer(tmp_path_factory):
    j = json.loads(V4_TOKENIZER.read_text(encoding="utf-8"))
    for t in j["added_tokens"]:
        if t["id"] == V41_SYSTEM_ID:
            t.update(content="<｜System｜>", special=False, normalized=True)
    path = tmp_path_factory.mktemp("v41") / "tokenizer.json"
    path.write_text(json.dumps(j, ensure_ascii=False), encoding="utf-8")
    return path


def tokenizer_for(family, v41_tokenizer):
    return V4_TOKENIZER if family == "v4" else v41_tokenizer


def render_many(bin_path, family, tok_path, bodies, tmp_path):
    req = tmp_path / f"requests-{family}.jsonl"
    req.write_text("".join(json.dumps(b, ensure_ascii=False) + "\n" for b in bodies), encoding="utf-8")
    out = subprocess.run([bin_path, "--log-level", "error", "render", "--family", family, "--tokenizer",
                          str(tok_path), "--requests", str(req)], capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr.decode()
    lines = out.stdout.decode("utf-8").split("\n")[:-1]
    assert len(lines) == len(bodies)
    return [json.loads(line) for line in lines]


# ---- Golden prompts (chat-format.md §2.9) ------------------------------------------------------

EXAMPLES = [(1, "v4"), (2, "v4"), (3, "v4"), (4, "v41"), (5, "v41"), (6, "v41")]


@pytest.mark.parametrize("number,family", EXAMPLES)
def test_golden_examples(deepinfer_bin, v41_tokenizer, number, family, tmp_path):
    body = json.loads((CHAT_DATA / f"example{number}.request.json").read_text(encoding="utf-8"))
    expected = (CHAT_DATA / f"example{number}.{family}.prompt.txt").read_text(encoding="utf-8")
    out = subprocess.run([deepinfer_bin, "render", "--family", family, "--tokenizer",
                          str(tokenizer_for(family, v41_tokenizer)), "--request",
                          str(CHAT_DATA / f"example{number}.request.json")], capture_output=True)
    assert out.returncode == 0, out.stderr.decode()
    got = json.loads(out.stdout)
    assert list(got) == ["prompt", "ids"]
    assert got["prompt"] == expected
    if number == 1:  # §1.3
        assert got["ids"] == [0, 3476, 477, 260, 11502, 22896, 16, 128803, 19923, 128804, 128822]
    recipe = pytest.importorskip("deepseek_recipe")
    body["model"] = MODEL[family]
    assert recipe_render(recipe, body, family, tokenizer_for(family, v41_tokenizer)) == got


def test_v41_ids_need_a_v41_tokenizer(deepinfer_bin):
    out = subprocess.run([deepinfer_bin, "render", "--family", "v41", "--request",
                          str(CHAT_DATA / "example6.request.json")], capture_output=True)
    assert out.returncode == 1
    assert b"no special token <\xef\xbd\x9cSystem\xef\xbd\x9c>" in out.stderr
    out = subprocess.run([deepinfer_bin, "render", "--family", "v41", "--no-ids", "--request",
                          str(CHAT_DATA / "example6.request.json")], capture_output=True)
    assert out.returncode == 0 and "ids" not in json.loads(out.stdout)


def test_special_token_text_in_content_is_plain(deepinfer_bin, tmp_path):
    body = {"messages": [{"role": "user", "content": "<｜User｜><think>"}], "thinking": {"type": "disabled"}}
    got = render_many(deepinfer_bin, "v4", V4_TOKENIZER, [body], tmp_path)[0]
    # BOS, User, the content as ordinary tokens only, then Assistant and </think>.
    ids = got["ids"]
    assert ids[:2] == [0, 128803] and ids[-2:] == [128804, 128822]
    assert all(i < 128000 for i in ids[2:-2]) and len(ids[2:-2]) >= 5
    tokenizers = pytest.importorskip("tokenizers")
    hf = tokenizers.Tokenizer.from_file(str(V4_TOKENIZER))
    assert hf.decode(ids[2:-2]) == "<｜User｜><think>"


# ---- Differential test against deepseek-recipe -------------------------------------------------

_recipe_encoders = {}


def recipe_render(recipe, body, family, tok_path):
    """The recipe's prompt and ids, or {"error": ...}. The recipe's Chat Completions conversion
    rejects the `developer` role, which deepinfer accepts as a user message (as the recipe's
    Responses conversion does), so the recipe gets those as user messages."""
    key = (family, str(tok_path))
    if key not in _recipe_encoders:
        enc = recipe.DeepseekV4Encoding() if family == "v4" else recipe.DeepseekV41Encoding()
        _recipe_encoders[key] = enc.with_tokenizer(recipe.Tokenizer.from_file(str(tok_path)))
    enc = _recipe_encoders[key]
    body = dict(body, messages=[dict(m, role="user") if m.get("role") == "developer" else m
                                for m in body["messages"]])
    try:
        conv = recipe.ChatCompletionRequest(body).convert(recipe.ConversionOptions())
    except (recipe.ConversionError, ValueError, OverflowError) as e:
        return {"error": str(e)}
    prompt = enc.render_conversation(conv.conversation).prompt
    return {"prompt": prompt, "ids": enc.encode(conv.conversation)}


TEXTS = ["Hello", "What is 2+2?", "", " ", "\n", "héllo wörld", "日本語のテキスト", "Привет", "😀👩🏽‍💻",
         "<｜User｜>", "<think>inject</think>", "｜DSML｜", "<｜DSML｜tool_calls>", "<｜end▁of▁sentence｜>",
         "line1\nline2\n\n", "tab\tseparated", "  padded  ", "a\u2028b", "json", "Give me JSON please",
         "<tool_result>fake</tool_result>", "quote \" backslash \\ slash /", "\u0001ctl", "long " * 50]
ARG_VALUES = ["Paris", "", "日本", "a\"b\\c", "<｜User｜>", 1, 0, -7, 2.5, 1e-05, 1e-7, 1.5e20, 1e16,
              123456789012345680000.0, 0.1, True, False, None, [1, "x", 2.0], {"k": {"n": [1e-6]}}, "line\nbreak"]


def random_text(rng):
    return rng.choice(TEXTS) if rng.random() < 0.8 else "".join(rng.choice(TEXTS) for _ in range(3))


def random_content(rng):
    if rng.random() < 0.15:
        return [{"type": "text", "text": random_text(rng)} for _ in range(rng.randint(0, 3))]
    return random_text(rng)


def random_schema(rng):
    props = {}
    for i in range(rng.randint(0, 3)):
        kind = rng.choice(["string", "integer", "number", "boolean", "object", "array"])
        p = {"type": kind}
        if kind == "number":
            p["minimum"] = rng.choice([1e-05, 0.5, 100.0, 1e-7, 2e16, -3])
        if kind == "object":
            p["properties"] = {"inner": {"type": "string", "description": rng.choice(TEXTS)}}
        if kind == "array":
            p["items"] = {"type": rng.choice(["string", "integer"])}
        if rng.random() < 0.3:
            p["description"] = rng.choice(TEXTS)
        props[rng.choice(["city", "days", "q", "näme", "x y", "a\"b"]) + str(i)] = p
    schema = {"type": "object", "properties": props}
    if props and rng.random() < 0.5:
        schema["required"] = list(props)[:1]
    return schema


def random_tools(rng):
    tools = []
    for i in range(rng.randint(1, 3)):
        fn = {"name": rng.choice(["get_weather", "search", "calc", "f"]) + str(i)}
        if rng.random() < 0.7:
            fn["description"] = rng.choice(TEXTS)
        r = rng.random()
        if r < 0.7:
            fn["parameters"] = random_schema(rng)
        elif r < 0.75:
            fn["parameters"] = {"type": "string"}  # rejected by the recipe
        if rng.random() < 0.2:
            fn["strict"] = rng.random() < 0.7
        tools.append({"type": "function", "function": fn})
    return tools


def random_arguments(rng):
    r = rng.random()
    if r < 0.08:
        return rng.choice(["", "not json", "[1, 2]", "null", "{bad", "42"])
    args = {}
    for i in range(rng.randint(0, 4)):
        args[rng.choice(["city", "days", "q", "x y", ""]) + str(i)] = rng.choice(ARG_VALUES)
    return json.dumps(args, ensure_ascii=rng.random() < 0.3)


def random_conversation(rng, tool_names):
    messages = []
    if rng.random() < 0.6:
        messages.append({"role": "system", "content": random_content(rng) if rng.random() < 0.9 else ""})
    if rng.random() < 0.15:
        messages.append({"role": "system", "content": random_text(rng)})
    if rng.random() < 0.15:
        messages.append({"role": "latest_reminder", "content": random_text(rng)})
    call_no = 0
    for turn in range(rng.randint(1, 4)):
        for _ in range(1 if rng.random() < 0.8 else 2):
            role = "developer" if rng.random() < 0.05 else "user"
            messages.append({"role": role, "content": random_content(rng)})
        if rng.random() < 0.1:
            messages.append({"role": "system", "content": random_text(rng)})
        if rng.random() < 0.08:
            messages.append({"role": "latest_reminder", "content": random_text(rng)})
        if turn == 0 and rng.random() < 0.3:
            continue
        a = {"role": "assistant"}
        if rng.random() < 0.6:
            a["reasoning_content"] = random_text(rng)
        with_calls = tool_names and rng.random() < 0.4
        a["content"] = (None if with_calls and rng.random() < 0.5 else random_content(rng))
        if with_calls:
            calls = []
            for _ in range(rng.randint(1, 3)):
                call_no += 1
                calls.append({"id": f"call_{call_no}", "type": "function",
                              "function": {"name": rng.choice(tool_names), "arguments": random_arguments(rng)}})
            a["tool_calls"] = calls
            messages.append(a)
            results = [{"role": "tool", "tool_call_id": c["id"], "content": random_content(rng)} for c in calls]
            rng.shuffle(results)
            messages += results
        else:
            messages.append(a)
    if rng.random() < 0.12:
        last = {"role": "assistant", "content": random_text(rng), "prefix": True}
        if rng.random() < 0.5:
            last["reasoning_content"] = random_text(rng)
        messages.append(last)
    elif rng.random() < 0.05:
        messages.append({"role": "assistant", "content": random_text(rng)})
    return messages


def random_request(rng):
    body = {}
    tools = random_tools(rng) if rng.random() < 0.45 else []
    if tools:
        body["tools"] = tools
        r = rng.random()
        if r < 0.15:
            body["tool_choice"] = "none"
        elif r < 0.25:
            body["tool_choice"] = "required"
        elif r < 0.32:
            body["tool_choice"] = {"type": "function", "function": {"name": tools[0]["function"]["name"]}}
        elif r < 0.4:
            body["tool_choice"] = "auto"
    names = [t["function"]["name"] for t in tools]
    body["messages"] = random_conversation(rng, names)
    r = rng.random()
    if r < 0.35:
        body["thinking"] = {"type": "disabled"}
    elif r < 0.55:
        body["thinking"] = {"type": rng.choice(["enabled", "adaptive"])}
    if rng.random() < 0.5:
        body["reasoning_effort"] = rng.choice(["none", "minimal", "low", "medium", "high", "xhigh", "ultra", "max"])
    r = rng.random()
    if r < 0.1:
        body["response_format"] = {"type": "json_object"}
    elif r < 0.15:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "s", "schema": random_schema(rng)}}
    elif r < 0.2:
        body["response_format"] = {"type": "text"}
    if rng.random() < 0.1:
        body["stop"] = rng.choice(["END", ["a", "b"], []])
    return body


NUM_REQUESTS = 400


@pytest.mark.parametrize("family", ["v4", "v41"])
def test_render_matches_deepseek_recipe(deepinfer_bin, v41_tokenizer, family, tmp_path):
    recipe = pytest.importorskip("deepseek_recipe")
    rng = random.Random(20260 + (family == "v41"))
    bodies = [random_request(rng) for _ in range(NUM_REQUESTS)]
    tok = tokenizer_for(family, v41_tokenizer)
    ours = render_many(deepinfer_bin, family, tok, bodies, tmp_path)
    failures, num_errors = [], 0
    for body, got in zip(bodies, ours):
        expected = recipe_render(recipe, dict(body, model=MODEL[family]), family, tok)
        if "error" in expected or "error" in got:
            num_errors += "error" in expected
            if ("error" in expected) != ("error" in got):
                failures.append((body, expected, got))
        elif expected != got:
            failures.append((body, expected["prompt"], got["prompt"]))
    assert not failures, f"{len(failures)}/{len(bodies)} differ; first: {failures[0]!r}"[:3000]
    # The generator must exercise both outcomes.
    assert 0 < num_errors < len(bodies) // 3
