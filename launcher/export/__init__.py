"""The trained model as files a person, a server or a device uses: `model.keras`, `best.keras`, the SavedModel,
TFLite and the MLflow model.

Apart from `launch` because the exports are their own concern (formats, signatures, the code MLflow serves) and
`inference` reads what they write: a batch of predictions goes through the same SavedModel a server answers with.

Modules:
    mlflow_model: the MLflow model: the SavedModel's served function as a pyfunc, signature, raw example
    served_pyfunc: the code MLflow runs to serve a run's SavedModel (never imports the launcher)
    serving: exports a server or a device runs: a TensorFlow SavedModel and a TFLite file
    trained: the trained model as files: `model.keras`, `best.keras`, serving formats, MLflow model
    yours: export formats of a person's or a plugin's own (launcher.exports): a writer called with the model

May import: `config`, `train` (the model's preprocessing and its EMA weights) and the leaf modules (`contract`,
`files`, `console`: TensorFlow's C++ notes set aside). Never `launch`, `inference`, `tracking` or `sweep`: the
launch logs what the exports write.
"""
