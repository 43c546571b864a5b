"""The `alignmt` command in-process: config handling, train, translate."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
import torch
import yaml

from alignmt.cli import main

TINY = [
    *("train.steps=150", "train.lr=1e-2", "train.log_every=50"),
    *("data.min_len=2", "data.max_len=4"),
    *("model.emb_dim=16", "model.enc_hidden=32", "model.dec_hidden=64"),
]


def stdin(text: str | bytes) -> io.TextIOWrapper:
    """A standard input holding `text`, with the binary `.buffer` that translate reads."""
    return io.TextIOWrapper(io.BytesIO(text.encode() if isinstance(text, str) else text))


def test_print_config_shows_the_file_with_overrides_applied(capsys):
    assert main(["train", "configs/reverse_vanilla.yaml", "train.lr=5e-4", "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["model"]["attention"] == "none"
    assert printed["train"]["lr"] == 5e-4
    assert printed["out_dir"] == "runs/reverse_vanilla"


def test_a_misspelt_key_is_an_error_that_suggests_the_right_one(capsys):
    assert main(["train", "configs/reverse.yaml", "train.learnign_rate=5e-4"]) == 2
    err = capsys.readouterr().err
    assert "unknown key 'train.learnign_rate'" in err and "did you mean 'train.lr'" in err


def test_demo_flags_are_validated_before_any_work(capsys):
    for flags, said in (
        (["--lengths", "9-3"], "MIN must not exceed MAX"),
        (["--lengths", "x-4"], "expected an integer"),
        (["--eval-lengths", "3,0"], "must be at least 1"),
    ):
        with pytest.raises(SystemExit) as stop:
            main(["demo", *flags])
        assert stop.value.code == 2 and said in capsys.readouterr().err
    assert main(["demo", "model.dropout=2"]) == 2  # overrides go through the config's checks
    assert "model.dropout: must be in [0, 1)" in capsys.readouterr().err


def test_a_trained_run_folder_translates_stdin_line_by_line(tmp_path, capsys, monkeypatch, caplog):
    run = tmp_path / "run"
    assert main(["train", "configs/reverse.yaml", f"out_dir={run}", *TINY]) == 0
    assert "final loss" in capsys.readouterr().out
    monkeypatch.setattr("sys.stdin", stdin("abc\nbad\n\nXyz\n"))
    assert main(["translate", str(run)]) == 0
    captured = capsys.readouterr()
    lines = captured.out.split("\n")[:-1]
    assert len(lines) == 4  # one output per input line, the empty one included
    assert lines[:2] == ["cba", "dab"]
    assert "not in the vocabulary, read as <unk>: line 4: 'X'" in caplog.text
    # Text from the wild: a byte order mark, CRLF, invalid UTF-8, no final newline. Each line
    # still gets exactly one output line, the bad one with a warning that names it.
    monkeypatch.setattr("sys.stdin", stdin(b"\xef\xbb\xbfabc\r\nab\xffc\r\n\r\nbad"))
    assert main(["translate", str(run)]) == 0
    lines = capsys.readouterr().out.split("\n")[:-1]
    assert len(lines) == 4
    assert lines[0] == "cba" and lines[3] == "dab"  # no BOM token, no "\r" reversed in front
    assert "stdin:2: invalid UTF-8 (byte 0xff at column 3)" in caplog.text
    for flag in ("--batch-size", "--beam", "--nbest"):
        for bad in ("-1", "0", "x"):
            with pytest.raises(SystemExit) as usage:  # argparse: before any work starts
                main(["translate", str(run), flag, bad])
            assert usage.value.code == 2
            assert f"argument {flag}" in capsys.readouterr().err


def test_translate_refuses_an_over_long_line_by_number_before_translating_any(
    toy_run, capsys, monkeypatch
):
    monkeypatch.setattr("alignmt.decoding.translator.Translator.translate_tokens", _no_decoding)
    monkeypatch.setattr("sys.stdin", stdin("a dog\n" + "dog " * 201 + "\nthe cat\n"))
    assert main(["translate", str(toy_run)]) == 2
    said = capsys.readouterr()
    assert said.out == ""  # nothing translated, nothing dropped
    assert "stdin:2: 201 source tokens, over --max-source-tokens 200" in said.err
    monkeypatch.setattr("sys.stdin", stdin("a dog runs\nthe cat\n"))
    assert main(["translate", str(toy_run), "--max-source-tokens", "2"]) == 2
    assert "stdin:1: 3 source tokens, over --max-source-tokens 2" in capsys.readouterr().err


def _no_decoding(*args, **kwargs):
    pytest.fail("decoding started before the input was checked")


def test_translating_a_folder_without_a_model_names_it(tmp_path, capsys):
    assert main(["translate", str(tmp_path)]) == 2
    assert str(tmp_path) in capsys.readouterr().err


@pytest.mark.parametrize("argv", [[], ["fly"]])
def test_a_missing_or_unknown_command_is_a_usage_error(argv):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2


# --- real-text commands on the toy corpus run -----------------------------------------------


def _toy_test_set(folder):
    (folder / "t.en").write_text("a red dog runs\nthe cat sleeps\n\nsmall dog\n")
    (folder / "t.de").write_text("ein roter hund läuft .\nder katze schläft .\n\nkleiner hund .\n")
    return str(folder / "t.en"), str(folder / "t.de")


def test_translate_prints_nbest_tab_joined_and_keeps_blank_lines(toy_run, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", stdin("a dog runs\n\nthe cat\n"))
    assert main(["translate", str(toy_run), "--beam", "3", "--nbest", "2"]) == 0
    lines = capsys.readouterr().out.split("\n")[:-1]
    assert len(lines) == 3 and lines[1] == "\t"
    assert len(lines[0].split("\t")) == 2 and lines[0].split("\t")[0].startswith("ein")


def test_translate_alignment_prints_the_apis_pharaoh_pairs_after_a_tab(
    toy_run, capsys, monkeypatch
):
    from alignmt.checkpoint.torch_io import load_checkpoint
    from alignmt.decoding.door import open_translator

    monkeypatch.setattr("sys.stdin", stdin("a dog runs\n\nthe big cat sleeps\n"))
    assert main(["translate", str(toy_run), "--beam", "1", "--alignment"]) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.split("\n")[:-1]]
    ckpt = load_checkpoint(toy_run)
    search = ckpt.config.search.__class__(**{**vars(ckpt.config.search), "beam_size": 1})
    expected = open_translator(ckpt, search=search).translate(["a dog runs", "the big cat sleeps"])
    assert lines[1] == ["", ""]  # a blank line keeps its place
    for (text, alignment), [t] in zip([lines[0], lines[2]], expected, strict=True):
        assert (text, alignment) == (t.text, t.alignment)
        pairs = [tuple(map(int, pair.split("-"))) for pair in alignment.split()]
        assert [i for _, i in pairs] == list(range(len(t.tokens) - 1))  # every word but </s>
    # the toy corpus's Moses tokens are words: --alignment words prints the same pairs
    monkeypatch.setattr("sys.stdin", stdin("a dog runs\n\nthe big cat sleeps\n"))
    assert main(["translate", str(toy_run), "--beam", "1", "--alignment", "words"]) == 0
    assert [line.split("\t") for line in capsys.readouterr().out.split("\n")[:-1]] == lines


def test_serve_has_a_flag_for_every_limit(capsys):
    from dataclasses import fields

    from alignmt.answers.limits import Limits

    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    usage = capsys.readouterr().out
    for limit in fields(Limits):
        assert "--" + limit.name.replace("_", "-") in usage


def test_serve_refuses_impossible_limits_and_missing_folders(tmp_path, capsys):
    for flag, value, said in (
        ("--max-beam", "0", "must be at least 1"),
        ("--deadline", "nan", "must be a finite number above 0"),
        ("--port", "70000", "at most 65535"),
    ):
        with pytest.raises(SystemExit) as stop:
            main(["serve", str(tmp_path), flag, value])
        assert stop.value.code == 2 and said in capsys.readouterr().err
    assert main(["serve", str(tmp_path), "--max-queue", "8"]) == 2  # under max_sentences
    assert "max_queue (8) must hold one full request" in capsys.readouterr().err
    assert main(["serve", str(tmp_path / "none")]) == 2
    assert "no checkpoint" in capsys.readouterr().err


def test_nbest_larger_than_the_beam_is_an_error(toy_run, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", stdin("a dog\n"))
    assert main(["translate", str(toy_run), "--beam", "2", "--nbest", "3"]) == 2
    assert "--nbest" in capsys.readouterr().err


def test_evaluate_scores_buckets_plots_heatmaps_and_dumps_attention(toy_run, tmp_path, capsys):
    src, ref = _toy_test_set(tmp_path)
    out, attention = tmp_path / "eval", tmp_path / "align.json"
    argv = [
        "evaluate",
        str(toy_run),
        "--src",
        src,
        "--ref",
        ref,
        "--out",
        str(out),
        "--heatmaps",
        "1,4",
        "--attention",
        str(attention),
        "--sentence-bleu",
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "BLEU lc signature: nrefs:1|case:lc" in printed and "< 10" in printed
    assert "a red dog runs => [" in printed and "bleu " in printed
    scores = json.loads((out / "scores.json").read_text())
    assert scores["bleu_lowercased"]["sentences"] == 4
    assert (out / "hyps.txt").read_text().split("\n")[2] == ""  # the blank line stays blank
    for name in ("buckets.png", "bleu_by_length.png", "heatmap_1.png", "heatmap_4.png"):
        assert (out / name).stat().st_size > 0
    rows = json.loads(attention.read_text())
    assert rows[0]["source"] == ["a", "red", "dog", "runs", "</s>"]
    assert len(rows[0]["attention"]) == len(rows[0]["output"])
    assert len(rows[0]["attention"][0]) == 5


def test_bad_heatmap_lines_are_refused_before_the_test_set_is_translated(
    toy_run, tmp_path, capsys, monkeypatch
):
    src, ref = _toy_test_set(tmp_path)
    argv = ["evaluate", str(toy_run), "--src", src, "--ref", ref, "--heatmaps"]
    with pytest.raises(SystemExit) as usage:
        main([*argv, "abc"])
    assert usage.value.code == 2 and "argument --heatmaps" in capsys.readouterr().err
    monkeypatch.setattr(
        "alignmt.cli.evaluate.translate_and_score", lambda *args: pytest.fail("translated")
    )
    assert main([*argv, "2,9"]) == 2
    assert "--heatmaps: the test set has 4 lines, not 9" in capsys.readouterr().err


def test_evaluate_names_both_files_when_their_line_counts_differ(toy_run, tmp_path, capsys):
    src, _ = _toy_test_set(tmp_path)
    (tmp_path / "short.de").write_text("ein hund .\n")
    assert main(["evaluate", str(toy_run), "--src", src, "--ref", str(tmp_path / "short.de")]) == 2
    err = capsys.readouterr().err
    assert "t.en has 4 lines" in err and "short.de has 1" in err


def test_evaluate_without_a_test_set_says_how_to_give_one(toy_run, capsys):
    assert main(["evaluate", str(toy_run)]) == 2
    assert "pass --src and --ref" in capsys.readouterr().err


def test_compare_scores_every_run_on_one_test_set_with_plots(toy_run, tmp_path, capsys):
    src, ref = _toy_test_set(tmp_path)
    out = tmp_path / "cmp"
    argv = ["compare", str(toy_run), str(toy_run), "--src", src, "--ref", ref, "--out", str(out)]
    assert main([*argv, "--beam", "1"]) == 0
    printed = capsys.readouterr().out
    # one row per run in the scores and bucket tables, and the second run in the table of
    # how far it trails the first; the second run of the same name goes by its path
    assert printed.count(f"| {toy_run} |") == 3 and printed.count("| run | ") == 5
    assert "0.0 (100%)" in printed  # the same model trails itself by nothing
    assert len(json.loads((out / "scores.json").read_text())) == 2
    assert (out / "buckets.png").stat().st_size > 0


def test_train_resume_continues_a_run_to_its_last_step(tmp_path, capsys):
    run = tmp_path / "run"
    first = [
        "train",
        "configs/reverse.yaml",
        f"out_dir={run}",
        *TINY[1:],
        "train.steps=20",
        "train.eval_every=10",
    ]
    assert main(first) == 0
    before = (run / "metrics.jsonl").read_text()
    assert main([*first[:-2], "train.steps=40", "train.eval_every=10", "--resume"]) == 0
    assert "trained to step 40" in capsys.readouterr().out
    # Continued, not retrained: the first 20 steps ran on a 20-step cosine, and their record
    # stays; a fresh 40-step run logs another loss at step 20.
    after = (run / "metrics.jsonl").read_text()
    assert after.startswith(before) and len(after.splitlines()) == len(before.splitlines()) + 1
    fresh = tmp_path / "fresh"
    assert (
        main(["train", "configs/reverse.yaml", f"out_dir={fresh}", *TINY[1:], "train.steps=40"])
        == 0
    )
    first_fresh = (fresh / "metrics.jsonl").read_text().splitlines()[0]
    assert json.loads(first_fresh)["loss"] != json.loads(before.splitlines()[0])["loss"]


# --- devices and precisions -----------------------------------------------------------------

NO_CUDA = (
    "error: --device=cuda, but torch sees no CUDA device (torch.cuda.is_available() is False); "
    "use auto or cpu\n"
)
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")


@no_gpu
@pytest.mark.parametrize("command", ["translate", "evaluate", "serve", "explore", "compare"])
def test_cuda_without_a_gpu_is_a_one_line_error_before_any_work(
    command, toy_run, tmp_path, capsys, monkeypatch
):
    monkeypatch.setattr("sys.stdin", stdin("a dog\n"))
    src, ref = _toy_test_set(tmp_path)
    extra = {
        "evaluate": ["--src", src, "--ref", ref, "--out", str(tmp_path / "eval")],
        "explore": ["--input", src, "--out", str(tmp_path / "page.html")],
        "compare": ["--src", src, "--ref", ref, "--out", str(tmp_path / "compare")],
    }.get(command, [])
    assert main([command, str(toy_run), "--device", "cuda", *extra]) == 2
    assert capsys.readouterr() == ("", NO_CUDA)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["t.de", "t.en"]  # no output


@no_gpu
def test_the_demo_refuses_cuda_without_a_gpu_before_it_trains(tmp_path, capsys):
    assert main(["demo", "--device", "cuda", "--out", str(tmp_path / "demo")]) == 2
    assert capsys.readouterr() == ("", NO_CUDA)
    assert not (tmp_path / "demo").exists()


@no_gpu
def test_the_command_itself_exits_2_with_the_line_and_no_traceback(toy_run):
    run = subprocess.run(
        [sys.executable, "-m", "alignmt", "translate", str(toy_run), "--device", "cuda"],
        input="a dog\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (run.returncode, run.stdout, run.stderr) == (2, "", NO_CUDA)


def test_an_unknown_device_names_the_forms_there_are(toy_run, capsys):
    assert main(["translate", str(toy_run), "--device", "gpu"]) == 2
    assert capsys.readouterr().err == "error: --device=gpu: expected auto, cpu, cuda or cuda:N\n"


def test_bfloat16_translates_on_the_cpu_as_float32_does_on_the_toy_run(
    toy_run, capsys, monkeypatch
):
    lines = "a red dog runs\nthe small cat sleeps now\n\nbig cat\n"
    outputs = {}
    for precision in ("float32", "bfloat16"):
        monkeypatch.setattr("sys.stdin", stdin(lines))
        argv = ["translate", str(toy_run), "--device", "cpu", "--precision", precision]
        assert main(argv) == 0
        outputs[precision] = capsys.readouterr().out
    assert outputs["bfloat16"] == outputs["float32"]
    assert len(outputs["bfloat16"].split("\n")) == 5 and outputs["bfloat16"].startswith("ein ")


def test_an_unknown_precision_is_a_usage_error(toy_run, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["translate", str(toy_run), "--precision", "float16"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'float16'" in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["truncated", "empty", "garbage"])
def test_a_damaged_model_file_is_named_not_a_traceback(toy_run, tmp_path, capsys, damage):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(toy_run, run)
    weights = run / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(
        {"truncated": data[: len(data) // 2], "empty": b"", "garbage": b"x" * 99}[damage]
    )
    for argv in (["translate", str(run)], ["evaluate", str(run)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{weights}: not a readable checkpoint" in err and "Traceback" not in err


def test_translate_constraints_place_phrases_and_name_a_bad_line(
    toy_run, tmp_path, capsys, monkeypatch
):
    text = "a dog runs\n\nthe big cat sleeps\n"
    monkeypatch.setattr("sys.stdin", stdin(text))
    assert main(["translate", str(toy_run), "--beam", "3"]) == 0
    plain = capsys.readouterr().out.split("\n")[:-1]
    assert "katze" not in plain[0].split() and "hund" in plain[0].split()
    given = tmp_path / "c.jsonl"
    given.write_text('{"include": ["katze"], "exclude": ["hund"]}\n\n{"include": ["ein"]}\n')
    monkeypatch.setattr("sys.stdin", stdin(text))
    assert (
        main(["translate", str(toy_run), "--beam", "3", "--constraints", str(given), "--jsonl"])
        == 0
    )
    first, blank, third = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    tokens = first[0]["tokens"]
    assert "katze" in tokens and "hund" not in tokens and first[0]["met"] == [True]
    assert blank[0]["text"] == "" and third[0]["met"] == [True] and "ein" in third[0]["tokens"]

    for lines, said in (
        ('{"include": ["katze"]}\n', "c.jsonl: 1 lines for 3 input lines"),
        ('\n{"include": "katze"}\n\n', "c.jsonl:2: 'include' must be a list of strings"),
        ('\n\n{"include": [katze]}\n', "c.jsonl:3: not JSON"),
        ('{"must": ["katze"]}\n\n\n', "c.jsonl:1: unknown keys ['must']"),
        ('\n{"include": ["zebraquagga"]}\n\n', "c.jsonl:2: include phrase 'zebraquagga': tokens"),
        ('{"exclude": ["  "]}\n\n\n', "c.jsonl:1: 'exclude' holds a blank phrase"),
    ):
        given.write_text(lines)
        monkeypatch.setattr("sys.stdin", stdin(text))
        assert main(["translate", str(toy_run), "--constraints", str(given)]) == 2
        assert said in capsys.readouterr().err
    given.write_bytes(b'{"include": ["k\xe4tze"]}\n\n\n')
    monkeypatch.setattr("sys.stdin", stdin(text))
    assert main(["translate", str(toy_run), "--constraints", str(given)]) == 2
    assert "c.jsonl:1: not UTF-8" in capsys.readouterr().err
    for flags, said in ((["--sample"], "cannot be sampled"),):
        monkeypatch.setattr("sys.stdin", stdin(text))
        assert main(["translate", str(toy_run), "--constraints", str(given), *flags]) == 2
        assert said in capsys.readouterr().err


def test_warnings_are_said_as_errors_are_said(toy_run):
    """`warning: ...`, as `error: ...`, not logging's default `WARNING:name:...`."""
    command = [sys.executable, "-m", "alignmt", "translate", str(toy_run)]
    run = subprocess.run(command, input="the zzz dog\n", capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stderr.startswith("warning: source tokens not in the vocabulary"), run.stderr
