"""gpufleet's tests: a package imported from the repository root (pytest's ``pythonpath``); benches run
as ``python -m tests.bench.NAME``."""
