"""Decoding a trained model: one translator over three engines (and the browser's, whose
JavaScript is answers/static/web/). The modules are the framework-free spine every engine
shares; each engine is a subpackage that imports its framework and nothing of the others.
Nothing is imported here, so that a module of the spine loads no framework.

    banks.py        constrained beam search's candidates in NumPy, by dynamic beam allocation
    beams.py        beam search's step in NumPy: candidates, ended hypotheses, when a sentence
                    stops
    constraint.py   one sentence's lexical constraints as ids, and whether an output meets them
    door.py         `open_translator`: any model folder, checkpoint or ensemble, on its engine
    engine.py       what an engine implements, and the table of what each engine can do
    exported.py     what an exported folder holds, and its graphs' names
    flax_engine/    The flax engine: decoding a `FlaxSeq2Seq` with JAX, no torch.
    forced.py       teacher-forced attention and the what-if over any engine's step
    onnx_engine/    The onnxruntime engine: decoding a folder `alignmt export` wrote, with ONNX
                    Runtime and NumPy, neither torch nor JAX.
    results.py      `Hypothesis`, `Translation`, the step-by-step and beam-tree records
    rules.py        the length limit, length penalty and stopping rule every search follows
    sample.py       sampling over any engine's step, in NumPy: temperature, top-k and top-p
                    draws
    shortlisted.py  a shortlist's allowed words, and a step renormalised over them, on any
                    engine
    torch_engine/   The torch engine: decoding a PyTorch `Seq2Seq` (or an ensemble of them).
    translator.py   `Translator`: raw text to translations over any engine
    walk.py         the decoder step by step, and beam search as a tree, over any engine's step
    words.py        alignments, `<unk>` replacement, constraint phrases and prefixes as ids
"""
