"""The scores with a hidden layer, additive (Bahdanau et al. 2015) and concat (Luong et
al. 2015): an entry of the attention room.

    flax.py       the additive and concat scores in Flax
    reference.py  the additive and concat scores in float64, and their declaration
    torch.py      the additive and concat scores, with their fused fast path
"""
