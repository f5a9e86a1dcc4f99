# SPDX-License-Identifier: Apache-2.0
"""Request outputs, shaped like vLLM's ``RequestOutput`` / ``CompletionOutput``."""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Optional


@dataclasses.dataclass
class Logprob:
    """One token's log probability. ``rank`` is its 1-based place among the returned
    alternatives (None when the sampled token is not among them)."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


@dataclasses.dataclass
class ToolCall:
    """A tool call the model made (chat with tools). ``arguments`` is JSON text."""

    id: str
    name: str
    arguments: str
    type: str = "function"

    def parsed_arguments(self) -> Any:
        """The arguments as Python values (raises ValueError if they are not valid JSON)."""
        return json.loads(self.arguments)


@dataclasses.dataclass
class CompletionOutput:
    """One completion of a request.

    ``text`` is the generated text, cut before a matched stop string. For ``LLM.chat`` it is the
    assistant's answer (``content``); the thinking is in ``reasoning_content``, tool calls in
    ``tool_calls``, and the raw generated text in ``raw_text``. ``finish_reason`` is "stop",
    "length", or for chat also "tool_calls". ``logprobs`` (when requested) holds one
    {token id: Logprob} per generated token: the sampled token and the top alternatives.
    """

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[list[dict[int, Logprob]]]
    finish_reason: Optional[str]
    stop_reason: Optional[str] = None
    reasoning_content: Optional[str] = None
    tool_calls: Optional[list[ToolCall]] = None
    raw_text: Optional[str] = None
    parse_errors: list[str] = dataclasses.field(default_factory=list)

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclasses.dataclass
class RequestOutput:
    """The result of one prompt: its completions (``outputs``) and prompt accounting."""

    request_id: str
    prompt: Optional[str]
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool = True
    num_cached_tokens: int = 0
