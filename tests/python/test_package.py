# SPDX-License-Identifier: Apache-2.0
"""The `deepinfer` Python package (installed into the virtualenv from the checkout) on the built-in
tiny model: generate and chat equal the CLI's batch runner on the same requests, determinism across
calls and instances, logprobs / n / stop strings, structured output (regex, JSON schema, EBNF,
response_format) equal to the batch runner's, Python exceptions carrying the C++ messages,
run_batch with resume, Ctrl-C between engine steps, the GIL released during generation, tqdm."""
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from package_helpers import cli_run, import_deepinfer, read_jsonl

deepinfer = import_deepinfer()
from deepinfer import LLM, SamplingParams  # noqa: E402

PROMPTS = ["The lighthouse keeper", "Once upon a time", "def fibonacci(n):", "Bonjour, je m'appelle"]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("dicache"))


@pytest.fixture(scope="module")
def llm(cache_dir) -> LLM:
    return LLM(cache_dir=cache_dir, seed=11)


def completion_line(cid, prompt, **body):
    return {"custom_id": cid, "method": "POST", "url": "/v1/completions", "body": {"prompt": prompt, **body}}


def chat_line(cid, messages, **body):
    return {"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": {"messages": messages, **body}}


def test_package_is_installed_not_the_source_tree():
    # The tests exercise what `pip install .` put into the virtualenv.
    path = pathlib.Path(deepinfer.__file__).resolve()
    assert "site-packages" in str(path), path
    assert (path.parent / "_core.pyi").exists()
    assert (path.parent / "py.typed").exists()


def test_generate_equals_cli(llm, deepinfer_bin, cache_dir, tmp_path):
    """Text prompts, sampled with per-request seeds, match `deepinfer run` token for token."""
    sp = [SamplingParams(temperature=0.9, top_p=0.95, max_tokens=12, seed=100 + i, ignore_eos=True)
          for i in range(len(PROMPTS))]
    outs = llm.generate(PROMPTS, sp, use_tqdm=False)
    lines = [completion_line(f"r{i}", p, temperature=0.9, top_p=0.95, max_tokens=12, seed=100 + i, ignore_eos=True)
             for i, p in enumerate(PROMPTS)]
    cli = cli_run(deepinfer_bin, cache_dir, lines, tmp_path)
    tok = llm.get_tokenizer()
    assert [o.request_id for o in outs] == [str(i) for i in range(len(PROMPTS))]
    for i, out in enumerate(outs):
        body = cli[f"r{i}"]["response"]["body"]
        assert out.prompt == PROMPTS[i]
        assert out.prompt_token_ids == tok.encode(PROMPTS[i])
        assert body["usage"]["prompt_tokens"] == len(out.prompt_token_ids)
        (c,) = out.outputs
        assert len(c.token_ids) == 12 and c.finish_reason == "length"
        assert c.text == body["choices"][0]["text"]
        assert c.text == tok.decode(c.token_ids)
        assert body["usage"]["completion_tokens"] == 12


def test_token_id_prompts_equal_text_prompts(llm):
    tok = llm.get_tokenizer()
    sp = SamplingParams(temperature=0, max_tokens=6)
    by_text = llm.generate(PROMPTS[:2], sp, use_tqdm=False)
    ids = [tok.encode(p) for p in PROMPTS[:2]]
    by_ids = llm.generate([ids[0], {"prompt_token_ids": ids[1]}], sp, use_tqdm=False)
    single = llm.generate(ids[0], sp, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in by_text] == [o.outputs[0].token_ids for o in by_ids]
    assert single[0].outputs[0].token_ids == by_text[0].outputs[0].token_ids
    assert by_ids[0].prompt is None and by_ids[0].prompt_token_ids == ids[0]


def test_determinism_across_calls_and_instances(llm, cache_dir):
    sp = SamplingParams(temperature=1.0, max_tokens=10, ignore_eos=True)
    first = [o.outputs[0].token_ids for o in llm.generate(PROMPTS, sp, use_tqdm=False)]
    again = [o.outputs[0].token_ids for o in llm.generate(PROMPTS, sp, use_tqdm=False)]
    other = LLM(cache_dir=cache_dir, seed=11, max_num_seqs=1, enable_prefix_caching=False)
    fresh = [o.outputs[0].token_ids for o in other.generate(PROMPTS, sp, use_tqdm=False)]
    assert first == again == fresh
    # Another job seed changes the sampled tokens (of at least one of the prompts).
    reseeded = [o.outputs[0].token_ids for o in LLM(cache_dir=cache_dir, seed=12).generate(PROMPTS, sp, use_tqdm=False)]
    assert reseeded != first
    # A request's tokens depend on its seed and position, not on its neighbours.
    alone = llm.generate(PROMPTS[:1], sp, use_tqdm=False)[0].outputs[0].token_ids
    assert alone == first[0]
    # An explicit seed makes a request independent of its position.
    seeded = SamplingParams(temperature=1.0, max_tokens=10, ignore_eos=True, seed=5)
    a = llm.generate([PROMPTS[0], PROMPTS[1]], seeded, use_tqdm=False)[1].outputs[0].token_ids
    b = llm.generate([PROMPTS[1]], seeded, use_tqdm=False)[0].outputs[0].token_ids
    assert a == b


def test_n_logprobs_and_stop(llm):
    sp = SamplingParams(n=3, temperature=1.0, max_tokens=8, logprobs=2, ignore_eos=True, seed=3)
    (out,) = llm.generate([PROMPTS[0]], sp, use_tqdm=False)
    assert [c.index for c in out.outputs] == [0, 1, 2]
    assert len({tuple(c.token_ids) for c in out.outputs}) > 1  # independent samples
    for c in out.outputs:
        assert len(c.logprobs) == len(c.token_ids) == 8
        total = 0.0
        for token, step in zip(c.token_ids, c.logprobs):
            assert token in step
            ranked = sorted((lp.rank, t) for t, lp in step.items() if lp.rank is not None)
            assert [r for r, _ in ranked] == [1, 2]
            values = [step[t].logprob for _, t in ranked]
            assert values[0] >= values[1] and all(v <= 0 for v in values)
            assert step[token].logprob <= 0
            assert step[token].decoded_token == llm.get_tokenizer().decode([token])
            total += step[token].logprob
        assert c.cumulative_logprob == pytest.approx(total, rel=1e-5)
    # A stop string cut from a greedy completion ends the text just before it.
    greedy = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    text = llm.generate([PROMPTS[2]], greedy, use_tqdm=False)[0].outputs[0].text
    assert len(text) > 6
    stop = text[3:6]
    cut = llm.generate([PROMPTS[2]], SamplingParams(temperature=0, max_tokens=16, ignore_eos=True, stop=stop),
                       use_tqdm=False)[0].outputs[0]
    assert cut.finish_reason == "stop"
    assert cut.text == text[: text.index(stop)]


def test_chat_equals_cli(llm, deepinfer_bin, cache_dir, tmp_path):
    convs = [[{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a colour."}],
             [{"role": "user", "content": "What is 2+2?"}]]
    # Keys in sorted order: the batch runner re-serializes bodies with sorted keys (the recipe keeps
    # the client's order, as LLM.chat does), so only sorted schemas render identically through both.
    tools = [{"function": {"description": "Weather of a city", "name": "get_weather",
                           "parameters": {"properties": {"city": {"type": "string"}}, "required": ["city"],
                                          "type": "object"}}, "type": "function"}]
    cases = [dict(thinking=True), dict(thinking=False), dict(reasoning_effort="max"), dict(tools=tools)]
    results, lines = [], []
    for k, kwargs in enumerate(cases):
        sp = [SamplingParams(temperature=0.7, max_tokens=10, seed=40 + i) for i in range(len(convs))]
        results.append(llm.chat(convs, sp, use_tqdm=False, **kwargs))
        body_extra = {}
        if "thinking" in kwargs:
            body_extra["thinking"] = {"type": "enabled" if kwargs["thinking"] else "disabled"}
        if "reasoning_effort" in kwargs:
            body_extra["reasoning_effort"] = kwargs["reasoning_effort"]
        if "tools" in kwargs:
            body_extra["tools"] = tools
        lines += [chat_line(f"c{k}-{i}", conv, temperature=0.7, max_tokens=10, seed=40 + i, **body_extra)
                  for i, conv in enumerate(convs)]
    cli = cli_run(deepinfer_bin, cache_dir, lines, tmp_path)
    for k, (kwargs, outs) in enumerate(zip(cases, results)):
        for i, out in enumerate(outs):
            body = cli[f"c{k}-{i}"]["response"]["body"]
            assert body["usage"]["prompt_tokens"] == len(out.prompt_token_ids)
            (c,) = out.outputs
            message = body["choices"][0]["message"]
            assert c.text == message["content"], (k, i)
            assert c.reasoning_content == message.get("reasoning_content"), (k, i)
            assert c.finish_reason == body["choices"][0]["finish_reason"]
            assert (c.tool_calls is None) == ("tool_calls" not in message)
            assert c.raw_text == llm.get_tokenizer().decode(c.token_ids)
            thinking = kwargs.get("thinking", True)
            assert (c.reasoning_content is not None) == thinking
            # The prompt ends with the recipe's thinking switch.
            assert out.prompt.endswith("<think>" if thinking else "</think>")
        if "tools" in kwargs:
            assert "get_weather" in outs[0].prompt


def test_chat_prompt_equals_cli_render(llm, deepinfer_bin, tmp_path):
    conv = [{"role": "user", "content": "Hello <｜User｜> there"}]
    tools = [{"type": "function", "function": {"name": "lookup", "description": "Find a word",
                                               "parameters": {"type": "object", "required": ["word"],
                                                              "properties": {"word": {"type": "string"}}}}}]
    (out,) = llm.chat(conv, SamplingParams(max_tokens=1), thinking=False, tools=tools, use_tqdm=False)
    req = tmp_path / "req.json"
    req.write_text(json.dumps({"messages": conv, "thinking": {"type": "disabled"}, "tools": tools}))
    proc = subprocess.run([deepinfer_bin, "render", "--family", "v4", "--request", str(req)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    rendered = json.loads(proc.stdout)
    assert out.prompt == rendered["prompt"]
    assert out.prompt_token_ids == rendered["ids"]


def test_bad_arguments_raise_with_the_cpp_message(llm, cache_dir):
    with pytest.raises(deepinfer.Error, match="temperature must be >= 0") as e:
        llm.generate(PROMPTS, [SamplingParams(), SamplingParams(temperature=-1), SamplingParams(), SamplingParams()],
                     use_tqdm=False)
    assert isinstance(e.value, ValueError)
    assert e.value.location.startswith("src/engine/engine.cpp:") or "engine.cpp:" in e.value.location
    with pytest.raises(deepinfer.Error, match="top_p must be in"):
        llm.generate("x", SamplingParams(top_p=0), use_tqdm=False)
    with pytest.raises(deepinfer.Error, match="max_tokens must be >= 1"):
        llm.generate("x", SamplingParams(max_tokens=0), use_tqdm=False)
    with pytest.raises(deepinfer.Error, match=r"n must be in \[1, 128\]"):
        llm.generate("x", SamplingParams(n=0), use_tqdm=False)
    with pytest.raises(deepinfer.Error, match="outside the vocabulary"):
        llm.generate([[5, 10**7]], use_tqdm=False)
    with pytest.raises(deepinfer.Error, match="Empty input messages"):
        llm.chat([], use_tqdm=False) if False else llm.chat([[]], use_tqdm=False)
    with pytest.raises(deepinfer.Error, match="unknown variant `extreme`"):
        llm.chat([{"role": "user", "content": "hi"}], reasoning_effort="extreme", use_tqdm=False)
    with pytest.raises(TypeError):
        llm.generate(3.5, use_tqdm=False)
    with pytest.raises(TypeError):
        SamplingParams(max_tokens=2.5)
    with pytest.raises(ValueError, match="at most one structured-output"):
        SamplingParams(regex="a+", ebnf="root ::= 'a'")
    with pytest.raises(ValueError, match="2 sampling_params for 4 prompts"):
        llm.generate(PROMPTS, [SamplingParams()] * 2, use_tqdm=False)
    with pytest.raises(ValueError, match="use 'cpu', 'cuda' or 'auto'"):
        LLM(cache_dir=cache_dir, device="tpu")
    with pytest.raises(ValueError, match="gpus must be a positive int"):
        LLM(cache_dir=cache_dir, gpus=0)
    with pytest.raises(ValueError, match="needs device='cuda'"):
        LLM(cache_dir=cache_dir, gpus=2)
    with pytest.raises(deepinfer.Error, match="no such directory, and not a Hub repo id"):
        LLM("/nonexistent/model-dir")
    small = LLM(cache_dir=cache_dir, max_model_len=8)
    with pytest.raises(deepinfer.Error, match=r"exceeds the model's context of 8 \(max_model_len\)"):
        small.generate("The lighthouse keeper", SamplingParams(max_tokens=8), use_tqdm=False)
    # Nothing of a failed call ran or lingers: the next call works and matches a fresh instance.
    sp = SamplingParams(temperature=0.5, max_tokens=5, ignore_eos=True)
    after = llm.generate(PROMPTS[:2], sp, use_tqdm=False)
    fresh = LLM(cache_dir=cache_dir, seed=11).generate(PROMPTS[:2], sp, use_tqdm=False)
    assert [o.outputs[0].token_ids for o in after] == [o.outputs[0].token_ids for o in fresh]


def test_run_batch_with_resume(llm, deepinfer_bin, cache_dir, tmp_path):
    lines = [completion_line(f"p{i}", PROMPTS[i % 4] + f" #{i}", max_tokens=6, temperature=0.8, ignore_eos=True)
             for i in range(8)]
    lines.insert(3, {"custom_id": "bad", "method": "POST", "url": "/v1/embeddings", "body": {}})
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(l) + "\n" for l in lines))
    out = tmp_path / "out.jsonl"
    seen = []
    summary = llm.run_batch(inp, out, use_tqdm=False, on_progress=lambda s: seen.append(s.completed))
    assert (summary.lines, summary.completed, summary.errors, summary.skipped_done) == (9, 8, 1, 0)
    assert seen and seen == sorted(seen) and seen[-1] == 8
    full = {r["custom_id"]: r for r in read_jsonl(out)}
    # The same job through the CLI (job seed 11, as the LLM's) gives the same completions.
    cli = cli_run(deepinfer_bin, cache_dir, lines, tmp_path, "--seed", "11")
    for cid, rec in full.items():
        if cid == "bad":
            assert rec["error"]["code"] == "invalid_request"
            continue
        assert rec["response"]["body"]["choices"] == cli[cid]["response"]["body"]["choices"]
    # Resume: keep 4 results plus a torn line, as a killed run leaves them.
    kept = out.read_text().splitlines(keepends=True)[:4]
    out.write_text("".join(kept) + '{"id": "batch_req_torn", "custom_id": "p')
    summary = llm.run_batch(inp, out, resume=True, use_tqdm=False)
    assert summary.skipped_done == 4 and summary.completed + summary.errors == 5
    recs = read_jsonl(out)
    assert sorted(r["custom_id"] for r in recs) == sorted(full)
    for r in recs:
        assert r["response"] == full[r["custom_id"]]["response"] or (
            r["response"]["body"]["choices"] == full[r["custom_id"]]["response"]["body"]["choices"])
    # Without resume an existing output is refused.
    with pytest.raises(deepinfer.Error, match="the output file exists"):
        llm.run_batch(inp, out, resume=False, use_tqdm=False)


def test_structured_output_through_sampling_params(llm, deepinfer_bin, cache_dir, tmp_path):
    """regex, json_schema and response_format constrain the output, and give the same tokens as the
    same constraint in a `deepinfer run` body (so the Python spec equals the batch runner's)."""
    jsonschema = pytest.importorskip("jsonschema")
    tok = llm.get_tokenizer()
    # A bias toward closing tokens ends the random model's walk through the JSON grammar early.
    closers = {}
    for s in ['"', "}", "]", '"}', "},", '"]', "}}"]:
        ids = tok.encode(s)
        if len(ids) == 1:
            closers[ids[0]] = 7.0
    assert len(closers) >= 4
    regex = r"(yes|no)-[0-9]{2}"
    schema = {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}, "sure": {"type": "boolean"}},
              "required": ["colour", "sure"], "additionalProperties": False}
    params = [SamplingParams(regex=regex, max_tokens=32, seed=1, ignore_eos=True),
              SamplingParams(json_schema=schema, max_tokens=96, seed=2, logit_bias=closers, json_whitespace="compact"),
              SamplingParams(ebnf='root ::= "(" [a-c]+ ")"', max_tokens=64, seed=3, logit_bias={tok.encode(")")[0]: 5})]
    outs = llm.generate(["Answer yes or no:", "Pick a colour:", "Letters:"], params, use_tqdm=False)
    text = [o.outputs[0].text for o in outs]
    assert re.fullmatch(regex, text[0]) and outs[0].outputs[0].finish_reason == "stop", text[0]
    jsonschema.validate(json.loads(text[1]), schema)
    assert re.fullmatch(r"\([a-c]+\)", text[2]), text[2]
    rf = {"type": "json_schema", "json_schema": {"name": "colour", "schema": schema, "strict": True}}
    conv = [{"role": "user", "content": "Pick a colour, in JSON."}]
    (chat,) = llm.chat(conv, SamplingParams(response_format=rf, max_tokens=96, seed=4, logit_bias=closers,
                                            json_whitespace="compact"), thinking=False, use_tqdm=False)
    assert chat.outputs[0].finish_reason == "stop", chat.outputs[0].text
    jsonschema.validate(json.loads(chat.outputs[0].text), schema)
    (obj,) = llm.chat([{"role": "user", "content": "Reply with a JSON object."}],
                      SamplingParams(response_format={"type": "json_object"}, max_tokens=96, seed=5,
                                     logit_bias={t: 2 * b for t, b in closers.items()}, json_whitespace="compact"),
                      thinking=False, use_tqdm=False)
    assert isinstance(json.loads(obj.outputs[0].text), dict)
    bias = {str(k): v for k, v in closers.items()}
    lines = [completion_line("r", "Answer yes or no:", regex=regex, max_tokens=32, seed=1, ignore_eos=True),
             completion_line("s", "Pick a colour:", response_format={"type": "json_schema", "json_schema": {
                 "name": "x", "schema": schema}}, max_tokens=96, seed=2, logit_bias=bias, json_whitespace="compact"),
             completion_line("e", "Letters:", ebnf='root ::= "(" [a-c]+ ")"', max_tokens=64, seed=3,
                             logit_bias={str(tok.encode(")")[0]): 5}),
             chat_line("c", conv, response_format=rf, thinking={"type": "disabled"}, max_tokens=96, seed=4,
                       logit_bias=bias, json_whitespace="compact")]
    cli = cli_run(deepinfer_bin, cache_dir, lines, tmp_path)
    assert cli["r"]["response"]["body"]["choices"][0]["text"] == text[0]
    assert cli["s"]["response"]["body"]["choices"][0]["text"] == text[1]
    assert cli["e"]["response"]["body"]["choices"][0]["text"] == text[2]
    assert cli["c"]["response"]["body"]["choices"][0]["message"]["content"] == chat.outputs[0].text
    # An invalid constraint is a GrammarError (a deepinfer.Error) when the request is queued.
    with pytest.raises(deepinfer.GrammarError, match="regex"):
        llm.generate("x", SamplingParams(regex="(unclosed"), use_tqdm=False)
    with pytest.raises(ValueError, match="json_schema.schema is required"):
        llm.generate("x", SamplingParams(response_format={"type": "json_schema", "json_schema": {}}), use_tqdm=False)


INTERRUPT_SCRIPT = textwrap.dedent("""
    import os, signal, sys, threading, time, json
    from deepinfer import LLM, SamplingParams
    # Ctrl-C raises KeyboardInterrupt even when this process inherited SIGINT ignored (a parent started in
    # the background by a non-interactive shell): Python installs its handler only over the default action.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    llm = LLM(cache_dir=sys.argv[1], seed=3, max_num_seqs=4)
    sp = SamplingParams(temperature=1.0, max_tokens=2000, ignore_eos=True)
    prompts = ["Tell me a long story %d" % i for i in range(4)]
    threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    t0 = time.monotonic()
    try:
        llm.generate(prompts, sp, use_tqdm=False)
        print(json.dumps({"interrupted": False}))
        sys.exit(0)
    except KeyboardInterrupt:
        stopped = time.monotonic() - t0
    short = SamplingParams(temperature=1.0, max_tokens=5, ignore_eos=True)
    after = [o.outputs[0].token_ids for o in llm.generate(prompts, short, use_tqdm=False)]
    fresh = [o.outputs[0].token_ids
             for o in LLM(cache_dir=sys.argv[1], seed=3, max_num_seqs=4).generate(prompts, short, use_tqdm=False)]
    # run_batch: interrupted between steps, every finished line written; resume completes the job.
    inp, out = sys.argv[2], sys.argv[3]
    fired = []
    def after_some(summary):  # once results are on disk, Ctrl-C arrives from another thread
        if summary.completed >= 8 and not fired:
            fired.append(1)
            threading.Timer(0.05, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    try:
        llm.run_batch(inp, out, use_tqdm=False, on_progress=after_some)
        batch_interrupted = False
    except KeyboardInterrupt:
        batch_interrupted = True
    partial = len(open(out).read().splitlines())
    summary = llm.run_batch(inp, out, resume=True, use_tqdm=False)
    print(json.dumps({"interrupted": True, "stopped_after": stopped, "same_after": after == fresh,
                      "batch_interrupted": batch_interrupted, "partial": partial,
                      "skipped": summary.skipped_done, "completed": summary.completed}))
""")


def test_ctrl_c_stops_between_steps(cache_dir, tmp_path):
    script = tmp_path / "interrupt.py"
    script.write_text(INTERRUPT_SCRIPT)
    inp = tmp_path / "in.jsonl"
    # Requests in waves of 4 (max_num_seqs): results arrive over several seconds.
    inp.write_text("".join(json.dumps(completion_line(f"q{i}", f"Story {i}", max_tokens=8, ignore_eos=True)) + "\n"
                           for i in range(48)))
    out = tmp_path / "out.jsonl"
    proc = subprocess.run([sys.executable, str(script), cache_dir, str(inp), str(out)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["interrupted"], "generation finished before the signal: make it longer"
    assert result["stopped_after"] < 10.0
    assert result["same_after"]
    assert result["batch_interrupted"]
    ids = [r["custom_id"] for r in read_jsonl(out)]
    assert len(ids) == len(set(ids)) == 48
    assert 0 < result["partial"] < 48
    assert result["skipped"] == result["partial"] and result["completed"] == 48 - result["partial"]


def test_gil_released_during_generation(cache_dir):
    """A pure-Python loop in this thread keeps its speed while another thread generates: with the
    GIL held through each engine step it would run only in the gaps between steps."""
    llm = LLM(cache_dir=cache_dir, num_threads=1)
    prompts = [f"Prompt number {i}" for i in range(16)]
    sp = SamplingParams(max_tokens=400, ignore_eos=True)

    def spin() -> float:
        t0 = time.perf_counter()
        x = 0
        for i in range(300_000):
            x += i * i
        return time.perf_counter() - t0

    alone = min(spin() for _ in range(3))
    started = threading.Event()
    done = threading.Event()

    def work():
        started.set()
        try:
            llm.generate(prompts, sp, use_tqdm=False)
        except KeyboardInterrupt:
            pass
        done.set()

    old = sys.getswitchinterval()
    sys.setswitchinterval(0.001)  # a thread holding the GIL in C++ would hand it over only between steps
    try:
        thread = threading.Thread(target=work, daemon=True)
        thread.start()
        started.wait()
        time.sleep(0.3)  # inside the engine's steps by now
        during = min(spin() for _ in range(3))
        still_running = not done.is_set()
    finally:
        sys.setswitchinterval(old)
    assert still_running, "generation ended before the measurement: make it longer"
    assert during < 4 * alone + 0.05, (during, alone)
    # Stop the background generation early (it is only there to keep the engine busy).
    import ctypes
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread.ident), ctypes.py_object(KeyboardInterrupt))
    thread.join(timeout=60)
    assert not thread.is_alive()


def test_tqdm_progress(llm, capsys):
    llm.generate(PROMPTS, SamplingParams(max_tokens=3), use_tqdm=True)
    err = capsys.readouterr().err
    assert "Processed prompts" in err and "4/4" in err
    llm.generate(PROMPTS, SamplingParams(max_tokens=3), use_tqdm=False)
    assert capsys.readouterr().err == ""


def test_engine_limits_follow_the_device(llm, cache_dir):
    # CPU-sized steps on the CPU; on the GPU (resolved without one) whole-GPU steps, the device page
    # pool as the state bound and asynchronous scheduling, as `deepinfer run --device cuda` has.
    from deepinfer.llm import _engine_defaults
    cpu, gpu = _engine_defaults("cpu"), _engine_defaults("cuda")
    assert (cpu["max_num_seqs"], cpu["max_num_batched_tokens"], cpu["max_prefill_chunk"]) == (64, 2048, 512)
    assert cpu["state_memory_gib"] == 4.0 and cpu["async_scheduling"] is False
    assert (gpu["max_num_seqs"], gpu["max_num_batched_tokens"], gpu["max_prefill_chunk"]) == (256, 8192, 8192)
    assert gpu["state_memory_gib"] >= 1 << 20 and gpu["async_scheduling"] is True
    two = _engine_defaults("cuda", 2)  # expert parallelism: sequences and step tokens per GPU
    assert (two["max_num_seqs"], two["max_num_batched_tokens"], two["max_prefill_chunk"]) == (512, 16384, 8192)
    cfg = llm._engine_config
    assert (cfg.max_num_seqs, cfg.max_num_batched_tokens, cfg.max_prefill_chunk) == (64, 2048, 512)
    assert cfg.state_memory_bytes == 4 << 30 and cfg.async_scheduling is False
    given = LLM(cache_dir=cache_dir, max_prefill_chunk=100, state_memory_gib=2.0)._engine_config  # given values win
    assert (given.max_num_seqs, given.max_prefill_chunk, given.state_memory_bytes) == (64, 100, 2 << 30)
