"""Flower Datasets' partitioners through turnout give exactly the client index sets Flower gives, seed for seed."""

from __future__ import annotations

import numpy as np
import pytest

datasets = pytest.importorskip("datasets")
fp = pytest.importorskip("flwr_datasets.partitioner")

from turnout.core.errors import ConfigError  # noqa: E402
from turnout.runs.experiment import prepare  # noqa: E402
from turnout.sim.composition import expand  # noqa: E402

N = 900


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A saved DatasetDict whose input column is each row's own number, so loaded rows name their source row."""
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 10, N)
    writers = rng.integers(0, 25, N)

    def split(n, lab, wr):
        return datasets.Dataset.from_dict(
            {"row": [[float(i)] for i in range(n)], "label": lab.tolist(), "writer": [f"w{w:02d}" for w in wr]},
            features=datasets.Features({"row": datasets.Sequence(datasets.Value("float32")),
                                        "label": datasets.ClassLabel(num_classes=10),
                                        "writer": datasets.Value("string")}))

    train = split(N, labels, writers)
    path = tmp_path_factory.mktemp("flower") / "dd"
    datasets.DatasetDict({"train": train, "test": split(50, labels[:50], writers[:50])}).save_to_disk(str(path))
    return path, train


def turnout_sets(path, partition: dict, num_clients: int | None = 10, seed: int = 0) -> list[set[int]]:
    data = {"name": "huggingface", "path": str(path), "input": "row", "test_split": "test",
            "client_test_fraction": 0.0, "partition": partition}
    if num_clients is not None:
        data["num_clients"] = num_clients
    variants = expand({"name": "f", "rounds": 1, "seeds": [seed], "data": data}, None)
    d = prepare(variants).dataset_for(variants[0], seed)
    return [set(d.client_train(k)[0][:, 0].astype(int).tolist()) for k in range(d.num_clients)]


def flower_sets(train, partitioner) -> list[set[int]]:
    partitioner.dataset = train.add_column("idx", list(range(len(train))))
    return [set(partitioner.load_partition(i)["idx"]) for i in range(partitioner.num_partitions)]


@pytest.mark.parametrize("seed", [42, 7])
def test_dirichlet_partitioner_matches_flower(saved, seed):
    path, train = saved
    opts = {"partition_by": "label", "alpha": 0.5, "min_partition_size": 5, "seed": seed}
    ours = turnout_sets(path, {"name": "flower", "partitioner": "DirichletPartitioner", "options": opts})
    theirs = flower_sets(train, fp.DirichletPartitioner(num_partitions=10, **opts))
    assert ours == theirs
    assert sorted(len(s) for s in ours) != [N // 10] * 10  # label skew makes unequal clients: a real Dirichlet draw


def test_iid_partitioner_matches_flower(saved):
    path, train = saved
    ours = turnout_sets(path, {"name": "flower", "partitioner": "IidPartitioner"})
    assert ours == flower_sets(train, fp.IidPartitioner(num_partitions=10))
    assert [len(s) for s in ours] == [90] * 10


def test_shard_partitioner_matches_flower(saved):
    path, train = saved
    opts = {"partition_by": "label", "num_shards_per_partition": 2, "seed": 3}
    ours = turnout_sets(path, {"name": "flower", "partitioner": "ShardPartitioner", "options": opts})
    assert ours == flower_sets(train, fp.ShardPartitioner(num_partitions=10, **opts))


def test_natural_id_partitioner_equals_flowers_and_turnouts_natural_partition(saved):
    path, train = saved
    flower = turnout_sets(path, {"name": "flower", "partitioner": "NaturalIdPartitioner",
                                 "options": {"partition_by": "writer"}}, num_clients=None)
    assert flower == flower_sets(train, fp.NaturalIdPartitioner(partition_by="writer"))
    ours = turnout_sets(path, {"name": "natural", "by": "writer"}, num_clients=None)
    assert sorted(map(sorted, ours)) == sorted(map(sorted, flower)) and len(ours) == 25


def test_seed_left_out_follows_the_run_seed(saved):
    path, _ = saved
    block = {"name": "flower", "partitioner": "DirichletPartitioner",
             "options": {"partition_by": "label", "alpha": 0.5, "min_partition_size": 5}}
    assert turnout_sets(path, block, seed=0) == turnout_sets(path, block, seed=0)
    assert turnout_sets(path, block, seed=0) != turnout_sets(path, block, seed=1)


def test_flower_partitioner_on_a_pooled_dataset_uses_the_labels():
    variants = expand({"name": "f", "rounds": 1, "data": {
        "name": "digits", "num_clients": 8,
        "partition": {"name": "flower", "partitioner": "DirichletPartitioner",
                      "options": {"partition_by": "label", "alpha": 0.3, "seed": 1, "min_partition_size": 5}}}}, None)
    d = prepare(variants).dataset_for(variants[0], 0)
    assert d.num_clients == 8 and (d.n_train + d.n_test >= 5).all()


@pytest.mark.parametrize("block,needle", [
    ({"partitioner": "DirichletPartition"},
     "data.partition.partitioner = 'DirichletPartition': not a row partitioner of flwr_datasets; one of:"),
    ({"partitioner": "DirichletPartitioner", "options": {"partition_by": "label"}},
     "data.partition.options.alpha = None: DirichletPartitioner needs it"),
    ({"partitioner": "IidPartitioner", "options": {"num_partitions": 4}},
     "data.partition.options.num_partitions = 4: is set by data.num_clients"),
    ({"partitioner": "IidPartitioner", "options": {"alpah": 4}},
     "data.partition.options.alpah = 4: IidPartitioner takes no such argument"),
    # Flower's own argument checks, at validation, as one line naming the option
    ({"partitioner": "DirichletPartitioner", "options": {"partition_by": "label", "alpha": "lots"}},
     "data.partition.options.alpha = 'lots': DirichletPartitioner: The given alpha format is not supported"),
    ({"partitioner": "DirichletPartitioner", "options": {"partition_by": "label", "alpha": 0.0}},
     "data.partition.options.alpha = 0.0: DirichletPartitioner: Alpha values should be strictly greater than zero"),
])
def test_bad_flower_blocks_are_refused_with_one_line(block, needle):
    with pytest.raises(ConfigError) as exc:
        expand({"data": {"name": "digits", "partition": {"name": "flower", **block}}}, None)
    assert str(exc.value).startswith(needle) and "\n" not in str(exc.value)


def test_without_flwr_datasets_the_partition_is_refused_naming_the_extra(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "flwr_datasets" else real(name, *a))
    with pytest.raises(ConfigError) as exc:
        expand({"data": {"name": "digits", "partition": {"name": "flower", "partitioner": "IidPartitioner"}}}, None)
    assert str(exc.value).startswith("data.partition.name = 'flower': needs Flower Datasets (flwr-datasets)")
    assert "turnout[flower-datasets]" in str(exc.value)


def test_a_minimum_size_flower_cannot_meet_is_one_line_naming_it():
    """Flower retries its Dirichlet draw, warning each time, then gives up: one line, no warnings, nothing written."""
    variants = expand({"name": "f", "rounds": 1, "data": {
        "name": "digits", "num_clients": 10,
        "partition": {"name": "flower", "partitioner": "DirichletPartitioner",
                      "options": {"partition_by": "label", "alpha": 0.5, "min_partition_size": 1000}}}}, None)
    import warnings

    with warnings.catch_warnings(record=True) as caught, pytest.raises(ConfigError) as exc:
        warnings.simplefilter("always")
        prepare(variants).dataset_for(variants[0], 0)
    message = str(exc.value)
    assert message.startswith("data.partition.options.min_partition_size = 1000: DirichletPartitioner: no draw gave "
                              "every client this many rows") and "\n" not in message
    assert not [w for w in caught if "min_partition_size" in str(w.message)]  # Flower's ten retry warnings


def _digits_with(partition: dict, num_clients: int = 8):
    variants = expand({"name": "f", "rounds": 1, "data": {"name": "digits", "num_clients": num_clients,
                                                          "partition": {"name": "flower", **partition}}}, None)
    return prepare(variants).dataset_for(variants[0], 0)


def test_a_shard_partition_warns_of_nothing_and_a_missing_shard_option_is_named():
    """Flower sorts the rows through `datasets`, whose pyarrow call warns of a deprecation (a FutureWarning each
    run): not the user's to read. Without shard_size or num_shards_per_partition Flower refuses at load time."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        d = _digits_with({"partitioner": "ShardPartitioner",
                          "options": {"partition_by": "label", "num_shards_per_partition": 2, "seed": 3}})
        assert d.num_clients == 8 and (d.n_train + d.n_test > 0).all()
        with pytest.raises(ConfigError) as exc:
            _digits_with({"partitioner": "ShardPartitioner", "options": {"partition_by": "label"}})
    assert not caught, [str(w.message) for w in caught]
    assert str(exc.value).startswith("data.partition.options.shard_size = None: ShardPartitioner: The shard_size "
                                     "needs to be specified if the num_shards_per_partition is None")


def test_distribution_partitioner_takes_its_array_as_a_yaml_list(saved):
    """YAML has lists, DistributionPartitioner wants a numpy array: the list is passed as one (it was refused)."""
    path, train = saved
    table = [[5, 5]] * 10  # 10 labels x (10 clients x 2 labels each / 10 labels) = 2 slots per label
    opts = {"partition_by": "label", "num_unique_labels_per_partition": 2, "preassigned_num_samples_per_label": 1,
            "seed": 4}
    ours = turnout_sets(path, {"name": "flower", "partitioner": "DistributionPartitioner",
                               "options": {**opts, "distribution_array": table}})
    assert ours == flower_sets(train, fp.DistributionPartitioner(num_partitions=10, distribution_array=np.array(table),
                                                                 **opts))
    with pytest.raises(ConfigError) as exc:
        _digits_with({"partitioner": "DistributionPartitioner",
                      "options": {**opts, "distribution_array": [[1], [1, 2]]}})
    assert str(exc.value).startswith("data.partition.options.distribution_array = [[1], [1, 2]]: must be a table of "
                                     "numbers")


@pytest.mark.parametrize("block,num_clients,needle", [
    ({"partitioner": "IdToSizeFncPartitioner", "options": {"partition_id_to_size_fn": "len"}}, 8,
     "data.partition.partitioner = 'IdToSizeFncPartitioner': takes a Python function"),
    ({"partitioner": "SquarePartitioner"}, 100,
     "data.num_clients = 100: SquarePartitioner: The given specification of the parameter num_partitions=100"),
    ({"partitioner": "PathologicalPartitioner",
      "options": {"partition_by": "label", "num_classes_per_partition": 2, "seed": 1.5}}, 8,
     "data.partition.options.seed = 1.5: PathologicalPartitioner takes a whole number or null here"),
    # Flower compares these values: a wrong type was a TypeError that named no option ('<=' not supported ...)
    ({"partitioner": "ContinuousPartitioner", "options": {"partition_by": "label", "strictness": None}}, 8,
     "data.partition.options.strictness = None: ContinuousPartitioner takes a number here"),
    ({"partitioner": "ShardPartitioner", "options": {"partition_by": None, "shard_size": 5}}, 8,
     "data.partition.options.partition_by = None: ShardPartitioner takes a column name (a string, e.g. label) here"),
    ({"partitioner": "GroupedNaturalIdPartitioner", "options": {"partition_by": "label", "group_size": 0}}, 8,
     "data.partition.options.group_size = 0: GroupedNaturalIdPartitioner takes a whole number >= 1 here"),  # was 1/0
    ({"partitioner": "GroupedNaturalIdPartitioner", "options": {"partition_by": "label", "group_size": 2,
                                                                "mode": "strictly"}}, 8,
     "data.partition.options.mode = 'strictly': GroupedNaturalIdPartitioner takes one of 'allow-smaller', "),
    ({"partitioner": "SizePartitioner", "options": {"partition_sizes": [1.5, 2]}}, 8,
     "data.partition.options.partition_sizes = [1.5, 2]: SizePartitioner: All partition sizes must be integers"),
])
def test_flowers_refusals_name_the_option_or_num_clients(block, num_clients, needle):
    with pytest.raises(ConfigError) as exc:
        _digits_with(block, num_clients)
    assert str(exc.value).startswith(needle) and "\n" not in str(exc.value), str(exc.value)


def test_continuous_partitioner_splits_by_a_float_column_as_flower_does(tmp_path):
    """Flower's ContinuousPartitioner splits by a continuous feature: a float column (refused before as 'not ids')."""
    rng = np.random.default_rng(3)
    n = 200
    train = datasets.Dataset.from_dict({"row": [[float(i)] for i in range(n)], "label": rng.integers(0, 4, n).tolist(),
                                        "size": rng.normal(size=n).tolist()})
    test = datasets.Dataset.from_dict({"row": [[0.0]] * 10, "label": [0] * 10, "size": [0.0] * 10})
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(str(tmp_path / "dd"))
    opts = {"partition_by": "size", "strictness": 0.5, "seed": 11}
    ours = turnout_sets(tmp_path / "dd", {"name": "flower", "partitioner": "ContinuousPartitioner", "options": opts},
                        num_clients=5)
    assert ours == flower_sets(train, fp.ContinuousPartitioner(num_partitions=5, **opts))
    assert sorted(map(len, ours)) == [40] * 5
    nan = train.map(lambda r, i: {"size": float("nan") if i == 3 else r["size"]}, with_indices=True)
    datasets.DatasetDict({"train": nan, "test": test}).save_to_disk(str(tmp_path / "nan"))
    with pytest.raises(ConfigError) as exc:
        turnout_sets(tmp_path / "nan", {"name": "flower", "partitioner": "ContinuousPartitioner", "options": opts},
                     num_clients=5)
    assert str(exc.value).startswith("data.partition.options.partition_by = 'size': 1 of 200 rows are NaN")
    # Every float a class of its own: Flower's class priors divide 0 by 0 (numpy warns), then it gives up
    import warnings

    with warnings.catch_warnings(record=True) as caught, pytest.raises(ConfigError) as exc:
        warnings.simplefilter("always")
        turnout_sets(tmp_path / "dd", {"name": "flower", "partitioner": "InnerDirichletPartitioner",
                                       "options": {"partition_by": "size", "alpha": 1.0,
                                                   "partition_sizes": [50, 50, 50]}}, num_clients=None)
    assert not caught, [str(w.message) for w in caught]
    assert str(exc.value).startswith("data.partition.options = {") and "InnerDirichletPartitioner: " in str(exc.value)
