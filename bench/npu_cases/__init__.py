"""Generated cases under torch_npu: small PyTorch workloads whose hazards matter under torch_npu autocast, split
into a development and a held-out set, with a brute-force oracle over precision-policy rule sets.

    generator.py   make_case(seed) -> NpuCase (deterministic)
    suite.py       the fixed seed lists: DEV_SEEDS, HOLDOUT_SEEDS
    oracle.py      python -m bench.npu_cases.oracle --set dev|holdout --out FILE

Documentation: docs/benchmarks.md, section "Generated cases under torch_npu".
"""
