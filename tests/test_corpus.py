from __future__ import annotations

import logging

import pytest

from alignmt.text.corpus import (
    CorpusError,
    Pair,
    ReadReport,
    read_lines,
    read_parallel,
    read_tsv,
    stream_parallel,
    stream_tsv,
)
from tests.conftest import SHARED, needs_shared_data, write_file

# --- read_lines ---------------------------------------------------------------------------


def test_gzipped_and_plain_files_read_the_same(tmp_path):
    text = "ein Hund\nzwei Katzen läuft\n\ndrei\n"
    plain = read_lines(write_file(tmp_path / "a.de", text))
    assert plain == ["ein Hund", "zwei Katzen läuft", "", "drei"]
    assert read_lines(write_file(tmp_path / "a.de.gz", text)) == plain


def test_crlf_endings_are_removed_and_a_missing_final_newline_loses_nothing(tmp_path):
    assert read_lines(write_file(tmp_path / "a.txt", "one\r\ntwo\r\nthree")) == [
        "one",
        "two",
        "three",
    ]


def test_utf8_bom_is_removed_from_the_first_line_only(tmp_path):
    path = write_file(tmp_path / "a.txt", "\ufeffHello\n\ufeffkept\n")
    assert read_lines(path) == ["Hello", "\ufeffkept"]


def test_invalid_utf8_names_the_file_line_and_column(tmp_path):
    path = write_file(tmp_path / "bad.en", b"fine\nalso fine\nca\xffe\nlater\n")
    with pytest.raises(CorpusError, match=r"bad\.en:3: invalid UTF-8 \(byte 0xff at column 3\)"):
        read_lines(path)


def test_invalid_utf8_inside_a_gzip_file_names_the_line(tmp_path):
    path = write_file(tmp_path / "bad.en.gz", b"a\nb\n\xc3(\n")
    with pytest.raises(CorpusError, match=r"bad\.en\.gz:3: invalid UTF-8"):
        read_lines(path)


def test_unicode_line_separators_inside_a_sentence_do_not_split_it(tmp_path):
    path = write_file(tmp_path / "a.txt", "one\u2028still one\ntwo\x85still two\nthree\n")
    assert read_lines(path) == ["one\u2028still one", "two\x85still two", "three"]


def test_missing_file_is_a_corpus_error_naming_the_path(tmp_path):
    with pytest.raises(CorpusError, match=r"nowhere\.en: no such file"):
        read_lines(tmp_path / "nowhere.en")


def test_directory_is_a_corpus_error_naming_the_path(tmp_path):
    with pytest.raises(CorpusError, match=f"{tmp_path}: is a directory"):
        read_lines(tmp_path)


def test_corrupt_gzip_is_a_corpus_error_naming_the_path(tmp_path):
    path = tmp_path / "a.en.gz"
    path.write_bytes(b"not gzip at all")
    with pytest.raises(CorpusError, match=r"a\.en\.gz:1: cannot read"):
        read_lines(path)


# --- read_parallel ------------------------------------------------------------------------


def test_parallel_files_give_stripped_pairs_located_by_the_source_file(tmp_path):
    src = write_file(tmp_path / "a.en.gz", "  A dog .\nTwo cats\n")
    tgt = write_file(tmp_path / "a.de.gz", "Ein Hund .\t\nZwei  Katzen\n")
    pairs, report = read_parallel(src, tgt)
    assert pairs == [
        Pair("A dog .", "Ein Hund .", f"{src}:1"),
        Pair("Two cats", "Zwei  Katzen", f"{src}:2"),
    ]
    assert report == ReadReport(path=f"{src} + {tgt}", read=2, kept=2, empty=[])
    assert report.summary() == f"{src} + {tgt}: 2 lines, 2 kept, 0 dropped as empty"


@pytest.mark.parametrize(("n_src", "n_tgt"), [(4, 3), (3, 4)])
def test_mismatched_counts_name_both_files_counts_and_first_unpartnered_line(
    tmp_path, n_src, n_tgt
):
    src = write_file(tmp_path / "train.en", "s\n" * n_src)
    tgt = write_file(tmp_path / "train.de", "t\n" * n_tgt)
    longer = src if n_src > n_tgt else tgt
    expected = f"{src} has {n_src} lines but {tgt} has {n_tgt}: line 4 of {longer} has no partner"
    with pytest.raises(CorpusError) as info:
        read_parallel(src, tgt)
    assert str(info.value) == expected


def test_pairs_with_an_empty_side_are_dropped_and_located(tmp_path, caplog):
    src = write_file(tmp_path / "a.en", "one\n\nthree\nfour\n  \nsix\n")
    tgt = write_file(tmp_path / "a.de", "eins\nzwei\ndrei\n\t\nfünf\nsechs\n")
    with caplog.at_level(logging.WARNING, logger="alignmt.text.corpus"):
        pairs, report = read_parallel(src, tgt)
    assert [(p.src, p.where) for p in pairs] == [
        ("one", f"{src}:1"),
        ("three", f"{src}:3"),
        ("six", f"{src}:6"),
    ]
    assert report.empty == [f"{src}:2", f"{src}:4", f"{src}:5"]
    assert (report.read, report.kept) == (6, 3)
    assert report.summary() in caplog.text
    assert f"3 dropped as empty ({src}:2, {src}:4, {src}:5)" in report.summary()


def test_summary_names_only_the_first_three_drops():
    report = ReadReport(path="x.tsv", read=9, kept=4, empty=[f"x.tsv:{i}" for i in range(1, 6)])
    assert report.summary() == (
        "x.tsv: 9 lines, 4 kept, 5 dropped as empty (x.tsv:1, x.tsv:2, x.tsv:3, and 2 more)"
    )


def test_nothing_dropped_logs_no_warning(tmp_path, caplog):
    src, tgt = write_file(tmp_path / "a.en", "a\n"), write_file(tmp_path / "a.de", "b\n")
    with caplog.at_level(logging.WARNING, logger="alignmt.text.corpus"):
        read_parallel(src, tgt)
    assert caplog.records == []


def test_a_stream_gives_rows_as_it_reads_and_names_a_bad_line_when_it_gets_there(tmp_path):
    src = write_file(tmp_path / "a.en", b"one\n\nthree\nfo\xffur\n")
    tgt = write_file(tmp_path / "a.de", "eins\nzwei\ndrei\nvier\n")
    stream = stream_parallel(src, tgt)
    assert (stream.origin, stream.files) == (src, (src, tgt))
    rows = iter(stream)
    assert [next(rows), next(rows)] == [(1, "one", "eins"), (3, "three", "drei")]
    assert (stream.report.read, stream.report.kept, stream.report.empty) == (3, 2, [f"{src}:2"])
    with pytest.raises(CorpusError, match=r"a\.en:4: invalid UTF-8"):
        next(rows)


def test_a_tsv_stream_reads_the_same_pairs_as_read_tsv(tmp_path):
    path = write_file(tmp_path / "a.tsv", "Go.\tVa !\n\nHi.\tSalut !\n")
    pairs, _ = read_tsv(path, src_column=1, tgt_column=0)
    stream = stream_tsv(path, src_column=1, tgt_column=0)
    assert [(p.src, p.tgt, p.where) for p in pairs] == [
        (src, tgt, f"{stream.origin}:{line}") for line, src, tgt in stream
    ]
    assert stream.report.summary() == f"{path}: 3 lines, 2 kept, 1 dropped as empty ({path}:2)"


# --- read_tsv -----------------------------------------------------------------------------


TSV = "Go.\tVa !\tCC-BY 2.0 #1\nHi.\tSalut !\tCC-BY 2.0 #2\n"


def test_tsv_gives_the_first_two_columns_and_ignores_attribution(tmp_path):
    path = write_file(tmp_path / "eng-fra.tsv", TSV)
    pairs, report = read_tsv(path)
    assert pairs == [Pair("Go.", "Va !", f"{path}:1"), Pair("Hi.", "Salut !", f"{path}:2")]
    assert (report.path, report.read, report.kept, report.empty) == (str(path), 2, 2, [])


def test_tsv_column_selection_swaps_direction(tmp_path):
    pairs, _ = read_tsv(write_file(tmp_path / "eng-fra.tsv", TSV), src_column=1, tgt_column=0)
    assert [(p.src, p.tgt) for p in pairs] == [("Va !", "Go."), ("Salut !", "Hi.")]


def test_tsv_line_without_a_tab_names_the_line(tmp_path):
    path = write_file(tmp_path / "a.tsv", "Go.\tVa !\nHi. Salut !\n")
    with pytest.raises(CorpusError, match=r"a\.tsv:2: expected source<TAB>target.*found 1 field"):
        read_tsv(path)


def test_tsv_line_with_too_few_columns_for_the_requested_ones_names_the_line(tmp_path):
    path = write_file(tmp_path / "a.tsv", "a\tb\tc\nd\te\n")
    with pytest.raises(CorpusError, match=r"a\.tsv:2: columns 2 and 0 asked for, found 2 fields"):
        read_tsv(path, src_column=2, tgt_column=0)


def test_tsv_blank_lines_and_empty_fields_are_dropped_with_their_location(tmp_path):
    path = write_file(tmp_path / "a.tsv", "Go.\tVa !\n\nHi.\t \n  \nRun!\tCours !\n")
    pairs, report = read_tsv(path)
    assert [p.where for p in pairs] == [f"{path}:1", f"{path}:5"]
    assert report.empty == [f"{path}:2", f"{path}:3", f"{path}:4"]


@pytest.mark.parametrize(("src_column", "tgt_column"), [(0, 0), (-1, 0)])
def test_tsv_rejects_equal_or_negative_columns(tmp_path, src_column, tgt_column):
    with pytest.raises(ValueError, match="src_column and tgt_column"):
        read_tsv(tmp_path / "unread.tsv", src_column=src_column, tgt_column=tgt_column)


# --- The shared corpora -------------------------------------------------------------------


@pytest.mark.needs_shared_data
@needs_shared_data
def test_multi30k_val_reads_1014_aligned_pairs():
    root = SHARED / "data" / "multi30k"
    pairs, report = read_parallel(root / "val.en.gz", root / "val.de.gz")
    assert (report.read, report.kept, report.empty) == (1014, 1014, [])
    assert pairs[0].src == read_lines(root / "val.en.gz")[0].strip()
    assert pairs[0].tgt == read_lines(root / "val.de.gz")[0].strip()
    assert pairs[-1].where == f"{root / 'val.en.gz'}:1014"


@pytest.mark.needs_shared_data
@needs_shared_data
def test_tatoeba_tsv_reads_5000_pairs():
    pairs, report = read_tsv(SHARED / "data" / "tatoeba" / "eng-fra.tsv")
    assert (report.read, report.kept, len(pairs)) == (5000, 5000, 5000)
    assert all("Attribution" not in p.tgt for p in pairs)
