# SPDX-License-Identifier: Apache-2.0
"""Sampling parameters, named as in vLLM and the OpenAI API.

The engine validates every value when a request is queued (``LLM.generate`` queues all of a
call's requests before running any), so an out-of-range value raises :class:`deepinfer.Error`
with the engine's message before any work is done.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional, Union

from . import _core


@dataclasses.dataclass
class SamplingParams:
    """How to sample one request's completions.

    Attributes:
        n: completions per prompt (1-128).
        temperature: 0 is greedy; the default 1.0 samples from the model's distribution.
        top_p, top_k, min_p: nucleus, top-k (0 or -1: off) and min-p filtering.
        presence_penalty, frequency_penalty: OpenAI penalties on generated tokens.
        repetition_penalty: > 1 discourages tokens already in the prompt or the output.
        logit_bias: token id -> bias added to its logit (clamped to [-100, 100]).
        seed: the request's seed. Without one, the seed derives from ``LLM(seed=...)`` and the
            request's position in the call, so the same call gives the same tokens every time.
        stop: strings that end a completion (the text is cut before them).
        stop_token_ids: ids that end a completion, besides the model's end-of-sequence ids.
        ignore_eos: keep generating past end-of-sequence ids.
        max_tokens: the most tokens generated per completion.
        logprobs: None, or k >= 0: the sampled token's logprob and the top k alternatives.
        response_format: an OpenAI ``response_format`` ({"type": "json_object"} or
            {"type": "json_schema", "json_schema": {...}}). In ``LLM.chat`` it also selects the
            chat recipe's JSON mode.
        json_schema: a JSON schema (dict or JSON text) the output must match.
        regex: a regular expression the output must match.
        ebnf: a grammar (EBNF) the output must match.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: Optional[dict[int, float]] = None
    seed: Optional[int] = None
    stop: Optional[Union[str, list[str]]] = None
    stop_token_ids: Optional[list[int]] = None
    ignore_eos: bool = False
    max_tokens: int = 16
    logprobs: Optional[int] = None
    response_format: Optional[dict[str, Any]] = None
    json_schema: Optional[Union[dict[str, Any], str]] = None
    regex: Optional[str] = None
    ebnf: Optional[str] = None

    def __post_init__(self) -> None:
        for name in ("n", "top_k", "max_tokens"):
            _require_int(name, getattr(self, name))
        for name in ("seed", "logprobs"):
            if getattr(self, name) is not None:
                _require_int(name, getattr(self, name))
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        given = [k for k in ("response_format", "json_schema", "regex", "ebnf") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give at most one structured-output constraint, got {', '.join(given)}")
        if self.response_format is not None:
            if not isinstance(self.response_format, dict) or "type" not in self.response_format:
                raise ValueError('response_format must be a dict with a "type" ("text", "json_object" or "json_schema")')
        if self.json_schema is not None and not isinstance(self.json_schema, (dict, str)):
            raise TypeError("json_schema must be a dict or JSON text")

    @property
    def structured(self) -> Optional[tuple[str, str]]:
        """The structured-output constraint as (kind, JSON/pattern text), or None."""
        rf = self.response_format
        if rf is not None and rf.get("type") != "text":
            return ("response_format", json.dumps(rf))
        if self.json_schema is not None:
            text = self.json_schema if isinstance(self.json_schema, str) else json.dumps(self.json_schema)
            return ("json_schema", text)
        if self.regex is not None:
            return ("regex", self.regex)
        if self.ebnf is not None:
            return ("ebnf", self.ebnf)
        return None

    def _to_core(self) -> _core.SamplingParams:
        p = _core.SamplingParams()
        p.n = self.n
        p.temperature = float(self.temperature)
        p.top_p = float(self.top_p)
        p.top_k = 0 if self.top_k == -1 else self.top_k
        p.min_p = float(self.min_p)
        p.presence_penalty = float(self.presence_penalty)
        p.frequency_penalty = float(self.frequency_penalty)
        p.repetition_penalty = float(self.repetition_penalty)
        p.logit_bias = [(int(k), float(v)) for k, v in (self.logit_bias or {}).items()]
        p.seed = self.seed
        p.stop = list(self.stop or [])
        p.stop_token_ids = [int(t) for t in (self.stop_token_ids or [])]
        p.ignore_eos = bool(self.ignore_eos)
        p.max_tokens = self.max_tokens
        p.logprobs = -1 if self.logprobs is None else self.logprobs
        structured = self.structured
        if structured is not None:
            if not hasattr(p, "structured_kind"):
                raise _core.Error(
                    f"structured output ({structured[0]}) is not available in this build of deepinfer")
            p.structured_kind, p.structured_spec = structured
        return p


def _require_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
