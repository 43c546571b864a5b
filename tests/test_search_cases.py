"""The search contract: every search reproduces the golden cases the float64 reference wrote
(tests/search_cases.py): the torch engine's, the Flax engine's, the ONNX Runtime engine's
NumPy search, and the browser worker's JavaScript, run in Node. Each case's model is a table
(a trie of prefixes); each search runs it as its engine runs a model, over batches of
sentences that end at different steps, and must find each sentence's n-best (tokens, summed
log-probabilities, token log-probabilities, attention) and stop at the reference's step."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from alignmt.config import SearchConfig
from alignmt.decoding.rules import max_output_len
from tests import search_cases

GOLDEN = json.loads(search_cases.PATH.read_text())
CASES = GOLDEN["cases"]
BOS, EOS, FIRST = GOLDEN["bos"], GOLDEN["eos"], GOLDEN["first"]
NAMES = [case["name"] for case in CASES]


def test_the_golden_cases_are_what_the_reference_writes_now():
    assert search_cases.PATH.read_text() == search_cases.text()


def settings(case: dict) -> SearchConfig:
    return SearchConfig(
        beam_size=case["beam_size"],
        length_penalty=case["length_penalty"],
        max_len_ratio=case["max_len_ratio"],
        max_len_offset=case["max_len_offset"],
    )


def check(case: dict, found: list, steps: list[int]) -> None:
    """`found`: each sentence's hypotheses, as (tokens, score, token scores, attention)."""
    for expected, hyps, ran in zip(case["expected"], found, steps, strict=True):
        want = expected["hypotheses"]
        assert [h[0] for h in hyps] == [h["tokens"] for h in want]
        for (_, score, token_scores, attention), h in zip(hyps, want, strict=True):
            assert score == pytest.approx(h["score"], abs=1e-4)  # a float32 sum of exact values
            assert list(token_scores) == h["token_scores"]
            n = len(attention[0]) if len(attention) else 0
            assert np.array_equal(np.asarray(attention), np.asarray(h["attention"])[:, :n])
        assert ran == expected["steps"]


# --- the torch engine ------------------------------------------------------------------------


class TorchTable:
    """A case's table as the torch engine's search sees a model: `encode` and `decode_step`
    over rows whose state is their node and their sentence; it counts each sentence's
    steps."""

    def __init__(self, case: dict) -> None:
        self.log_probs = torch.tensor(case["log_probs"], dtype=torch.float32)  # (nodes, V)
        self.attention = torch.tensor(case["attention"], dtype=torch.float32)  # (nodes, T)
        self.children = torch.tensor(case["children"])  # (nodes, V)
        self.roots = torch.tensor(case["roots"])
        self.steps: Counter = Counter()
        self.bos_id, self.eos_id, self.pad_id = BOS, EOS, GOLDEN["pad"]
        self.decoder = torch.nn.Module()  # no Linear to pack

    def encode(self, src: torch.Tensor, src_len: torch.Tensor):
        mask = src != self.pad_id  # (B, T_src)
        sentence = src[:, 0] - FIRST
        return (mask,), (self.roots[sentence], sentence)

    def decode_step(self, prev: torch.Tensor, state: tuple, memory: tuple):
        from alignmt.model.distribution import LogProbs

        node, sentence = state  # (N,) each
        node = torch.where(prev == BOS, node, self.children[node, prev])
        self.steps.update(set(sentence.tolist()))
        t_src = memory[0].size(1)
        dist = LogProbs(normalised=self.log_probs[node])
        return dist, (node, sentence), self.attention[node, :t_src]


@pytest.mark.parametrize("case", CASES, ids=NAMES)
def test_the_torch_search_reproduces_every_case(case):
    from alignmt.decoding.torch_engine.plan import SearchPlan
    from alignmt.decoding.torch_engine.search import search

    model = TorchTable(case)
    config = settings(case)
    how = SearchPlan.from_config(config, nbest=case["nbest"], width=case["width"])
    sources = case["sources"]
    batches = []
    for start in range(0, len(sources), case["width"]):  # encoded lazily, a batch at a time
        chunk = sources[start : start + case["width"]]
        src = torch.zeros(len(chunk), max(map(len, chunk)), dtype=torch.long)
        for row, ids in enumerate(chunk):
            src[row, : len(ids)] = torch.tensor(ids)
        batches.append((src, torch.tensor([len(ids) for ids in chunk])))
    with torch.no_grad():
        found = search(model, batches, how)
    hyps = [[(h.tokens, h.score, h.token_scores, h.attention) for h in s] for s in found]
    check(case, hyps, [model.steps[s] for s in range(len(sources))])


def test_a_broken_stopping_rule_fails_the_torch_search(monkeypatch):
    """The cases can fail: a beam search that never stops early finds the same n-best, and
    stops at other steps."""
    import alignmt.decoding.torch_engine.search as torch_search

    monkeypatch.setattr(torch_search, "cannot_improve", lambda *args: torch.tensor(False))
    failed = []
    for case in CASES:
        try:
            test_the_torch_search_reproduces_every_case(case)
        except AssertionError:
            failed.append(case["name"])
    assert failed and "greedy" not in failed  # greedy stops at </s> alone


# --- the ONNX Runtime engine's NumPy search ------------------------------------------------------


class NumpyTable:
    """A case's table as the onnxruntime engine's search sees an exported model."""

    def __init__(self, case: dict) -> None:
        self.log_probs = np.array(case["log_probs"], np.float32)
        self.attention = np.array(case["attention"], np.float32)
        self.children = np.array(case["children"])
        self.roots = np.array(case["roots"])
        self.steps: Counter = Counter()
        self.bos_id, self.eos_id, self.pad_id = BOS, EOS, GOLDEN["pad"]

    def encode_ids(self, sentences: list[list[int]]) -> tuple[dict, dict]:
        t_src = max(map(len, sentences))
        mask = np.array([[j < len(ids) for j in range(t_src)] for ids in sentences])
        sentence = np.array([ids[0] for ids in sentences]) - FIRST
        return {"node": self.roots[sentence], "sentence": sentence}, {"mask": mask}

    def step(self, prev: np.ndarray, state: dict, memory: dict):
        node = np.where(prev == BOS, state["node"], self.children[state["node"], prev])
        self.steps.update(set(state["sentence"].tolist()))
        alpha = self.attention[node, : memory["mask"].shape[1]]
        return self.log_probs[node], {"node": node, "sentence": state["sentence"]}, alpha


@pytest.mark.parametrize("case", CASES, ids=NAMES)
def test_the_onnx_engines_numpy_search_reproduces_every_case(case):
    pytest.importorskip("onnxruntime")
    from alignmt.decoding.engine import Call
    from alignmt.decoding.onnx_engine.search import search

    model = NumpyTable(case)
    call = Call(search=settings(case), nbest=case["nbest"], width=case["width"])
    found = search(model, case["sources"], call)
    hyps = [[(h.tokens, h.score, h.token_scores, h.attention) for h in s] for s in found]
    check(case, hyps, [model.steps[s] for s in range(len(case["sources"]))])


# --- the Flax engine -----------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=NAMES)
def test_the_flax_search_reproduces_every_case(case):
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from alignmt.decoding.flax_engine.batch import pad_batch
    from alignmt.decoding.flax_engine.search import beam_search, greedy_search
    from alignmt.model.flax_distribution import LogProbs

    log_probs = jnp.array(case["log_probs"], jnp.float32)
    attention, children = jnp.array(case["attention"], jnp.float32), jnp.array(case["children"])
    roots = jnp.array(case["roots"])

    class FlaxTable:
        bos_id, eos_id, pad_id, has_attention = BOS, EOS, GOLDEN["pad"], True

        def apply(self, variables, *args, method):
            if method == "encode":
                src, _ = args
                first = src[:, 0] - FIRST  # padding rows (a bare </s>) read the default node
                return (), (jnp.where(first >= 0, roots[jnp.maximum(first, 0)], 0),)
            prev, (node,), _ = args
            node = jnp.where(prev == BOS, node, children[node, prev])
            pad = jnp.zeros((len(node), MAX_SRC - attention.shape[1]))
            return LogProbs(normalised=log_probs[node]), (node,), jnp.hstack([attention[node], pad])

    sources = case["sources"]
    src, src_len = pad_batch(sources, len(sources), FlaxTable())
    MAX_SRC = src.shape[1]
    limit = max_output_len(src_len, case["max_len_ratio"], case["max_len_offset"])
    max_len = int(limit.max())
    args = (FlaxTable(), {}, src, src_len, limit.astype(np.int32))
    if case["beam_size"] == 1:
        out = greedy_search(*args, max_len=max_len)
    else:
        alpha = np.float32(case["length_penalty"])
        out = beam_search(
            *args, alpha, beam_size=case["beam_size"], max_len=max_len, nbest=case["nbest"]
        )
    out = jax.device_get(out)
    hyps = []
    for b, n_src in enumerate(src_len.tolist()):
        sentence = []
        for j in np.flatnonzero(out.found[b]):
            n = int(out.length[b, j])
            sentence.append(
                (
                    out.tokens[b, j, :n].tolist(),
                    float(out.score[b, j]),
                    out.token_scores[b, j, :n].tolist(),
                    np.asarray(out.attention[b, j, :n, :n_src]),
                )
            )
        hyps.append(sentence)
    check(case, hyps, out.steps.tolist())


# --- the browser worker, in Node ---------------------------------------------------------------

WEB = Path(__file__).resolve().parents[1] / "src" / "alignmt" / "answers" / "static" / "web"
NODE = shutil.which("node")


@pytest.mark.skipif(
    not NODE and not os.environ.get("CI"), reason="Node.js runs the worker's search here"
)
def test_the_browser_workers_search_reproduces_every_case(tmp_path):
    """web/search.js, the worker's greedy and beam search, run in Node over each case's
    table: its answers go through `check` as the other searches' do."""
    shutil.copy(WEB / "search.js", tmp_path / "search.mjs")
    runner = tmp_path / "run.mjs"
    runner.write_text(RUNNER)
    done = subprocess.run(
        [NODE, str(runner), str(search_cases.PATH)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    answers = json.loads(done.stdout)
    for case, answer in zip(CASES, answers, strict=True):
        hyps = [
            [(h["ids"], h["score"], h["logProbs"], h["attention"]) for h in sentence]
            for sentence in answer["found"]
        ]
        check(case, hyps, answer["steps"])


# The case's table as the worker's search sees a model (web/search.js documents `model`),
# with fields as plain {type, data, dims} objects in place of ONNX Runtime's tensors; a row's
# state is its node and its sentence, whose steps it counts.
RUNNER = """
import { readFileSync } from "node:fs";
import { greedy, beam } from "./search.mjs";

const golden = JSON.parse(readFileSync(process.argv[2], "utf8"));

function tableModel(c) {
  const V = golden.vocab;
  const steps = new Array(c.sources.length).fill(0);
  const tensor = (type, data, dims) => ({ type, data, dims });
  const model = {
    bos: golden.bos, eos: golden.eos, steps, tensor,
    async encode(sentences) {
      const sentence = Int32Array.from(sentences, (ids) => ids[0] - golden.first);
      const nodes = Int32Array.from(sentence, (s) => c.roots[s]);
      const Tn = Math.max(...sentences.map((ids) => ids.length));
      const mask = new Uint8Array(sentences.length * Tn);
      sentences.forEach((ids, b) => mask.fill(1, b * Tn, b * Tn + ids.length));
      return { state: { node: tensor("int32", nodes, [sentences.length]),
        sentence: tensor("int32", sentence, [sentences.length]) },
        memory: { mask: tensor("bool", mask, [sentences.length, Tn]) } };
    },
    async step(prev, state, memory) {
      const Tn = memory.mask.dims[1];
      const at = state.node.data;
      const next = (p, r) => (p === golden.bos ? at[r] : c.children[at[r]][p]);
      const node = Int32Array.from(prev, next);
      const logProbs = new Float32Array(prev.length * V);
      const alpha = new Float32Array(prev.length * Tn);
      node.forEach((n, r) => {
        logProbs.set(c.log_probs[n], r * V);
        alpha.set(c.attention[n].slice(0, Tn), r * Tn);
      });
      for (const s of new Set(state.sentence.data)) steps[s] += 1;
      const after = { node: tensor("int32", node, [prev.length]), sentence: state.sentence };
      return { logProbs, state: after, alpha };
    },
  };
  return model;
}

const answers = [];
for (const c of golden.cases) {
  const model = tableModel(c);
  const limits = c.expected.map((e) => e.limit);
  let found;
  if (c.beam_size === 1) {
    found = (await greedy(model, c.sources, limits)).map((hypothesis) => [hypothesis]);
  } else {
    found = [];
    for (const [s, ids] of c.sources.entries()) {
      const searched = await beam(model, ids, limits[s], c.beam_size, c.nbest, c.length_penalty);
      found.push(searched.finished.slice(0, c.nbest));
    }
  }
  answers.push({ found, steps: model.steps });
}
console.log(JSON.stringify(answers));
"""
