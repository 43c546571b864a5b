"""The onnxruntime engine: decoding a folder `alignmt export` wrote, with ONNX Runtime and
NumPy, neither torch nor JAX.

    engine.py       `OnnxEngine`
    ensemble.py     exported models decoding as one, by their mean log-probabilities
    int8.py         the int8 copies of the graphs (`alignmt export --int8`)
    model.py        the manifest and the two graphs as ONNX Runtime sessions
    rows.py         the rows of a continuously refilled batch, in NumPy
    search.py       greedy and beam search, their candidates and back-trace, in NumPy
    shortlisted.py  an exported model decoding over a lexical shortlist
    stored_int8.py  weights stored in int8, arithmetic in float32 (a site too big with float32)
"""
