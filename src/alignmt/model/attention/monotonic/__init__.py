"""Monotonic attention (Raffel et al. 2017): an entry of the attention room.

flax.py       monotonic attention in Flax
reference.py  Raffel et al.'s monotonic attention in float64: the stop probabilities, the
              expected alignment and the walk, and its declaration
torch.py      monotonic attention: the expected alignment in training, the walk in decoding
"""
