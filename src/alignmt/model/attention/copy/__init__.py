"""The pointer-generator (See et al. 2017): an entry of the attention room.

flax.py       the pointer-generator in Flax
reference.py  the copy ids and the extended distribution in float64, and the declaration
torch.py      the pointer-generator: p_gen, the copy ids and the extended distribution
"""
