# SPDX-License-Identifier: Apache-2.0
"""`mpirun -np N deepinfer run` (data parallelism over replicas) on the built-in model: 2 and 4 ranks
give the records of one process, merged in input order (byte-identical after the two documented
placement fields `created` and `cached_tokens`); a replica killed mid-run, then `--resume` with another
rank count or with no mpirun at all: every request exactly once, equal to the uninterrupted run."""
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import time

import pytest

MPIRUN = shutil.which("mpirun")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("dicache"))


@pytest.fixture(scope="module")
def mpi_env():
    if MPIRUN is None:
        if os.environ.get("CI"):
            pytest.fail("mpirun is missing (scripts/install_deps.sh installs openmpi-bin)")
        pytest.skip("mpirun is not installed")
    env = dict(os.environ)
    # As root (CI containers) OpenMPI needs both; vader's single-copy (CMA) is often blocked there.
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none", OMPI_MCA_rmaps_base_oversubscribe="1")
    return env


def chat_line(cid, text, max_tokens, **extra):
    body = {"messages": [{"role": "system", "content": "You are terse."}, {"role": "user", "content": text}],
            "max_tokens": max_tokens, "temperature": 0.8, "ignore_eos": True, **extra}
    return json.dumps({"custom_id": cid, "method": "POST", "url": "/v1/chat/completions", "body": body})


def write_batch(path, n, max_tokens):
    """n requests of very different prompt lengths, a malformed line, a blank line, a duplicate
    custom_id and a raw completion."""
    lines = [chat_line(f"r{i}", f"question {i}: " + "tell me more " * (1 + (i * 7) % 11), max_tokens)
             for i in range(n)]
    lines.insert(3, '{"custom_id": "torn", "url": ')
    lines.insert(5, "")
    lines.insert(8, chat_line("r1", "a duplicate id", max_tokens))
    lines.append(json.dumps({"custom_id": "raw", "method": "POST", "url": "/v1/completions",
                             "body": {"prompt": "The lighthouse keeper", "max_tokens": max_tokens, "temperature": 0}}))
    path.write_text("\n".join(lines) + "\n")
    return sum(1 for l in lines if l.strip())


def run_cmd(bin_, cache_dir, inp, out, *args):
    return [bin_, "run", "--input", str(inp), "--output", str(out), "--cache-dir", cache_dir, "--progress", "never",
            *args]


def one_process(bin_, cache_dir, inp, out, *args, check=True):
    proc = subprocess.run(run_cmd(bin_, cache_dir, inp, out, *args), capture_output=True, text=True, timeout=600)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def mpirun(env, ranks, bin_, cache_dir, inp, out, *args, check=True):
    cmd = [MPIRUN, "--oversubscribe", "-np", str(ranks), *run_cmd(bin_, cache_dir, inp, out, *args)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def normalized(path):
    """The file's lines with the two fields that record when and where a request ran zeroed."""
    text = pathlib.Path(path).read_text()
    assert text.endswith("\n")
    text = re.sub(r'"created":\d+', '"created":0', text)
    text = re.sub(r'"cached_tokens":\d+', '"cached_tokens":0', text)
    return text.splitlines()


def input_position(line, inp_lines):
    """Where a record's request is in the input: an error record names its line; a result, its id."""
    rec = json.loads(line)
    if rec["error"]:
        return rec["error"]["line"]
    for no, text in enumerate(inp_lines, 1):
        if f'"custom_id": "{rec["custom_id"]}"' in text:  # the first line with the id claims it
            return no
    raise AssertionError(f"no input line for {rec['custom_id']}")


def in_input_order(lines, inp):
    inp_lines = pathlib.Path(inp).read_text().splitlines()
    return sorted(lines, key=lambda l: input_position(l, inp_lines))


def summary(stderr):
    m = re.search(r"summary: (\d+) requests \((\d+) completed, (\d+) errors, (\d+) already done\)", stderr)
    assert m, stderr
    return tuple(int(x) for x in m.groups())


def parts(out):
    return sorted(pathlib.Path(out).parent.glob(pathlib.Path(out).name + ".part-*"))


def check_mpi_build(returncode, output):
    if returncode != 0 and "built without MPI" in output and not os.environ.get("CI"):
        pytest.skip("this build has no MPI (DI_ENABLE_MPI / libopenmpi-dev)")


def children(pid):
    kids = []
    for stat in pathlib.Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


@pytest.fixture(scope="module")
def batch(deepinfer_bin, cache_dir, tmp_path_factory):
    """The input, its one-process output (normalized, in input order) and summary."""
    tmp = tmp_path_factory.mktemp("batch")
    inp = tmp / "in.jsonl"
    total = write_batch(inp, 16, max_tokens=10)
    ref = tmp / "one.jsonl"
    ref_summary = summary(one_process(deepinfer_bin, cache_dir, inp, ref, "--max-num-seqs", "4").stderr)
    assert ref_summary == (total, total - 2, 2, 0)
    reference = normalized(ref)
    assert len(reference) == total
    expected = in_input_order(reference, inp)
    assert expected != reference, "the batch should finish out of input order in one process"
    return inp, total, expected, ref_summary


def test_two_and_four_replicas_equal_one_process(deepinfer_bin, cache_dir, mpi_env, batch, tmp_path):
    inp, total, expected, ref_summary = batch
    for ranks in (2, 4):
        out = tmp_path / f"out{ranks}.jsonl"
        proc = mpirun(mpi_env, ranks, deepinfer_bin, cache_dir, inp, out, "--max-num-seqs", "4", check=False)
        check_mpi_build(proc.returncode, proc.stdout + proc.stderr)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert summary(proc.stderr) == ref_summary
        assert f", {ranks} replicas" in proc.stderr
        # Each replica announces its share; together they cover every request once.
        shares = [int(m) for m in re.findall(r"replica \d+/%d: (\d+) of %d requests" % (ranks, total), proc.stderr)]
        assert len(shares) == ranks and sum(shares) == total, proc.stderr
        assert min(shares) >= 1
        assert normalized(out) == expected, f"{ranks} ranks: not the one-process records in input order"
        assert parts(out) == [], "the merge removes the part files"


def kill_one_replica(env, bin_, cache_dir, inp, out, ranks, total):
    """Starts `ranks` replicas and SIGKILLs one as soon as its part has a flushed record."""
    cmd = [MPIRUN, "--oversubscribe", "-np", str(ranks),
           *run_cmd(bin_, cache_dir, inp, out, "--max-num-seqs", "2")]
    log_path = pathlib.Path(out).with_suffix(".log")
    log = open(log_path, "w")
    mpi = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    victim = None
    deadline = time.time() + 180
    while victim is None and time.time() < deadline and mpi.poll() is None:
        for p in parts(out):
            if p.read_text().count("\n") >= 1:
                victim = int(p.name.rsplit("-", 1)[1])
                break
        time.sleep(0.02)
    if victim is None:
        mpi.kill()
        log.close()
        check_mpi_build(mpi.wait(), log_path.read_text())
    assert victim is not None, "no replica wrote a record: " + log_path.read_text()
    pids = children(mpi.pid)
    for pid in pids:
        environ = pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        if f"OMPI_COMM_WORLD_RANK={victim}".encode() in environ:
            os.kill(pid, signal.SIGKILL)
            break
    else:
        raise AssertionError(f"rank {victim} not found among {pids}")
    rc = mpi.wait(timeout=120)
    log.close()
    assert rc != 0, "mpirun must report the killed replica"
    written = sum(p.read_text().count("\n") for p in parts(out))
    assert 1 <= written < total, f"{written} of {total} records before the kill"
    assert not pathlib.Path(out).exists(), "no merge after a failed job"
    return written


def test_kill_a_replica_then_resume_with_other_rank_counts(deepinfer_bin, cache_dir, mpi_env, batch, tmp_path):
    inp, total, expected, _ = batch
    # 4 replicas, one killed; resumed by 2 replicas.
    out = tmp_path / "out.jsonl"
    written = kill_one_replica(mpi_env, deepinfer_bin, cache_dir, inp, out, 4, total)
    resumed = mpirun(mpi_env, 2, deepinfer_bin, cache_dir, inp, out, "--resume")
    requests, completed, errors, done = summary(resumed.stderr)
    assert requests == total and done >= written and completed + errors == total - done
    assert normalized(out) == expected, "every request exactly once, as in the uninterrupted run"
    assert parts(out) == []

    # 2 replicas, one killed; finished by one process (no mpirun), which merges the parts too.
    out2 = tmp_path / "out2.jsonl"
    kill_one_replica(mpi_env, deepinfer_bin, cache_dir, inp, out2, 2, total)
    refused = one_process(deepinfer_bin, cache_dir, inp, out2, check=False)
    assert refused.returncode == 1 and "part files of a multi-replica run exist" in refused.stderr
    one_process(deepinfer_bin, cache_dir, inp, out2, "--resume")
    assert normalized(out2) == expected
    assert parts(out2) == []
