"""Lexically constrained beam search (dynamic beam allocation): phrases placed where the model
would not put them, excluded phrases never written, the beam never wider than K, a search
with no constraints the plain one; and constraints through the translator and the HTTP API.
The command line's are test_cli.py's, the explorer's test_explorer.py's."""

from __future__ import annotations

import math

import pytest
import torch

from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.decoding.constraint import Constraint
from alignmt.decoding.door import open_translator
from alignmt.decoding.torch_engine.constraints import Table
from alignmt.decoding.torch_engine.plan import SearchPlan
from alignmt.decoding.torch_engine.search import beam_decode, beam_search, search
from alignmt.decoding.translator import Translator
from tests.conftest import padded_batch, serving, tiny_model
from tests.test_beam import MIXED, markov_step, mixed_id
from tests.test_search import BOS, EOS, X, Y, Z
from tests.test_serve import LIMITS, SENTENCE, post

CPU = torch.device("cpu")


def test_a_constraint_is_met_by_its_phrase_unbroken_and_in_order():
    c = Constraint(include=((X, Y), (Z,)), exclude=((Y, X),))
    assert c.met([X, Z, Y, EOS]) == [False, True]
    assert c.met([Z, X, Y, EOS]) == [True, True]
    assert c.broken([X, Y, X]) == [True]
    assert c.broken([X, Z, Y]) == [False]
    with pytest.raises(ValueError, match="no tokens"):
        Constraint(include=((),))


# The made-up language says X, then X again or </s>; Z and Y are unlikely everywhere.
XX = {BOS: {X: 0.8, Y: 0.1, Z: 0.1}, X: {X: 0.6, EOS: 0.3, Y: 0.05, Z: 0.05}}


def constrained(rules, constraints, max_len=8, **kwargs):
    """Beam search over the made-up language, one sentence per rule set."""
    step, state, memory = markov_step(rules)
    start = (state, memory, torch.tensor([max_len] * len(rules)))
    table = Table.of(constraints, CPU)
    how = SearchPlan(width=len(rules), constraints=table, **{"beam_size": 3, **kwargs})
    return beam_search(step, [start], how, bos_id=BOS, eos_id=EOS), step.rows


def test_an_unlikely_phrase_is_placed_and_an_excluded_one_never_written():
    plain, _ = constrained([XX], [None])
    assert plain[0][0].tokens == [X, EOS]
    cases = [
        Constraint(include=((Z,),)),
        Constraint(include=((Y, Z),)),
        Constraint(include=((Z,), (Y,))),
        Constraint(exclude=((X,),)),
        Constraint(exclude=((X, X),)),
        Constraint(include=((Y,),), exclude=((X, X), (Z,))),
    ]
    found, _ = constrained([XX] * len(cases), cases, nbest=3)
    for c, hyps in zip(cases, found, strict=True):
        met = [all(c.met(hyp.tokens)) for hyp in hyps]
        assert met[0] and hyps[0].tokens[-1] == EOS, hyps[0].tokens  # well within the limit
        assert met == sorted(met, reverse=True)  # the n-best's unmet ones come last
        assert not any(any(c.broken(hyp.tokens)) for hyp in hyps)


def test_a_phrase_left_half_written_must_start_again():
    # Y Z is wanted; the language likes Y then X, so a beam that wrote Y and went on with X
    # has met nothing, and only an unbroken Y Z counts.
    rules = {BOS: {Y: 0.9, X: 0.1}, Y: {X: 0.9, Z: 0.05, EOS: 0.05}, X: {EOS: 0.9, Y: 0.1}}
    [hyps], _ = constrained([rules], [Constraint(include=((Y, Z),))], beam_size=2, nbest=2)
    for hyp in hyps:
        assert Constraint(include=((Y, Z),)).met(hyp.tokens) == [True]


def test_the_beam_never_grows_with_the_number_of_constraints():
    many = Constraint(include=((Z,), (Y, Z), (Y,), (Z, Y, Z)))
    for beam_size in (1, 2, 4):
        found, rows = constrained([XX, XX], [many, None], max_len=12, beam_size=beam_size)
        assert max(rows) == 2 * beam_size
        assert all(many.met(found[0][0].tokens))


def test_the_length_limit_ends_an_unmet_hypothesis_below_every_met_one():
    # Five phrase tokens cannot fit in three: the search still answers, its best ranked
    # by score among the unmet; with room, every answer meets them.
    c = Constraint(include=((Z,), (Y,), (Z, Y, Z)))
    [short], _ = constrained([XX], [c], max_len=3, nbest=3)
    assert short and all(len(h.tokens) == 3 for h in short)
    [roomy], _ = constrained([XX], [c], max_len=9, nbest=3)
    assert all(all(c.met(h.tokens)) for h in roomy)


def test_a_beam_of_one_still_places_the_phrase():
    [[hyp]], _ = constrained([XX], [Constraint(include=((Z,),))], beam_size=1)
    assert Z in hyp.tokens and hyp.tokens[-1] == EOS


def test_constraints_cannot_be_sampled():
    with pytest.raises(ValueError, match="cannot be sampled"):
        SearchPlan(constraints=Table.of([None], CPU), pick=lambda logits: logits)


@pytest.mark.parametrize("case", MIXED, ids=mixed_id)
def test_no_constraints_is_plain_beam_search(case):
    arch, seed = case
    model = tiny_model(**arch, seed=seed)
    src, src_len, _, _ = padded_batch(src_lens=(9, 2, 5, 7, 3), tgt_lens=(1,) * 5)
    plain = beam_decode(model, src, src_len, beam_size=4, nbest=3, length_penalty=0.6)
    how = SearchPlan(
        beam_size=4, nbest=3, length_penalty=0.6, width=5, constraints=Table.of([None] * 5, CPU)
    )
    none = search(model, [(src, src_len)], how)
    for p, n in zip(plain, none, strict=True):
        assert [h.tokens for h in p] == [h.tokens for h in n]
        for a, b in zip(p, n, strict=True):
            assert math.isclose(a.score, b.score, rel_tol=1e-9)


def test_constrained_hypotheses_score_what_the_model_gives_them_and_batch_as_alone():
    model = tiny_model(seed=10)
    src, src_len, _, _ = padded_batch(src_lens=(9, 2, 5, 7, 3, 6), tgt_lens=(1,) * 6)
    plain = beam_decode(model, src, src_len, beam_size=4)
    unseen = [
        next(t for t in range(3, 12) if t not in hyps[0].tokens) for hyps in plain
    ]  # a token each plain output lacks
    constraints = [
        Constraint(include=((unseen[0],),)),
        None,
        Constraint(include=((unseen[2], unseen[2]),), exclude=((plain[2][0].tokens[0],),)),
        Constraint(exclude=((plain[3][0].tokens[0],),)),
        Constraint(include=((unseen[4],), (unseen[4] % 11 + 1,))),
        Constraint(),
    ]
    batches = [
        (src[i : i + 2, : int(src_len[i : i + 2].max())], src_len[i : i + 2]) for i in (0, 2, 4)
    ]
    how = dict(beam_size=4, nbest=2, length_penalty=0.5, max_len_offset=14)
    table = Table.of(constraints, CPU)
    found = search(model, batches, SearchPlan(width=2, constraints=table, **how))
    for b, (c, hyps) in enumerate(zip(constraints, found, strict=True)):
        n = int(src_len[b])
        for hyp in hyps:
            if c is not None:
                assert all(c.met(hyp.tokens)) and not any(c.broken(hyp.tokens))
            tgt_in = torch.tensor([[BOS, *hyp.tokens[:-1]]])
            log_probs = model(src[b : b + 1, :n], src_len[b : b + 1], tgt_in).log_probs.logits[0]
            log_probs = log_probs.log_softmax(-1)
            expected = log_probs.gather(1, torch.tensor(hyp.tokens)[:, None]).sum().item()
            assert math.isclose(hyp.score, expected, rel_tol=1e-9)
        alone = SearchPlan(width=1, constraints=Table.of([c], CPU), **how)
        [again] = search(model, [(src[b : b + 1, :n], src_len[b : b + 1])], alone)
        assert [h.tokens for h in again] == [h.tokens for h in hyps]
    assert found[1][0].tokens == plain[1][0].tokens


def test_a_phrase_of_subword_pieces_is_placed_piece_by_piece_and_reads_as_words():
    from alignmt.config import ModelConfig, SearchConfig
    from alignmt.decoding.torch_engine.engine import TorchEngine
    from alignmt.model.seq2seq import Seq2Seq
    from alignmt.text.tokenize import SentencePieceTokenizer, SpaceTokenizer
    from alignmt.text.vocab import Vocab

    sentences = ["the dog runs", "a red dog sleeps now", "the small cat runs"] * 20
    pieces = SentencePieceTokenizer.train(sentences, vocab_size=30, lowercase=True)
    tgt_vocab = Vocab.build(pieces.encode(s) for s in [*sentences, "red cats"])
    src_tokenizer = SpaceTokenizer()
    src_vocab = Vocab.build(src_tokenizer.encode(s) for s in sentences)
    torch.manual_seed(0)
    cfg = ModelConfig(emb_dim=8, enc_hidden=8, dec_hidden=16, attn_dim=8)
    model = Seq2Seq.from_config(cfg, src_vocab=len(src_vocab), tgt_vocab=len(tgt_vocab))
    search = SearchConfig(beam_size=3)
    vocabs = (src_vocab, tgt_vocab)
    engine = TorchEngine(model, search=search, vocabs=vocabs)
    translator = Translator(
        engine, tokenizers=(src_tokenizer, pieces), vocabs=vocabs, search=search
    )
    wanted = translator.constraint(["Red cats"])
    assert len(wanted.include[0]) > 2  # the phrase is several pieces
    [[out]] = translator.translate(["the dog runs"], constraints=[wanted])
    assert translator.met(out, wanted) == [True] and "red cats" in out.text
    with pytest.raises(ValueError, match="include phrase 'zzz': tokens not in the target"):
        translator.constraint(["zzz"])


# --- through the translator and the HTTP API ----------------------------------------------


@pytest.fixture(scope="module")
def client(toy_run):
    with serving(toy_run, limits=LIMITS) as client:
        yield client


@pytest.fixture(scope="module")
def translator(toy_run):
    return open_translator(load_checkpoint(toy_run))


def test_constrained_translations_hold_their_phrases_and_say_so(client, translator):
    [[plain]] = translator.translate(["a cat"], beam_size=3)
    wanted = next(t for t in translator.tgt_vocab.itos[4:] if t not in plain.tokens)
    banned = plain.tokens[0]
    body = {
        "sentences": ["a cat", SENTENCE, "a cat"],
        "beam_size": 3,
        "nbest": 2,
        "constraints": [{"include": [wanted]}, None, {"exclude": [banned]}],
    }
    status, answer = post(client, "/v1/translate", body)
    assert status == 200
    first, second, third = (t["hypotheses"] for t in answer["translations"])
    assert first[0]["met"] == [True] and wanted in first[0]["tokens"]
    assert second[0]["met"] is None
    assert third[0]["met"] == [] and all(banned not in h["tokens"] for h in third)
    # the same search as the translator's, whatever else shares the batch
    expected = translator.translate(
        ["a cat"], beam_size=3, nbest=2, constraints=[translator.constraint([wanted])]
    )
    assert [h["tokens"] for h in first] == [t.tokens for t in expected[0]]
    # the beam tree under the same constraint: each node says what its path has met
    _, tree = post(
        client,
        "/v1/beam",
        {"sentence": "a cat", "beam_size": 3, "constraints": {"include": [wanted]}},
    )
    assert tree["constraints"] == {"include": [wanted], "exclude": []}
    assert tree["finished"][0]["tokens"] == first[0]["tokens"]
    nodes = tree["nodes"]
    for node in nodes:
        assert node["met"] == [
            node["token"] == wanted
            or (node["parent"] is not None and nodes[node["parent"]]["met"][0])
        ]


CONSTRAINED = [
    ({"constraints": [None, None]}, 422, "constraints"),
    ({"constraints": [{"include": [" "]}]}, 422, "constraints[0].include[0]"),
    ({"constraints": [{"include": ["zebraquagga"]}]}, 422, "constraints[0]"),
    ({"constraints": [{"require": ["der"]}]}, 422, "constraints[0].require"),
    ({"constraints": [{"include": ["der"] * 17}]}, 422, "max_phrases"),
    ({"constraints": [{"include": ["der"]}], "sample": {}}, 422, "constraints"),
]


@pytest.mark.parametrize(("extra", "status", "names"), CONSTRAINED)
def test_constraints_the_model_cannot_meet_or_read_are_refused(client, extra, status, names):
    got, answer = post(client, "/v1/translate", {"sentences": ["a cat"], **extra})
    error = answer["error"]
    assert got == status and error["message"]
    assert error.get("limit", error.get("field")) == names
