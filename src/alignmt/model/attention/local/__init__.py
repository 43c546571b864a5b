"""One entry of the attention room: local attention's windows, local-m and local-p (Luong et al.
2015, §3.2).

    reference.py     the equations in float64 NumPy, and the declaration (`from_config`)
    torch.py         the PyTorch module
    flax.py          the Flax twin
"""
