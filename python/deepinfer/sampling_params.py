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
        json_whitespace: "flexible" (default) or "compact" spacing of constrained JSON.

    An invalid constraint raises :class:`deepinfer.GrammarError` when the request is queued.
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
    json_whitespace: Optional[str] = None

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
            if not isinstance(self.response_format, dict) or self.response_format.get("type") not in (
                    "text", "json_object", "json_schema"):
                raise ValueError('response_format must be a dict with a "type": "text", "json_object" or "json_schema"')
        if self.json_schema is not None and not isinstance(self.json_schema, (dict, str)):
            raise TypeError("json_schema must be a dict or JSON text")

    def _grammar(self, chat: Optional[_core.ChatParseOptions]) -> Optional[_core.GrammarSpec]:
        """The engine's GrammarSpec for the structured-output field, as `deepinfer run` builds it
        from a request body: in chat, thinking mode constrains only the answer (after </think>)
        and offered tools stay callable (a DSML block ends the constraint)."""
        spec = _core.GrammarSpec()
        rf = self.response_format
        if rf is not None and rf.get("type") != "text":
            if rf["type"] == "json_object":
                spec.kind = _core.GrammarSpec.Kind.json_object
                spec.json.strict = False
            elif rf["type"] == "json_schema":
                js = rf.get("json_schema")
                if not isinstance(js, dict) or "schema" not in js:
                    raise ValueError("response_format.json_schema.schema is required")
                spec.kind = _core.GrammarSpec.Kind.json_schema
                spec.text = json.dumps(js["schema"])
                spec.json.strict = js.get("strict") is True
            else:
                raise ValueError("response_format type must be text, json_object or json_schema")
        elif self.json_schema is not None:
            spec.kind = _core.GrammarSpec.Kind.json_schema
            spec.text = self.json_schema if isinstance(self.json_schema, str) else json.dumps(self.json_schema)
            spec.json.strict = False
        elif self.regex is not None:
            spec.kind = _core.GrammarSpec.Kind.regex
            spec.text = self.regex
        elif self.ebnf is not None:
            spec.kind = _core.GrammarSpec.Kind.ebnf
            spec.text = self.ebnf
        else:
            return None
        if self.json_whitespace is not None:
            if self.json_whitespace not in ("flexible", "compact"):
                raise ValueError('json_whitespace must be "flexible" or "compact"')
            spec.json.whitespace = getattr(_core.JsonWhitespace, self.json_whitespace)
        if chat is not None:
            if chat.starts_in_tool_calls:
                raise ValueError("structured output cannot be combined with tool_choice required or a named tool")
            if chat.thinking:
                spec.start_after = "</think>"
            if chat.parse_tool_calls:
                spec.tool_call_prefix = _DSML_START
        return spec

    def _to_core(self, chat: Optional[_core.ChatParseOptions] = None) -> _core.SamplingParams:
        p = _core.SamplingParams()
        p.n = self.n
        p.temperature = float(self.temperature)
        p.top_p = float(self.top_p)
        p.top_k = 0 if self.top_k == -1 else self.top_k
        p.min_p = float(self.min_p)
        p.presence_penalty = float(self.presence_penalty)
        p.frequency_penalty = float(self.frequency_penalty)
        p.repetition_penalty = float(self.repetition_penalty)
        p.logit_bias = [(int(k), max(-100.0, min(100.0, float(v)))) for k, v in (self.logit_bias or {}).items()]
        p.seed = self.seed
        p.stop = list(self.stop or [])
        p.stop_token_ids = [int(t) for t in (self.stop_token_ids or [])]
        p.ignore_eos = bool(self.ignore_eos)
        p.max_tokens = self.max_tokens
        p.logprobs = -1 if self.logprobs is None else self.logprobs
        p.grammar = self._grammar(chat)
        return p


# The start of a DeepSeek tool-call block (DSML): a constraint gives way to it in chat with tools.
_DSML_START = "<\uff5cDSML\uff5c"


def _require_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
