"""The shipped real-data configs name corpora the data folder holds, and train on a slice."""

from __future__ import annotations

import os

import pytest

from alignmt.checkpoint.torch_io import load_checkpoint
from alignmt.config import SHIPPED, config_path, load_config
from alignmt.text.corpora import lang, named
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


@needs_shared_data
@pytest.mark.needs_shared_data
@pytest.mark.parametrize("name", ["multi30k_en_de", "multi30k_en_de_vanilla", "tatoeba_en_fr"])
def test_each_real_data_config_trains_a_tiny_model_on_a_slice(name, corpora, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the configs name corpora, not paths beside the repository
    cfg = load_config(config_path(name), [*TINY, f"out_dir={tmp_path / name}"])
    result = train(cfg, progress=False)
    ckpt = load_checkpoint(result.run_dir)
    assert ckpt.src_tokenizer.kind == "moses" and len(ckpt.src_vocab) > 20
    assert result.steps[-1] == 6
    assert (name == "tatoeba_en_fr") == (not result.evals)  # Tatoeba has no validation set


def test_a_config_whose_corpus_is_not_got_names_the_command_that_gets_it(tmp_path):
    cfg = load_config(
        config_path("multi30k_en_de"), [*TINY, f"out_dir={tmp_path}/r"]
    )  # empty data folder
    with pytest.raises(CorpusError) as refused:
        train(cfg, progress=False)
    assert str(refused.value) == (
        f"data.train: multi30k:train is not in the data folder {os.environ['ALIGNMT_DATA']} "
        "(no train.en.gz); get it with: alignmt data get multi30k"
    )
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("name", sorted(p.stem for p in SHIPPED.glob("*.yaml")))
def test_every_shipped_config_names_corpora_or_a_synthetic_task(name):
    data = load_config(config_path(name)).data
    specs = [s for s in (data.train, data.valid, data.test) if s]
    assert data.task != "corpus" or specs
    for spec in specs:  # a corpus part the catalogue has, in the config's languages
        corpus = named(spec)
        assert corpus is not None, f"{name}: {spec} is a path"
        files = corpus.parts()[spec.partition(":")[2]]
        assert files[0].name.endswith(".tsv") or {data.src_lang, data.tgt_lang} <= {
            lang(f.name) for f in files if f.default
        }


def test_the_gpu_recipe_trains_the_cpu_recipes_model_on_the_same_data():
    cpu, gpu = (load_config(config_path(n)) for n in ("multi30k_en_de", "multi30k_en_de_gpu"))
    assert gpu.model == cpu.model and gpu.data == cpu.data and gpu.search == cpu.search
    assert gpu.train.device == "cuda" and gpu.train.cuda_graphs and gpu.train.batch_tokens
