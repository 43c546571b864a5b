"""Decoding a trained model: one translator over three engines.

Framework-free, the spine every engine shares:

    door.py         open_translator: a run folder, checkpoint, ensemble or exported folder
    translator.py   Translator: raw text in, translations out; sorting, groups, n-best, words
    engine.py       what an engine implements, and the table of what each can do
    results.py      Hypothesis, Translation, and the step-by-step and beam-tree records
    rules.py        the length limit, length penalty and stopping rule every search follows
    words.py        alignments, <unk> replacement, constraint phrases as ids
    constraint.py   one sentence's lexical constraints
    exported.py     what a folder `alignmt export` wrote holds, and its graphs' names

One subpackage per engine, each importing its framework and nothing of the others:

    torch_engine/   PyTorch: search with continuous batching, int8, shortlist, sampling,
                    constraints, ensembles, step-through and the beam tree; ONNX export
    flax_engine/    JAX/Flax: greedy and beam search compiled by XLA
    onnx_engine/    ONNX Runtime and NumPy: exported graphs, greedy and beam search

Nothing is imported here, so that a module of the spine loads no framework.
"""
