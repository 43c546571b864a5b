"""The attention room: every attention mechanism as one entry, and what composes them.

An entry is a package that holds one mechanism three ways, side by side: `reference.py`, its
equations in float64 NumPy (the tests' oracle) and its declaration (`spec.Spec`: the config
that chooses it, its state and memory slots with their axes, what the explorer shows);
`torch.py`, its PyTorch module; and `flax.py`, its Flax twin.

    spec.py          what a mechanism declares, and a model's composition of them
    registry.py      the entries, and the composition a model config chooses
    torch.py         a score, a mapping and a modifier in PyTorch, and `Attention`, which
                     composes them into one step
    flax.py          the same composer in Flax

    additive/        the scores with a hidden layer: additive and concat
    multiplicative/  the dot, scaled dot and general scores
    location/        Luong's location score
    mappings/        softmax, sparsemax and 1.5-entmax
    local/           Luong's local windows, local-m and local-p
    coverage/        Tu et al.'s coverage, summed or by fertility

Nothing is imported here, so that the declarations load no framework.
"""
