# SPDX-License-Identifier: Apache-2.0
"""``LLM``: offline generation over deepinfer's engine, in the shape of vLLM's ``LLM``.

Each call queues every request (the engine validates them all before any runs), then drives the
engine step by step. A step runs in C++ with the GIL released; between steps Python handles
signals, so Ctrl-C raises KeyboardInterrupt within one step and the ``LLM`` stays usable (the
interrupted requests are dropped). A request's tokens depend only on its seed: its own
``SamplingParams.seed``, or one derived from ``LLM(seed=...)`` and its position in the call, never
on batch size, neighbours or scheduling. So the same call gives the same outputs every time.
"""
from __future__ import annotations

import json
import os
import pathlib
import warnings
from collections.abc import Sequence
from typing import Any, Callable, Optional, Union

from . import _core
from ._progress import Progress
from .outputs import CompletionOutput, Logprob, RequestOutput, ToolCall
from .sampling_params import SamplingParams

PromptType = Union[str, dict[str, Any], Sequence[int]]
Conversation = list[dict[str, Any]]

_PACKAGE_DIR = pathlib.Path(os.path.abspath(__file__)).parent  # not resolve(): the build tree links the sources


def default_cache_dir() -> str:
    """Where the built-in tiny models are generated: $XDG_CACHE_HOME/deepinfer or ~/.cache/deepinfer
    (the CLI's choice)."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return os.path.join(xdg, "deepinfer")
    return os.path.join(os.path.expanduser("~"), ".cache", "deepinfer")


def bundled_tokenizer() -> str:
    """The DeepSeek-V4 tokenizer.json shipped with the package (the built-in model's)."""
    return str(_PACKAGE_DIR / "assets" / "tokenizer" / "deepseek-v4" / "tokenizer.json")


class LLM:
    """A model with its tokenizer and engine.

    Args:
        model: a checkpoint directory, a Hugging Face repo id ("org/name", resolved through the
            Hugging Face cache and downloaded if missing), or None for the built-in tiny
            random-weight DeepSeek-V4.1 model ("embedded:v41"; "embedded:v4" is the V4 one; their
            text is random by design). In production: ``LLM("deepseek-ai/DeepSeek-V4.1-Flash-1017")``.
        revision: the Hub revision (branch, tag or commit) of a repo id; default "main".
        tokenizer: a tokenizer.json; default the model's, else the bundled DeepSeek-V4 one.
        device: "cpu" (the default, "auto"), or "cuda" for the GPU (a build without nvcc raises
            deepinfer.Error).
        gpus: with device="cuda", the GPUs the model spans (default 1); more than one shards the routed
            experts across them (expert parallelism over NCCL; outputs identical to one GPU).
        numerics: "exact" or "official"; default official for FP8/FP4 checkpoints.
        max_model_len: the most tokens (prompt + max_tokens) of one request; default the model's.
        seed: the job seed that requests without their own seed derive theirs from.
        max_num_seqs, max_num_batched_tokens, max_prefill_chunk: the engine's batch limits; default
            64, 2048, 512 on the CPU and 256, 4096, 4096 with device="cuda" (GPU-sized steps).
        state_memory_gib: memory for sequence state (running sequences and the prefix cache); default
            4 on the CPU; with device="cuda" the device page pool bounds it.
        enable_prefix_caching: share the state of common prompt prefixes (same results).
        async_scheduling: overlap post-processing with the next forward (same results); default off on
            the CPU (it competes with the forward for cores), on with device="cuda".
        chat_family: the chat format, "v4" or "v41"; default the model's family (V4.1's needs a
            tokenizer with <｜System｜>).
        cache_dir: where the built-in model is generated (default ~/.cache/deepinfer).
        num_threads: CPU threads (default: one per core).
        log_level: "debug", "info", "warn" (default), "error" or "off".
    """

    def __init__(
        self,
        model: Optional[str] = None,
        *,
        revision: Optional[str] = None,
        tokenizer: Optional[str] = None,
        device: str = "auto",
        numerics: Optional[str] = None,
        max_model_len: Optional[int] = None,
        seed: int = 0,
        max_num_seqs: Optional[int] = None,
        max_num_batched_tokens: Optional[int] = None,
        max_prefill_chunk: Optional[int] = None,
        state_memory_gib: Optional[float] = None,
        enable_prefix_caching: bool = True,
        async_scheduling: Optional[bool] = None,
        chat_family: Optional[str] = None,
        cache_dir: Optional[str] = None,
        num_threads: Optional[int] = None,
        log_level: str = "warn",
        gpus: int = 1,
    ) -> None:
        if device not in ("auto", "cpu", "cuda"):
            raise ValueError(f"device={device!r}: use 'cpu', 'cuda' or 'auto' (the CPU)")
        if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
            raise ValueError(f"gpus must be a positive int, got {gpus!r}")
        if gpus > 1 and device != "cuda":
            raise ValueError(f"gpus={gpus} needs device='cuda' (expert parallelism across GPUs)")
        if max_model_len is not None and (isinstance(max_model_len, bool) or not isinstance(max_model_len, int)
                                          or max_model_len < 1):
            raise ValueError(f"max_model_len must be a positive int, got {max_model_len!r}")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {seed!r}")
        limits = _engine_defaults(device, gpus)
        max_num_seqs = limits["max_num_seqs"] if max_num_seqs is None else max_num_seqs
        max_num_batched_tokens = limits["max_num_batched_tokens"] if max_num_batched_tokens is None else max_num_batched_tokens
        max_prefill_chunk = limits["max_prefill_chunk"] if max_prefill_chunk is None else max_prefill_chunk
        state_memory_gib = limits["state_memory_gib"] if state_memory_gib is None else state_memory_gib
        async_scheduling = limits["async_scheduling"] if async_scheduling is None else async_scheduling
        _core.set_log_level(log_level)
        if num_threads is not None:
            _core.set_num_threads(num_threads)

        self.model_dir, self.model_name = _resolve_model(model, revision, cache_dir)
        tok_path = tokenizer or _model_tokenizer(self.model_dir) or bundled_tokenizer()
        self._model = _core.Model.load(self.model_dir, numerics, tok_path, "cpu" if device == "auto" else device,
                                       max_model_len or 0, max_batch_tokens=-(-max_num_batched_tokens // gpus),
                                       max_num_seqs=max_num_seqs, gpus=gpus)
        self._tokenizer = _core.Tokenizer.from_file(tok_path)
        info = self._model.info
        if self._tokenizer.vocab_size > info.vocab_size:
            warnings.warn(f"the tokenizer has {self._tokenizer.vocab_size} ids, the model's vocabulary "
                          f"{info.vocab_size}: prompts using the others are rejected", stacklevel=2)
        # V4.1's chat format needs <｜System｜>, which a V4 tokenizer lacks (as `deepinfer run` decides).
        if chat_family is None:
            v41 = info.family == "deepseek_v41" and self._tokenizer.added_token_id("<｜System｜>") is not None
            chat_family = "v41" if v41 else "v4"
        self._family = _core.parse_chat_family(chat_family)

        cfg = _core.EngineConfig()
        cfg.max_num_seqs = max_num_seqs
        cfg.max_num_batched_tokens = max_num_batched_tokens
        cfg.max_prefill_chunk = max_prefill_chunk
        cfg.state_memory_bytes = int(state_memory_gib * (1 << 30))
        cfg.prefix_caching = enable_prefix_caching
        cfg.async_scheduling = async_scheduling
        cfg.job_seed = seed
        cfg.max_model_len = max_model_len or 0
        self._engine_config = cfg
        self._engine: Optional[_core.Engine] = None

    # ---- properties ---------------------------------------------------------------------------

    @property
    def model_info(self) -> _core.ModelInfo:
        """The model's family, vocabulary size, end-of-sequence ids and context length."""
        return self._model.info

    @property
    def numerics(self) -> str:
        return self._model.numerics

    def get_tokenizer(self) -> _core.Tokenizer:
        return self._tokenizer

    def metrics(self) -> Optional[_core.EngineMetrics]:
        """The engine's counters since it was created (None before the first call)."""
        return None if self._engine is None else self._engine.metrics

    # ---- generation ---------------------------------------------------------------------------

    def generate(
        self,
        prompts: Union[PromptType, Sequence[PromptType]],
        sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
        *,
        use_tqdm: bool = True,
    ) -> list[RequestOutput]:
        """Completes prompts. A prompt is text, a list of token ids, or {"prompt": text} /
        {"prompt_token_ids": ids}; pass one or a list. ``sampling_params`` is one for all or one
        per prompt (default ``SamplingParams()``). Returns one RequestOutput per prompt, in order."""
        items = _normalize_prompts(prompts)
        params = _per_prompt(sampling_params, len(items))
        requests = []
        for (text, ids), sp in zip(items, params):
            if ids is None:
                ids = self._tokenizer.encode(text)
            requests.append((text, ids, sp))
        finished = self._run([(ids, sp._to_core()) for _, ids, sp in requests], use_tqdm)
        outputs = []
        for i, ((text, ids, sp), out) in enumerate(zip(requests, finished)):
            completions = [self._completion(c, sp) for c in out.completions]
            outputs.append(RequestOutput(request_id=str(i), prompt=text, prompt_token_ids=list(ids),
                                         outputs=completions, num_cached_tokens=out.cached_prompt_tokens))
        return outputs

    def chat(
        self,
        messages: Union[Conversation, Sequence[Conversation]],
        sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
        *,
        tools: Optional[list[dict[str, Any]]] = None,
        tool_choice: Optional[Union[str, dict[str, Any]]] = None,
        thinking: Optional[bool] = None,
        reasoning_effort: Optional[str] = None,
        use_tqdm: bool = True,
    ) -> list[RequestOutput]:
        """Chat completions with DeepSeek's chat recipe. ``messages`` is one conversation (a list
        of OpenAI messages) or a list of them. ``tools`` / ``tool_choice`` are OpenAI's;
        ``thinking`` switches the reasoning mode (default on); ``reasoning_effort`` is OpenAI's
        ("low", "medium", "high", "xhigh", "max", or "none" for no thinking). Each completion's
        ``text`` is the answer, with ``reasoning_content`` and ``tool_calls`` beside it."""
        conversations = _normalize_conversations(messages)
        params = _per_prompt(sampling_params, len(conversations))
        prepared = []
        for i, (conv, sp) in enumerate(zip(conversations, params)):
            body: dict[str, Any] = {"messages": conv}
            if tools is not None:
                body["tools"] = tools
            if tool_choice is not None:
                body["tool_choice"] = tool_choice
            if thinking is not None:
                body["thinking"] = {"type": "enabled" if thinking else "disabled"}
            if reasoning_effort is not None:
                body["reasoning_effort"] = reasoning_effort
            if sp.response_format is not None:
                body["response_format"] = sp.response_format
            request = _core.parse_chat_request(json.dumps(body, ensure_ascii=False))
            prompt = _core.render_chat(request, self._family)
            ids = _core.encode_chat_prompt(prompt, self._tokenizer)
            options = _core.parse_options_for(request)
            options.stop = []  # the engine cuts the text at SamplingParams.stop itself
            options.response_id = f"chatcmpl-{i}"
            prepared.append((prompt.text(), ids, sp, options))
        finished = self._run([(ids, sp._to_core(options)) for _, ids, sp, options in prepared], use_tqdm)
        outputs = []
        for i, ((text, ids, sp, options), out) in enumerate(zip(prepared, finished)):
            completions = []
            for c in out.completions:
                base_id = options.response_id
                options.response_id = f"{base_id}-{c.index}"
                reason = _core.BackendFinish.length if c.finish_reason == "length" else _core.BackendFinish.stop
                message = _core.parse_chat_output(c.text, options, reason)
                options.response_id = base_id
                completion = self._completion(c, sp)
                completion.raw_text = completion.text
                completion.text = message.content
                completion.reasoning_content = message.reasoning_content
                completion.tool_calls = [ToolCall(id=t.id, name=t.name, arguments=t.arguments)
                                         for t in message.tool_calls] or None
                completion.finish_reason = message.finish_reason
                completion.parse_errors = list(message.errors)
                completions.append(completion)
            outputs.append(RequestOutput(request_id=str(i), prompt=text, prompt_token_ids=list(ids),
                                         outputs=completions, num_cached_tokens=out.cached_prompt_tokens))
        return outputs

    def run_batch(
        self,
        input_path: Union[str, os.PathLike[str]],
        output_path: Union[str, os.PathLike[str]],
        *,
        resume: bool = True,
        default_max_tokens: int = 256,
        use_tqdm: bool = True,
        on_progress: Optional[Callable[[_core.BatchRunSummary], None]] = None,
    ) -> _core.BatchRunSummary:
        """``deepinfer run`` from Python: an OpenAI Batch API input file (JSONL) into a batch output
        file, results appended and flushed as each request finishes. With ``resume`` (default) an
        existing output is continued: custom_ids already in it are skipped. Ctrl-C stops between
        engine steps with every finished result written; run again to continue."""
        options = _core.BatchRunOptions()
        options.input_path = os.fspath(input_path)
        options.output_path = os.fspath(output_path)
        options.model_name = self.model_name
        options.resume = resume
        options.family = self._family
        options.default_max_tokens = default_max_tokens
        options.progress = _core.BatchProgress.never
        bar: Optional[Progress] = None

        def progress(summary: _core.BatchRunSummary) -> None:
            nonlocal bar
            if bar is None:
                bar = Progress(summary.lines, use_tqdm, "Batch requests")
            bar.set_done(summary.completed + summary.errors + summary.skipped_done, summary.completion_tokens)
            if on_progress is not None:
                on_progress(summary)

        try:
            summary = _core.run_batch(options, self._model, self._tokenizer, self._engine_config, progress)
            if bar is not None:
                bar.set_done(summary.completed + summary.errors + summary.skipped_done, summary.completion_tokens)
            return summary
        finally:
            if bar is not None:
                bar.close()

    # ---- internals ----------------------------------------------------------------------------

    def _run(self, requests: list[tuple[list[int], _core.SamplingParams]], use_tqdm: bool) -> list[_core.RequestOutput]:
        if self._engine is None:
            self._engine = _core.Engine(self._model, self._tokenizer, self._engine_config)
        engine = self._engine
        results: list[Optional[_core.RequestOutput]] = [None] * len(requests)
        bar = None
        try:
            for i, (ids, sp) in enumerate(requests):
                engine.add_request(str(i), ids, sp)
            bar = Progress(len(requests), use_tqdm and len(requests) > 0, "Processed prompts")
            while engine.has_unfinished():
                done = engine.step()  # the GIL is released inside; signals are handled after it
                tokens = 0
                for out in done:
                    results[int(out.request_id)] = out
                    tokens += sum(len(c.token_ids) for c in out.completions)
                if done:
                    bar.update(len(done), tokens)
        except BaseException:
            # Requests of this call may still be queued: drop the engine (the next call starts a
            # clean one; the model and tokenizer stay loaded).
            self._engine = None
            raise
        finally:
            if bar is not None:
                bar.close()
        return results  # type: ignore[return-value]

    def _completion(self, c: _core.CompletionOutput, sp: SamplingParams) -> CompletionOutput:
        logprobs = None
        cumulative = None
        if sp.logprobs is not None:
            logprobs = []
            cumulative = 0.0
            for entry in c.logprobs:
                step: dict[int, Logprob] = {}
                for rank, (token, lp) in enumerate(entry.top, start=1):
                    step[token] = Logprob(lp, rank, self._tokenizer.decode([token]))
                if entry.token not in step:
                    step[entry.token] = Logprob(entry.logprob, None, self._tokenizer.decode([entry.token]))
                cumulative += entry.logprob
                logprobs.append(step)
        return CompletionOutput(index=c.index, text=c.text, token_ids=list(c.token_ids),
                                cumulative_logprob=cumulative, logprobs=logprobs, finish_reason=c.finish_reason)


# ---- argument normalization ---------------------------------------------------------------------

def _engine_defaults(device: str, gpus: int = 1) -> dict[str, Any]:
    """The engine limits an LLM gets unless given, by device (as `deepinfer run`'s): CPU-sized steps,
    or on the GPU whole-GPU batches and prefill chunks with the state bounded by the device page pool
    (2**20 GiB: no budget of the engine's own) and asynchronous scheduling; sequences and step tokens
    per GPU (the engine splits a step's tokens equally over an expert-parallel model's GPUs, so each
    GPU's workspace is sized for its share)."""
    if device == "cuda":
        return {"max_num_seqs": 256 * gpus, "max_num_batched_tokens": 8192 * gpus, "max_prefill_chunk": 8192,
                "state_memory_gib": float(1 << 20), "async_scheduling": True}
    return {"max_num_seqs": 64, "max_num_batched_tokens": 2048, "max_prefill_chunk": 512,
            "state_memory_gib": 4.0, "async_scheduling": False}


def _resolve_model(model: Optional[str], revision: Optional[str], cache_dir: Optional[str]) -> tuple[str, str]:
    if model is None or _core.is_embedded_model_name(os.fspath(model)):
        if revision is not None:
            raise ValueError("revision needs a Hub model id")
        name = _core.EMBEDDED_DEFAULT if model is None else os.fspath(model)
        return _core.ensure_embedded_model(cache_dir or default_cache_dir(), name), name
    model = os.fspath(model)
    if os.path.isdir(model):
        if revision is not None:
            raise ValueError(f"revision={revision!r} applies to Hub model ids, but {model!r} is a local directory")
        return model, model
    from . import hub  # noqa: PLC0415 (only when a Hub id is given)

    if not hub.is_repo_id(model):
        raise _core.Error(f"'{model}': no such directory, and not a Hub repo id (org/name)")
    return hub.snapshot_download(model, revision=revision), model


def _model_tokenizer(model_dir: str) -> Optional[str]:
    path = os.path.join(model_dir, "tokenizer.json")
    return path if os.path.exists(path) else None


def _is_token_ids(x: object) -> bool:
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(isinstance(t, int) and not isinstance(t, bool) for t in x)


def _normalize_prompts(prompts: Any) -> list[tuple[Optional[str], Optional[list[int]]]]:
    def one(p: Any) -> tuple[Optional[str], Optional[list[int]]]:
        if isinstance(p, str):
            return p, None
        if isinstance(p, dict):
            if "prompt_token_ids" in p:
                if not _is_token_ids(p["prompt_token_ids"]):
                    raise TypeError("prompt_token_ids must be a non-empty list of ints")
                return p.get("prompt"), list(p["prompt_token_ids"])
            if isinstance(p.get("prompt"), str):
                return p["prompt"], None
            raise TypeError('a prompt dict needs "prompt" (text) or "prompt_token_ids"')
        if _is_token_ids(p):
            return None, list(p)
        raise TypeError(f"a prompt must be text, a list of token ids or a dict, got {type(p).__name__}")

    if isinstance(prompts, (str, dict)) or _is_token_ids(prompts):
        return [one(prompts)]
    if isinstance(prompts, (list, tuple)):
        return [one(p) for p in prompts]
    raise TypeError(f"prompts must be a prompt or a list of prompts, got {type(prompts).__name__}")


def _normalize_conversations(messages: Any) -> list[Conversation]:
    if isinstance(messages, (list, tuple)) and messages and all(isinstance(m, dict) for m in messages):
        return [list(messages)]
    if isinstance(messages, (list, tuple)) and messages and all(isinstance(c, (list, tuple)) for c in messages):
        for conv in messages:
            if not all(isinstance(m, dict) for m in conv):
                raise TypeError("each conversation must be a list of message dicts")
        return [list(c) for c in messages]
    raise TypeError("messages must be a list of message dicts (one conversation) or a list of conversations")


def _per_prompt(sampling_params: Any, count: int) -> list[SamplingParams]:
    if sampling_params is None:
        return [SamplingParams()] * count
    if isinstance(sampling_params, SamplingParams):
        return [sampling_params] * count
    if isinstance(sampling_params, (list, tuple)):
        if len(sampling_params) != count:
            raise ValueError(f"{len(sampling_params)} sampling_params for {count} prompts")
        if not all(isinstance(p, SamplingParams) for p in sampling_params):
            raise TypeError("sampling_params must be SamplingParams objects")
        return list(sampling_params)
    raise TypeError(f"sampling_params must be a SamplingParams or a list of them, got {type(sampling_params).__name__}")
