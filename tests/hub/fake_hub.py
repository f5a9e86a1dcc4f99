# SPDX-License-Identifier: Apache-2.0
"""A Hugging Face Hub-shaped HTTP server on 127.0.0.1 for the Hub tests (no other host is touched).

It serves what clients of the Hub use: the revision API
(GET /api/models/{repo}/revision/{rev}[?blobs=true] -> sha + siblings with blobId / size / lfs),
the tree API (GET /api/models/{repo}/tree/{rev}?recursive=true, which huggingface_hub lists with),
and file resolution (HEAD/GET /{repo}/resolve/{rev}/{path}, with X-Repo-Commit, ETag,
X-Linked-Etag / X-Linked-Size and a 302 to a second "CDN" server on another port for LFS files).
Byte ranges are honoured. Errors carry X-Error-Code / X-Error-Message as the Hub's do. Faults can
be injected: a transfer cut after half its bytes (once per file), corrupted LFS bytes, gated repos.
Every request is recorded. Both servers run on daemon threads and shut themselves down after
`lifetime` seconds at the latest.
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class RepoFile:
    path: str
    data: bytes
    lfs: bool

    @property
    def etag(self) -> str:
        return hashlib.sha256(self.data).hexdigest() if self.lfs else git_blob_id(self.data)


@dataclass
class Repo:
    revisions: dict[str, str]                 # branch/tag -> commit
    commits: dict[str, dict[str, RepoFile]]   # commit -> path -> file
    gated: bool = False                       # 401 GatedRepo without the right token


@dataclass
class Faults:
    cut_once: set[str] = field(default_factory=set)  # paths whose first GET stops after half the bytes
    corrupt: set[str] = field(default_factory=set)   # paths whose bytes are served altered
    ignore_range: bool = False                       # answer 200 with the whole file to a Range request


@dataclass
class Request:
    server: str  # "hub" | "cdn"
    method: str
    path: str
    range: Optional[str]
    authorization: Optional[str]


class FakeHub:
    def __init__(self, repos: dict[str, Repo], token: Optional[str] = None, lifetime: float = 120.0):
        self.repos = repos
        self.token = token
        self.faults = Faults()
        self.requests: list[Request] = []
        self._cut_done: set[str] = set()
        self._lock = threading.Lock()
        self._blobs: dict[str, bytes] = {}
        for repo in repos.values():
            for files in repo.commits.values():
                for f in files.values():
                    if f.lfs:
                        self._blobs[f.etag] = f.data
        self.hub = ThreadingHTTPServer(("127.0.0.1", 0), self._handler("hub"))
        self.cdn = ThreadingHTTPServer(("127.0.0.1", 0), self._handler("cdn"))
        self.hub.daemon_threads = self.cdn.daemon_threads = True
        self._threads = [threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
                         for s in (self.hub, self.cdn)]
        for t in self._threads:
            t.start()
        self._timer = threading.Timer(lifetime, self.close)
        self._timer.daemon = True
        self._timer.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.hub.server_address[1]}"

    def cdn_url(self, etag: str) -> str:
        return f"http://127.0.0.1:{self.cdn.server_address[1]}/lfs/{etag}"

    def close(self) -> None:
        self._timer.cancel()
        for s in (self.hub, self.cdn):
            s.shutdown()
            s.server_close()

    def __enter__(self) -> "FakeHub":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def requests_for(self, server: str, method: str = "GET", contains: str = "") -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.server == server and r.method == method and contains in r.path]

    # ---- request handling ----------------------------------------------------------------------

    def _handler(self, server: str):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def do_HEAD(self) -> None:
                hub._serve(self, server, head=True)

            def do_GET(self) -> None:
                hub._serve(self, server, head=False)

        return Handler

    def _serve(self, h: BaseHTTPRequestHandler, server: str, head: bool) -> None:
        with self._lock:
            self.requests.append(Request(server, "HEAD" if head else "GET", h.path, h.headers.get("Range"),
                                         h.headers.get("Authorization")))
        url = urllib.parse.urlsplit(h.path)
        path = urllib.parse.unquote(url.path)
        if server == "cdn":
            m = re.fullmatch(r"/lfs/([0-9a-f]{64})", path)
            if not m or m.group(1) not in self._blobs:
                return self._error(h, 404, "EntryNotFound", "no such object", head)
            etag = m.group(1)
            name = next(f.path for r in self.repos.values() for fs in r.commits.values() for f in fs.values()
                        if f.lfs and f.etag == etag)
            return self._send_file(h, self._blobs[etag], name, head, {"ETag": f'"{etag}"'})
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/revision/(.+)", path)
        if m:
            repo_id, revision = m.group(1), m.group(2)
            repo, commit = self._lookup(h, repo_id, revision, head)
            if repo is None:
                return
            blobs = "blobs=true" in (url.query or "")
            siblings = []
            for f in repo.commits[commit].values():
                s = {"rfilename": f.path}
                if blobs:
                    s["blobId"] = git_blob_id(f.data) if not f.lfs else git_blob_id(b"pointer " + f.etag.encode())
                    s["size"] = len(f.data)
                    if f.lfs:
                        s["lfs"] = {"sha256": f.etag, "size": len(f.data), "pointerSize": 134}
                siblings.append(s)
            body = json.dumps({"id": repo_id, "modelId": repo_id, "sha": commit, "private": False,
                               "gated": repo.gated, "siblings": siblings}).encode()
            return self._send(h, 200, body, {"Content-Type": "application/json"}, head)
        m = re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)", path)
        if m:  # the tree listing huggingface_hub's snapshot_download uses
            repo, commit = self._lookup(h, m.group(1), m.group(2), head)
            if repo is None:
                return
            entries, dirs = [], set()
            for f in repo.commits[commit].values():
                parts = f.path.split("/")
                for i in range(1, len(parts)):
                    dirs.add("/".join(parts[:i]))
                e = {"type": "file", "path": f.path, "size": len(f.data),
                     "oid": git_blob_id(b"pointer " + f.etag.encode()) if f.lfs else git_blob_id(f.data)}
                if f.lfs:
                    e["lfs"] = {"oid": f.etag, "size": len(f.data), "pointerSize": 134}
                entries.append(e)
            entries += [{"type": "directory", "path": d, "oid": "0" * 40, "size": 0} for d in sorted(dirs)]
            return self._send(h, 200, json.dumps(entries).encode(), {"Content-Type": "application/json"}, head)
        m = re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if m:
            repo_id, revision, file_path = m.groups()
            repo, commit = self._lookup(h, repo_id, revision, head)
            if repo is None:
                return
            f = repo.commits[commit].get(file_path)
            if f is None:
                return self._error(h, 404, "EntryNotFound", f"{file_path} does not exist at {revision}", head)
            headers = {"X-Repo-Commit": commit, "ETag": f'"{f.etag}"'}
            if f.lfs:
                headers.update({"X-Linked-Etag": f'"{f.etag}"', "X-Linked-Size": str(len(f.data)),
                                "Location": self.cdn_url(f.etag)})
                return self._send(h, 302, b"", headers, head)
            return self._send_file(h, f.data, f.path, head, headers)
        return self._error(h, 404, None, "not found", head)

    def _lookup(self, h, repo_id: str, revision: str, head: bool):
        repo = self.repos.get(repo_id)
        if repo is None:
            self._error(h, 404, "RepoNotFound", f"Repository {repo_id} not found", head)
            return None, None
        if repo.gated and h.headers.get("Authorization") != f"Bearer {self.token}":
            self._error(h, 401, "GatedRepo", f"Access to model {repo_id} is restricted", head)
            return None, None
        commit = revision if revision in repo.commits else repo.revisions.get(revision)
        if commit is None:
            self._error(h, 404, "RevisionNotFound", f"Invalid rev id: {revision}", head)
            return None, None
        return repo, commit

    def _send_file(self, h, data: bytes, name: str, head: bool, headers: dict[str, str]) -> None:
        if name in self.faults.corrupt:
            data = bytes(b ^ 0x5A for b in data[:16]) + data[16:]
        rng = h.headers.get("Range")
        start = 0
        status = 200
        if rng and not self.faults.ignore_range:
            m = re.fullmatch(r"bytes=(\d+)-", rng)
            start = int(m.group(1)) if m else 0
            if start >= len(data):
                return self._send(h, 416, b"", {"Content-Range": f"bytes */{len(data)}"}, head)
            status = 206
            headers = {**headers, "Content-Range": f"bytes {start}-{len(data) - 1}/{len(data)}"}
        body = data[start:]
        cut = False
        if not head and name in self.faults.cut_once:
            with self._lock:
                if name not in self._cut_done:
                    self._cut_done.add(name)
                    cut = True
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Accept-Ranges", "bytes")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if head:
            return
        if cut:
            # Half the announced bytes, then the connection drops: the client sees a short transfer.
            h.wfile.write(body[: len(body) // 2])
            h.wfile.flush()
            h.close_connection = True
            return
        h.wfile.write(body)

    def _send(self, h, status: int, body: bytes, headers: dict[str, str], head: bool) -> None:
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        if not head:
            h.wfile.write(body)

    def _error(self, h, status: int, code: Optional[str], message: str, head: bool) -> None:
        headers = {"Content-Type": "application/json", "X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self._send(h, status, json.dumps({"error": message}).encode(), headers, head)
