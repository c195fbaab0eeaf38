"""The host side of a run: the chunk loop and the protocol it drives, the run folder,
checkpoints, metric sinks, locks, caches and guards (signals, non-finite numbers)."""
