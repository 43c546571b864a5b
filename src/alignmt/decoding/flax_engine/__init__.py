"""The flax engine: decoding a `FlaxSeq2Seq` with JAX, no torch.

batch.py        source ids padded to bucketed shapes, and a compiled search's outputs as
                hypotheses
engine.py       `FlaxEngine`
ensemble.py     Flax models decoding as one, by their mean log-probabilities
relevance.py    attribution with `jax.grad`: gradient × input, integrated gradients, erasure
sample.py       sampling's draws inside the compiled greedy loop
search.py       greedy and beam search compiled by XLA, and sampling in greedy's loop
shortlisted.py  a Flax model decoding over a lexical shortlist
"""
