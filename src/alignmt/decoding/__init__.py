"""Decoding a trained model: greedy and beam search, the rows of a continuously refilled
batch, packed matmuls for the CPU, step-by-step tracing for the explorer, and `Translator`,
which goes from raw text to translations."""
