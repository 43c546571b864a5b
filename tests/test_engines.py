"""The three engines under one translator: each one's search held to the float64 reference
beam search (`reference.beam_search`) over its own decoder step, one table refusing what an
engine cannot do, with one message shape, before any work, and sampling on every engine
(Flax and ONNX Runtime draw over their step with one NumPy generator, the same samples on
either for one seed; each follows the model's distribution as the torch engine's draws do)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from alignmt import reference
from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.decoding import sample
from alignmt.decoding.door import open_translator
from alignmt.decoding.engine import FEATURES, Call, Unavailable
from alignmt.decoding.rules import Sampling, sentence_limit
from alignmt.decoding.torch_engine.export import export_onnx
from alignmt.decoding.torch_engine.sample import reshaped as torch_reshaped

pytest.importorskip("jax")
pytest.importorskip("onnxruntime")

LINES = ["the big dog sleeps now", "a cat", "the small red cat runs", "dog", "a red dog runs"]
ENGINES = ["torch", "flax", "onnxruntime"]


@pytest.fixture(scope="module")
def exported(toy_exported):
    return toy_exported


@pytest.fixture(scope="module")
def translators(toy_run, exported):
    """The toy run on each engine, with GNMT's length penalty so that ranking matters."""
    opened = {
        "torch": open_translator(toy_run, device="cpu", length_penalty=0.6),
        "flax": open_translator(toy_run, engine="flax", device="cpu", length_penalty=0.6),
        "onnxruntime": open_translator(exported, length_penalty=0.6),
    }
    assert {name: t.engine.name for name, t in opened.items()} == {n: n for n in ENGINES}
    return opened


def prefix_log_probs(engine, src: list[int], bos: int):
    """`reference.beam_search`'s model: an output prefix -> the engine's next-token
    log-probabilities, one decoder step from the prefix's parent (kept), in float64."""
    state, memory = engine.encode([src])
    kept = {}

    def log_probs(prefix: tuple[int, ...]) -> np.ndarray:
        if prefix not in kept:
            before = state if not prefix else kept[prefix[:-1]][1]
            fed = np.array([prefix[-1] if prefix else bos], np.int64)
            out, after, _ = engine.step(fed, before, memory)
            kept[prefix] = (np.asarray(out[0], np.float64), after)
        return kept[prefix][0]

    return log_probs


def on_each_engine(run) -> dict:
    """The run folder `run` on each engine: PyTorch, Flax, and its ONNX export (written to
    `onnx` beside it)."""
    export_onnx(load_checkpoint(run), run.parent / "onnx")
    return {
        "torch": open_translator(run, device="cpu"),
        "flax": open_translator(run, engine="flax", device="cpu"),
        "onnxruntime": open_translator(run.parent / "onnx"),
    }


def assert_beam_is_the_reference_search(translators: dict, engine: str) -> None:
    """`engine`'s beam 3, n-best 2 over LINES is the reference search over its own step, with
    best outputs of more than three tokens; and every engine's greedy outputs are the same."""
    translator = translators[engine]
    search = replace(translator.search, beam_size=3)
    ids = [
        translator.src_vocab.encode(translator.source_tokens(line), add_eos=True) for line in LINES
    ]
    found = translator.engine.searcher(Call(search=search, nbest=2, width=8))(ids, None)
    for src, hyps in zip(ids, found, strict=True):
        expected = reference.beam_search(
            prefix_log_probs(translator.engine, src, translator.tgt_vocab.bos_id),
            eos=translator.tgt_vocab.eos_id,
            beam_size=3,
            max_len=sentence_limit(len(src) - 1, search),
            nbest=2,
        )
        assert [h.tokens for h in hyps] == [tokens for tokens, _ in expected]
        assert len(hyps[0].tokens) > 3
    greedy = [[h[0].tokens for h in x.translate(LINES)] for x in translators.values()]
    assert greedy[0] == greedy[1] == greedy[2]


# Flax's greedy search is held to PyTorch's in test_flax_search.py: here its beam alone.
@pytest.mark.parametrize(
    ("engine", "beam", "nbest"),
    [
        ("torch", 1, 1),
        ("torch", 4, 3),
        ("flax", 4, 3),
        ("onnxruntime", 1, 1),
        ("onnxruntime", 4, 3),
    ],
)
def test_each_engines_search_is_the_reference_beam_search_over_its_own_step(
    translators, engine, beam, nbest
):
    translator = translators[engine]
    search = replace(translator.search, beam_size=beam)
    tokens = [translator.source_tokens(line) for line in LINES]
    ids = sorted((translator.src_vocab.encode(t, add_eos=True) for t in tokens), key=len)
    found = translator.engine.searcher(Call(search=search, nbest=nbest, width=8))(ids, None)
    for src, hyps in zip(ids, found, strict=True):
        expected = reference.beam_search(
            prefix_log_probs(translator.engine, src, translator.tgt_vocab.bos_id),
            eos=translator.tgt_vocab.eos_id,
            beam_size=beam,
            max_len=sentence_limit(len(src) - 1, search),
            nbest=nbest,
            alpha=search.length_penalty,
        )
        assert [h.tokens for h in hyps] == [tokens for tokens, _ in expected]
        for hyp, (_, score) in zip(hyps, expected, strict=True):
            assert hyp.score == pytest.approx(score, abs=1e-4)
            assert sum(hyp.token_scores) == pytest.approx(score, abs=1e-4)
            assert hyp.attention.shape == (len(hyp.tokens), len(src))


@pytest.mark.parametrize("engine", ENGINES[1:])
def test_every_engine_ranks_by_the_coverage_penalty_as_pytorch_does(toy_run, exported, engine):
    """Each row's summed attention rides in the state (ONNX Runtime, through refills and
    reorderings) or in the compiled loop's carry (Flax): the same n-best, scores and order as
    the torch engine's, sentences sharing rows; and a penalty of 2 reorders some sentence's
    n-best here."""
    want = open_translator(toy_run, device="cpu", coverage_penalty=2.0, beam_size=3)
    folder = exported if engine == "onnxruntime" else toy_run
    got = open_translator(folder, engine=engine, coverage_penalty=2.0, beam_size=3)
    found = got.translate(LINES, nbest=3, batch_size=2)
    for ours, theirs in zip(found, want.translate(LINES, nbest=3, batch_size=2), strict=True):
        assert [h.tokens for h in ours] == [h.tokens for h in theirs]
        assert [h.score for h in ours] == pytest.approx([h.score for h in theirs], abs=1e-4)
    plain = open_translator(folder, engine=engine, beam_size=3)
    plain = plain.translate(LINES, nbest=3, batch_size=2)
    moved = [
        [h.tokens for h in a] != [h.tokens for h in b] for a, b in zip(found, plain, strict=True)
    ]
    assert any(moved)


def test_the_reference_search_finds_the_better_sequence_that_greedy_misses():
    """Greedy takes X (0.6), then </s> (0.5): 0.30; beam search finds Y, </s>: 0.4 x 0.9."""
    X, Y, EOS = 3, 4, 2
    table = {(): [0, 0, 0, 0.6, 0.4], (X,): [0, 0, 0.5, 0.25, 0.25], (Y,): [0, 0, 0.9, 0.05, 0.05]}

    def log_probs(prefix):
        with np.errstate(divide="ignore"):
            return np.log(np.array(table.get(prefix, [0, 0, 1.0, 0, 0])))

    greedy = reference.beam_search(log_probs, eos=EOS, beam_size=1, max_len=3)
    best = reference.beam_search(log_probs, eos=EOS, beam_size=2, max_len=3, nbest=2)
    assert greedy[0][0][0] == X
    assert [tokens for tokens, _ in best] == [[Y, EOS], [X, EOS]]
    assert best[0][1] == pytest.approx(np.log(0.4 * 0.9))


# --- one table of what each engine can do ----------------------------------------------------

CALLS = {
    "sampling": lambda t: t.translate(["a cat"], sampling=Sampling(seed=1)),
    "constrained search": lambda t: t.translate(["a cat"], constraints=[t.constraint(["katze"])]),
    "stepping through the decoder": lambda t: t.step_through("a cat"),
}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("feature", CALLS)
def test_what_an_engine_cannot_do_is_refused_by_the_table_in_one_message_shape(
    translators, engine, feature
):
    translator = translators[engine]
    if feature in FEATURES[engine]:
        CALLS[feature](translator)  # it does it
        return
    with pytest.raises(
        Unavailable, match=rf"^{feature} is not available with the {engine} engine: "
    ):
        CALLS[feature](translator)


def test_opening_asks_the_table_first(toy_run, exported):
    refusals = [
        (lambda: open_translator(toy_run, engine="flax", weights="int8"), "int8", "flax"),
        (lambda: open_translator(exported, device="cuda"), "a GPU", "onnxruntime"),
        (lambda: open_translator(exported, precision="bfloat16"), "bfloat16", "onnxruntime"),
    ]
    for opened, feature, engine in refusals:
        with pytest.raises(Unavailable, match=rf"^{feature} is not available with the {engine}"):
            opened()
    with pytest.raises(ValueError, match="an exported model runs on ONNX Runtime, not flax"):
        open_translator(exported, engine="flax")
    with pytest.raises(ValueError, match="an exported model ensembles with exported models"):
        open_translator([exported, toy_run])
    with pytest.raises(ValueError, match="not an exported folder"):
        open_translator(toy_run, engine="onnxruntime")
    with pytest.raises(ValueError, match="a checkpoint loaded in memory runs on the torch"):
        open_translator(load_checkpoint(toy_run), engine="flax")


def test_a_stored_search_the_engine_cannot_run_is_turned_off_with_a_warning(
    toy_run, tmp_path, caplog
):
    """A run that searched with int8 weights, exported without them: the onnxruntime engine
    decodes without and says so, where asking outright is refused; the coverage penalty it
    keeps, and a stored shortlist the export carries."""
    ckpt = load_checkpoint(toy_run)
    ckpt.config.search = replace(ckpt.config.search, shortlist=5, coverage_penalty=0.3)
    export_onnx(ckpt, tmp_path / "onnx")
    translator = open_translator(tmp_path / "onnx")  # the export carries the run's shortlist
    assert translator.search.shortlist == 5 and translator.search.coverage_penalty == 0.3
    (tmp_path / "onnx" / "shortlist.safetensors").unlink()
    with pytest.raises(ValueError, match=r"search.shortlist=5: this run folder has no shortlist"):
        open_translator(tmp_path / "onnx")  # as on PyTorch
    ckpt.config.search = replace(ckpt.config.search, shortlist=0, coverage_penalty=0.0)
    ckpt.config.search = replace(ckpt.config.search, weights="int8")
    export_onnx(ckpt, tmp_path / "int8")  # without --int8: no int8 graphs
    assert open_translator(tmp_path / "int8").search.weights == "float32"
    assert "has no int8 graphs (`alignmt export --int8` writes them)" in caplog.text
    with pytest.raises(ValueError, match="not found; export with --int8"):
        open_translator(tmp_path / "int8", weights="int8")  # asked outright: refused


# --- the door's engine options, and one word for the idea ---------------------------------


def test_the_table_says_why_flax_and_onnxruntime_lack_what_they_lack():
    """Flax does 10 of the 11 features and ONNX Runtime 8; each gap has its reason, which
    the refusal says."""
    from alignmt.decoding.engine import EVERY, WHY

    assert len(FEATURES["flax"]) == 10 and len(FEATURES["onnxruntime"]) == 8
    for engine in ("flax", "onnxruntime"):
        lacking = EVERY - FEATURES[engine]
        assert {f for e, f in WHY if e == engine} == lacking
        for feature in lacking:
            said = str(Unavailable.of(feature, engine))
            assert said.endswith(WHY[engine, feature]) and "; " in said


def test_the_door_sets_an_engines_threads_or_says_why_it_cannot(toy_run, exported):
    import torch

    onnx = open_translator(exported, threads=1)
    for session in (onnx.engine.model.encoder, onnx.engine.model.step_graph):
        assert session.get_session_options().intra_op_num_threads == 1
    before = torch.get_num_threads()
    try:
        open_translator(toy_run, device="cpu", threads=1)
        assert torch.get_num_threads() == 1  # PyTorch's threads are the process's
    finally:
        torch.set_num_threads(before)
    with pytest.raises(ValueError, match="JAX fixes its CPU threads when it starts"):
        open_translator(toy_run, engine="flax", threads=2)
    with pytest.raises(ValueError, match="threads must be 0"):
        open_translator(exported, threads=-1)


def test_a_server_opens_a_run_on_flax_and_names_its_engine(toy_run, exported):
    from fastapi.testclient import TestClient

    from alignmt.answers.registry import load_models
    from alignmt.serve.app import create_app
    from tests.conftest import SERVE_LIMITS, post

    models = load_models([toy_run, exported], engine="flax")  # the export stays on ONNX
    with TestClient(create_app(models, SERVE_LIMITS)) as client:
        infos = client.get("/v1/models").json()["models"]
        assert [m["engine"] for m in infos] == ["flax", "onnxruntime"]
        status, body = post(client, "/v1/translate", {"sentences": ["a red dog"]})
        assert status == 200 and body["translations"][0]["hypotheses"][0]["text"]
        expected = open_translator(toy_run, device="cpu").translate(["a red dog"])[0][0]
        assert body["translations"][0]["hypotheses"][0]["tokens"] == expected.tokens
        status, refused = post(client, "/v1/snapshots", {"sentence": "a red dog"})
        assert status == 422
        said = "its run's snapshots are not available with the flax engine"
        assert said in refused["error"]["message"]


def test_engine_names_the_framework_on_the_command_line_and_in_the_config():
    from alignmt.cli.parser import build_parser
    from alignmt.config import apply_overrides, config_from_dict, load_config

    parser = build_parser()
    for flag in ("--engine", "--backend"):  # --backend: its older name, still read
        args = parser.parse_args(["translate", "runs/r", flag, "flax"])
        assert args.engine == "flax"
    assert parser.parse_args(["serve", "runs/r", "--engine", "flax"]).engine == "flax"
    assert apply_overrides(load_config(), ["train.backend=flax"]).train.engine == "flax"
    assert config_from_dict({"train": {"backend": "flax"}}).train.engine == "flax"


# --- sampling on every engine: Flax and ONNX Runtime draw over their step (decoding/sample.py)

SETTINGS = [
    Sampling(),
    Sampling(temperature=0.5),
    Sampling(top_k=3),
    Sampling(top_p=0.7),
    Sampling(temperature=2.0, top_k=5, top_p=0.9),
]


@pytest.mark.parametrize("sampling", SETTINGS, ids=repr)
def test_the_numpy_reshaping_is_torchs(sampling):
    scores = np.random.default_rng(0).normal(size=(6, 40)).astype(np.float32)
    scores[0, :4] = scores[0, 4]  # ties at the k-th score stay in
    want = torch_reshaped(torch.from_numpy(scores), sampling).numpy()
    got = sample.reshaped(scores, sampling)
    assert np.array_equal(np.isfinite(got), np.isfinite(want))
    np.testing.assert_allclose(got[np.isfinite(got)], want[np.isfinite(want)], rtol=1e-6)


def test_draws_follow_the_distribution_and_never_take_a_token_of_probability_zero():
    probs = np.array([0.5, 0.3, 0.15, 0.05, 0.0])
    with np.errstate(divide="ignore"):
        scores = np.log(np.tile(probs, (40_000, 1)))
    tokens = sample.draw(scores, np.random.default_rng(1).random(len(scores)))
    shares = np.bincount(tokens, minlength=5) / len(tokens)
    np.testing.assert_allclose(shares, probs, atol=0.01)
    assert shares[4] == 0


def first_token_shares(translator, line: str, sampling: Sampling) -> np.ndarray:
    """How often each target id came first over `sampling.samples` draws of `line`."""
    vocab = translator.tgt_vocab
    drawn = translator.translate([line], sampling=sampling)[0]
    firsts = [vocab.stoi.get(t.tokens[0], vocab.unk_id) for t in drawn]
    return np.bincount(firsts, minlength=len(vocab)) / len(firsts)


def first_step_probabilities(translator, line: str) -> np.ndarray:
    engine = translator.engine
    src = translator.source_ids(translator.source_tokens(line), add_eos=True)
    state, memory = engine.encode([src])
    log_probs, _, _ = engine.step(np.array([translator.tgt_vocab.bos_id]), state, memory)
    return np.exp(np.asarray(log_probs, np.float64)[0])


@pytest.mark.parametrize("engine", ENGINES)
def test_every_engine_samples_the_models_distribution(translators, engine):
    """The first token of 600 draws at temperature 3 (a flat enough distribution that
    several tokens come first) against the model's first-step probabilities, reshaped."""
    translator = translators[engine]
    line = "a cat"
    sampling = Sampling(temperature=3.0, samples=600, seed=4)
    p = first_step_probabilities(translator, line) ** (1 / 3)
    p /= p.sum()
    shares = first_token_shares(translator, line, sampling)
    assert (shares > 0).sum() >= 3  # not a greedy search in disguise
    assert 0.5 * np.abs(shares - p).sum() < 0.1  # total variation


def test_flax_and_onnxruntime_draw_the_same_samples_and_top_k_1_is_greedy(translators):
    lines = ["a cat", "the dog sees a cat", "a dog"]
    sampling = Sampling(temperature=2.0, top_p=0.95, samples=4, seed=7)
    flax, onnx = (translators[e].translate(lines, sampling=sampling) for e in ENGINES[1:])
    for ours, theirs in zip(flax, onnx, strict=True):
        assert [t.tokens for t in ours] == [t.tokens for t in theirs]
        assert [t.score for t in ours] == pytest.approx([t.score for t in theirs], abs=1e-4)
    assert len({tuple(t.tokens) for hyps in flax for t in hyps}) > len(lines)  # they differ
    for engine in ENGINES:
        greedy = translators[engine].translate(lines, beam_size=1)
        top_1 = translators[engine].translate(lines, sampling=Sampling(top_k=1, seed=3))
        assert [h[0].tokens for h in top_1] == [h[0].tokens for h in greedy]
