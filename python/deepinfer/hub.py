# SPDX-License-Identifier: Apache-2.0
"""Models from the Hugging Face Hub, through the standard Hugging Face cache.

``snapshot_download("org/name")`` returns the local snapshot directory of a repository: a model
that huggingface_hub already downloaded is used in place, missing files are downloaded into the
same cache (in parallel, resumable, LFS files checked against their sha256), and what deepinfer
downloads is found by huggingface_hub too. The usual environment applies: HF_HOME,
HF_HUB_CACHE, HF_ENDPOINT, HF_TOKEN (or the saved token), HF_HUB_OFFLINE.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from . import _core
from ._core import (
    EntryNotFoundError,
    HubAuthError,
    HubConnectionError,
    HubError,
    IntegrityError,
    OfflineModeError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from ._progress import ByteProgress

__all__ = [
    "snapshot_download",
    "is_repo_id",
    "HubError",
    "RepositoryNotFoundError",
    "RevisionNotFoundError",
    "EntryNotFoundError",
    "HubAuthError",
    "OfflineModeError",
    "IntegrityError",
    "HubConnectionError",
]


def is_repo_id(spec: str) -> bool:
    """Whether ``spec`` has the shape of a Hub model id ("org/name")."""
    return "/" in spec and _core.is_hub_repo_id(spec)


def snapshot_download(
    repo_id: str,
    *,
    revision: Optional[str] = None,
    cache_dir: Optional[str] = None,
    token: Optional[str] = None,
    endpoint: Optional[str] = None,
    offline: Optional[bool] = None,
    allow_patterns: Optional[Sequence[str]] = None,
    max_workers: int = 8,
    use_tqdm: bool = True,
) -> str:
    """The local directory of ``repo_id`` at ``revision`` (branch, tag or commit; default "main").

    Arguments left as None come from the environment (HF_HUB_CACHE / HF_HOME, HF_TOKEN,
    HF_ENDPOINT, HF_HUB_OFFLINE). ``allow_patterns`` selects repository files (fnmatch, '*' stops
    at '/'; default top-level ``*.json`` and ``*.safetensors``). Raises a :class:`HubError`
    subclass: RepositoryNotFoundError, RevisionNotFoundError, EntryNotFoundError, HubAuthError
    (401/403), OfflineModeError, IntegrityError (size or sha256 mismatch), HubConnectionError.
    Ctrl-C stops the transfers; partial files stay in the cache and the next call resumes them.
    """
    options = _core.HubOptions.from_environment()
    if cache_dir is not None:
        options.cache_dir = str(cache_dir)
    if token is not None:
        options.token = token
    if endpoint is not None:
        options.endpoint = endpoint.rstrip("/")
    if offline is not None:
        options.offline = offline
    if allow_patterns is not None:
        options.allow_patterns = list(allow_patterns)
    options.max_parallel_downloads = max_workers
    bar: Optional[ByteProgress] = None

    def progress(p: _core.HubProgress) -> None:
        nonlocal bar
        if bar is None and use_tqdm and p.bytes_total > 0:
            bar = ByteProgress(p.bytes_total, f"Downloading {repo_id}")
        if bar is not None:
            bar.set(p.bytes_done)

    try:
        return _core.hub_snapshot_download(repo_id, revision or "", options, progress)
    finally:
        if bar is not None:
            bar.close()
