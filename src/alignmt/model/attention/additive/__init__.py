"""One entry of the attention room: the scores with a hidden layer, additive (Bahdanau et al.
2015) and concat (Luong et al. 2015).

    reference.py     the equations in float64 NumPy, and the declaration (`from_config`)
    torch.py         the PyTorch module
    flax.py          the Flax twin
"""
