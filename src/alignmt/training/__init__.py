"""Training: the loop and its two backends (PyTorch, Flax), the optimiser and its schedule,
the micro-batches each process trains on, torchrun/DDP, validation and the run log."""
