"""Tests for config.py: precedence, coercion from declared types, and loud errors."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import reduce
from pathlib import Path

import pytest
import yaml

from alignmt.config import (
    _KEYS,
    AtLeast,
    Config,
    ConfigError,
    Count,
    DataConfig,
    ModelConfig,
    TrainConfig,
    apply_overrides,
    config_from_dict,
    config_to_dict,
    dump_config,
    load_config,
)
from alignmt.config_merge import check_rules, field_rules, merge

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
            "scaled_general, concat, scaled_dot, location, none; did you mean 'additive'?",
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


# Every field with a rule: a value it refuses, one it accepts, and the rule the error names.
# Grouped by the rule that each used to get from its key's name (a suffix, or the whole key),
# which each keeps at exactly its old strength.
RULED = [
    # Sizes and counts (_dim, hidden, layers, steps, _len, _size, batch_size, log_every,
    # accumulate), and three named one by one: at least 1
    ("model.emb_dim", 0, 1, "must be at least 1"),
    ("model.enc_hidden", 0, 1, "must be at least 1"),
    ("model.enc_layers", 0, 1, "must be at least 1"),
    ("model.dec_hidden", 0, 1, "must be at least 1"),
    ("model.dec_layers", 0, 1, "must be at least 1"),
    ("model.attn_dim", 0, 1, "must be at least 1"),
    ("model.window", 0, 1, "must be at least 1"),
    ("model.positions", 0, 1, "must be at least 1"),
    ("model.readout_dim", 0, 1, "must be at least 1"),
    ("data.min_len", 0, 1, "must be at least 1"),
    ("data.spm_vocab_size", 0, 1, "must be at least 1"),
    ("data.min_freq", 0, 1, "must be at least 1"),
    ("data.max_tokens", 0, 1, "must be at least 1"),
    ("train.steps", -1, 1, "must be at least 1"),
    ("train.max_bad_steps", 0, 1, "must be at least 1"),
    ("train.batch_size", 0, 1, "must be at least 1"),
    ("train.log_every", 0, 1, "must be at least 1"),
    ("train.accumulate", 0, 1, "must be at least 1"),
    ("train.plateau_patience", 0, 1, "must be at least 1"),
    ("search.beam_size", 0, 1, "must be at least 1"),
    # Counts and intervals whose 0 means none, all or off
    ("data.limit", -1, 0, "must not be negative"),
    ("data.max_vocab", -1, 2000, "must not be negative"),
    ("data.spm_sample", -1, 0, "must not be negative"),
    ("data.workers", -1, 0, "must not be negative"),
    ("train.minutes", -0.5, 0.0, "must not be negative"),
    ("train.batch_tokens", -1, 0, "must not be negative"),
    ("train.warmup_steps", -1, 0, "must not be negative"),
    ("train.eval_every", -1, 0, "must not be negative"),
    ("train.early_stop", -1, 0, "must not be negative"),
    ("train.threads", -1, 0, "must not be negative"),
    ("train.snapshot_every", -1, 0, "must not be negative"),
    ("train.save_every", -1, 0, "must not be negative"),
    ("train.guided_half_life", -1, 0, "must not be negative"),
    ("train.sampling_slope", -1e-3, 0.0, "must not be negative"),
    ("search.coverage_penalty", -0.1, 0.0, "must not be negative"),
    ("search.shortlist", -1, 0, "must not be negative"),
    ("data.max_len_ratio", 0.5, 0.0, "must be 0 (keep all) or at least 1"),
    ("data.max_len_ratio", -1.0, 1.0, "must be 0 (keep all) or at least 1"),
    ("data.valid_rows", -1, 0, "must not be negative"),
    ("data.truncate", 1, 0, "must be 0 (keep whole) or at least 2"),
    ("data.truncate", -1, 2, "must be 0 (keep whole) or at least 2"),
    # Probabilities
    ("model.dropout", 1.0, 0.0, "must be in [0, 1)"),
    ("model.state_dropout", -0.1, 0.5, "must be in [0, 1)"),
    ("train.label_smoothing", 1.0, 0.999, "must be in [0, 1)"),
    ("train.sampling_floor", 1.0, 0.5, "must be in [0, 1)"),
    # Positive
    ("train.lr", 0.0, 1e-9, "must be positive"),
    ("train.wait_minutes", 0.0, 0.5, "must be positive"),
    ("train.wait_minutes", -1.0, 30.0, "must be positive"),
    ("train.guided_weight", 0.0, 0.1, "must be positive"),
    ("model.max_fertility", -2.0, 1.0, "must be positive"),
    ("model.monotonic_noise", -0.5, 0.0, "must not be negative"),
    ("model.heads", 0, 4, "must be at least 1"),
]
# Fields with no rule, whatever their names suggest: only their type refuses a value.
UNRULED = [
    ("seed", 1.5, 0, "expected an integer"),
    ("search.max_len_offset", "x", 0, "expected an integer"),
    ("search.max_len_ratio", "inf", 0.5, "expected a finite number"),
    ("search.length_penalty", "nan", 0.0, "expected a finite number"),
    ("train.clip_norm", "true", 0.0, "expected a finite number"),
]


@pytest.mark.parametrize(("key", "refused", "accepted", "rule"), RULED + UNRULED)
def test_each_field_refuses_and_accepts_what_it_did_when_rules_came_from_names(
    key, refused, accepted, rule
):
    cfg = load_config(None, [f"{key}={accepted}"])
    assert reduce(getattr, key.split("."), cfg) == accepted
    with raises(f"command line: {key}: {rule}"):
        load_config(None, [f"{key}={refused}"])


def test_max_len_is_at_least_1_though_min_len_is_checked_first():
    assert AtLeast(1) in field_rules(DataConfig)["max_len"]
    with raises("command line: data.min_len: must not exceed data.max_len (0), got 1"):
        load_config(None, ["data.min_len=1", "data.max_len=0"])


def test_the_fields_with_rules_are_exactly_those_listed():
    def rules(key):
        *sections, name = key.split(".")
        return field_rules(type(reduce(getattr, sections, Config())))[name]

    # the two whose rules read other fields: tested where those are (and in
    # test_scheduled_sampling.py)
    listed = {key for key, *_ in RULED} | {"data.max_len", "train.sampling_k"}
    assert {key for key in _KEYS if rules(key)} == listed
    assert not any(rules(key) for key, *_ in UNRULED)


@dataclass
class Unruled:
    """Named like fields that used to get a rule from their names, but with plain types."""

    warmup_steps: int = 0
    steps: int = 0
    emb_dim: int = -1
    batch_size: int = 0
    dropout: float = 1.5
    lr: float = 0.0


@dataclass
class Ruled:
    anything: Count = 1


def test_a_field_without_an_annotated_rule_gets_none_whatever_its_name():
    assert set(field_rules(Unruled).values()) == {()}
    obj = merge(Unruled(), {"warmup_steps": "0", "steps": "0", "lr": "-1"}, "test")
    check_rules(obj, "test")  # raises nothing
    assert (obj.warmup_steps, obj.steps, obj.lr) == (0, 0, -1.0)


def test_a_rule_comes_from_the_annotation_whatever_the_name():
    with raises("test: anything: must be at least 1, got 0"):
        check_rules(merge(Ruled(), {"anything": "0"}, "test"), "test")


def test_a_broken_rule_in_a_file_names_the_file(write_yaml):
    path = write_yaml("train:\n  warmup_steps: -1\n")
    with raises(f"{path}: train.warmup_steps: must not be negative, got -1"):
        load_config(path)


@pytest.mark.parametrize(("section", "name"), [("model", "dropout"), ("search", "length_penalty")])
def test_a_config_built_in_code_must_still_be_finite(section, name):
    cfg = Config()
    setattr(getattr(cfg, section), name, float("inf"))
    with raises(f"command line: {section}.{name}: must be a finite number, got inf"):
        apply_overrides(cfg, [])


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
