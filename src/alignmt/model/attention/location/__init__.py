"""Luong et al.'s location score (2015): an entry of the attention room.

flax.py       the location score in Flax
reference.py  Luong's location score in float64, and its declaration
torch.py      the location score
"""
