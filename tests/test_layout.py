"""The layout checker: neuron_mpi.check_layout and `neuron-mpi groups` (no MPI)."""
from __future__ import annotations

import json

import numpy as np
import pytest

import neuron_mpi
from neuron_mpi import cli
from neuron_mpi.errors import InvalidArgumentError
from neuron_mpi.layout import parallel_groups
from neuron_mpi.model.predict import predict
from neuron_mpi.algorithms.group import GroupView

ENV = ("NEURON_MPI_INSTANCE", "NEURON_LOGICAL_NC_CONFIG", "NEURON_MPI_NODES")


def call(capsys, *args):
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_trn1_8x4_layout_accepted_and_modeled():
    rep = neuron_mpi.check_layout("trn1.32xlarge", tp=8, size=1 << 20)
    assert rep.accepted
    kinds = {k.kind: k for k in rep.kinds}
    assert set(kinds) == {"tp", "dp"}
    assert kinds["dp"].groups[0] == [0, 8, 16, 24]
    assert kinds["tp"].groups[1] == list(range(8, 16))
    topo = neuron_mpi.topology("trn1.32xlarge")
    for k in rep.kinds:
        # all the kind's groups at once: never less than one of them alone
        want = predict("all_reduce", 1 << 20, "trn1.32xlarge", groups=k.groups)
        alone = predict("all_reduce", 1 << 20, view=GroupView(topo, k.groups[0]))
        assert k.times_us["all_reduce"] == pytest.approx(want.time_us)
        assert k.times_us["all_reduce"] >= alone.time_us * (1 - 1e-12)
        assert k.algorithms["all_reduce"] == want.algorithm
        assert k.times_us["all_gather"] > 0
    # the 8 DP groups' rings share the column links: dearer together than alone
    dp = kinds["dp"]
    alone = predict("all_reduce", 1 << 20, view=GroupView(topo, dp.groups[0]))
    assert dp.times_us["all_reduce"] > 1.1 * alone.time_us


def test_refused_group_is_reported_with_the_runtime_message():
    rep = neuron_mpi.check_layout("trn1.32xlarge",
                                  replica_groups=[list(range(1, 16, 2))], model=False)
    assert not rep.accepted
    (v,) = rep.refused
    assert "CC not permitted on this group" in v.message
    assert "issue 761" in v.source


@pytest.mark.parametrize("tp", [4, 8, 16, 32, 64])
def test_trn2_tp_with_dp_accepted(tp):
    rep = neuron_mpi.check_layout("trn2.48xlarge", 2, tp=tp, model=False)
    assert rep.accepted, [v.message for v in rep.refused]


def test_trn2_tp32_uses_neuronx_distributed_rows():
    g = parallel_groups(neuron_mpi.topology("trn2.48xlarge", 2), 32)
    assert g["tp"][0] == list(range(16)) + list(range(48, 64))
    assert g["dp"][0] == [0, 16]
    # the plain blocks would leave DP pairs two rows apart: refused
    rep = neuron_mpi.check_layout("trn2.48xlarge", 2, replica_groups=[[0, 32]], model=False)
    assert not rep.accepted


def test_trn1_tp4_is_one_rank_per_column_chip():
    g = parallel_groups(neuron_mpi.topology("trn1.32xlarge", 1, 2), 4)
    assert g["tp"][:2] == [[0, 8, 16, 24], [1, 9, 17, 25]]
    assert g["dp"][0] == list(range(8)) + list(range(32, 40))


def test_pp_groups_and_sizes():
    g = parallel_groups(neuron_mpi.topology("trn1.32xlarge"), 8, pp=2)
    assert g["pp"][0] == [0, 16] and g["dp"][0] == [0, 8] and g["dp"][-1] == [23, 31]
    # nxd's example 1: TP 8 x PP 4, PP groups [0, 8, 16, 24]
    rep = neuron_mpi.check_layout("trn1.32xlarge", tp=8, pp=4, model=False)
    assert rep.accepted and [k.kind for k in rep.kinds] == ["tp", "pp"]
    assert rep.kinds[1].groups[0] == [0, 8, 16, 24]


@pytest.mark.parametrize("kwargs,match", [
    (dict(tp=3), "tp:"), (dict(tp=8, dp=3), "tp:"), (dict(tp=0), "tp:"),
    (dict(replica_groups=[[0, 99]]), r"replica_groups\[0\]: .* got 99"),
    (dict(replica_groups=[[0, 1], [1, 2]]), "replica_groups: rank 1 .* more than one"),
    (dict(replica_groups=[[0, 1, 0]]), "replica_groups: rank 0 appears twice in group 0"),
    (dict(replica_groups=[[0, 1], [2, 3, 4, 5]]), "replica_groups: .* one size, got sizes 2, 4"),
    (dict(replica_groups=[]), "replica_groups:"), (dict(), "exactly one"),
    (dict(tp=8, size=0), "size:"), (dict(tp=8, pp=0), "pp:"),
])
def test_bad_arguments_name_the_argument(kwargs, match):
    with pytest.raises(InvalidArgumentError, match=match):
        neuron_mpi.check_layout("trn1.32xlarge", model=False, **kwargs)


def test_replica_groups_take_what_split_takes():
    """numpy integers and ranges, as Communicator.split takes them."""
    rep = neuron_mpi.check_layout("trn1.32xlarge", model=False,
                                  replica_groups=[range(0, 8), np.arange(8, 16)])
    assert rep.accepted and rep.kinds[0].groups == [list(range(8)), list(range(8, 16))]
    assert all(type(r) is int for g in rep.kinds[0].groups for r in g)


@pytest.mark.parametrize("lnc,tp", [(2, 32), (1, 64)])
def test_ultraserver_tp_rows_per_server(lnc, tp):
    """TP=32 at LNC=2 (TP=64 at LNC=1) on the UltraServer: rows 0+3 and 1+2 of each of
    its 4 servers' tori, as on a trn2.48xlarge (the node holds 4 servers)."""
    topo = neuron_mpi.topology("trn2-ultraserver", lnc)
    g = parallel_groups(topo, tp)
    server, row = 16 * topo.ranks_per_chip, 4 * topo.ranks_per_chip
    assert len(g["tp"]) == 8 and all(len(x) == tp for x in g["tp"])
    for s in range(4):
        b = s * server
        assert g["tp"][2 * s] == list(range(b, b + row)) + list(range(b + 3 * row, b + server))
        assert g["tp"][2 * s + 1] == list(range(b + row, b + 3 * row))
    assert sorted(r for x in g["dp"] for r in x) == list(range(topo.size))
    assert all(len(x) == 8 for x in g["dp"])


# --- the command ---------------------------------------------------------------------
def test_cli_accepted_layout_exits_0(capsys):
    code, out, err = call(capsys, "groups", "--instance", "trn1.32xlarge", "--tp", "8",
                          "--dp", "4", "--size", "64MB")
    assert code == 0, err
    assert "accepted [0, 8, 16, 24]: one rank on each chip of a torus column" in out
    assert "dp: 8 groups of 4, 8 accepted; modeled all_reduce" in out
    assert "all groups accepted" in out and "[seed-trn1]" in out and "sources:" in out


def test_cli_refused_group_exits_1(capsys):
    code, out, err = call(capsys, "groups", "--instance", "trn1.32xlarge",
                          "--replica-groups", "[[1,3,5,7,9,11,13,15],[16,17,18,19,20,21,22,23]]")
    assert code == 1
    assert "refused  [1, 3, 5, 7, 9, 11, 13, 15]: CC not permitted on this group" in out
    assert "accepted [16, 17, 18, 19, 20, 21, 22, 23]" in out and "1 group(s) refused" in out
    assert "optimum-neuron issue 761" in out


def test_cli_takes_nccom_tests_replica_groups_file(capsys, tmp_path):
    f = tmp_path / "g.json"
    f.write_text(json.dumps({"replica_groups": [[[0, 1], [2, 3]]]}))
    code, out, err = call(capsys, "groups", "--instance", "trn1.32xlarge",
                          "--replica-groups", str(f), "--size", "1MB")
    assert code == 0, err
    assert "replica_groups: 2 groups of 2, 2 accepted" in out


def test_cli_json(capsys, tmp_path):
    f = tmp_path / "g.json"
    f.write_text(json.dumps([[0, 16]]))
    code, out, _ = call(capsys, "groups", "--instance", "trn2.48xlarge", "--lnc", "2",
                        "--replica-groups", str(f), "--format", "json", "--size", "1MB")
    assert code == 0
    j = json.loads(out)
    assert j["accepted"] and j["size"] == 1 << 20
    (k,) = j["kinds"]
    assert k["groups"][0]["rule"] and k["modeled_time_us"]["all_reduce"] > 0


@pytest.mark.parametrize("args,match", [
    ((), "exactly one of --tp or --replica-groups"),
    (("--tp", "8", "--replica-groups", "[[0]]"), "exactly one"),
    (("--replica-groups", "[[0,1]]", "--dp", "2"), "--pp and --dp go with --tp"),
    (("--replica-groups", "[[0,"), "--replica-groups: inline JSON is not valid JSON"),
    (("--replica-groups", "groups.json"), "'groups.json' is neither an existing file nor"),
    (("--replica-groups", "."), "--replica-groups: cannot read '.'"),
    (("--replica-groups", "[[0,1],[2,3,4,5]]"), "same size, got sizes 2, 4"),
    (("--replica-groups", '{"groups": [[0, 1]]}'), "expected a 'replica_groups' entry"),
    (("--tp", "8", "--pp", "0"), "pp:"),
    (("--tp", "8", "--size", "lots"), "invalid size"),
    (("--tp", "5"), "tp:"),
    (("--tp", "8", "--instance", "trn9"), "trn9"),
])
def test_cli_usage_errors_exit_2(capsys, args, match):
    code, out, err = call(capsys, "groups", *args)
    assert code == 2 and out == ""
    assert match in err and err.startswith("neuron-mpi: error:")
