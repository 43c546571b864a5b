"""Training: the loop, the optimiser and its schedule, the micro-batches each process
trains on, torchrun/DDP, validation and the run log."""
