"""What MLflow's views get beyond params and metrics (`launcher.launch.mlflow_record`): the data as dataset inputs,
for every form a loader may hand over (one array, named features, a tuple of features, weighted examples)."""

from __future__ import annotations

import json
import types

import numpy as np

from launcher.launch.mlflow_record import dataset_inputs

CONFIG = types.SimpleNamespace(name="mine", path="")


def test_named_features_several_heads_and_weights_become_dataset_inputs_with_a_field_per_feature():
    features = {"age": np.ones((4, 1), "float32"), "dose": np.zeros((4, 2), "float32")}
    heads = {"kind": np.array([0, 1, 0, 1]), "size": np.ones(4, "float32")}
    val = ((np.ones((2, 3), "float32"), np.ones((2, 1), "float32")), np.array([0, 1]))  # a tuple of features
    source = types.SimpleNamespace(train=(features, heads, np.ones(4, "float32")), val=val)
    found = dataset_inputs(source, CONFIG)
    assert [(d["context"], d["name"]) for d in found] == [
        ("training", "mine-training"),
        ("validation", "mine-validation"),
    ]
    assert "age" in found[0]["schema"] and "dose" in found[0]["schema"]
    assert "input_0" in found[1]["schema"] and "input_1" in found[1]["schema"]


def test_one_array_stays_one_unnamed_field_as_before():
    source = types.SimpleNamespace(
        train=(np.ones((4, 3), "float32"), np.arange(4)), val=(np.ones((2, 3)), np.arange(2))
    )
    found = dataset_inputs(source, CONFIG)
    assert len(found) == 2
    features = json.loads(json.loads(found[0]["schema"])["mlflow_tensorspec"]["features"])
    assert features == [{"type": "tensor", "tensor-spec": {"dtype": "float32", "shape": [-1, 3]}}]  # no name
