"""SentencePiece in an exported site's page (`answers.web_tokenizers`, static/web/tokenize.js
over @huggingface/tokenizers): the page cuts every corpus sentence as SentencePiece does,
except where the `tokenizers` library does not either, and those are what the export names
when it refuses."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from alignmt.answers.site import STATIC
from alignmt.answers.web_tokenizers import check_web_tokenizers
from alignmt.checkpoint.format import load_header
from alignmt.text.corpus import read_lines
from alignmt.text.tokenize import SentencePieceTokenizer
from alignmt.text.tokenizer_json import differences, tokenizer_json


def corpora(root: Path) -> dict[str, tuple[list[str], list[str]]]:
    """Corpus side -> (what its SentencePiece model learns from: the first 8,000 sentences,
    every sentence checked)."""
    out = {}
    for lang in ("en", "de"):
        parts = [read_lines(root / "multi30k" / f"{p}.{lang}.gz") for p in ("train", "val")]
        test = read_lines(root / "multi30k" / f"test_2016_flickr.{lang}.gz")
        out[f"multi30k.{lang}"] = (parts[0][:8000], parts[0] + parts[1] + test)
    rows = [line.split("\t") for line in read_lines(root / "tatoeba" / "eng-fra.tsv")]
    for column, lang in enumerate(("en", "fr")):
        side = [row[column] for row in rows]
        out[f"tatoeba.{lang}"] = (side, side)
    return out


PAGE = """<!doctype html><script type="module">
import { tokenizer } from "./web/tokenize.js";
const cases = await (await fetch("cases.json")).json();
window.result = [];
for (const c of cases) {
  const cut = await tokenizer({ kind: "sentencepiece", lowercase: true }, c.file);
  const { vocab } = c.file.model; // unigram's: [piece, score] pairs; BPE's: piece -> id
  const known = new Set(Array.isArray(vocab) ? vocab.map(([piece]) => piece) : Object.keys(vocab));
  const differ = [];
  c.sentences.forEach((s, i) => {
    const got = cut.encode(s).map((t) => (known.has(t) ? t : "<unk>"));
    if (JSON.stringify(got) !== JSON.stringify(c.pieces[i])) differ.push(i);
  });
  window.result.push({ name: c.name, checked: c.sentences.length, differ });
}
</script>"""


@pytest.mark.slow
def test_the_page_cuts_every_corpus_sentence_as_sentencepiece_or_says_which(
    _shared_corpora, browser, host, tmp_path
):
    cases, rust = [], {}
    for name, (learnt, checked) in corpora(_shared_corpora).items():
        for model_type in ("bpe", "unigram"):
            tok = SentencePieceTokenizer.train(
                learnt, vocab_size=4000, model_type=model_type, lowercase=True
            )
            # SentencePiece's pieces, a piece it lacks as <unk>: its ids, in one call
            ids = tok._sp.encode([s.lower() for s in checked], out_type=int)
            table = [tok._sp.id_to_piece(i) for i in range(tok._sp.get_piece_size())]
            pieces = [[table[i] for i in sentence] for sentence in ids]
            file = tokenizer_json(tok.model)
            case = f"{name} {model_type}"
            cases.append({"name": case, "file": file, "sentences": checked, "pieces": pieces})
            rust[case] = differences(tok.model, checked, lowercase=True)
    shutil.copytree(STATIC / "web", tmp_path / "web")
    (tmp_path / "cases.json").write_text(json.dumps(cases, ensure_ascii=False), encoding="utf-8")
    (tmp_path / "index.html").write_text(PAGE, encoding="utf-8")
    browser.get(host(tmp_path) + "index.html")
    browser.set_script_timeout(300)
    result = browser.execute_async_script(
        """const [count, done] = arguments;
        const wait = () => (window.result?.length === count ? done(window.result)
          : setTimeout(wait, 50));
        wait();""",
        len(cases),
    )
    by_case = {r["name"]: r for r in result}
    for case in cases:
        got = by_case[case["name"]]
        assert got["checked"] == len(case["sentences"])
        # the page differs from SentencePiece exactly where the export's check finds it
        assert got["differ"] == rust[case["name"]], case["name"]
    checked = sum(len(c["sentences"]) for c in cases)
    assert checked == 2 * (2 * (29000 + 1014 + 1000) + 2 * 5000)
    assert sum(len(d) for d in rust.values()) <= 2, rust  # unigram's ties, the only ones


@pytest.fixture
def multi30k_header(toy_run, corpora_path):
    """The toy run's header as if it had learnt Multi30k En->De with SentencePiece."""
    header = load_header(toy_run)
    data = replace(header.config.data, train="multi30k:train", tokenizer="sentencepiece")
    return replace(header, config=replace(header.config, data=data))


@pytest.fixture
def corpora_path(corpora) -> Path:
    return corpora


def test_the_export_refuses_a_model_the_page_would_cut_otherwise_naming_the_lines(
    multi30k_header, corpora_path
):
    train = read_lines(corpora_path / "multi30k" / "train.de.gz")
    cutters = {
        kind: SentencePieceTokenizer.train(train, vocab_size=8000, model_type=kind, lowercase=True)
        for kind in ("bpe", "unigram")
    }
    bpe = replace(multi30k_header, tgt_tokenizer=cutters["bpe"])
    check_web_tokenizers(bpe, "runs/x")  # cut alike everywhere: accepted
    unigram = replace(multi30k_header, tgt_tokenizer=cutters["unigram"])
    with pytest.raises(ValueError) as refused:
        check_web_tokenizers(unigram, "runs/x")
    said = str(refused.value)
    assert said.startswith("runs/x: the browser's SentencePiece tokenizer cuts 1 of 29000 target")
    line = next(i for i, s in enumerate(train, 1) if "Gewerkschaftsmitarbeiter, der 95.000" in s)
    assert f"line {line}: 'dieser mann" not in said and f"line {line}: 'Dieser Mann" in said


def test_without_the_corpus_it_learnt_from_the_check_refuses(
    multi30k_header, tmp_path, monkeypatch
):
    monkeypatch.setenv("ALIGNMT_DATA", str(tmp_path))  # an empty data folder
    tok = SentencePieceTokenizer.train(["a b c"] * 30, vocab_size=8)
    with pytest.raises(ValueError, match="checked for the browser on the corpus they learnt from"):
        check_web_tokenizers(replace(multi30k_header, src_tokenizer=tok), "runs/x")


def test_the_export_refuses_a_tokenizer_the_browser_lacks_before_writing(
    toy_run, tmp_path, capsys, monkeypatch
):
    from alignmt.answers import web_tokenizers
    from alignmt.cli import main
    from alignmt.text.tokenize import MosesTokenizer

    check = web_tokenizers.check_web_tokenizers
    monkeypatch.setattr(  # the toy run, as if its source side were Czech
        web_tokenizers,
        "check_web_tokenizers",
        lambda header, run: check(replace(header, src_tokenizer=MosesTokenizer(lang="cs")), run),
    )
    out = tmp_path / "site"
    assert main(["export", str(toy_run), "--out", str(out), "--web"]) == 2
    said = capsys.readouterr().err
    assert "source tokenizer is Moses' rules for cs, which the browser has only for en" in said
    assert not out.exists()
