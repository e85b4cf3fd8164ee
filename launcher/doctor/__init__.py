"""`mode=doctor`: short trials of a config that find why it breaks and verify the fix.

`trials` runs one short, untracked training of a config variant in this process; `inspect`
replays a failing step layer by layer and scans a model for float16 risks; `diagnose` (pure)
judges trials against the float32 one-device baseline and proposes fixes; `report` writes the
Markdown, the console table and the loss-scale plot; `doctor` runs the whole examination and
`launch` is its CLI task (run-dir lock, files, MLflow run, exit code).

May import: `config`, `plan`, `train`, `run` (the review and the runtime a launch uses),
`tracking` and the leaf modules.
"""
