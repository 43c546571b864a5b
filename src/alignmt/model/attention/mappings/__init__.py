"""The mappings from scores to weights, softmax, sparsemax (Martins & Astudillo 2016) and
1.5-entmax (Peters et al. 2019): an entry of the attention room.

    flax.py       softmax, sparsemax and 1.5-entmax in JAX
    reference.py  softmax, sparsemax and 1.5-entmax in float64, and their declaration
    torch.py      the masked softmax, and the sparse mappings of the `entmax` package
"""
