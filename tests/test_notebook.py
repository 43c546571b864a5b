"""The notebook face: `alignmt.train` and `alignmt.load` give a `Run` that translates,
scores and draws what the command line does, and renders its results as HTML tables."""

from __future__ import annotations

import pytest
from matplotlib.figure import Figure

import alignmt
from alignmt.analysis.align import word_links
from alignmt.cli import main
from alignmt.config import SHIPPED, ConfigError, config_path, load_config, with_fields
from alignmt.notebook import run as notebook
from alignmt.text.links import sentence_words
from tests.conftest import LEXICON, held_out_toy_lines

TINY = dict(emb_dim=8, enc_hidden=8, dec_hidden=16, attn_dim=8, readout_dim=8)


def test_a_shipped_config_is_found_by_name_and_a_path_is_taken_as_it_is(tmp_path):
    assert config_path("reverse") == SHIPPED / "reverse.yaml"
    assert load_config(config_path("multi30k_en_de")).data.task == "corpus"
    own = tmp_path / "reverse"  # a file of that name is the user's, not the shipped one
    own.write_text("seed: 7\n")
    assert config_path(own) == own
    with pytest.raises(ConfigError, match=r"revers: .*reverse_vanilla.*did you mean 'reverse'"):
        config_path("revers")


def test_fields_are_set_by_their_last_name_and_refused_where_that_is_not_one_field():
    cfg = with_fields(load_config(), {"steps": 12, "dropout": 0.25, "out_dir": "runs/x"})
    assert (cfg.train.steps, cfg.model.dropout, cfg.out_dir) == (12, 0.25, "runs/x")
    with pytest.raises(ConfigError, match=r"'max_len_ratio' is a field of several sections"):
        with_fields(load_config(), {"max_len_ratio": 2.0})
    with pytest.raises(ConfigError, match=r"no config field is called 'step'"):
        with_fields(load_config(), {"step": 3})
    with pytest.raises(ConfigError, match=r"train.steps: expected an integer"):
        with_fields(load_config(), {"steps": "many"})
    with pytest.raises(ConfigError, match=r"train.steps: must be at least 1"):
        with_fields(load_config(), {"steps": 0})


def test_train_by_name_translates_draws_and_loads_back(tmp_path, monkeypatch):
    shown = []
    monkeypatch.setattr(notebook, "_display", shown.append)
    run = alignmt.train(
        "reverse",
        out_dir=str(tmp_path / "r"),
        steps=20,
        eval_every=0,
        log_every=5,
        progress=False,
        **TINY,
    )
    assert isinstance(run, alignmt.Run) and run.trained.step == 20
    assert [type(f) for f in shown] == [Figure]  # the loss curve, when training ends
    found = run.translate(["abc", "hello"], beam=2)
    assert len(found) == 2 and found.texts == [t.text for t in found]
    assert all(len(t.probabilities) == len(t.tokens) for t in found)
    page = found._repr_html_()
    assert "<table>" in page and "hello" in page and "alignment (Pharaoh)" in page
    loaded = alignmt.load(run.run_dir)
    assert loaded.translate(["abc", "hello"], beam=2).texts == found.texts
    assert loaded.checkpoint.model is loaded.translator.engine.model  # one model in memory
    assert loaded.checkpoint.step == 20
    figure = run.heatmap("abc")
    assert [t.get_text() for t in figure.axes[0].get_xticklabels()] == ["a", "b", "c", "</s>"]
    curve = run.curves().axes[0]
    assert [line.get_label() for line in curve.get_lines()] == ["train"]
    assert list(curve.get_lines()[0].get_xdata()) == [5, 10, 15, 20]


def test_nbest_lists_each_sentences_hypotheses_best_first(toy_run):
    found = alignmt.load(toy_run).translate("the big dog", nbest=3)
    assert len(found) == 1 and len(found.nbest[0]) == 3
    scores = [h.score for h in found.nbest[0]]
    assert scores == sorted(scores, reverse=True) and found[0] is found.nbest[0][0]


def test_translations_read_as_a_table_outside_a_notebook(toy_run):
    found = alignmt.load(toy_run).translate(["the big dog", "a cat"], nbest=2)
    text = repr(found)
    assert text == str(found) and "array" not in text
    lines = text.splitlines()
    assert lines[0] == "1. the big dog" and "2. a cat" in lines
    best = found[0]
    assert f"log p {best.score:8.3f}" in lines[1] and f"{best.tokens[0]} (" in lines[1]
    assert lines[2].split() == ["alignment", *best.alignment.split()]


def test_constraints_are_given_as_the_command_line_reads_them(toy_run):
    run = alignmt.load(toy_run)
    plain = run.translate(["the big dog", "a cat"], beam=3)
    assert "katze" not in plain[0].tokens
    held = run.translate(
        ["the big dog", "a cat"], beam=3, constraints=[{"include": ["katze"]}, None]
    )
    assert "katze" in held[0].tokens and held[1].tokens == plain[1].tokens
    with pytest.raises(ValueError, match="unknown keys"):
        run.translate("a cat", constraints=[{"inlcude": ["katze"]}])


def test_evaluate_scores_a_test_set_and_the_attention_against_gold_links(toy_run, tmp_path):
    run = alignmt.load(toy_run)
    src = held_out_toy_lines(tmp_path, n=20)
    ref = [" ".join(LEXICON[w] for w in line.split()) + " ." for line in src]
    report = run.evaluate(src, ref, beam=1)
    assert report.evaluation.lowercased.sentences == 20 and report.bleu > 50
    assert "BLEU by source length" in report._repr_html_()
    # the model's own word links as gold: AER 0, which it is only if evaluate links the
    # same pairs; shifted by one source word it is not
    words = [sentence_words(run.translator.src_tokenizer, line) for line in src]
    refs = [sentence_words(run.translator.tgt_tokenizer, line) for line in ref]
    links = word_links(run.translator, words, refs)
    own, shifted = tmp_path / "own.align", tmp_path / "shifted.align"
    own.write_text("".join(" ".join(f"{i}-{j}" for i, j in sorted(s)) + "\n" for s in links))
    shifted.write_text(
        "".join(
            " ".join(f"{(i + 1) % len(w.words)}-{j}" for i, j in sorted(s)) + "\n"
            for s, w in zip(links, words, strict=True)
        )
    )
    assert run.evaluate(src, ref, gold=own).alignment.aer == 0
    assert run.evaluate(src, ref, gold=shifted).alignment.aer > 0.5


def test_evaluate_searches_with_the_beam_and_coverage_penalty_asked(toy_run, monkeypatch):
    run = alignmt.load(toy_run)
    searched = []
    real = notebook.open_translator

    def spy(path, search=None, **kwargs):
        searched.append(search)
        return real(path, search=search, **kwargs)

    monkeypatch.setattr(notebook, "open_translator", spy)
    run.evaluate(["the big dog"], ["der große hund ."], beam=3, coverage_penalty=0.4)
    run.evaluate(["the big dog"], ["der große hund ."], coverage_penalty=0.2)
    asked = [(s.beam_size, s.coverage_penalty) for s in searched[-2:]]
    assert asked == [(3, 0.4), (run.config.search.beam_size, 0.2)]
    assert run.translator.search.coverage_penalty == run.config.search.coverage_penalty == 0.0


def test_evaluate_refuses_a_test_set_whose_sides_differ(toy_run):
    with pytest.raises(ValueError, match="src has 2 sentences but ref has 1"):
        alignmt.load(toy_run).evaluate(["a dog", "a cat"], ["ein hund ."])
    with pytest.raises(ValueError, match="src and ref go together"):
        alignmt.load(toy_run).evaluate(["a dog"])
    with pytest.raises(ValueError, match=r"its config names no data\.test; pass src and ref"):
        alignmt.load(toy_run).evaluate()


def test_the_command_line_takes_a_shipped_configs_name(capsys):
    assert main(["train", "reverse_vanilla", "--print-config"]) == 0
    assert "attention: none" in capsys.readouterr().out
