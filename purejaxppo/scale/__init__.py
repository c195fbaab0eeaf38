"""Scaling out the one step: the runs axis (seeds, sweeps), sharding over devices, and the
population-based-training stage. Pure functions over pytrees with a leading runs axis."""
