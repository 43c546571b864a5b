"""Exact hard monotonic attention (Wu & Cotterell 2019): an entry of the attention room.

flax.py       hard monotonic attention in Flax
reference.py  the transitions, the prior, the mixture and the posterior in float64, the
              decoder step they make, and the declaration
torch.py      hard monotonic attention: the prior over positions from the posterior
"""
