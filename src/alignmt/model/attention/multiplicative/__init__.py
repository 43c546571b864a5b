"""The dot and general scores (Luong et al. 2015) and the scaled dot product (Vaswani et al.
2017): an entry of the attention room.

    flax.py       the dot, scaled dot, general and scaled general scores in Flax
    reference.py  the dot, scaled dot, general and scaled general scores in float64, and their
                  declaration
    torch.py      the dot, scaled dot, general and scaled general scores
"""
