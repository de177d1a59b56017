"""Names vulture reports as unused (60 % confidence) that are used in ways it cannot see.  Never run; vulture
reads it beside the package:

    vulture advisor tools/vulture_whitelist.py --min-confidence 60
"""
# ruff: noqa
# flake8: noqa

# typer calls these: registered by decorator (app.callback, app.command) in cli.py and commands/*.py
_root
compare
diff_cmd
inspect_cmd
lint
recommend_cmd
replay_cmd

# PEP 562 module __getattr__: the lazy re-exports of advisor and advisor.ingest
__getattr__

# public API of advisor.ingest (listed in its __all__ through _EXPORTS)
infer_edges

# Mixlist.gray_remove: read as getattr(self, f"{list}_remove") with the other list/action fields
_.gray_remove

# RunResult.duration_s: written to the tune journal by asdict() (docs/tune.md)
_.duration_s

# a TensorFlow ConfigProto field: set to run the graphs exactly as written (grappler off)
_.disable_meta_optimizer

# StepsVerdict fields: compare's JSON (training_steps) by asdict(), docs/cli.md
_.overflow_steps
_.max_drift
_.skipped_steps
