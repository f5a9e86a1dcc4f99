# SPDX-License-Identifier: Apache-2.0
"""deepinfer: offline batch inference for DeepSeek-V4-family models.

    from deepinfer import LLM, SamplingParams
    llm = LLM("deepseek-ai/DeepSeek-V4.1-Flash-1017")
    outputs = llm.generate(["The capital of France is"], SamplingParams(temperature=0, max_tokens=8))
    print(outputs[0].outputs[0].text)

``LLM()`` with no model uses the built-in tiny random-weight model (its text is random by design).
"""
from __future__ import annotations

from ._core import Error, GrammarError, HubError
from .hub import snapshot_download
from .llm import LLM
from .outputs import CompletionOutput, Logprob, RequestOutput, ToolCall
from .sampling_params import SamplingParams

__version__ = "0.1.0"

__all__ = [
    "LLM",
    "SamplingParams",
    "RequestOutput",
    "CompletionOutput",
    "Logprob",
    "ToolCall",
    "Error",
    "GrammarError",
    "HubError",
    "snapshot_download",
    "__version__",
]
