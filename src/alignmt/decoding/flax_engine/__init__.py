"""The flax engine: decoding a `FlaxSeq2Seq` with JAX, no torch.

engine.py   FlaxEngine, as the translator drives it
search.py   greedy and beam search, each a `jax.lax.while_loop` compiled per shape
"""
