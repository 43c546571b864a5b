"""The model architectures the tests run over: every score, cell, direction, depth and
decoder order, the sparse mappings, the local windows and multi-head attention, with a
readable id for each."""

from __future__ import annotations

import itertools

ATTENTIONS = ["additive", "dot", "general", "concat", "scaled_dot"]

# Every architecture the model can be built as: cell x direction x depth x decoder.
ARCHITECTURES = [
    dict(rnn=rnn, bidirectional=bi, layers=layers, attention=attention, order=order)
    for rnn, bi, layers in itertools.product(["gru", "lstm"], [True, False], [1, 2])
    for attention, order in [(a, "bahdanau") for a in ATTENTIONS]
    + [("general", "luong"), ("dot", "luong"), ("additive", "cgru"), ("none", "bahdanau")]
] + [  # the vanilla decoder that sees the source only through s_0 (Sutskever et al. 2014)
    dict(
        rnn=rnn,
        bidirectional=False,
        layers=2,
        attention="none",
        order="bahdanau",
        context="init_only",
    )
    for rnn in ("gru", "lstm")
]


# Sparse weights (sparsemax, Martins & Astudillo 2016; 1.5-entmax, Peters et al. 2019): each
# mapping in two decoder orders, each cell and direction
SPARSE_ARCHITECTURES = [
    dict(rnn=rnn, bidirectional=bi, layers=layers, attention=score, order=order, attention_fn=fn)
    for rnn, bi, layers, score, order, fn in [
        ("gru", True, 1, "additive", "bahdanau", "sparsemax"),
        ("lstm", False, 1, "additive", "bahdanau", "entmax15"),
        ("lstm", True, 2, "general", "luong", "entmax15"),
        ("gru", False, 1, "concat", "cgru", "sparsemax"),
    ]
]


# Local attention (Luong et al. 2015, §3.2), with windows narrower than padded_batch's
# sentences, and the location score: each window in each decoder order
LOCAL_ARCHITECTURES = [
    dict(
        rnn=rnn,
        bidirectional=bi,
        layers=layers,
        attention=score,
        order=order,
        attention_window=window,
        window=1,
        **extra,
    )
    for rnn, bi, layers, score, order, window, extra in [
        ("gru", True, 1, "general", "luong", "local_m", {}),
        ("lstm", True, 2, "general", "luong", "local_p", {}),
        ("gru", False, 1, "additive", "bahdanau", "local_p", {}),
        ("lstm", False, 1, "dot", "bahdanau", "local_m", {}),
        ("gru", True, 2, "concat", "cgru", "local_p", {"attention_fn": "sparsemax"}),
        ("gru", True, 1, "location", "luong", "global", {}),
        ("lstm", True, 1, "location", "bahdanau", "local_p", {}),
    ]
]


# Multi-head attention (Chen et al. 2018): each decoder order, over scores with weights of
# their own and without, and a sparse mapping
HEADS_ARCHITECTURES = [
    dict(rnn=rnn, bidirectional=bi, layers=layers, attention=score, order=order, heads=n, **extra)
    for rnn, bi, layers, score, order, n, extra in [
        ("gru", True, 1, "additive", "bahdanau", 2, {}),
        ("lstm", True, 2, "dot", "luong", 4, {}),
        ("gru", False, 1, "general", "cgru", 2, {"attention_fn": "sparsemax"}),
        ("lstm", False, 1, "concat", "bahdanau", 4, {}),
        ("gru", True, 1, "location", "luong", 2, {}),
        ("gru", True, 1, "scaled_dot", "cgru", 8, {}),
    ]
]


def arch_id(arch: dict) -> str:
    bi = "bi" if arch["bidirectional"] else "uni"
    context = "-init_only" if arch.get("context") == "init_only" else ""
    fn = f"-{arch['attention_fn']}" if arch.get("attention_fn", "softmax") != "softmax" else ""
    window = arch.get("attention_window", "global")
    window = f"-{window}{arch['window']}" if window != "global" else ""
    name = f"{arch['rnn']}-{bi}-L{arch['layers']}-{arch['attention']}-{arch['order']}"
    heads = f"-h{arch['heads']}" if arch.get("heads", 1) > 1 else ""
    return f"{name}{context}{fn}{window}{heads}"
