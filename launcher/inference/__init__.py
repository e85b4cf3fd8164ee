"""A trained run's model put to use: `mode=eval` on a split, `mode=predict` on a split or on files, in bounded
memory.

Apart from `launch` because it trains nothing: it finds a finished run (`launch.find_run`), runs in the same shell
(`launch.shell`) after the same review (`launch.review`), and predicts through the SavedModel `export` writes.

Modules:
    batch_files: `mode=predict eval.input=`: a folder of images or TFRecord files, a chunk at a time
    batch_inputs: `mode=predict eval.input=`: a CSV or Parquet table, checked against the served inputs, in chunks
    batch_outputs: `mode=predict`: a file's or a split's predictions written a chunk at a time (Parquet, CSV) or npz
    batch_predict: `mode=predict eval.input=`: a file or folder through the run's SavedModel, in bounded memory
    evaluate: `mode=eval` and `mode=predict`: a trained run's model on a split, logged beside it

May import: every stage below it (`config`, `plan`, `train`, `tracking`, `export`, `launch`) and the leaf modules
(`contract`, `files`, `console`, `outcome`). Never `launcher.sweep` or `launcher.doctor`.
"""
