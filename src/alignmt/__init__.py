"""alignmt: attention-based RNN encoder-decoders (Bahdanau et al. 2015, Luong et al. 2015)
to train, translate with, evaluate and look inside."""

__version__ = "0.1.0"  # first: checkpoint.py records it, and is imported below

from alignmt.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from alignmt.config import Config, ModelConfig, load_config
from alignmt.evaluate import corpus_scores
from alignmt.model import Seq2Seq
from alignmt.search import Hypothesis, beam_decode, decode
from alignmt.train import train
from alignmt.translate import Translation, Translator

__all__ = [
    "Checkpoint",
    "Config",
    "Hypothesis",
    "ModelConfig",
    "Seq2Seq",
    "Translation",
    "Translator",
    "beam_decode",
    "corpus_scores",
    "decode",
    "load_checkpoint",
    "load_config",
    "save_checkpoint",
    "train",
]
