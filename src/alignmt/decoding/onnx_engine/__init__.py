"""The onnxruntime engine: decoding a folder `alignmt export` wrote, with ONNX Runtime and
NumPy, neither torch nor JAX.

    model.py    the manifest and the two graphs as ONNX Runtime sessions
    search.py   greedy and beam search, their candidates and back-trace, in NumPy
    rows.py     the rows of a continuously refilled batch (continuous batching)
    engine.py   OnnxEngine, as the translator drives it
    int8.py     the int8 copies of the graphs that `alignmt export --int8` writes
"""
