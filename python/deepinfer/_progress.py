# SPDX-License-Identifier: Apache-2.0
"""A tqdm progress bar when tqdm is installed and wanted; otherwise nothing."""
from __future__ import annotations

from typing import Any, Optional


class Progress:
    """Counts finished requests and generated tokens; shows them through tqdm if available."""

    def __init__(self, total: int, enabled: bool, desc: str) -> None:
        self._bar: Optional[Any] = None
        if enabled:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self._bar = tqdm(total=total, desc=desc, unit="req", dynamic_ncols=True)
        self.tokens = 0

    def update(self, requests: int, tokens: int = 0) -> None:
        self.tokens += tokens
        if self._bar is not None:
            if requests:
                self._bar.update(requests)
            elapsed = self._bar.format_dict.get("elapsed") or 0
            if elapsed > 0:
                self._bar.set_postfix_str(f"{self.tokens / elapsed:.1f} tok/s", refresh=False)

    def set_done(self, done: int, tokens: int) -> None:
        if self._bar is not None:
            self.update(max(0, done - self._bar.n), tokens - self.tokens)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class ByteProgress:
    """A tqdm bar over bytes (downloads), if tqdm is installed."""

    def __init__(self, total: int, desc: str) -> None:
        self._bar: Optional[Any] = None
        try:
            from tqdm.auto import tqdm
        except ImportError:
            return
        self._bar = tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, dynamic_ncols=True)

    def set(self, done: int) -> None:
        if self._bar is not None and done > self._bar.n:
            self._bar.update(done - self._bar.n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
