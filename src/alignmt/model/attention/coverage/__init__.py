"""One entry of the attention room: coverage, summed or by fertility (Tu et al. 2016).

reference.py     the equations in float64 NumPy, and the declaration (`from_config`)
torch.py         the PyTorch module
flax.py          the Flax twin
"""
