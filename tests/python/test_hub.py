# SPDX-License-Identifier: Apache-2.0
"""Hugging Face Hub loading against a Hub-shaped server on 127.0.0.1 (tests/hub/fake_hub.py): the
standard cache layout (checked both ways with huggingface_hub itself), LFS redirects, a transfer cut
mid-file and resumed with Range, a partial blob left by a killed run resumed, a corrupted file
rejected by its sha256, 401/404/offline errors, revisions, HF_TOKEN kept from the CDN, and
`deepinfer run --model org/name`. No other host is contacted."""
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "hub"))
from fake_hub import FakeHub, Repo, RepoFile  # noqa: E402

from package_helpers import import_deepinfer  # noqa: E402

deepinfer = import_deepinfer()
from deepinfer import LLM, SamplingParams, hub  # noqa: E402
from deepinfer import _core  # noqa: E402

REPO = "tiny-org/deepinfer-tiny"
COMMIT_1 = "1" * 40
COMMIT_2 = "a1b2c3d4e5f60718293a4b5c6d7e8f9012345678"


@pytest.fixture(scope="module")
def model_files(tmp_path_factory):
    """The built-in tiny model's files, as a Hub repository would hold them."""
    cache = tmp_path_factory.mktemp("embedded")
    d = pathlib.Path(_core.ensure_embedded_model(str(cache)))
    tok_dir = pathlib.Path(deepinfer.llm.bundled_tokenizer()).parent
    return {
        "config.json": (d / "config.json").read_bytes(),
        "model.safetensors": (d / "model.safetensors").read_bytes(),
        "tokenizer.json": (tok_dir / "tokenizer.json").read_bytes(),
        "tokenizer_config.json": (tok_dir / "tokenizer_config.json").read_bytes(),
        "README.md": b"# tiny\n",
        "original/extra.safetensors": b"not needed",
    }


def make_repo(files, gated=False):
    lfs = {"model.safetensors", "tokenizer.json", "original/extra.safetensors"}
    v1 = {p: RepoFile(p, data, p in lfs) for p, data in files.items()}
    cfg = json.loads(files["config.json"])
    cfg["deepinfer_note"] = "revision 2"
    v2 = dict(v1)
    v2["config.json"] = RepoFile("config.json", (json.dumps(cfg, indent=2) + "\n").encode(), False)
    return Repo(revisions={"main": COMMIT_2, "v1": COMMIT_1}, commits={COMMIT_1: v1, COMMIT_2: v2}, gated=gated)


@pytest.fixture
def server(model_files):
    with FakeHub({REPO: make_repo(model_files), "gated-org/tiny": make_repo(model_files, gated=True)},
                 token="hf_secret_token") as s:
        yield s


@pytest.fixture
def hf_env(tmp_path, monkeypatch, server):
    cache = tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
    return cache


def repo_dir(cache):
    return cache / ("models--" + REPO.replace("/", "--"))


def test_download_layout_and_generate(hf_env, server, model_files, tmp_path):
    path = pathlib.Path(hub.snapshot_download(REPO, use_tqdm=False))
    root = repo_dir(hf_env)
    assert path == root / "snapshots" / COMMIT_2
    assert (root / "refs" / "main").read_text() == COMMIT_2
    assert sorted(p.name for p in path.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json",
                                                      "tokenizer_config.json"]
    for name in ("model.safetensors", "tokenizer.json"):
        link = path / name
        assert link.is_symlink()
        sha = hashlib.sha256(model_files[name]).hexdigest()
        assert os.readlink(link) == f"../../blobs/{sha}"
        assert link.read_bytes() == model_files[name]
    assert not list((root / "blobs").glob("*.incomplete"))
    # LFS files came through the 302 to the CDN server.
    assert server.requests_for("cdn", contains=hashlib.sha256(model_files["model.safetensors"]).hexdigest())
    # The model loads from the Hub id and is the built-in model: same tokens as LLM().
    sp = SamplingParams(temperature=0.8, max_tokens=6, ignore_eos=True)
    by_id = LLM(REPO, seed=4).generate(["Hello there"], sp, use_tqdm=False)[0].outputs[0].token_ids
    builtin = LLM(cache_dir=str(tmp_path / "b"), seed=4).generate(["Hello there"], sp, use_tqdm=False)[0]
    assert by_id == builtin.outputs[0].token_ids
    # A second resolution downloads nothing.
    before = len(server.requests_for("cdn"))
    assert hub.snapshot_download(REPO, use_tqdm=False) == str(path)
    assert len(server.requests_for("cdn")) == before


def test_huggingface_hub_reads_what_we_downloaded(hf_env, server):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    path = hub.snapshot_download(REPO, use_tqdm=False)
    theirs = huggingface_hub.snapshot_download(REPO, cache_dir=str(hf_env), local_files_only=True,
                                               allow_patterns=["*.json", "*.safetensors"])
    assert pathlib.Path(theirs) == pathlib.Path(path)
    cached = huggingface_hub.try_to_load_from_cache(REPO, "model.safetensors", cache_dir=str(hf_env))
    assert pathlib.Path(cached) == pathlib.Path(path) / "model.safetensors"
    info = huggingface_hub.scan_cache_dir(str(hf_env))
    (repo,) = [r for r in info.repos if r.repo_id == REPO]
    (rev,) = repo.revisions
    assert rev.commit_hash == COMMIT_2 and "main" in rev.refs
    assert {f.file_name for f in rev.files} == {"config.json", "model.safetensors", "tokenizer.json",
                                                "tokenizer_config.json"}


def test_offline_uses_a_cache_populated_by_huggingface_hub(hf_env, server, monkeypatch, tmp_path):
    huggingface_hub = pytest.importorskip("huggingface_hub")
    theirs = huggingface_hub.snapshot_download(REPO, cache_dir=str(hf_env), endpoint=server.endpoint,
                                               allow_patterns=["*.json", "*.safetensors"])
    server.close()  # nothing may be asked of the network now
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    ours = hub.snapshot_download(REPO, use_tqdm=False)
    assert pathlib.Path(ours) == pathlib.Path(theirs)
    llm = LLM(REPO, seed=1)
    assert llm.model_dir == ours
    out = llm.generate("Hi", SamplingParams(max_tokens=3, ignore_eos=True), use_tqdm=False)[0].outputs[0]
    assert len(out.token_ids) == 3
    # Offline with a revision the cache lacks: a clear error.
    with pytest.raises(hub.OfflineModeError, match="HF_HUB_OFFLINE is set"):
        hub.snapshot_download(REPO, revision="v1", use_tqdm=False)
    with pytest.raises(hub.OfflineModeError, match="missing: refs/main"):
        hub.snapshot_download("tiny-org/other", use_tqdm=False)


def test_interrupted_transfer_is_resumed(hf_env, server, model_files):
    server.faults.cut_once = {"model.safetensors", "tokenizer_config.json"}
    path = pathlib.Path(hub.snapshot_download(REPO, use_tqdm=False))
    data = model_files["model.safetensors"]
    assert (path / "model.safetensors").read_bytes() == data
    assert (path / "tokenizer_config.json").read_bytes() == model_files["tokenizer_config.json"]
    sha = hashlib.sha256(data).hexdigest()
    gets = server.requests_for("cdn", contains=sha)
    assert [g.range for g in gets] == [None, f"bytes={len(data) // 2}-"]
    small = server.requests_for("hub", contains="tokenizer_config.json")
    assert [g.range for g in small] == [None, f"bytes={len(model_files['tokenizer_config.json']) // 2}-"]


def test_partial_blob_of_a_killed_run_is_resumed(hf_env, server, model_files):
    data = model_files["model.safetensors"]
    sha = hashlib.sha256(data).hexdigest()
    blobs = repo_dir(hf_env) / "blobs"
    blobs.mkdir(parents=True)
    (blobs / f"{sha}.incomplete").write_bytes(data[:1000])
    path = pathlib.Path(hub.snapshot_download(REPO, use_tqdm=False))
    assert (path / "model.safetensors").read_bytes() == data
    assert [g.range for g in server.requests_for("cdn", contains=sha)] == ["bytes=1000-"]
    # A server that ignores Range gets the file from the start; the result is still exact.
    shutil.rmtree(repo_dir(hf_env))
    blobs.mkdir(parents=True)
    (blobs / f"{sha}.incomplete").write_bytes(data[:1000])
    server.faults.ignore_range = True
    path = pathlib.Path(hub.snapshot_download(REPO, use_tqdm=False))
    assert (path / "model.safetensors").read_bytes() == data


def test_corrupted_file_is_rejected_by_sha256(hf_env, server, model_files):
    server.faults.corrupt = {"model.safetensors"}
    sha = hashlib.sha256(model_files["model.safetensors"]).hexdigest()
    with pytest.raises(hub.IntegrityError, match=f"model.safetensors: sha256 mismatch: got [0-9a-f]{{64}}, the Hub "
                                                 f"says {sha}"):
        hub.snapshot_download(REPO, use_tqdm=False)
    root = repo_dir(hf_env)
    assert not (root / "blobs" / sha).exists()
    assert not list((root / "blobs").glob("*.incomplete"))
    assert not (root / "snapshots" / COMMIT_2 / "model.safetensors").exists()
    assert not (root / "refs" / "main").exists()
    # Fixed upstream: the next call fetches only what is missing.
    server.faults.corrupt = set()
    before = len(server.requests_for("hub", contains="/resolve/"))
    path = pathlib.Path(hub.snapshot_download(REPO, use_tqdm=False))
    assert (path / "model.safetensors").read_bytes() == model_files["model.safetensors"]
    after = [r.path for r in server.requests_for("hub", contains="/resolve/")[before:]]
    assert after == [f"/{REPO}/resolve/{COMMIT_2}/model.safetensors"]


def test_errors_401_404_unreachable(hf_env, server, monkeypatch, tmp_path):
    with pytest.raises(hub.RepositoryNotFoundError, match="tiny-org/missing: repository not found"):
        hub.snapshot_download("tiny-org/missing", use_tqdm=False)
    with pytest.raises(hub.RevisionNotFoundError, match="revision 'no-such-branch' not found"):
        hub.snapshot_download(REPO, revision="no-such-branch", use_tqdm=False)
    with pytest.raises(hub.HubAuthError, match="HTTP 401 Unauthorized.*no token is set: set HF_TOKEN"):
        hub.snapshot_download("gated-org/tiny", use_tqdm=False)
    with pytest.raises(hub.HubAuthError, match="has no access"):
        hub.snapshot_download("gated-org/tiny", token="hf_wrong", use_tqdm=False)
    assert issubclass(hub.HubAuthError, deepinfer.Error) and issubclass(hub.HubAuthError, ValueError)
    # HF_TOKEN opens the gated repo; it is sent to the Hub and never to the CDN it redirects to.
    monkeypatch.setenv("HF_TOKEN", "hf_secret_token")
    earlier = len(server.requests_for("hub", contains="gated-org"))
    path = hub.snapshot_download("gated-org/tiny", use_tqdm=False)
    assert pathlib.Path(path, "model.safetensors").exists()
    with_token = server.requests_for("hub", contains="gated-org")[earlier:]
    assert len(with_token) == 5  # the API, then config, tokenizer_config, tokenizer, weights
    assert all(r.authorization == "Bearer hf_secret_token" for r in with_token)
    assert server.requests_for("cdn") and all(r.authorization is None for r in server.requests_for("cdn"))
    # An endpoint that cannot be reached: an error without a cached snapshot, the cache with one.
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    with pytest.raises(hub.HubConnectionError, match="cannot reach http://127.0.0.1:9"):
        hub.snapshot_download(REPO, use_tqdm=False)
    assert hub.snapshot_download("gated-org/tiny", use_tqdm=False) == path
    with pytest.raises(deepinfer.Error, match="not a Hub repo id"):
        LLM("not a repo id!")


def test_revisions_share_blobs(hf_env, server, model_files):
    p1 = pathlib.Path(hub.snapshot_download(REPO, revision="v1", use_tqdm=False))
    p2 = pathlib.Path(hub.snapshot_download(REPO, use_tqdm=False))
    assert p1.name == COMMIT_1 and p2.name == COMMIT_2
    assert "revision 2" not in (p1 / "config.json").read_text()
    assert "revision 2" in (p2 / "config.json").read_text()
    assert os.readlink(p1 / "model.safetensors") == os.readlink(p2 / "model.safetensors")
    sha = hashlib.sha256(model_files["model.safetensors"]).hexdigest()
    assert len(server.requests_for("cdn", contains=sha)) == 1  # the weights came once
    root = repo_dir(hf_env)
    assert (root / "refs" / "v1").read_text() == COMMIT_1
    # A commit id needs no ref.
    p3 = pathlib.Path(hub.snapshot_download(REPO, revision=COMMIT_1, use_tqdm=False))
    assert p3 == p1 and not (root / "refs" / COMMIT_1).exists()


def test_cli_run_and_download_with_a_repo_id(hf_env, server, deepinfer_bin, tmp_path):
    env = {**os.environ}
    proc = subprocess.run([deepinfer_bin, "download", REPO], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(repo_dir(hf_env) / "snapshots" / COMMIT_2)
    assert "download: 4/4 files" in proc.stderr and "(done)" in proc.stderr, proc.stderr
    inp = tmp_path / "in.jsonl"
    inp.write_text(json.dumps({"custom_id": "a", "method": "POST", "url": "/v1/completions",
                               "body": {"prompt": "Hello there", "max_tokens": 6, "temperature": 0.8,
                                        "seed": 9, "ignore_eos": True}}) + "\n")
    out = tmp_path / "out.jsonl"
    proc = subprocess.run([deepinfer_bin, "run", "--model", REPO, "--revision", "v1", "--input", str(inp), "--output",
                           str(out), "--progress", "never"], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    rec = json.loads(out.read_text())
    assert rec["response"]["body"]["model"] == REPO
    ours = LLM(REPO, revision="v1").generate("Hello there", SamplingParams(max_tokens=6, temperature=0.8, seed=9,
                                                                          ignore_eos=True), use_tqdm=False)
    assert rec["response"]["body"]["choices"][0]["text"] == ours[0].outputs[0].text
    proc = subprocess.run([deepinfer_bin, "run", "--model", "tiny-org/missing", "--input", str(inp), "--output",
                           str(tmp_path / "o2.jsonl")], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 1
    assert "error: tiny-org/missing: repository not found" in proc.stderr
