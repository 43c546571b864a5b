"""The run-folder name map (`checkpoint.flax_io`): PyTorch `state_dict` names and layouts <->
Flax parameters over the architecture matrix, the tree `init` builds and what it draws tensor
by tensor, tied embeddings, and run folders written by one framework and read by the other.
"""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import torch

if os.environ.get("CI"):  # CI installs the [flax] extra: there a missing JAX is a failure
    try:
        import jax
    except ImportError as err:
        raise ImportError(f"CI installs the [flax] extra, but JAX does not import: {err}") from err
else:
    jax = pytest.importorskip(
        "jax", reason="the [flax] extra is not installed: pip install -e '.[flax]'"
    )

from alignmt.checkpoint.flax_io import (
    flax_path,
    load_flax,
    save_flax,
    tensors_from_params,
    torch_name,
)
from alignmt.checkpoint.torch_io import load_checkpoint, save_checkpoint
from alignmt.config import Config, ModelConfig
from alignmt.model.flax_seq2seq import FlaxSeq2Seq
from alignmt.model.seq2seq import Seq2Seq
from alignmt.text.tasks import ALPHABET
from alignmt.text.vocab import Vocab
from tests.conftest import padded_batch
from tests.test_flax_model import (  # the autouse fixture applies here too
    ARCH,
    MATRIX,
    MATRIX_CASES,
    _full_float32_products_and_one_torch_thread,  # noqa: F401
    as_jax,
    case_id,
    model_shapes,
    twins,
)


def leaves(params: dict) -> dict[tuple[str, ...], np.ndarray]:
    """{Flax path: value} of every parameter."""
    flat = jax.tree_util.tree_leaves_with_path(params)
    return {tuple(key.key for key in path): np.asarray(value) for path, value in flat}


# --- the name map ----------------------------------------------------------------------------


@pytest.mark.parametrize("arch,changes", MATRIX_CASES)
def test_state_dict_to_flax_params_and_back_is_bit_exact(arch, changes):
    model, flax_model, variables = twins(arch, torch.float32, **changes)
    expected = {name: t.numpy() for name, t in model.state_dict().items()}
    back = tensors_from_params(variables["params"], flax_model.cfg)
    assert back.keys() == expected.keys()
    for name, tensor in expected.items():
        assert back[name].dtype == tensor.dtype and np.array_equal(back[name], tensor), name


@pytest.mark.parametrize("arch,changes", MATRIX_CASES)
def test_each_tensor_has_one_flax_path_and_kernels_are_transposed(arch, changes):
    model, flax_model, variables = twins(arch, torch.float32, **changes)
    params = leaves(variables["params"])
    tied = (
        {"decoder.proj.weight", "decoder.output.proj.weight"}
        if flax_model.cfg.tie_embeddings
        else set()
    )
    for name, tensor in model.state_dict().items():
        path = flax_path(name)
        assert torch_name(path) == name
        assert (path[-1] == "kernel") == (tensor.dim() == 2 and path[-1] != "embedding"), name
        if name in tied:  # the embedding, which Flax reads in its place
            assert path not in params
            continue
        # (out, in) -> (in, out); a bias, embedding or GRU/LSTM gate bias as it is
        expected = tensor.numpy().T if path[-1] == "kernel" else tensor.numpy()
        assert np.array_equal(params[path], expected), name
    assert all(flax_path(torch_name(path)) == path for path in params)


@pytest.mark.parametrize("arch,changes", MATRIX_CASES)
def test_init_builds_the_tree_that_a_pytorch_state_dict_maps_to(arch, changes):
    _, flax_model, variables = twins(arch, torch.float32, **changes)
    shapes = {path: (x.shape, x.dtype) for path, x in leaves(variables["params"]).items()}
    traced = jax.tree_util.tree_leaves_with_path(model_shapes(flax_model.cfg))
    assert {tuple(k.key for k in path): (x.shape, x.dtype) for path, x in traced} == shapes


# --- what init draws ------------------------------------------------------------------------

# Large enough for the statistics of each tensor: E = 40, H = 96 (C = 192), D = 128, A = 80
LARGE = dict(emb_dim=40, enc_hidden=96, dec_hidden=128, attn_dim=80, init="bridge")


@pytest.fixture(scope="module", params=[False, True], ids=["untied", "tied"])
def initialised(request) -> tuple[ModelConfig, dict]:
    """A config with a maxout readout, tied or not, and FlaxSeq2Seq.init's parameters for it
    (V = 300)."""
    cfg = ModelConfig(**LARGE, readout="maxout", readout_dim=40, tie_embeddings=request.param)
    src, src_len, tgt_in, _ = padded_batch()
    init = jax.jit(FlaxSeq2Seq(cfg, 300, 300).init)  # op by op, jax.random would crawl
    return cfg, init(jax.random.key(0), *as_jax(src, src_len, tgt_in))["params"]


def test_linear_and_rnn_weights_are_uniform_within_pytorchs_bounds(initialised):
    """nn.Linear(fan_in, .) draws weights and biases from U(-1/sqrt(fan_in), 1/sqrt(fan_in));
    nn.GRU every weight from U(-1/sqrt(H), 1/sqrt(H)), W_ih included."""
    _, params = initialised
    fan_ins = {
        ("decoder", "attention", "score", "W_s", "kernel"): 128,  # D
        ("decoder", "attention", "score", "W_h", "kernel"): 192,  # C
        ("decoder", "rnn", "embed_in", "kernel"): 40,  # E
        ("decoder", "rnn", "embed_in", "bias"): 40,
        ("decoder", "bridge", "kernel"): 192,
        ("decoder", "output", "hidden", "kernel"): 128 + 192 + 40,  # [s_i; c_i; y_{i-1}]
        ("decoder", "output", "proj", "bias"): 40,  # R
        ("encoder", "rnn_l0", "ih", "kernel"): 96,  # H, not E
        ("encoder", "rnn_l0_reverse", "hh", "bias"): 96,
    }
    for path, fan_in in fan_ins.items():
        tensor = params
        for key in path:
            tensor = tensor[key]
        bound = 1 / math.sqrt(fan_in)
        assert np.abs(tensor).max() <= bound, path
        assert np.std(tensor) == pytest.approx(bound / math.sqrt(3), rel=0.1), path


def test_embeddings_are_normal_with_a_zero_padding_row(initialised):
    """N(0, 1) as nn.Embedding draws; tied target embeddings N(0, 1/E), as seq2seq ties them."""
    cfg, params = initialised
    for side in ("encoder", "decoder"):
        embedding = np.asarray(params[side]["embed"]["embedding"])  # (V, E)
        assert np.all(embedding[0] == 0)  # pad_id 0
        tied = side == "decoder" and cfg.tie_embeddings
        assert embedding[1:].std() == pytest.approx(40**-0.5 if tied else 1.0, rel=0.05)


def ks_distance(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov statistic: the largest gap between empirical CDFs."""
    grid = np.concatenate([a, b])
    cdf = lambda x: np.searchsorted(np.sort(x), grid, side="right") / x.size  # noqa: E731
    return float(np.abs(cdf(a) - cdf(b)).max())


def test_every_tensor_is_drawn_from_the_distribution_pytorch_draws_it_from(initialised):
    cfg, params = initialised
    torch.manual_seed(0)
    expected = Seq2Seq.from_config(cfg, src_vocab=300, tgt_vocab=300).state_dict()
    actual = tensors_from_params(params, cfg)
    assert set(actual) == set(expected)
    for name, tensor in expected.items():
        assert actual[name].shape == tuple(tensor.shape), name
        # one distribution: below 1.95 sqrt(2 / n) <= 0.087 but once in 1000 draws (n >= 1000)
        if tensor.numel() >= 1000:
            assert ks_distance(actual[name].ravel(), tensor.numpy().ravel()) < 0.09, name


# --- run folders ----------------------------------------------------------------------------


def test_flax_params_saved_as_a_run_folder_load_in_pytorch_with_the_same_logits(
    initialised, tmp_path
):
    cfg, params = initialised
    words = Vocab([f"w{i}" for i in range(296)])  # V = 300
    save_flax(tmp_path, params, Config(model=cfg), words, words, step=7)
    loaded = load_checkpoint(tmp_path)
    assert (loaded.config.model, loaded.src_vocab, loaded.tgt_vocab) == (cfg, words, words)
    assert loaded.step == 7
    src, src_len, tgt_in, _ = padded_batch()
    with jax.disable_jit():
        expected, _ = FlaxSeq2Seq(cfg, 300, 300).apply(
            {"params": params}, *as_jax(src, src_len, tgt_in)
        )
    with torch.no_grad():
        logits = loaded.model(src, src_len, tgt_in).log_probs.logits  # (3, 5, 300)
    np.testing.assert_allclose(logits, expected.logits, rtol=0, atol=1e-6)
    embedding = loaded.model.decoder.embed.weight
    assert (loaded.model.decoder.projection.weight is embedding) == cfg.tie_embeddings
    np.testing.assert_array_equal(embedding.detach(), params["decoder"]["embed"]["embedding"])


# PyTorch's: the richest untied architecture, and tied embeddings in each decoder order
SAVED = [
    (ARCH["lstm-bi-L2-additive-bahdanau"], {"readout": "maxout"}),
    *[case for case in MATRIX if case[1].get("tie_embeddings")],
]
CHARS = Vocab(ALPHABET[:9])  # VOCAB = 13 ids


@pytest.mark.parametrize("arch,changes", SAVED, ids=[case_id(*case) for case in SAVED])
def test_a_pytorch_run_folder_loads_in_flax_bit_for_bit(arch, changes, tmp_path):
    model, flax_model, variables = twins(arch, torch.float32, **changes)
    cfg = Config(model=flax_model.cfg)
    save_checkpoint(tmp_path, model, cfg, CHARS, CHARS, step=5)
    loaded = load_flax(tmp_path)
    assert (loaded.config, loaded.src_vocab, loaded.tgt_vocab) == (cfg, CHARS, CHARS)
    assert loaded.step == 5 and loaded.model == flax_model
    params, expected = leaves(loaded.params), leaves(variables["params"])
    assert params.keys() == expected.keys()
    for path, value in expected.items():
        assert params[path].dtype == value.dtype and np.array_equal(params[path], value), path
