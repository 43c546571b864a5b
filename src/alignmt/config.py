"""The typed config tree, and the only place that reads YAML.

Owns `Config` and its sections and how one is built. Precedence, lowest first: dataclass
defaults < a YAML file (partial and nested: any subset of sections and keys) < command-line
`key.path=value` overrides. Values are coerced from each field's declared type, never guessed,
then checked against the rules that type carries (`config_rules`: `Count` is
`Annotated[int, AtLeast(1)]`), never against the key's name. Unknown keys and bad values raise
`ConfigError` naming the source and the dotted key, with a close-match hint. How a mapping is
coerced, merged and checked, for any dataclass tree, is `config_merge`'s; this module reads the
files, turns overrides into mappings and says in what order they apply. Imports no other
alignmt module than those two: `cli` builds a Config, `train` and `Seq2Seq.from_config` unpack
it, and model code never sees one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml

from alignmt.config_merge import ConfigError, check_rules, did_you_mean, dotted_keys, merge
from alignmt.config_rules import (
    AtLeast,
    AtMost,
    Count,
    DecayK,
    Needs,
    NonNegative,
    Positive,
    Probability,
    ZeroOrAtLeast,
)

# Where and in what precision a model runs: shared by configs, command-line flags and
# `alignmt.model.device`, which turns them into a torch device and an autocast context.
Precision = Literal["float32", "bfloat16"]
PRECISIONS: tuple[Precision, ...] = get_args(Precision)
Weights = Literal["float32", "int8"]
WEIGHTS: tuple[Weights, ...] = get_args(Weights)
DEVICES = "auto, cpu, cuda or cuda:N"  # what `pick_device` accepts, for help and errors

# The attention scores (model.attention), read by the server's schema and the demo's flag
# too: a score added to the attention room is named here once. "none" is vanilla seq2seq.
Score = Literal[
    "additive", "dot", "general", "scaled_general", "concat", "scaled_dot", "location", "none"
]
SCORES: tuple[Score, ...] = get_args(Score)


@dataclass
class ModelConfig:
    rnn: Literal["gru", "lstm"] = "gru"  # recurrent cell of encoder and decoder
    emb_dim: Count = 48  # E, source and target embeddings
    enc_hidden: Count = 48  # H, encoder units per direction; C = 2H = D lets dot scores work
    enc_layers: Count = 1  # L of the encoder
    bidirectional: bool = True  # [h_fwd; h_bwd] as in the paper; False: forward only
    dec_hidden: Count = 96  # D
    dec_layers: Count = 1  # L of the decoder
    # "none" is vanilla seq2seq: the decoder sees a fixed context, the final encoder state;
    # "location" (Luong et al. 2015) scores by position alone, e_i = W_a s; "scaled_general"
    # is g s^T W h with a learned g, 1/sqrt(D) at first, where "general" saturates
    attention: Score = "additive"
    attn_dim: Count = 96  # A, hidden units of the additive/concat scorer and of local_p's p_i
    # Luong et al. (2015, §3.2): weigh every source position (global), or only a window of
    # them, [p_i - D, p_i + D], around p_i = i (local_m) or a learnt p_i = S sigmoid(v_p^T
    # tanh(W_p s)), weighted by a Gaussian of sigma = D / 2 (local_p)
    attention_window: Literal["global", "local_m", "local_p"] = "global"
    window: Count = 10  # D, the local window's half-width
    positions: Count = 100  # location score: how many source positions (</s> included) W_a has
    # the weights from the scores: softmax, or sparse (exact zeros below a threshold):
    # sparsemax (Martins & Astudillo 2016) or 1.5-entmax (Peters et al. 2019); or monotonic
    # (Raffel et al. 2017): a walk left to right that stops where sigmoid(e + r) says, in
    # training its expectation, in decoding the walk itself; or hard_monotonic (Wu &
    # Cotterell 2019): each word emitted from one source position, never going back, and
    # p(y | x) the exact sum over such alignments
    attention_fn: Literal["softmax", "sparsemax", "entmax15", "monotonic", "hard_monotonic"] = (
        "softmax"
    )
    monotonic_bias: float = -1.0  # r at first: below 0, the walk starts out moving on
    # the standard deviation of the noise added to e + r in training, which teaches the
    # stop probabilities to be near 0 or 1, as the walk in decoding takes them
    monotonic_noise: Annotated[float, AtLeast(0)] = 1.0
    # several heads (Vaswani et al. 2017; in an RNN decoder, Chen et al. 2018's RNMT+): each
    # scores and weighs its own projection of the query and the states, C / N units wide, and
    # the heads' contexts are joined; alpha is their mean. 1: one attention, as in the paper
    heads: Count = 1
    # attention "none": the fixed context c feeds every step and the output (Cho et al. 2014),
    # or only the initial state s_0 = tanh(W c) (Sutskever et al. 2014; needs init "bridge")
    context: Literal["every_step", "init_only"] = "every_step"
    # where the query comes from: s_{i-1} before the RNN (bahdanau), s_i after it (luong), or
    # s'_i between the conditional GRU's two transitions, after y_{i-1} (cgru, Nematus)
    order: Literal["bahdanau", "luong", "cgru"] = "bahdanau"
    init: Literal["zeros", "bridge"] = "zeros"  # decoder s_0: zeros, or tanh(W [h_fwd; h_bwd])
    readout: Literal["none", "tanh", "maxout"] = "none"  # layer between [s_i; c_i; y_{i-1}] and V
    readout_dim: Count = 128  # R, units of the readout layer
    tie_embeddings: bool = False  # output projection = target embeddings (needs R = E)
    dropout: Probability = 0.0  # dropout probability, in [0, 1)
    # dropout on the encoder states h_j that attention reads (nmtpytorch's dropout_ctx); the
    # final state that a bridge or vanilla decoder reads is left alone
    state_dropout: Probability = 0.0
    # Tu et al. (2016): each source word's attention so far, C_{i-1,j}, enters its score
    # (additive and concat scores only): "sum" adds up alpha_ij, "fertility" adds
    # alpha_ij / Phi_j with a learnt fertility Phi_j = max_fertility * sigmoid(U_f h_j)
    coverage: Literal["none", "sum", "fertility"] = "none"
    max_fertility: Positive = 2.0  # N: the most target words a source word may produce
    # the pointer-generator (See et al. 2017): each step generates a word from the vocabulary
    # or, with probability 1 - p_gen, copies the source word its attention points at, by
    # name, where the vocabulary lacks it
    copy: bool = False


@dataclass
class DataConfig:
    # A built-in synthetic task, or "corpus": the parallel files named by train/valid/test
    task: Literal["reverse", "copy", "sort", "corpus"] = "reverse"
    min_len: Annotated[Count, AtMost("data.max_len")] = 3  # shortest training string (synthetic)
    max_len: Count = 10  # longest training string (synthetic tasks)
    # A corpus is PREFIX (PREFIX.{src_lang} + PREFIX.{tgt_lang}, each optionally .gz) or a
    # .tsv (or .tsv.gz) file of source<TAB>target[<TAB>attribution] lines, relative to the
    # working directory; or NAME:PART, a corpus `alignmt data get NAME` put in the data folder
    train: str = ""  # training pairs (multi30k:train, tatoeba:eng-fra, or a path)
    valid: str = ""  # validation pairs for loss, BLEU and early stopping; "" for none
    test: str = ""  # held-out pairs for `alignmt evaluate` without --src/--ref
    src_lang: str = "en"  # file suffix and Moses language of the source
    tgt_lang: str = "de"  # file suffix and Moses language of the target
    tsv_swap: bool = False  # TSV only: read column 2 as the source and column 1 as the target
    # moses: sacremoses' words; char: characters; sentencepiece: subwords, a model per side,
    # trained on train; d2l: d2l.ai's words, split on spaces after a space is put before
    # , . ! ? (Zhang et al., "Dive into Deep Learning", §10.5); space: the tokens of a corpus
    # tokenised before it arrived (by Moses' scripts, say), split on spaces alone
    tokenizer: Literal["moses", "char", "sentencepiece", "d2l", "space"] = "moses"
    # space only: read Moses' entities (&apos; &quot; &amp; ...) as their characters in the
    # tokens, and write them back into the output, the form the references are in
    unescape: bool = False
    lowercase: bool = False  # lowercase both sides before tokenising
    spm_vocab_size: Count = 8000  # SentencePiece pieces per side
    spm_model_type: Literal["bpe", "unigram"] = "bpe"  # SentencePiece: BPE or unigram LM
    min_freq: Count = 1  # tokens seen fewer times in train become <unk>
    max_vocab: NonNegative = 0  # >0: keep only this many of each side's most frequent tokens
    max_tokens: Count = 80  # training pairs longer than this (either side, tokens) are dropped
    limit: NonNegative = 0  # read only the first N pairs of train and valid (quick trials); 0: all
    # >0: validate on the N pairs of `train` right after its first `limit` (one file split in
    # two, as d2l.ai's num_train/num_val), instead of on a `valid` file
    valid_rows: Annotated[NonNegative, Needs("data.limit"), Needs("data.valid", unset=True)] = 0
    # >0: cut each side to this many tokens, </s> included (d2l.ai's num_steps), before
    # max_tokens drops what is still longer; 0: keep whole
    truncate: Annotated[int, ZeroOrAtLeast(2, "keep whole")] = 0
    # count min_freq over the training pairs, or over every pair of the `train` file
    vocab_from: Literal["train", "file"] = "train"
    # drop training pairs whose longer side has over this many times the tokens of the
    # shorter (misaligned lines); 0: keep all
    max_len_ratio: Annotated[float, ZeroOrAtLeast(1, "keep all")] = 0.0
    # SentencePiece trains on a seeded uniform sample of this many training pairs; 0: all
    # (a smaller corpus trains on every pair)
    spm_sample: NonNegative = 1_000_000
    # keep the tokenised training split in a folder keyed by the corpus files' contents and
    # these settings, memory-mapped by later runs and by every process of a run; false: in RAM
    cache: bool = True
    cache_dir: str = ""  # "": $ALIGNMT_CACHE, else the user cache folder (~/.cache/alignmt)
    workers: NonNegative = 0  # processes that tokenise the training split; 0: one per usable CPU


@dataclass
class TrainConfig:
    # the engine that trains: torch, or flax, the same model in JAX/Flax (the [flax] extra),
    # jit-compiled, writing the same run folder (read as train.backend too, its older name)
    engine: Literal["torch", "flax"] = "torch"
    steps: Count = 2000  # optimiser updates
    # >0: also stop after this many minutes of training (wall clock, evaluations included);
    # the cosine schedule then reaches zero at whichever of `steps` and `minutes` comes first
    minutes: Annotated[float, AtLeast(0)] = 0.0
    batch_size: Count = 64  # sentences per batch
    batch_tokens: NonNegative = 0  # corpus: >0 fills batches up to this many target tokens instead
    lr: Positive = 3e-3  # peak learning rate
    clip_norm: float = 1.0  # max global gradient norm; 0 disables clipping
    # After warm-up: cosine decay to zero at `steps`, flat, or halve on a validation plateau
    schedule: Literal["cosine", "constant", "plateau"] = "cosine"
    warmup_steps: NonNegative = 0  # learning-rate warmup before the schedule; 0: none
    plateau_patience: Count = 2  # plateau: evaluations without improvement before lr *= 0.5
    label_smoothing: Probability = 0.0  # in [0, 1): share of target mass spread over the vocabulary
    log_every: Count = 50  # steps between recorded losses
    eval_every: NonNegative = 0  # corpus: steps between validation loss + greedy BLEU; 0: at end
    early_stop: NonNegative = 0  # stop after this many evaluations without improvement; 0: never
    metric: Literal["bleu", "loss"] = "bleu"  # validation metric for best checkpoint and stopping
    tensorboard: bool = False  # also write TensorBoard event files (needs the tensorboard package)
    device: Literal["auto", "cpu", "cuda"] = "auto"  # auto: cuda when available
    # bfloat16: run forward and backward under autocast (GPUs; weights and Adam stay float32)
    precision: Precision = "float32"
    # CUDA: replay the decoder's unroll, forward and backward, from a CUDA graph per padded
    # batch shape instead of launching its kernels one by one (see training/graphs.py)
    cuda_graphs: bool = False
    # torch intra-op threads; 0: torch's default, less the cores other processes keep busy
    threads: NonNegative = 0
    # Micro-batches per update and process: N processes x accumulate K x batch B is one update
    # on N*K*B sentences, so one process with K = N follows an N-process run (exactly without
    # dropout; with it, each process draws its own masks)
    accumulate: Count = 1
    # Stop with an error after this many updates in a row with a non-finite loss or gradient
    # (each is skipped, not applied, and counted in the log)
    max_bad_steps: Count = 10
    # Distributed runs: how long a process waits for the others in a collective (validation
    # and checkpoint writing on rank 0 included) before it gives up with an error
    wait_minutes: Positive = 30.0
    # >0: keep the weights at step 0, every N steps and the last in snapshots/ (what attention
    # looked like as it trained); 0: none
    snapshot_every: NonNegative = 0
    # Steps between resumable checkpoints (last.safetensors), besides the one written at every
    # evaluation, on a signal and at the end; 0: only those
    save_every: NonNegative = 500
    # Guided alignment (Chen et al. 2016): train attention towards word links as well. "":
    # off; a Pharaoh file with a line per line of data.train (word indices as data.tokenizer
    # cuts the sentences); "eflomal": learnt on the training pairs (the [align] extra),
    # cached; "task": a synthetic task's own alignment
    guided_alignment: str = ""
    guided_weight: Positive = 0.5  # lambda: the alignment loss's weight beside the translation's
    guided_cost: Literal["ce", "mse"] = "ce"  # cross-entropy or squared error to the links
    guided_half_life: NonNegative = 0  # steps after which lambda has halved; 0: constant
    # Scheduled sampling (Bengio et al. 2015): each target position reads the true y_{i-1}
    # with probability eps_i, else the model's own output at the step before; eps_i falls
    # with the update i: "linear" max(sampling_floor, sampling_k - sampling_slope * i),
    # "exponential" sampling_k ** i (k < 1), "inverse_sigmoid" k / (k + exp(i / k)) (k >= 1)
    scheduled_sampling: Literal["none", "linear", "exponential", "inverse_sigmoid"] = "none"
    sampling_k: Annotated[float, DecayK()] = 1.0  # k: eps_0 (linear), the base, or the scale
    sampling_slope: Annotated[float, AtLeast(0)] = 1e-4  # c of the linear schedule
    sampling_floor: Probability = 0.0  # the linear schedule's least eps
    sampling_pick: Literal["sample", "argmax"] = "sample"  # the model's output: drawn or best


@dataclass
class SearchConfig:
    max_len_ratio: float = 2.0  # an output stops after ratio * source length + offset tokens
    max_len_offset: int = 10  # the offset of that limit, in tokens
    beam_size: Count = 5  # 1 is greedy
    length_penalty: float = 0.6  # GNMT alpha: rank finished beams by score / ((5 + |y|) / 6)^alpha
    # GNMT beta: add beta * sum_j log(min(sum_i alpha_ij, 1)) to that rank, which favours
    # outputs that attended to every source word (Wu et al. 2016, eq. 14); 0: none
    coverage_penalty: Annotated[float, AtLeast(0)] = 0.0
    replace_unk: bool = False  # output <unk> -> the source word it attends to most (Luong 2015)
    # int8: the decoder's matmuls in int8 on the CPU (weights per output unit, inputs per row)
    weights: Weights = "float32"
    # K > 0: score only the K likeliest translations of each source token, the corpus's most
    # frequent target tokens and </s> (the run folder's shortlist.safetensors); 0: every word
    shortlist: Annotated[int, AtLeast(0)] = 0


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    seed: int = 1  # random seed: initialisation and synthetic data
    out_dir: str = "runs/reverse"  # run directory: checkpoints, resolved config, logs


_CLI = "command line"
_KEYS = dotted_keys(Config)
# Keys read under an earlier name too: a run folder, a YAML file or a command line that says
# train.backend means train.engine.
RENAMED = {"train.backend": "train.engine"}


def _current(data: Any) -> Any:
    """A nested mapping with the keys of RENAMED under their current names."""
    if not isinstance(data, Mapping):
        return data
    out = {key: dict(value) if isinstance(value, Mapping) else value for key, value in data.items()}
    for old, new in RENAMED.items():
        (section, leaf), (_, current) = old.split("."), new.split(".")
        if isinstance(out.get(section), dict) and leaf in out[section]:
            out[section].setdefault(current, out[section].pop(leaf))
    return out


def _read_yaml(path: Path) -> Any:
    try:
        text = path.read_bytes()  # bytes: PyYAML then reports bad UTF-8 as a YAMLError
    except OSError as err:
        raise ConfigError(f"{path}: cannot read config file: {err.strerror}") from err
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}, line {mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: invalid YAML: {getattr(err, 'problem', None) or err}") from err
    return {} if data is None else data


def _apply(cfg: Config, overrides: Sequence[str]) -> Config:
    for override in overrides:
        key, eq, value = override.partition("=")
        if not eq:
            raise ConfigError(f"{_CLI}: override {override!r} is not of the form key.path=value")
        nested: Any = value.strip()
        for part in reversed(key.strip().split(".")):
            nested = {part: nested}
        cfg = merge(cfg, _current(nested), _CLI)  # one at a time: a later one beats an earlier
    return cfg


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> Config:
    """Builds a Config from defaults, then a YAML file, then command-line overrides.

    Args:
        path: YAML file with any subset of sections and keys; None or an empty file: defaults.
        overrides: `key.path=value` strings such as `train.lr=5e-4` or `seed=3`, applied in order.

    Returns:
        The merged, coerced and range-checked Config.
    """
    cfg = Config() if path is None else merge(Config(), _current(_read_yaml(Path(path))), str(path))
    cfg = _apply(cfg, overrides)
    # Checked once, at the end: an override may repair what the file alone got wrong.
    sources = [str(path)] * (path is not None) + [_CLI] * bool(overrides)
    check_rules(cfg, " + ".join(sources) or "defaults")
    return cfg


def config_from_dict(data: Mapping[str, Any], source: str = "<dict>") -> Config:
    """Builds a Config from defaults and a nested dict, e.g. one stored in a checkpoint.

    Args:
        data: nested mapping, as from `config_to_dict`; any subset of sections and keys.
        source: what `data` came from, for error messages (a checkpoint path, say).

    Returns:
        The merged, coerced and range-checked Config.
    """
    cfg = merge(Config(), _current(data), source)
    check_rules(cfg, source)
    return cfg


def apply_overrides(cfg: Config, overrides: Sequence[str]) -> Config:
    """Returns a new Config with `key.path=value` overrides applied; `cfg` is left unchanged.

    Args:
        cfg: the config to start from.
        overrides: `key.path=value` strings, applied in order.

    Returns:
        A Config that shares no section object with `cfg`.
    """
    out = _apply(cfg, overrides)
    check_rules(out, _CLI)
    return out


# The configs alignmt ships (the repository's configs/ links here), loadable by name.
SHIPPED = Path(__file__).with_name("configs")


def config_path(config: str | Path) -> Path:
    """A config file: `config` itself where it is a file, else the shipped config of that
    name (`"reverse"` is `SHIPPED / "reverse.yaml"`).

    Raises:
        ConfigError: neither a file nor a shipped config's name, listing the shipped names.
    """
    path = Path(config)
    if path.is_file():
        return path
    shipped = SHIPPED / f"{path.name}.yaml"
    if path.suffix == "" and len(path.parts) == 1 and shipped.is_file():
        return shipped
    names = sorted(p.stem for p in SHIPPED.glob("*.yaml"))
    raise ConfigError(
        f"{config}: no such config file, nor a shipped config (those are {', '.join(names)})"
        + did_you_mean(path.stem, names)
    )


def with_fields(
    cfg: Config, values: Mapping[str, Any], source: str = "keyword arguments"
) -> Config:
    """`cfg` with fields named by their last part (`steps=2000` sets `train.steps`), the
    values coerced and checked as a YAML file's are.

    Raises:
        ConfigError: a name no field has, or one several sections have (`max_len_ratio` is
            in `data` and `search`: set it by its dotted key).
    """
    nested: dict[str, Any] = {}
    renamed = {old.rsplit(".", 1)[1]: new.rsplit(".", 1)[1] for old, new in RENAMED.items()}
    for name, value in values.items():
        name = renamed.get(name, name)
        keys = [key for key in _KEYS if key.rsplit(".", 1)[-1] == name]
        if not keys:
            raise ConfigError(
                f"{source}: no config field is called {name!r}{did_you_mean(name, _KEYS)}"
            )
        if len(keys) > 1:
            raise ConfigError(
                f"{source}: {name!r} is a field of several sections ({', '.join(keys)}): "
                "give its dotted key as an override"
            )
        *sections, leaf = keys[0].split(".")
        node = nested
        for section in sections:
            node = node.setdefault(section, {})
        node[leaf] = value
    out = merge(cfg, nested, source)
    check_rules(out, source)
    return out


def config_to_dict(cfg: Config) -> dict[str, Any]:
    """`cfg` as plain nested dicts of str, int, float and bool in field order: safe for YAML."""
    return asdict(cfg)


def dump_config(cfg: Config) -> str:
    """`cfg` as YAML text in field order, readable by `load_config`."""
    return yaml.safe_dump(config_to_dict(cfg), sort_keys=False)
