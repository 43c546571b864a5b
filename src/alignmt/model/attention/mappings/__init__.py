"""One entry of the attention room: the mappings from scores to weights: softmax, sparsemax
(Martins & Astudillo 2016) and 1.5-entmax (Peters et al. 2019).

    reference.py     the equations in float64 NumPy, and the declaration (`from_config`)
    torch.py         the PyTorch module
    flax.py          the Flax twin
"""
