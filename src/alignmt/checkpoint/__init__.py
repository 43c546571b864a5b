"""Run folders: the checkpoint format and snapshots (`format`, no torch), atomic writes
(`rundir`, no torch), and the PyTorch loader and saver on top (`torch_io`)."""
