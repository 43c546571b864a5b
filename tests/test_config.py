"""Tests for config.py: precedence, coercion from declared types, and loud errors."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from alignmt.config import (
    Config,
    ConfigError,
    DataConfig,
    ModelConfig,
    TrainConfig,
    apply_overrides,
    config_from_dict,
    config_to_dict,
    dump_config,
    load_config,
)

CONFIGS = Path(__file__).parents[1] / "configs"


def raises(message: str):
    """pytest.raises for a ConfigError whose message contains `message` literally."""
    return pytest.raises(ConfigError, match=re.escape(message))


@pytest.fixture
def write_yaml(tmp_path):
    def write(text: str, name: str = "cfg.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write


def test_defaults_round_trip_through_yaml_unchanged():
    cfg = Config()
    assert config_from_dict(yaml.safe_load(dump_config(cfg))) == cfg


def test_non_default_config_round_trips_through_yaml_unchanged():
    cfg = Config(
        model=ModelConfig(rnn="lstm", bidirectional=True, attention="none", dropout=0.25),
        train=TrainConfig(lr=5e-4, steps=7),
        seed=3,
        out_dir="runs/x",
    )
    assert config_from_dict(yaml.safe_load(dump_config(cfg))) == cfg


def test_dump_keeps_field_order_not_alphabetical():
    top_keys = list(yaml.safe_load(dump_config(Config())))
    assert top_keys == ["model", "data", "train", "search", "seed", "out_dir"]


def test_config_to_dict_is_plain_nested_dicts():
    data = config_to_dict(Config())
    assert type(data["model"]) is dict
    assert data["train"]["lr"] == 3e-3


def test_empty_yaml_file_means_defaults(write_yaml):
    assert load_config(write_yaml("")) == Config()


def test_yaml_section_with_every_key_commented_out_means_defaults(write_yaml):
    assert load_config(write_yaml("train:\n  # steps: 10\nseed: 2\n")) == Config(seed=2)


def test_partial_yaml_changes_only_its_keys(write_yaml):
    path = write_yaml("train:\n  steps: 10\nseed: 7\n")
    expected = Config(train=TrainConfig(steps=10), seed=7)
    assert load_config(path) == expected


def test_cli_overrides_beat_yaml(write_yaml):
    path = write_yaml("train:\n  lr: 0.1\n  steps: 10\n")
    cfg = load_config(path, ["train.lr=5e-4", "model.bidirectional=true", "seed=3"])
    assert cfg.train.lr == 5e-4
    assert cfg.train.steps == 10  # from the file, untouched by the overrides
    assert cfg.model.bidirectional is True
    assert cfg.seed == 3


def test_later_override_beats_earlier_one():
    assert load_config(None, ["seed=3", "seed=4"]).seed == 4


def test_override_may_repair_what_the_file_alone_got_wrong(write_yaml):
    path = write_yaml("data:\n  min_len: 20\n")
    assert load_config(path, ["data.max_len=30"]).data == DataConfig(min_len=20, max_len=30)


def test_reverse_yaml_is_the_defaults_written_out():
    assert load_config(CONFIGS / "reverse.yaml") == Config(out_dir="runs/reverse")


def test_reverse_yaml_writes_out_every_key():
    written = yaml.safe_load((CONFIGS / "reverse.yaml").read_text(encoding="utf-8"))
    assert written == config_to_dict(Config(out_dir="runs/reverse"))


def test_reverse_vanilla_yaml_has_no_attention():
    cfg = load_config(CONFIGS / "reverse_vanilla.yaml")
    assert cfg.model.attention == "none"
    assert cfg.out_dir == "runs/reverse_vanilla"


def test_unknown_key_names_the_file_and_suggests_the_real_one(write_yaml):
    path = write_yaml("train:\n  learnign_rate: 5e-4\n")
    with raises(f"{path}: unknown key 'train.learnign_rate'; did you mean 'train.lr'?"):
        load_config(path)


def test_unknown_top_level_key_suggests_a_close_match():
    with raises("command line: unknown key 'sed'; did you mean 'seed'"):
        load_config(None, ["sed=3"])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("train.steps=ten", "command line: train.steps: expected an integer, got 'ten'"),
        ("train.steps=2.5", "train.steps: expected an integer"),
        ("model.emb_dim=true", "model.emb_dim: expected an integer"),
        ("train.lr=fast", "train.lr: expected a finite number"),
        ("train.lr=nan", "train.lr: expected a finite number"),
        ("model.bidirectional=maybe", "model.bidirectional: expected true or false, got 'maybe'"),
        (
            "model.attention=adittive",
            "command line: model.attention: 'adittive' is not one of additive, dot, general, "
            "concat, scaled_dot, none; did you mean 'additive'?",
        ),
    ],
)
def test_bad_override_value_is_an_error_naming_the_key(override, message):
    with raises(message):
        load_config(None, [override])


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("train:\n  steps: ten\n", "train.steps: expected an integer"),
        ("train:\n  steps: true\n", "train.steps: expected an integer, got True"),
        ("train:\n  lr: true\n", "train.lr: expected a finite number"),
        ("model:\n  bidirectional: 1\n", "model.bidirectional: expected true or false"),
        ("model:\n  rnn: GRU\n", "model.rnn: 'GRU' is not one of gru, lstm; did you mean 'gru'"),
        ("out_dir: 3\n", "out_dir: expected a string, got 3"),
        ("train:\n  lr:\n    peak: 0.1\n", "train.lr: expected a finite number"),
    ],
)
def test_bad_yaml_value_is_an_error_naming_file_and_key(write_yaml, text, message):
    path = write_yaml(text)
    with raises(f"{path}: {message}"):
        load_config(path)


def test_yaml_exponent_without_dot_coerces_to_float(write_yaml):
    path = write_yaml("train:\n  lr: 5e-4\n")
    assert yaml.safe_load(path.read_text())["train"]["lr"] == "5e-4"  # PyYAML 1.1 gives a str
    lr = load_config(path).train.lr
    assert type(lr) is float
    assert lr == 5e-4


def test_integral_values_coerce_to_int_fields(write_yaml):
    path = write_yaml("train:\n  steps: 1e4\n  batch_size: 32.0\n")
    assert load_config(path).train == TrainConfig(steps=10_000, batch_size=32)


def test_int_values_coerce_to_float_fields(write_yaml):
    lr = load_config(write_yaml("train:\n  lr: 1\n")).train.lr
    assert type(lr) is float


@pytest.mark.parametrize(
    ("text", "expected"), [("true", True), ("YES", True), ("1", True), ("False", False)]
)
def test_bool_fields_accept_the_usual_spellings_from_the_command_line(text, expected):
    cfg = load_config(None, [f"model.bidirectional={text}"])
    assert cfg.model.bidirectional is expected


def test_override_without_equals_sign_is_an_error_naming_it():
    with raises("command line: override 'train.lr' "):
        load_config(None, ["train.lr"])


def test_apply_overrides_does_not_mutate_its_input():
    cfg = Config()
    new = apply_overrides(cfg, ["train.lr=5e-4", "seed=9"])
    assert cfg == Config()
    assert (new.train.lr, new.seed) == (5e-4, 9)
    new.model.dropout = 0.5  # untouched sections are copies too, not shared
    assert cfg.model.dropout == 0.0


def test_apply_overrides_checks_ranges():
    with raises("command line: data.min_len: must not exceed"):
        apply_overrides(Config(), ["data.min_len=11"])


def test_min_len_above_max_len_is_an_error(write_yaml):
    path = write_yaml("data:\n  min_len: 12\n  max_len: 5\n")
    with raises(f"{path}: data.min_len: must not exceed data.max_len (5), got 12"):
        load_config(path)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("model.emb_dim=0", "model.emb_dim: must be at least 1, got 0"),
        ("model.enc_layers=0", "model.enc_layers: must be at least 1"),
        ("train.steps=-1", "train.steps: must be at least 1"),
        ("train.batch_size=0", "train.batch_size: must be at least 1"),
        ("model.dropout=1", "model.dropout: must be in [0, 1)"),
        ("train.lr=0", "train.lr: must be positive"),
    ],
)
def test_senseless_ranges_are_errors_naming_the_key(override, message):
    with raises(f"command line: {message}"):
        load_config(None, [override])


def test_zero_warmup_is_allowed():
    assert load_config(None, ["train.warmup_steps=0"]).train.warmup_steps == 0


def test_config_from_dict_names_its_source():
    with raises("ckpt.pt: unknown key 'model.atention'"):
        config_from_dict({"model": {"atention": "dot"}}, source="ckpt.pt")


def test_config_from_dict_checks_ranges():
    with raises("ckpt.pt: train.lr: must be positive"):
        config_from_dict({"train": {"lr": -1.0}}, source="ckpt.pt")


def test_config_from_dict_restores_a_stored_config():
    stored = config_to_dict(replace(Config(), seed=5))
    assert config_from_dict(stored).seed == 5


def test_section_given_a_scalar_is_an_error(write_yaml):
    path = write_yaml("train: 3\n")
    with raises(f"{path}: train: expected a mapping"):
        load_config(path)


def test_top_level_yaml_list_is_an_error(write_yaml):
    path = write_yaml("- seed\n")
    with raises(f"{path}: expected a mapping"):
        load_config(path)


def test_missing_file_error_names_the_path(tmp_path):
    path = tmp_path / "nope.yaml"
    with raises(f"{path}: cannot read config file"):
        load_config(path)


def test_yaml_syntax_error_names_file_and_line(write_yaml):
    path = write_yaml("seed: 1\ntrain:\n  lr: 0.1\n   steps: 3\n")
    with raises(f"{path}, line 4: invalid YAML: mapping values are not allowed here"):
        load_config(path)
