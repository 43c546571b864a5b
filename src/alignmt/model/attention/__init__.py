"""The attention room: every attention mechanism as one entry, and what composes them.

An entry is a package that holds one mechanism three ways, side by side: `reference.py`, its
equations in float64 NumPy (the tests' oracle) and its declaration (`spec.Spec`: the config
that chooses it, its state and memory slots with their axes, what the explorer shows);
`torch.py`, its PyTorch module; and `flax.py`, its Flax twin.

Nothing is imported here, so that the declarations load no framework.

    additive/        The scores with a hidden layer, additive (Bahdanau et al. 2015) and concat
                     (Luong et al. 2015): an entry of the attention room.
    copy/            The pointer-generator (See et al. 2017): an entry of the attention room.
    coverage/        Coverage, summed or by fertility (Tu et al. 2016): an entry of the
                     attention room.
    flax.py          the same composer in Flax
    hard_monotonic/  Exact hard monotonic attention (Wu & Cotterell 2019): an entry of the
                     attention room.
    heads/           Multi-head attention (Chen et al. 2018, RNMT+): an entry of the attention
                     room.
    local/           Local attention's windows, local-m and local-p (Luong et al. 2015, §3.2):
                     an entry of the attention room.
    location/        Luong et al.'s location score (2015): an entry of the attention room.
    mappings/        The mappings from scores to weights, softmax, sparsemax (Martins &
                     Astudillo 2016) and 1.5-entmax (Peters et al. 2019): an entry of the
                     attention room.
    monotonic/       Monotonic attention (Raffel et al. 2017): an entry of the attention room.
    multiplicative/  The dot and general scores (Luong et al. 2015) and the scaled dot product
                     (Vaswani et al. 2017): an entry of the attention room.
    registry.py      the room's entries, the composition a model config chooses, and the names
                     of weights stored before the room
    spec.py          what an attention mechanism declares: its entry, its state and memory slots
                     with their axes, what the explorer shows
    torch.py         what a score, a mapping and a modifier are in PyTorch, and `Attention`, the
                     step they compose
"""
