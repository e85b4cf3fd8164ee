"""What the tests share, by what it serves.

Modules:
    config: the real composed config (Hydra's compose, once per list of group choices), TINY, ROOT
    cli: the real `python -m launcher`, in a process of its own (warm or cold) or in this test process
    tracking: MLflow stores made from a migrated template, a real `mlflow server`, an S3-compatible server
    suite: the test process itself: fixed matmul rates, 2 logical CPUs, what each test must leave as it was,
        markers and ordering, the xdist group guard, CPU accounting
    train: in-process training pieces several modules drive: an engine over the real config, a poisonable model
    plugins: installed plugins faked in this process (the entry points the launcher reads)
    pages: the docs' runnable blocks, the files a page shows, its commands in the chains that run them

What tests name by import path (the `*_parts.py` components, `fakes`) and the warm starts (`warm`) stay at the top
of tests/, on the path as the launcher's own processes see it.
"""
