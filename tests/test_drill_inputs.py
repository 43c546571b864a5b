"""The drills with input from the wild (benchmarks/drill_inputs.py) at small counts, and the
bugs they found: each focused test fails without its fix."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from benchmarks.drill_inputs import corpora, translations

from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.cli import main
from alignmt.config import DataConfig
from alignmt.decoding.door import open_translator
from alignmt.text.corpus import CorpusError, input_lines, read_lines, read_parallel, read_tsv
from alignmt.text.prepare import prepare_text
from tests.conftest import write_file

# --- The drills -----------------------------------------------------------------------------


def test_fuzzed_corpora_are_read_clean_or_refused_by_file_and_line(tmp_path):
    result = corpora(tmp_path, reps=30, seed=0)
    assert result["failures"] == []
    assert result["tried"] == result["held"] == 30


def test_translate_gives_each_fuzzed_input_line_its_output_line_in_order(toy_run, tmp_path):
    result = translations(toy_run, tmp_path, lines=300, seed=0)
    assert result["failures"] == []
    assert result["tried"] == result["held"] == 300


# --- What they found: corpus files ------------------------------------------------------------


@pytest.mark.parametrize("name", ["a.en", "a.en.gz"])
def test_a_nul_byte_is_refused_naming_file_line_and_column(tmp_path, name):
    path = write_file(tmp_path / name, "fine\nal\0so fine\n")
    with pytest.raises(CorpusError, match=rf"{name}:2: a NUL byte at column 3 \(.*UTF-16"):
        read_lines(path)


def test_a_utf16_file_is_refused_at_its_first_line(tmp_path):
    # Without its BOM UTF-16 is valid UTF-8: ASCII with a NUL after every character.
    path = write_file(tmp_path / "a.en", "Hello\nworld\n".encode("utf-16-le"))
    with pytest.raises(CorpusError, match=r"a\.en:1: a NUL byte at column 2"):
        read_lines(path)


def test_a_carriage_return_that_ends_no_line_is_refused_naming_file_line_and_column(tmp_path):
    # Classic Mac line ends: read as text, this TSV would be one pair, "Hi." silently lost.
    mac = write_file(tmp_path / "mac.tsv", "Go.\tVa !\rHi.\tSalut !\r")
    message = r"mac\.tsv:1: a carriage return that ends no line at column 9"
    with pytest.raises(CorpusError, match=message):
        read_tsv(mac)
    stray = write_file(tmp_path / "a.en", "one\r\ntw\ro\r\n")
    with pytest.raises(CorpusError, match=r"a\.en:2: a carriage return .* at column 3"):
        read_lines(stray)
    # CRLF, and a CR that ends the file's last line, are line ends.
    assert read_lines(write_file(tmp_path / "b.en", "one\r\ntwo\r")) == ["one", "two"]


def test_stdin_to_translate_keeps_nul_bytes_and_lone_carriage_returns():
    assert input_lines(io.BytesIO(b"a\0b\r\nc\rd\n")) == ["a\0b", "c\rd"]


def test_a_file_of_a_byte_order_mark_alone_has_no_lines(tmp_path):
    # What an editor saves for an empty file "with BOM": its partner, empty, has no line either.
    pairs, report = read_parallel(
        write_file(tmp_path / "a.en", b"\xef\xbb\xbf"), write_file(tmp_path / "a.de.gz", b"")
    )
    assert (pairs, report.read) == ([], 0)
    assert read_lines(write_file(tmp_path / "b.en", b"\xef\xbb\xbf\n")) == [""]
    assert input_lines(io.BytesIO(b"\xef\xbb\xbf")) == []


@pytest.mark.parametrize(
    ("text", "line", "found", "first"),
    [
        ("Go.\tVa !\nHi.\tSalut\tmon ami\n", 2, 3, 1),  # a tab inside a sentence cuts it short
        ("Go.\tVa !\tCC #1\nHi.\tSalut !\n", 2, 2, 1),  # the attribution missing
        ("\n \t \nGo.\tVa !\nHi.\tSalut\tmon ami\n", 4, 3, 3),  # blank lines set no width
    ],
)
def test_a_tsv_line_with_more_or_fewer_fields_than_the_first_is_refused(
    tmp_path, text, line, found, first
):
    path = write_file(tmp_path / "a.tsv", text)
    with pytest.raises(CorpusError, match=rf"a\.tsv:{line}: {found} fields where line {first} has"):
        read_tsv(path)


# --- What they found: preparing a corpus -----------------------------------------------------


def _config(prefix: Path, tokenizer: str) -> DataConfig:
    return DataConfig(
        task="corpus",
        train=str(prefix),
        tokenizer=tokenizer,
        spm_vocab_size=50,
        cache=False,
        workers=1,
    )


@pytest.mark.parametrize("tokenizer", ["moses", "sentencepiece"])
def test_a_corpus_without_a_pair_is_refused_naming_its_files(tmp_path, tokenizer):
    # SentencePiece used to fail with an internal error that named no file.
    src, tgt = write_file(tmp_path / "c.en", " \n\n"), write_file(tmp_path / "c.de", "ein Hund\n\n")
    with pytest.raises(ValueError) as info:
        prepare_text(_config(tmp_path / "c", tokenizer), seed=0, progress=False)
    assert f"{src} + {tgt}: no pair is left to train on of the 2 lines read (2 empty" in str(
        info.value
    )


@pytest.mark.parametrize(
    ("english", "german"),
    [
        ("a dog\n", "Hund " * 1000),  # SentencePiece skips sentences over 4192 bytes
        ("a dog\na cat\n", "\u200b\n\u200b \u200b\n"),  # it normalises zero-width spaces away
    ],
)
def test_a_side_sentencepiece_cannot_learn_is_refused_naming_the_corpus(tmp_path, english, german):
    # It used to fail with SentencePiece's internal error, a RuntimeError naming no file.
    src, tgt = write_file(tmp_path / "c.en", english), write_file(tmp_path / "c.de", german)
    with pytest.raises(ValueError) as info:
        prepare_text(_config(tmp_path / "c", "sentencepiece"), seed=0, progress=False)
    assert f"{src} + {tgt}, the de side: SentencePiece cannot learn from it" in str(info.value)


# --- What they found: the translate command --------------------------------------------------


def test_translate_writes_utf8_where_the_locale_cannot_hold_the_output(toy_run, monkeypatch):
    lines = ["the big cat sleeps", "", "a dog runs"]
    translator = open_translator(load_checkpoint(toy_run))
    expected = [hyps[0].text for hyps in translator.translate(lines, beam_size=1)]
    assert any(not text.isascii() for text in expected)  # "schläft", "läuft", "großer"
    stdout = io.TextIOWrapper(io.BytesIO(), encoding="ascii")  # as in an ASCII locale
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO("\n".join(lines).encode())))
    monkeypatch.setattr("sys.stdout", stdout)
    assert main(["translate", str(toy_run), "--beam", "1"]) == 0
    stdout.flush()
    assert stdout.buffer.getvalue().decode("utf-8").split("\n") == [*expected, ""]
