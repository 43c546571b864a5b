"""The flax engine: decoding a `FlaxSeq2Seq` with JAX, no torch.

engine.py  `FlaxEngine`
search.py  greedy and beam search compiled by XLA
"""
