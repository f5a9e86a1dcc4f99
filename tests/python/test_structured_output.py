# SPDX-License-Identifier: Apache-2.0
"""Structured output end to end: `deepinfer run` with the built-in tiny random-weight model and the
real DeepSeek tokenizer, one request per schema of the suite (the official JSON-Schema-Test-Suite
schemas in tests/data/grammar/official_suite.jsonl, extracted from the jsonschema sdist, plus the
realistic API schemas of api_suite.jsonl). Every completed output must validate with `jsonschema`
(formats checked); schemas the engine does not support must come back as invalid_grammar records.

The model's text is random; a logit bias toward JSON's structural tokens (quotes, closing brackets,
commas, colons, and the '@' and '.' that formats need) makes random walks through the grammars end
within a few tokens, so the outputs are complete documents. All the requests of this file run as
one batch in one process (one model load, one pass of decode steps), on one thread: the tiny model's
steps are too small to gain from more, and the outputs do not depend on it.
"""
import json
import pathlib
import re
import subprocess

import jsonschema
import pytest

DATA = pathlib.Path(__file__).resolve().parents[1] / "data" / "grammar"
# Token ids (DeepSeek-V4 tokenizer) of ", }, ], "}, "], }}, ]}, }], "}, and }, and the end of sentence
# (which the mask allows only once the document is complete).
CLOSERS = [4, 95, 63, 62773, 13747, 3831, 48663, 37236, 87928, 6989, 1]
# , : @ . ", ], (an integer ends at a comma when members remain; formats need @ and .).
SEPARATORS = [14, 28, 34, 16, 1760, 3031]
BIAS = {str(t): 10 for t in CLOSERS + SEPARATORS}
MAX_TOKENS = 150


def load(name):
    return [json.loads(line) for line in (DATA / name).read_text().splitlines() if line.strip()]


def suite():
    return load("official_suite.jsonl") + load("api_suite.jsonl")


def validator_for(item):
    schema = item["schema"]
    cls = jsonschema.Draft7Validator if item["name"].startswith("draft7") or "draft-07" in schema.get(
        "$schema", "") else jsonschema.Draft202012Validator
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def schema_request(i, item, **extra):
    body = {"messages": [{"role": "user", "content": "Answer in JSON."}], "thinking": {"type": "disabled"},
            "max_tokens": MAX_TOKENS, "temperature": 1.0, "seed": 1000 + i, "logit_bias": BIAS,
            "response_format": {"type": "json_schema", "json_schema": {"name": "s", "schema": item["schema"]}},
            **extra}
    return {"custom_id": f"s{i}", "method": "POST", "url": "/v1/chat/completions", "body": body}


def completion(cid, **extra):
    return {"custom_id": cid, "method": "POST", "url": "/v1/completions",
            "body": {"prompt": "Q:", "max_tokens": 60, "seed": 5, **extra}}


THINKING_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"],
                   "additionalProperties": False}


def all_requests():
    lines = []
    for i, item in enumerate(suite()):
        # Alternate the whitespace policies; the API schemas also run with flexible spacing.
        ws = {"json_whitespace": "compact"} if i % 2 == 0 else {"max_whitespace": 2}
        lines.append(schema_request(i, item, **ws))
    lines += [
        completion("regex", regex="[A-Z][a-z]{2,6} [0-9]{1,3}(\\.[0-9])?"),
        completion("ebnf", ebnf='root ::= "(" item ("," item)* ")"\nitem ::= [a-c] | root',
                   logit_bias={"8": 6, "9": 6}),
        completion("bad_regex", regex="a(?=b)"),
        completion("bad_ebnf", ebnf="root ::= missing"),
        completion("two", regex="a", ebnf='root ::= "a"'),
        {"custom_id": "json_object", "method": "POST", "url": "/v1/chat/completions",
         "body": {"messages": [{"role": "user", "content": "json please"}], "thinking": {"type": "disabled"},
                  "max_tokens": MAX_TOKENS, "seed": 9, "response_format": {"type": "json_object"},
                  "json_whitespace": "compact", "logit_bias": BIAS}},
    ]
    # Thinking: reasoning is free text; </think> is pushed by a bias so the answer starts, then the
    # schema holds.
    lines += [{"custom_id": f"t{i}", "method": "POST", "url": "/v1/chat/completions",
               "body": {"messages": [{"role": "user", "content": "Think, then answer in JSON."}],
                        "thinking": {"type": "enabled"}, "max_tokens": MAX_TOKENS, "seed": 40 + i,
                        "json_whitespace": "compact", "logit_bias": {"128822": 10, **BIAS},
                        "response_format": {"type": "json_schema",
                                            "json_schema": {"name": "s", "schema": THINKING_SCHEMA}}}}
              for i in range(4)]
    return lines


@pytest.fixture(scope="module")
def results(deepinfer_bin, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("structured")
    inp, out = tmp / "in.jsonl", tmp / "out.jsonl"
    inp.write_text("".join(json.dumps(x) + "\n" for x in all_requests()))
    proc = subprocess.run([deepinfer_bin, "--threads", "1", "run", "--input", str(inp), "--output", str(out),
                           "--cache-dir", str(tmp / "cache"), "--progress", "never", "--max-num-seqs", "512"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    return {r["custom_id"]: r for r in map(json.loads, out.read_text().splitlines())}


def test_every_output_validates(results):
    items = suite()
    supported, unsupported, unfinished = 0, [], []
    for i, item in enumerate(items):
        rec = results[f"s{i}"]
        if rec["error"] is not None:
            assert rec["error"]["code"] == "invalid_grammar", (item["name"], rec["error"])
            unsupported.append(item["name"])
            continue
        choice = rec["response"]["body"]["choices"][0]
        content = choice["message"]["content"]
        if choice["finish_reason"] != "stop":
            unfinished.append(item["name"])
            continue
        supported += 1
        instance = json.loads(content)
        errors = list(validator_for(item).iter_errors(instance))
        assert not errors, f"{item['name']}: {content!r} -> {errors[0].message}"
    # Most of the suite is supported and almost every walk ends (the rest ran out of tokens).
    assert supported >= 200, (supported, unsupported)
    assert len(unfinished) <= len(items) // 20, unfinished
    assert all(n.startswith(("draft2020-12/", "draft7/")) for n in unsupported), unsupported


def test_regex_ebnf_json_object_and_errors(results):
    r = results
    text = r["regex"]["response"]["body"]["choices"][0]["text"]
    assert re.fullmatch(r"[A-Z][a-z]{2,6} [0-9]{1,3}(\.[0-9])?", text), text
    paren = r["ebnf"]["response"]["body"]["choices"][0]
    if paren["finish_reason"] == "stop":
        assert re.fullmatch(r"[(),a-c]+", paren["text"]) and paren["text"].count("(") == paren["text"].count(")")
    assert r["bad_regex"]["error"]["code"] == "invalid_grammar"
    assert "regex: offset 2: lookaround" in r["bad_regex"]["error"]["message"]
    assert "ebnf: line 1, column 10: rule 'missing' is used but never defined" in r["bad_ebnf"]["error"]["message"]
    assert "only one structured-output constraint" in r["two"]["error"]["message"]
    msg = r["json_object"]["response"]["body"]["choices"][0]
    assert msg["finish_reason"] == "stop"
    assert isinstance(json.loads(msg["message"]["content"]), dict)


def test_thinking_mode_constrains_only_the_answer(results):
    r = results
    for i in range(4):
        msg = r[f"t{i}"]["response"]["body"]["choices"][0]
        assert msg["finish_reason"] == "stop", msg
        assert msg["message"]["reasoning_content"] is not None
        jsonschema.validate(json.loads(msg["message"]["content"]), THINKING_SCHEMA)
