"""Shared fixtures: tiny seeded models and padded batches, the toy run, the ../shared data
marker, and the HTTP service's test client."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from benchmarks.browser import BrowserUnavailable, StaticHost, start_chromium
from fastapi.testclient import TestClient

from alignmt.answers.limits import Limits
from alignmt.answers.registry import load_models
from alignmt.config import ModelConfig
from alignmt.model.seq2seq import Seq2Seq
from alignmt.serve.app import create_app

pytest_plugins = ["tests.corpora_fixtures"]  # the data folder's fixtures

# XLA's backend optimisation (LLVM's -O passes) costs compile time that the suite's tiny
# programs never earn back: tests/test_flax_*.py took 161 s on two cores with it off and 219 s
# with it on, passing alike. Set before JAX creates its CPU client, which reads the variable
# once; the subprocesses the tests start inherit it.
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_backend_optimization_level=0"

SHARED = Path(__file__).resolve().parents[2] / "shared"
VOCAB = 13  # 4 specials + 9 symbols


def tiny_model(
    *,
    rnn: str = "gru",
    bidirectional: bool = True,
    layers: int = 1,
    attention: str = "additive",
    order: str = "bahdanau",
    readout: str = "none",
    init: str = "bridge",
    context: str = "every_step",
    coverage: str = "none",
    attention_fn: str = "softmax",
    attention_window: str = "global",
    window: int = 10,
    dtype: torch.dtype = torch.float64,
    seed: int = 0,
    **more: Any,
) -> Seq2Seq:
    """A randomly initialised model small enough for exact checks, in eval mode; `more` sets
    other `ModelConfig` keys."""
    torch.manual_seed(seed)
    enc_hidden = 4
    cfg = ModelConfig(
        rnn=rnn,
        emb_dim=5,
        enc_hidden=enc_hidden,
        enc_layers=layers,
        bidirectional=bidirectional,
        # dot scores need D = C
        dec_hidden=enc_hidden * (2 if bidirectional else 1),
        dec_layers=layers,
        attention=attention,
        attention_fn=attention_fn,
        attention_window=attention_window,
        window=window,
        positions=8,
        attn_dim=6,
        order=order,
        init=init,
        context=context,
        coverage=coverage,
        readout=readout,
        readout_dim=3,
        **more,
    )
    model = Seq2Seq.from_config(cfg, src_vocab=VOCAB, tgt_vocab=VOCAB)
    return model.to(dtype).eval()


def engine_of(model, src_vocab, tgt_vocab=None):
    """`model` on the torch engine, reading `src_vocab` and writing `tgt_vocab` (the same
    where None), as the analyses ask it."""
    from alignmt.config import SearchConfig
    from alignmt.decoding.torch_engine.engine import TorchEngine

    vocabs = (src_vocab, tgt_vocab or src_vocab)
    return TorchEngine(model, search=SearchConfig(), vocabs=vocabs)


def padded_batch(src_lens=(6, 2, 4), tgt_lens=(3, 5, 1), seed: int = 1):
    """Random ids for sentences of different lengths, padded with 0; sources end in </s> (2).

    Returns src (B, T_src), src_len (B,), tgt_in (B, T_tgt), tgt_len (B,).
    """
    g = torch.Generator().manual_seed(seed)
    batch = len(src_lens)
    src = torch.zeros(batch, max(src_lens), dtype=torch.long)
    tgt_in = torch.zeros(batch, max(tgt_lens), dtype=torch.long)
    for b, (n, m) in enumerate(zip(src_lens, tgt_lens, strict=True)):
        src[b, : n - 1] = torch.randint(4, VOCAB, (n - 1,), generator=g)
        src[b, n - 1] = 2
        tgt_in[b, 0] = 1
        tgt_in[b, 1:m] = torch.randint(4, VOCAB, (m - 1,), generator=g)
    return src, torch.tensor(src_lens), tgt_in, torch.tensor(tgt_lens)


def loss_targets(tgt_in: torch.Tensor, tgt_len: torch.Tensor) -> torch.Tensor:
    """`padded_batch`'s decoder inputs as loss targets: y_1 .. y_n </s> (2), then padding."""
    tgt_out = torch.cat([tgt_in[:, 1:], torch.zeros_like(tgt_in[:, :1])], dim=1)
    tgt_out[torch.arange(len(tgt_len)), tgt_len - 1] = 2
    return tgt_out


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow end-to-end runs first: under `-n auto` pytest-xdist hands tests out in this
    order, and a two-minute run handed out last leaves the other workers idle until it ends."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(scope="session", autouse=True)
def _one_cpu_thread():
    """One intra-op thread, in the test process and (OMP_NUM_THREADS) in the subprocesses it
    starts. The suite's models are tiny, so a second thread has nothing to share, and where
    the other core is busy at all OpenMP's waiting threads cost several times the work: on a
    2-core machine at load 2.7, `alignmt demo --steps 40` took 83 s with two threads and 18 s
    with one; 60 steps of the toy run used 26.5 s of CPU against 2.7 s. A run whose
    `train.threads` says otherwise sets its own for that run."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        yield
    torch.set_num_threads(threads)


def shared_temp(tmp_path_factory) -> Path:
    """The session's temporary folder, which pytest-xdist's workers share (each worker's own
    basetemp sits in it)."""
    root = tmp_path_factory.getbasetemp()
    return root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root


@pytest.fixture(scope="session", autouse=True)
def _jax_compilation_cache(tmp_path_factory):
    """XLA programs compiled once per session: every `train()` and search builds its jitted
    functions afresh, so the same program would otherwise compile again in each test that
    trains or decodes with the Flax backend (test_flax_train.py used 170 s of CPU without
    this cache and 95 s with it). Only programs that took half a second to compile are kept:
    writing each of the thousands of one-operation programs that `jax.disable_jit()` runs
    cost more than it saved (test_flax_model.py: 101 s of CPU against 94 s). The folder is
    the session's own, and under pytest-xdist its workers share it, so that a program one
    worker compiled is read by the others; JAX imported later, or in a subprocess, reads
    the variables."""
    folder = shared_temp(tmp_path_factory) / "jax_cache"
    folder.mkdir(exist_ok=True)
    settings = {
        "jax_compilation_cache_dir": str(folder),
        "jax_persistent_cache_min_compile_time_secs": 0.5,
        "jax_persistent_cache_min_entry_size_bytes": -1,
        # a bound, however large, makes JAX lock the folder: workers never read a half-written
        # program (torch's dependency filelock provides the lock)
        "jax_compilation_cache_max_size": 2**31,
    }
    with pytest.MonkeyPatch.context() as patch:
        for name, value in settings.items():
            patch.setenv(name.upper(), str(value))
        jax = sys.modules.get("jax")  # imported while the test files were collected
        if jax is not None:
            for name, value in settings.items():
                jax.config.update(name, value)
        yield


@pytest.fixture(scope="session", autouse=True)
def _cache_in_tmp(tmp_path_factory):
    """Tokenised-corpus caches and the data folder are temporary folders, never in ~/.cache
    (subprocesses inherit the variables); the data folder starts empty."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ALIGNMT_CACHE", str(tmp_path_factory.mktemp("alignmt_cache")))
        patch.setenv("ALIGNMT_DATA", str(tmp_path_factory.mktemp("alignmt_data")))
        yield


def docs_script(name: str):
    """The module of docs/NAME.py, a script that writes a page of the docs."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "docs" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


needs_shared_data = pytest.mark.skipif(
    not (SHARED / "data").is_dir(), reason=f"../shared/data is absent (looked in {SHARED})"
)


LEXICON = {
    **{"a": "ein", "red": "roter", "dog": "hund", "cat": "katze", "runs": "läuft"},
    **{"sleeps": "schläft", "big": "großer", "small": "kleiner", "the": "der", "now": "jetzt"},
}


def write_toy_corpus(folder: Path, name: str = "train", n: int = 200, seed: int = 0) -> str:
    """Line-aligned NAME.en / NAME.de files of word-for-word 'translations' in `folder`;
    returns the PREFIX that `data.train` takes."""
    import random

    rng = random.Random(seed)
    words = sorted(LEXICON)
    src = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 6))) for _ in range(n)]
    tgt = [" ".join(LEXICON[w] for w in line.split()) + " ." for line in src]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.en").write_text("".join(line + "\n" for line in src))
    (folder / f"{name}.de").write_text("".join(line + "\n" for line in tgt))
    return str(folder / name)


def held_out_toy_lines(folder: Path, n: int = 60, seed: int = 7) -> list[str]:
    """Source sentences of the toy language that the toy run was not trained on."""
    prefix = write_toy_corpus(folder, "held", n=n, seed=seed)
    return Path(prefix + ".en").read_text().splitlines()


def toy_corpus_config(folder: Path, **train):
    """A small attention model on the toy corpus, validated on held-out toy sentences."""
    from alignmt.config import Config, DataConfig, SearchConfig, TrainConfig

    return Config(
        model=ModelConfig(emb_dim=24, enc_hidden=24, dec_hidden=48, attn_dim=24, dropout=0.1),
        data=DataConfig(
            task="corpus",
            train=write_toy_corpus(folder / "data"),
            tokenizer="moses",
            valid=write_toy_corpus(folder / "data", "valid", n=30, seed=1),
        ),
        train=TrainConfig(
            **{"steps": 30, "batch_size": 16, "log_every": 5, "eval_every": 10, "lr": 1e-2, **train}
        ),
        search=SearchConfig(beam_size=3),
        out_dir=str(folder / "run"),
    )


@pytest.fixture(scope="session")
def toy_run(tmp_path_factory) -> Path:
    """A run folder trained until it translates the toy corpus (a few seconds), keeping its
    weights every 100 of its 300 steps: the explorer's tests read those snapshots, and one
    training serves every test file (snapshots do not change what is trained). Under
    pytest-xdist the first worker to ask trains it, and the others wait for it and read the
    same folder, which no test writes to."""
    from filelock import FileLock

    from alignmt.training.run import train

    folder = shared_temp(tmp_path_factory) / "toy"
    with FileLock(f"{folder}.lock"):
        if not (folder / "trained").is_file():  # not while another worker trains, nor after
            cfg = toy_corpus_config(folder, steps=300, eval_every=100, snapshot_every=100)
            train(cfg, progress=False)
            (folder / "trained").touch()
    return folder / "run"


@pytest.fixture(scope="session")
def toy_exported(toy_run, tmp_path_factory) -> Path:
    """The toy run exported for ONNX Runtime, with its int8 copies (`alignmt export
    --int8`), once for every test file and xdist worker, as `toy_run` is trained once; no
    test writes to it."""
    from filelock import FileLock

    from alignmt.cli import main

    folder = shared_temp(tmp_path_factory) / "toy_export" / "onnx"  # served as "onnx"
    with FileLock(f"{folder.parent}.lock"):
        if not (folder.parent / "exported").is_file():
            assert main(["export", str(toy_run), "--out", str(folder), "--int8"]) == 0
            (folder.parent / "exported").touch()
    return folder


def vanilla_twin(run: Path, folder: Path) -> Path:
    """An untrained model without attention on `run`'s vocabularies and tokenizers, saved as
    the run folder `folder`."""
    return untrained_twin(run, folder, attention="none")


def untrained_twin(run: Path, folder: Path, edit=None, **model) -> Path:
    """An untrained model of `run`'s config with the `model` fields changed, on `run`'s
    vocabularies and tokenizers, saved as the run folder `folder`; `edit(model)`, where
    given, changes its weights first (under no_grad)."""
    from dataclasses import replace

    from alignmt.checkpoint.torch_io import load_checkpoint, save_checkpoint

    ckpt = load_checkpoint(run)
    cfg = replace(ckpt.config, model=replace(ckpt.config.model, **model))
    torch.manual_seed(0)
    model = Seq2Seq.from_config(
        cfg.model, src_vocab=len(ckpt.src_vocab), tgt_vocab=len(ckpt.tgt_vocab)
    )
    if edit is not None:
        with torch.no_grad():
            edit(model)
    save_checkpoint(
        folder,
        model,
        cfg,
        ckpt.src_vocab,
        ckpt.tgt_vocab,
        0,
        tokenizers=(ckpt.src_tokenizer, ckpt.tgt_tokenizer),
    )
    return folder


@pytest.fixture(scope="session")
def vanilla_run(toy_run, tmp_path_factory) -> Path:
    """`toy_run` without attention (untrained): the vanilla model the server and explorer
    tests serve beside it."""
    return vanilla_twin(toy_run, tmp_path_factory.mktemp("vanilla") / "vanilla")


class Killed(Exception):
    """Stands in for the signal that kills a run."""


def train_killed_at(cfg, step: int, monkeypatch) -> None:
    """Train `cfg` until its `step`-th training step raises `Killed`, as a kill would; then
    put the real training step back, so that the caller can resume."""
    from alignmt.training import torch_backend as module
    from alignmt.training.run import train

    real_step, calls = module.train_step, [0]

    def dies(*args, **kwargs):
        calls[0] += 1
        if calls[0] == step:
            raise Killed
        return real_step(*args, **kwargs)

    monkeypatch.setattr(module, "train_step", dies)
    with pytest.raises(Killed):
        train(cfg, progress=False)
    monkeypatch.setattr(module, "train_step", real_step)


def write_file(path: Path, data: str | bytes) -> Path:
    """`data` (text as UTF-8) at `path`, gzipped when its name ends in .gz."""
    import gzip

    data = data.encode() if isinstance(data, str) else data
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as file:
            file.write(data)
    else:
        path.write_bytes(data)
    return path


def brief_demo(out: Path, *flags: str):
    """`alignmt demo` as a user runs it, briefly (40 steps, 20 strings per length), in a
    subprocess writing to `out`: the finished process, whose exit status is checked."""
    import subprocess
    import sys

    argv = ["demo", *flags, "--steps", "40", "--samples", "20", "--eval-lengths", "3,10,15"]
    run = subprocess.run(
        [sys.executable, "-m", "alignmt", *argv, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    return run


def chromium(*flags: str):
    """A headless Chromium with `flags`, quit after the test module; a skip without one, a
    failure in CI."""
    try:
        driver = start_chromium(flags=flags)
    except BrowserUnavailable as error:
        if os.environ.get("CI"):  # CI installs Chromium: a browser that will not start is a failure
            pytest.fail(f"the browser test cannot run: {error}")
        pytest.skip(f"no browser: {error}")
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium for the module's tests (see `chromium`)."""
    yield from chromium()


@pytest.fixture
def host():
    """A static host for exported sites: folder -> URL on localhost, as `python -m
    http.server` serves it (`isolating`: with COOP/COEP headers); the paths the browser asked
    for are on its `.asked`."""
    with contextlib.ExitStack() as hosts:

        def serve(folder: Path, isolating: bool = False) -> str:
            host = StaticHost(folder, isolating=isolating)
            serve.asked = host.asked
            return hosts.enter_context(host)

        serve.asked = []
        yield serve


# --- the HTTP service through FastAPI's TestClient (test_serve.py, test_serve_refusals.py) ---

SERVE_LIMITS = Limits(max_sentences=8, max_source_tokens=12, max_beam=6, max_top_k=10)


@pytest.fixture(scope="module")
def served(toy_run, vanilla_run):
    """The toy run and its vanilla twin, as a server holds them."""
    return load_models([toy_run, vanilla_run])


@pytest.fixture(scope="module")
def client(served):
    with TestClient(create_app(served, SERVE_LIMITS)) as client:
        yield client


def serving(*runs: Path, limits: Limits | None = None) -> TestClient:
    """A client of the service for the run folders `runs`; a context manager, within which
    the service runs."""
    return TestClient(create_app(load_models(list(runs)), limits))


def post(client, path, body):
    response = client.post(path, json=body)
    assert response.headers["content-type"] == "application/json"
    return response.status_code, response.json()


def post_raw(client, raw: bytes):
    return client.post("/v1/translate", content=raw, headers={"content-type": "application/json"})
