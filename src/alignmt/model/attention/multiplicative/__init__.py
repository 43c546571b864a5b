"""One entry of the attention room: the dot and general scores (Luong et al. 2015) and the
scaled dot product (Vaswani et al. 2017).

    reference.py     the equations in float64 NumPy, and the declaration (`from_config`)
    torch.py         the PyTorch module
    flax.py          the Flax twin
"""
