"""The pointer-generator (See et al. 2017): copy ids from source ids against the float64
reference and against the words (alignmt.text.copy), each order's steps against the float64
reference over the extended vocabulary, a distribution that sums to one, gradients, padding
invariance, search that reorders rows, the loss's smoothing, refusals, and a copying model
that spells names it never saw where one without copying writes <unk>."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from alignmt.model.attention.copy import reference as copy_ref
from alignmt.text import copy as copy_text
from alignmt.text.vocab import Vocab
from tests.conftest import VOCAB, padded_batch, tiny_model
from tests.test_beam import assert_search_carries_each_rows_state
from tests.test_decoder import numpy, reference_step

UNKNOWN = VOCAB + 1  # an unknown source word's extended id: V_src + its first position, 1


def copy_model(order: str = "bahdanau", seed: int = 0, **more):
    """A tiny copying model whose every source word but 4-6 has a target id (the same id)."""
    readout = "none" if order == "luong" else "tanh"
    model = tiny_model(copy=True, order=order, readout=readout, seed=seed, **more)
    model.set_copy_table([-1 if i in (3, 4, 5, 6) else i for i in range(VOCAB)])
    return model


def copying_batch():
    """padded_batch's sources with an unknown word at positions 1 and 3 of the first."""
    src, src_len, tgt_in, tgt_len = padded_batch(src_lens=(6, 2, 4), tgt_lens=(3, 5, 4))
    src[0, 1] = src[0, 3] = UNKNOWN
    src[2, 0] = 5  # a word the target vocabulary lacks
    return src, src_len, tgt_in, tgt_len


def test_copy_ids_match_the_reference_and_the_words():
    model = copy_model()
    src, _, _, _ = copying_batch()
    ids = model.decoder.copy.prepare(src, model.copy_table)
    table = numpy(model.copy_table)
    for b in range(src.size(0)):
        expected = copy_ref.copy_ids(numpy(src[b]), table, VOCAB, VOCAB)
        assert ids[b].tolist() == expected.tolist()
    assert ids[0, 1] == ids[0, 3] == VOCAB + 1  # a repeated unknown word: one id
    assert ids[2, 0] == VOCAB  # a word the target lacks: its own extended id
    # the words give the same ids: source, copies, and the target spelling a copy
    vocab = Vocab([f"w{i}" for i in range(VOCAB - 4)])
    words = ["w3", "zorb", "w1", "zorb", "w8"]
    src_ids = copy_text.source_ids(words, vocab, add_eos=True)
    assert src_ids == [
        vocab.stoi["w3"],
        VOCAB + 1,
        vocab.stoi["w1"],
        VOCAB + 1,
        vocab.stoi["w8"],
        2,
    ]
    tgt = copy_text.target_ids(words, ["w1", "zorb", "blip"], vocab, vocab)
    assert tgt == [vocab.stoi["w1"], VOCAB + 1, vocab.unk_id]
    model.set_copy_table(copy_text.copy_table(vocab, vocab))
    ids = model.decoder.copy.prepare(torch.tensor([src_ids]), model.copy_table)[0]
    assert ids[1] == tgt[1] and ids[2] == tgt[0]
    assert copy_text.output_tokens([ids[1], vocab.stoi["w8"], 2], [*words, "</s>"], vocab) == [
        "zorb",
        "w8",
    ]


@pytest.mark.parametrize("order", ["bahdanau", "luong", "cgru"])
def test_four_steps_match_the_numpy_reference_over_the_extended_vocabulary(order):
    model = copy_model(order)
    decoder = model.decoder
    src, src_len, _, _ = copying_batch()
    memory, state = model.encode(src, src_len)
    g = torch.Generator().manual_seed(5)
    prevs = [torch.full((3,), model.bos_id)]
    prevs += [torch.randint(4, VOCAB + 4, (3,), generator=g) for _ in range(3)]  # copies too
    w = numpy(decoder.copy.gate.weight)[0]
    b_gen = decoder.copy.gate.bias.item()
    start = state
    for b, n in enumerate(src_len.tolist()):
        hs = [numpy(h) for h in start.hidden[b]]
        cs = None if start.cell is None else [numpy(c) for c in start.cell[b]]
        feed = None if start.feed is None else numpy(start.feed[b])
        ids = copy_ref.copy_ids(numpy(src[b, :n]), numpy(model.copy_table), VOCAB, VOCAB)
        H = numpy(memory.states[b, :n])
        step_state = state
        for prev in prevs:
            log_probs, step_state, alpha = model.decode_step(prev, step_state, memory)
            known = prev.masked_fill(prev >= VOCAB, 3).numpy()  # a copy reads as <unk>
            logits, hs, cs, feed, ref_alpha = reference_step(
                decoder, b, known, hs, cs, feed, memory, n
            )
            y = numpy(decoder.embed.weight)[known[b]]
            seen = feed if order == "luong" else np.concatenate([hs[-1], ref_alpha @ H])
            p_gen = 1 / (1 + math.exp(-(w @ np.concatenate([seen, y]) + b_gen)))
            p_vocab = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
            P = copy_ref.extended_distribution(p_vocab, ref_alpha, ids, p_gen)
            np.testing.assert_allclose(numpy(alpha[b, :n]), ref_alpha, rtol=0, atol=1e-10)
            got = log_probs.full()[b].exp()
            np.testing.assert_allclose(numpy(got[: VOCAB + n]), P, rtol=0, atol=1e-10)
            assert not got[VOCAB + n :].any()  # the padding's extended ids: probability 0
            assert math.isclose(float(got.sum()), 1.0, abs_tol=1e-12)
            assert math.isclose(step_state.slots["p_gen"][b].item(), p_gen, abs_tol=1e-10)
            copied = step_state.slots["copied"][b, :n, 0]
            np.testing.assert_allclose(numpy(copied), (1 - p_gen) * ref_alpha, atol=1e-10)


def test_the_gradients_of_the_copy_loss_match_finite_differences():
    model = copy_model(seed=1)
    src, src_len, tgt_in, _ = copying_batch()
    tgt_out = torch.roll(tgt_in, -1, dims=1)
    tgt_out[0, 0] = VOCAB + 1  # the target spells the unknown word by copying
    names = ["decoder.copy.gate.weight", "decoder.attention.score.v.weight"]
    params = dict(model.named_parameters())

    def loss(gate, v):
        weights = {names[0]: gate, names[1]: v}
        out = torch.func.functional_call(model, params | weights, (src, src_len, tgt_in))
        return out[0].full().gather(-1, tgt_out.unsqueeze(-1)).sum()

    inputs = tuple(params[n].detach().clone().requires_grad_(True) for n in names)
    assert torch.autograd.gradcheck(loss, inputs, eps=1e-6, atol=1e-8)


def test_the_loss_smooths_over_the_vocabulary_and_its_gradients_are_finite():
    model = copy_model().train()
    src, src_len, tgt_in, _ = copying_batch()
    tgt_out = torch.roll(tgt_in, -1, dims=1)
    tgt_out[tgt_in == 0] = 0
    tgt_out[0, 0] = VOCAB + 1
    loss = model.loss(src, src_len, tgt_in, tgt_out, label_smoothing=0.1)
    log_p = model(src, src_len, tgt_in).log_probs.full()
    real = tgt_out != 0
    nll = -log_p.gather(-1, tgt_out.unsqueeze(-1))[..., 0][real].mean()
    uniform = -log_p[..., :VOCAB].mean(-1)[real].mean()
    assert math.isclose(float(loss), float(0.9 * nll + 0.1 * uniform), rel_tol=1e-9)
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    assert model.decoder.copy.gate.weight.grad.abs().sum() > 0


def test_padding_never_changes_a_sentence_and_its_extension_stays_empty():
    model = copy_model()
    src, src_len, tgt_in, tgt_len = copying_batch()
    out = model(src, src_len, tgt_in)
    for b in range(len(src_len)):
        n, m = int(src_len[b]), int(tgt_len[b])
        alone = model(src[b : b + 1, :n], src_len[b : b + 1], tgt_in[b : b + 1, :m])
        batched = out.log_probs.full()[b, :m]
        torch.testing.assert_close(
            batched[:, : VOCAB + n], alone.log_probs.full()[0], rtol=0, atol=1e-12
        )
        assert not batched[:, VOCAB + n :].exp().any()


def test_search_carries_copying_streamed_and_through_the_beam():
    assert_search_carries_each_rows_state(copy_model(seed=3))


@pytest.mark.parametrize(
    "setting,message",
    [
        (dict(attention="none"), r"model.attention=none has none: use model.copy=false"),
        (dict(attention_fn="hard_monotonic"), r"already a mixture.*model.copy=false"),
    ],
)
def test_what_copying_refuses(setting, message):
    with pytest.raises(ValueError, match=message):
        tiny_model(copy=True, **setting)


def test_an_ensemble_does_not_mix_copying_and_generating_models():
    from alignmt.decoding.torch_engine.ensemble import Ensemble

    with pytest.raises(ValueError, match=r"member 2 copies source words"):
        Ensemble([tiny_model(), copy_model()])


def test_the_explorer_is_told_p_gen_and_the_copy_weights():
    composition = copy_model().decoder.attention.composition
    shown = {s.slot: s for s in composition.shown}
    assert shown["p_gen"].kind == "probability" and shown["copied"].kind == "weights"
    assert any(slot.name == "copy_ids" for slot in composition.memory)


def write_names(folder, name: str, n: int, seed: int) -> str:
    """A corpus of n pairs about names that each occur once (so no vocabulary has them):
    "the name is X ." -> "der name ist X .", and "X sleeps ." -> "X schläft ."."""
    rng = np.random.default_rng(seed)
    letters = list("abcdefghijklmnopqrstuvwxyz")
    src, tgt = [], []
    for _ in range(n):
        x = "".join(rng.choice(letters, size=6))
        if rng.random() < 0.5:
            src.append(f"the name is {x} ."), tgt.append(f"der name ist {x} .")
        else:
            src.append(f"{x} sleeps ."), tgt.append(f"{x} schläft .")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.en").write_text("\n".join(src) + "\n")
    (folder / f"{name}.de").write_text("\n".join(tgt) + "\n")
    return str(folder / name)


def names_config(folder, seed: int = 1, tokenizer: str = "moses"):
    """The toy recipe, copying, on a corpus of names that each occur once."""
    from dataclasses import replace

    from tests.conftest import toy_corpus_config

    cfg = toy_corpus_config(folder, steps=250, lr=1e-2, eval_every=250)
    train = write_names(folder / "data", "train", 600, 0)
    data = replace(cfg.data, train=train, valid="", tokenizer=tokenizer)
    cfg = replace(cfg, data=replace(data, min_freq=2), model=replace(cfg.model, copy=True))
    return replace(cfg, seed=seed, search=replace(cfg.search, replace_unk=False))


@pytest.fixture(scope="module")
def names_run(tmp_path_factory):
    """A copying model trained on the names corpus (a few seconds)."""
    from alignmt.training.run import train

    return train(names_config(tmp_path_factory.mktemp("names")), progress=False).run_dir


def test_a_copying_model_spells_names_it_never_saw(names_run, tmp_path, caplog):
    from alignmt.decoding.door import open_translator

    run = names_run
    translator = open_translator(run)
    test = write_names(tmp_path / "test", "test", 40, 1) + ".en"
    lines = open(test).read().splitlines()  # noqa: SIM115
    names = [line.split()[-2] if line.startswith("the") else line.split()[0] for line in lines]
    assert not any(name in translator.tgt_vocab.stoi for name in names)  # none to generate
    outputs = [hyps[0].tokens for hyps in translator.translate(lines)]
    spelt = sum(name in out for name, out in zip(names, outputs, strict=True))
    assert spelt >= 0.9 * len(names), outputs
    assert "not in the vocabulary, read as <unk> and copied where the model" in caplog.text


def test_nbest_an_ensemble_and_samples_of_copying_models_copy(names_run, tmp_path):
    from alignmt.decoding.door import open_translator
    from alignmt.decoding.rules import Sampling
    from alignmt.training.run import train

    other = train(names_config(tmp_path / "other", seed=2), progress=False).run_dir
    line = "the name is qwzxyv ."
    nbest = open_translator(names_run).translate([line], nbest=3, beam_size=3)[0]
    assert len(nbest) == 3 and "qwzxyv" in nbest[0].tokens
    assert [t.score for t in nbest] == sorted((t.score for t in nbest), reverse=True)
    best = open_translator([names_run, other]).translate([line], beam_size=1)[0][0]
    assert "qwzxyv" in best.tokens
    drawn = open_translator(names_run).translate([line], sampling=Sampling(0.5, samples=4))[0]
    assert sum("qwzxyv" in t.tokens for t in drawn) >= 3


def test_the_served_step_through_names_copies_and_shows_p_gen(names_run):
    from tests.conftest import SERVE_LIMITS, post, serving

    with serving(names_run, limits=SERVE_LIMITS) as client:
        (info,) = client.get("/v1/models").json()["models"]
        assert any(m.startswith("the pointer-generator") for m in info["mechanisms"])
        shown = [(s["slot"], s["kind"]) for s in info["shown"]]
        assert shown == [("p_gen", "probability"), ("copied", "weights")]
        _, body = post(client, "/v1/step", {"sentence": "qwzxyv sleeps ."})
        steps = body["steps"]
        assert steps[0]["token"] == "qwzxyv"  # copied, by name
        assert steps[0]["shown"]["p_gen"] < 0.5  # mostly copied
        assert np.shape(steps[0]["shown"]["copied"]) == (1, 4)  # one row over 4 positions
        alpha = np.array(steps[0]["attention"])
        copied = (1 - steps[0]["shown"]["p_gen"]) * alpha
        np.testing.assert_allclose(steps[0]["shown"]["copied"][0], copied, atol=2e-3)
        # attribution reads the copying model's own ids
        asked = {"sentence": "qwzxyv sleeps .", "attribution": "gradient"}
        _, explained = post(client, "/v1/step", asked)
        assert np.shape(explained["steps"][0]["attribution"]) == (4,)


NAMES = [
    "the name is qwzxyv .",
    "abcdef sleeps .",
    "the name is zzzyyy .",
    "qq sleeps .",
    "qwzxyv sleeps , qwzxyv .",
]


@pytest.mark.parametrize("weights", ["float32", "int8"])
def test_the_onnx_export_copies_as_pytorch_does(names_run, weights, tmp_path):
    """The exported graphs (log_probs over V + T_src) on ONNX Runtime, greedy and beam with
    its n-best, against the torch engine on the same run: the same words copied."""
    pytest.importorskip("onnxruntime")
    from dataclasses import replace

    from alignmt.checkpoint.torch_io import load_checkpoint
    from alignmt.decoding.door import open_translator
    from alignmt.decoding.onnx_engine.int8 import write_int8
    from alignmt.decoding.torch_engine.export import export_onnx

    ckpt = load_checkpoint(names_run)
    assert export_onnx(ckpt, tmp_path / "onnx").copies
    write_int8(tmp_path / "onnx")
    pytorch = open_translator(names_run)
    search = replace(ckpt.config.search, weights=weights)
    exported = open_translator(tmp_path / "onnx", search=search)
    assert exported.engine.name == "onnxruntime" and exported.engine.copies
    tol = 1e-4 if weights == "float32" else 0.05
    for beam, nbest in ((1, 1), (3, 3)):
        want = pytorch.translate(NAMES, beam_size=beam, nbest=nbest)
        got = exported.translate(NAMES, beam_size=beam, nbest=nbest)
        for ours, theirs in zip(got, want, strict=True):
            assert [h.tokens for h in ours] == [h.tokens for h in theirs]
            assert [h.score for h in ours] == pytest.approx([h.score for h in theirs], abs=tol)
    assert "qwzxyv" in got[0][0].tokens and "abcdef" in got[1][0].tokens


FLAX_ORDERS = {  # each order with a readout it takes, one with an LSTM of two layers
    "bahdanau": ("gru-bi-L1-additive-bahdanau", "tanh"),
    "luong": ("gru-bi-L2-general-luong", "none"),
    "cgru": ("lstm-uni-L2-additive-cgru", "maxout"),
}


@pytest.mark.parametrize("order", FLAX_ORDERS)
def test_the_flax_twin_copies_as_pytorch_does(order):
    """On the same weights: the teacher-forced log P over the extended vocabulary (a copied
    word fed back), three steps with p_gen and the share copied, the smoothed loss and its
    gradient at the gate."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from alignmt.checkpoint.flax_io import params_from_tensors
    from alignmt.model.flax_seq2seq import FlaxSeq2Seq, sequence_loss
    from alignmt.model.seq2seq import Seq2Seq
    from tests.test_flax_model import ARCH, tiny_config

    name, readout = FLAX_ORDERS[order]
    cfg = tiny_config(ARCH[name], copy=True, readout=readout)
    torch.manual_seed(0)
    model = Seq2Seq.from_config(cfg, src_vocab=VOCAB, tgt_vocab=VOCAB).eval()
    table = [-1 if i in (3, 4, 5, 6) else i for i in range(VOCAB)]
    model.set_copy_table(table)
    tensors = {k: v.numpy() for k, v in model.state_dict().items()}
    variables = {"params": params_from_tensors(tensors, cfg)}
    twin = FlaxSeq2Seq(cfg, VOCAB, VOCAB, copy_table=tuple(table))
    src, src_len, tgt_in, _ = copying_batch()
    tgt_in[0, 2] = VOCAB + 1  # the copy of the unknown word, read back as <unk>
    tgt_out = torch.cat([tgt_in[:, 1:], torch.full_like(tgt_in[:, :1], 2)], 1)
    arrays = [jnp.asarray(t.numpy()) for t in (src, src_len, tgt_in, tgt_out)]

    def forward_and_steps(module, src, src_len, tgt_in):
        log_probs, _ = module(src, src_len, tgt_in)
        memory, state = module.encode(src, src_len)
        steps = []
        for t in range(3):
            step, state, _ = module.decode_step(tgt_in[:, t], state, memory)
            steps.append((step.full(), state.slots["p_gen"], state.slots["copied"]))
        return log_probs.full(), steps

    log_probs, steps = twin.apply(variables, *arrays[:3], method=forward_and_steps)
    with torch.no_grad():
        expected = model(src, src_len, tgt_in).log_probs.full()
        memory, state = model.encode(src, src_len)
        for t, (log_p, p_gen, copied) in enumerate(steps):
            step, state, _ = model.decode_step(tgt_in[:, t], state, memory)
            np.testing.assert_allclose(log_p, step.full(), atol=1e-5)
            np.testing.assert_allclose(p_gen, state.slots["p_gen"], atol=1e-6)
            np.testing.assert_allclose(copied, state.slots["copied"], atol=1e-6)
    assert log_probs.shape == (3, tgt_in.size(1), VOCAB + src.size(1))
    np.testing.assert_allclose(log_probs, expected, atol=1e-5)

    def loss(params):
        log_probs, _ = twin.apply({"params": params}, *arrays[:3])
        return sequence_loss(log_probs, arrays[3], 0, 0.1, VOCAB)

    value, grads = jax.value_and_grad(loss)(variables["params"])
    torch_loss = model.loss(src, src_len, tgt_in, tgt_out, label_smoothing=0.1)
    torch_loss.backward()
    assert float(value) == pytest.approx(float(torch_loss), abs=1e-5)
    gate = grads["decoder"]["pointer"]["gate"]["kernel"]
    np.testing.assert_allclose(gate, model.decoder.copy.gate.weight.grad.T, atol=1e-5)


@pytest.mark.slow
def test_a_flax_trained_copying_model_spells_names_and_reads_back_in_pytorch(tmp_path):
    """train.engine=flax on the names corpus: its run folder holds the copy table PyTorch
    reads, and the flax and torch engines copy the same names from it."""
    pytest.importorskip("jax")
    from dataclasses import replace

    from alignmt.decoding.door import open_translator
    from alignmt.training.run import train

    cfg = names_config(tmp_path / "names")
    cfg = replace(cfg, train=replace(cfg.train, engine="flax"))
    run = train(cfg, progress=False).run_dir
    lines = open(write_names(tmp_path / "test", "test", 20, 1) + ".en").read().splitlines()  # noqa: SIM115
    flax, pytorch = open_translator(run, engine="flax"), open_translator(run)
    got = [hyps[0].tokens for hyps in flax.translate(lines, beam_size=3)]
    assert got == [hyps[0].tokens for hyps in pytorch.translate(lines, beam_size=3)]
    names = [line.split()[-2] if line.startswith("the") else line.split()[0] for line in lines]
    assert sum(name in out for name, out in zip(names, got, strict=True)) >= 0.9 * len(names)


@pytest.mark.slow
def test_a_copying_model_answers_in_the_page_as_on_the_server(browser, host, tmp_path):
    """The pointer-generator in the page: names it never saw read by their extended ids and
    copied by name, a prefix that forces a copy, p_gen and the share copied at every step,
    the beam tree and the n-best, as the server answers them."""
    from alignmt.training.run import train
    from tests.test_web import ask_worker, assert_same, export_web, server_answers

    # the space tokenizer: Moses' rules have no twin in the page
    names_run = train(names_config(tmp_path / "names", tokenizer="space"), progress=False).run_dir
    site = export_web(names_run, tmp_path / "site", "--float32")
    sentences = ["the name is qwzxyv .", "abcdef sleeps .", "the name is zz ."]
    requests = [{"what": "step", "body": {"sentence": s, "top_k": 3}} for s in sentences]
    forced = ["der", "name", "ist", "qwzxyv"]
    requests.append({"what": "step", "body": {"sentence": sentences[0], "prefix": forced}})
    requests += [{"what": "beam", "body": {"sentence": s, "beam_size": 3}} for s in sentences]
    requests.append({"what": "translate", "body": {"sentences": sentences, "beam_size": 1}})
    requests.append(
        {"what": "translate", "body": {"sentences": sentences, "beam_size": 3, "nbest": 2}}
    )
    got = ask_worker(browser, host(site) + "index.html", requests)
    for asked, page, server in zip(requests, got, server_answers(names_run, requests), strict=True):
        assert "answer" in page, f"{asked}: the page says {page.get('error')}"
        assert_same(page["answer"], server, f"copy {asked['what']}")
    first = got[0]["answer"]
    assert first["source_tokens"][3] == "<unk>" and "qwzxyv" in first["tokens"]
    assert all(0 <= step["shown"]["p_gen"] <= 1 for step in first["steps"])
    assert got[3]["answer"]["steps"][3]["forced"] and got[3]["answer"]["text"] == first["text"]


def test_the_heatmap_shows_attention_and_the_share_copied(names_run):
    import alignmt

    figure = alignmt.load(names_run).heatmap("qwzxyv sleeps .")
    panels = [ax for ax in figure.axes if ax.get_title()]
    assert [ax.get_title() for ax in panels] == ["α", "copy"]
    alpha, copied = (ax.get_images()[0].get_array() for ax in panels)
    assert np.all(copied <= alpha + 1e-6) and copied[0].max() > 0.5  # the name was copied
