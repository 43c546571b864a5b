"""The torch engine: decoding a PyTorch `Seq2Seq` (or an ensemble of them).

beam.py         beam search's bookkeeping, candidates and back-trace
constraints.py  constrained beam search by dynamic beam allocation
engine.py       `TorchEngine`
ensemble.py     several models decoding as one
export.py       the model as two ONNX graphs and a manifest
greedy.py       greedy search and sampling's loop
int8.py         int8 matmuls for decoding
packed.py       MKL packed matmuls, and int8 ones in place
plan.py         `SearchPlan`: the one value a search reads
relevance.py    teacher-forced attention and attribution (shift-att, gradient × input,
                integrated gradients, erasure), and the what-if
rows.py         the rows of a continuously refilled batch
sample.py       temperature, top-k and top-p draws
search.py       greedy, sampling and beam search behind one door
shortlist.py    the projection over a lexical shortlist
speed.py        int8 and the shortlist chosen, checked and put in place
steps.py        what both searches make of a step
trace.py        the decoder step by step, and beam search as a tree, with constraints and
                packed matmuls
"""
