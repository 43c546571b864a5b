"""The `alignmt` command in-process: config handling, train, translate."""

from __future__ import annotations

import io

import pytest
import yaml

from alignmt.cli import main

TINY = [
    *("train.steps=150", "train.lr=1e-2", "train.log_every=50"),
    *("data.min_len=2", "data.max_len=4"),
    *("model.emb_dim=16", "model.enc_hidden=32", "model.dec_hidden=64"),
]


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


def test_demo_flags_are_validated_like_config_values(capsys):
    assert main(["demo", "--lengths", "9-3"]) == 2
    assert "min_len" in capsys.readouterr().err


def test_a_trained_run_folder_translates_stdin_line_by_line(tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    assert main(["train", "configs/reverse.yaml", f"out_dir={run}", *TINY]) == 0
    assert "final loss" in capsys.readouterr().out
    monkeypatch.setattr("sys.stdin", io.StringIO("abc\nbad\n\nXyz\n"))
    assert main(["translate", str(run)]) == 0
    captured = capsys.readouterr()
    lines = captured.out.split("\n")[:-1]
    assert len(lines) == 4  # one output per input line, the empty one included
    assert lines[:2] == ["cba", "dab"]
    assert "stdin line 4: 'X' not in the model's vocabulary" in captured.err


def test_translating_a_folder_without_a_model_names_it(tmp_path, capsys):
    assert main(["translate", str(tmp_path)]) == 2
    assert str(tmp_path) in capsys.readouterr().err


@pytest.mark.parametrize("argv", [[], ["fly"]])
def test_a_missing_or_unknown_command_is_a_usage_error(argv):
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
