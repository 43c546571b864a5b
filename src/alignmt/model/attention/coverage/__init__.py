"""Coverage, summed or by fertility (Tu et al. 2016): an entry of the attention room.

flax.py       coverage in Flax
reference.py  coverage and fertility in float64, and their declaration
torch.py      coverage C_i,j, its weight in the score, fertility
"""
