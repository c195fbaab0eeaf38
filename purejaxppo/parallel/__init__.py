"""Many runs in one program and one program over many devices: the leading runs axis (seeds and
swept members, :mod:`~purejaxppo.parallel.runs_axis`) and the sharding of the one step over
devices (:mod:`~purejaxppo.parallel.sharding`). Pure functions over pytrees with a leading runs
axis; no training step is written here."""
