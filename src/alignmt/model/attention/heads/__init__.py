"""Multi-head attention (Chen et al. 2018, RNMT+): an entry of the attention room.

flax.py       multi-head attention in Flax
reference.py  the heads in float64, each written out, and their declaration
torch.py      multi-head attention: the heads as rows, under the model's score and mapping
"""
