"""The network in PyTorch and in Flax: the attention room, the encoder, the decoders in
Bahdanau's, Luong's and the conditional GRU's order, `Seq2Seq`, the output distribution, the
fused loss, batches as tensors, and where tensors live (device, precision, host memory).

    allocator.py          glibc keeps freed memory for reuse
    attention/            The attention room: every attention mechanism as one entry, and what
                          composes them.
    attention_decoder.py  the decoders with attention: Bahdanau's, Luong's and the conditional
                          GRU's order, and the mixture over positions of hard attention
    batch.py              padded id tensors of sentence pairs
    cell.py               the decoder's recurrence, one step at a time
    decoder.py            what every decoder shares: the memory, the readout, the unroll; the
                          vanilla decoder
    device.py             `--device` and `--precision` as a torch device and autocast
    distribution.py       `LogProbs`: what a decoder step says of the next token, and how
                          searches read it
    encoder.py            the packed (bi)RNN encoder
    flax_decoder.py       the decoders in Flax
    flax_device.py        `--device` and `train.device` as a JAX device
    flax_distribution.py  `LogProbs` in JAX
    flax_init.py          PyTorch's initialisation for Flax layers
    flax_rnn.py           the recurrences in Flax, PyTorch's gate layout
    flax_seq2seq.py       `FlaxSeq2Seq`, weight for weight the PyTorch model
    fused.py              a decoder step's per-element work with hand-written backward: the
                          additive score, the GRU's and LSTM's gates
    loss.py               cross-entropy fused with the projection; guided alignment's loss
    seq2seq.py            `Seq2Seq`: encoder, decoder, special ids; the dimension key
"""
