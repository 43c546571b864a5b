"""The torch engine: decoding a PyTorch `Seq2Seq` (or an ensemble of them).

engine.py       TorchEngine, as the translator drives it
search.py       greedy search, sampling and beam search behind one door (`search`)
settings.py     Search: the one value a search reads
greedy.py       greedy search and sampling's loop; beam.py: beam search's parts
rows.py         the rows of a continuously refilled batch (refill)
steps.py        what both searches make of a step; sample.py: temperature, top-k, top-p
constraints.py  lexically constrained beam search (dynamic beam allocation)
ensemble.py     several models as one
packed.py       MKL packed matmuls, and int8 ones (int8.py)
shortlist.py    the projection over a lexical shortlist; speed.py chooses int8 and it
trace.py        the decoder step by step, and beam search as a tree
export.py       the model as ONNX graphs, which the onnxruntime engine runs
"""
