"""One entry of the attention room: Luong et al.'s location score (2015).

reference.py     the equations in float64 NumPy, and the declaration (`from_config`)
torch.py         the PyTorch module
flax.py          the Flax twin
"""
