"""Training: the loop and its two backends (PyTorch, Flax), the optimiser and its schedule,
the micro-batches each process trains on, torchrun/DDP, validation and the run log.

    batches.py        global micro-batches, and this process's share
    cores.py          the threads to compute with: the cores other processes leave free
    distributed.py    torchrun, DDP, stopping together
    flax_backend.py   the Flax backend: `train.engine=flax`
    flax_optim.py     optax's clipped Adam and one compiled update
    graphs.py         CUDA graphs over the decoder's unroll
    loop.py           the loop, and the `Backend` protocol
    optim.py          Adam, the schedule, one update
    report.py         progress on stderr: a bar on a terminal, lines elsewhere; the time left
    run.py            `train()`: the one start of both backends; guided links; the shortlist
    runlog.py         `metrics.jsonl`, TensorBoard, `curves.png`
    start.py          claiming the folder, seeding, preparing the data
    torch_backend.py  the PyTorch backend: its begin, update, validation loss, resume
    validate.py       validation of either backend: loss and greedy BLEU
"""
