"""The shipped real-data configs load, point at ../shared/data, and train on a slice."""

from __future__ import annotations

import os

import pytest

from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.config import load_config
from alignmt.text.corpus import CorpusError
from alignmt.training.run import train
from tests.conftest import needs_shared_data

# A tiny model, six steps and a 100-pair slice, validated once at the end: enough to show
# that each config trains (the validation greedy-decodes every pair of the slice up to its
# length limit, which cost as much as the training at 300 pairs and two validations)
TINY = [
    "model.emb_dim=16",
    "model.enc_hidden=16",
    "model.dec_hidden=32",
    "model.attn_dim=16",
    "model.readout_dim=16",
    "train.steps=6",
    "train.eval_every=0",
    "train.log_every=3",
    "data.limit=100",
]


@pytest.fixture
def in_repo(monkeypatch):
    """The configs name ../shared/data relative to the repository root."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    monkeypatch.chdir(root)


@needs_shared_data
@pytest.mark.needs_shared_data
@pytest.mark.parametrize("name", ["multi30k_en_de", "multi30k_en_de_vanilla", "tatoeba_en_fr"])
def test_each_real_data_config_trains_a_tiny_model_on_a_slice(name, in_repo, tmp_path):
    cfg = load_config(f"configs/{name}.yaml", [*TINY, f"out_dir={tmp_path / name}"])
    result = train(cfg, progress=False)
    ckpt = load_checkpoint(result.run_dir)
    assert ckpt.src_tokenizer.kind == "moses" and len(ckpt.src_vocab) > 20
    assert result.steps[-1] == 6
    assert (name == "tatoeba_en_fr") == (not result.evals)  # Tatoeba has no validation set


def test_a_config_whose_data_is_missing_says_where_it_looked(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # ../shared/data is not beside this folder
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cfg = load_config(f"{root}/configs/multi30k_en_de.yaml", [*TINY, f"out_dir={tmp_path}/r"])
    with pytest.raises(CorpusError, match=r"data.train: neither .*train\.en nor .*shared"):
        train(cfg, progress=False)


def test_the_gpu_recipe_trains_the_cpu_recipes_model_on_the_same_data(in_repo):
    cpu, gpu = (
        load_config("configs/multi30k_en_de.yaml"),
        load_config("configs/multi30k_en_de_gpu.yaml"),
    )
    assert gpu.model == cpu.model and gpu.data == cpu.data and gpu.search == cpu.search
    assert gpu.train.device == "cuda" and gpu.train.cuda_graphs and gpu.train.batch_tokens
