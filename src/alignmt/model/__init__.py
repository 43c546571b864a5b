"""The network in PyTorch: attention scorers, encoder, decoders in Bahdanau's and Luong's
order, `Seq2Seq`, the fused loss, batches as tensors, and where tensors live (device,
precision, host memory)."""
