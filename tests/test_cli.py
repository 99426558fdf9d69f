"""`neuron-mpi topo`: JSON schema, the text picture, and one-line errors."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

import neuron_mpi
from neuron_mpi import cli
from neuron_mpi.render import render_text
from env_helpers import child_env

ENV = ("NEURON_MPI_INSTANCE", "NEURON_LOGICAL_NC_CONFIG", "NEURON_MPI_NODES")
KINDS = {"intra-chip", "neuronlink", "neuronlink-z", "efa"}


def run_cli(*args, **env):
    return subprocess.run([sys.executable, "-m", "neuron_mpi", *args], capture_output=True,
                          text=True, env=child_env(ENV, **env), timeout=60)


def call(capsys, *args):
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def _check_schema(j: dict) -> None:
    assert set(j) == {"instance", "lnc", "nodes", "ranks", "links", "rings"}
    assert isinstance(j["instance"], str)
    assert type(j["lnc"]) is int and type(j["nodes"]) is int
    for r in j["ranks"]:
        assert set(r) == {"rank", "node", "chip", "core", "coords"}
        assert all(type(r[k]) is int for k in ("rank", "node", "chip", "core"))
        assert isinstance(r["coords"], list) and all(type(c) is int for c in r["coords"])
    assert [r["rank"] for r in j["ranks"]] == list(range(len(j["ranks"])))
    for lk in j["links"]:
        assert set(lk) == {"a", "b", "kind", "bandwidth_GBps", "latency_us"}
        assert type(lk["a"]) is int and type(lk["b"]) is int
        assert lk["kind"] in KINDS
        assert isinstance(lk["bandwidth_GBps"], (int, float)) and lk["bandwidth_GBps"] > 0
        assert isinstance(lk["latency_us"], (int, float)) and lk["latency_us"] > 0
    assert isinstance(j["rings"], list)
    for ring in j["rings"]:
        assert sorted(ring) == list(range(len(j["ranks"])))


# --- JSON ----------------------------------------------------------------------------
def test_json_subprocess_default_is_trn2():
    res = run_cli("topo", "--format", "json")
    assert res.returncode == 0, res.stderr
    j = json.loads(res.stdout)
    _check_schema(j)
    assert (j["instance"], j["lnc"], j["nodes"]) == ("trn2.48xlarge", 2, 1)
    assert len(j["ranks"]) == 64
    assert len({r["chip"] for r in j["ranks"]}) == 16
    assert sum(lk["kind"] == "neuronlink" for lk in j["links"]) == 32
    assert len(j["rings"]) == 2


def test_json_equals_to_json(capsys):
    code, out, err = call(capsys, "topo", "--instance", "trn1.32xlarge", "--nodes", "2",
                          "--format", "json")
    assert code == 0 and err == ""
    assert json.loads(out) == neuron_mpi.topology("trn1.32xlarge", 1, 2).to_json()


@pytest.mark.parametrize("args,ranks,chips", [
    (["--lnc", "1"], 128, 16),
    (["--instance", "trn2-ultraserver"], 256, 64),
    (["--instance", "inf2.48xlarge"], 24, 12),
    (["--instance", "trn1.2xlarge"], 2, 1),
    (["--instance", "trn2.48xlarge", "--nodes", "2"], 128, 16),
    (["-n", "12"], 12, 3),
])
def test_json_sizes(capsys, args, ranks, chips):
    code, out, _ = call(capsys, "topo", "--format", "json", *args)
    assert code == 0
    j = json.loads(out)
    _check_schema(j)
    assert len(j["ranks"]) == ranks
    assert len({r["chip"] for r in j["ranks"]}) == chips


def test_json_ultraserver_z_links(capsys):
    code, out, _ = call(capsys, "topo", "--instance", "trn2-ultraserver", "--format", "json")
    j = json.loads(out)
    degree = {}
    for lk in j["links"]:
        if lk["kind"] in ("neuronlink", "neuronlink-z"):
            for c in (lk["a"], lk["b"]):
                degree[c] = degree.get(c, 0) + 1
    assert len(degree) == 64 and set(degree.values()) == {6}


def test_inf2_json_one_ring(capsys):
    code, out, _ = call(capsys, "topo", "--instance", "inf2.48xlarge", "--format", "json")
    j = json.loads(out)
    assert len(j["rings"]) == 1 and j["rings"][0] == list(range(24))


def test_env_supplies_defaults(capsys, monkeypatch):
    monkeypatch.setenv("NEURON_MPI_INSTANCE", "trn1.32xlarge")
    monkeypatch.setenv("NEURON_MPI_NODES", "2")
    code, out, _ = call(capsys, "topo", "--format", "json")
    assert code == 0
    j = json.loads(out)
    assert (j["instance"], j["nodes"], len(j["ranks"])) == ("trn1.32xlarge", 2, 64)


def test_args_beat_env(capsys, monkeypatch):
    monkeypatch.setenv("NEURON_MPI_INSTANCE", "trn1.32xlarge")
    code, out, _ = call(capsys, "topo", "--instance", "inf2.24xlarge", "--format", "json")
    assert code == 0 and json.loads(out)["instance"] == "inf2.24xlarge"


# --- text ----------------------------------------------------------------------------
def test_text_subprocess_trn2():
    res = run_cli("topo")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert out.splitlines()[0].startswith("trn2.48xlarge: LNC=2, 1 node, 64 ranks, 16 chips")
    assert "| c0 [0-3]" in out and "c5 [20-23]" in out and "c15 [60-63]" in out
    assert "---" in out and "wrap" in out
    assert "ring 0: c0 -> " in out and "ring 1: c0 -> " in out
    assert "neuronlink" in out and "GB/s" in out and " us" in out
    assert all(len(line) <= 100 for line in out.splitlines())


@pytest.mark.parametrize("name,lnc", [(name, lnc) for name, spec in
                                      neuron_mpi.catalog.CATALOG.items()
                                      for lnc in spec.lnc_values])
def test_text_every_instance_fits_100_columns(name, lnc):
    spec = neuron_mpi.catalog.CATALOG[name]
    for nodes in ((1, 2) if spec.efa else (1,)):
        out = render_text(neuron_mpi.topology(name, lnc, nodes))
        lines = out.splitlines()
        assert all(len(line) <= 100 for line in lines), name
        assert "ring 0: " in out and "links (" in out
        assert f"{name}: LNC={lnc}" in lines[0]


def test_text_inf2_ring(capsys):
    code, out, _ = call(capsys, "topo", "--instance", "inf2.48xlarge")
    assert code == 0
    assert "c0 [0-1]" in out and "c11 [22-23]" in out
    assert "ring 0: c0 -> c1 -> c2" in out and "c11 -> c0" in out
    assert "closes the ring" in out


def test_text_ultraserver_layers(capsys):
    code, out, _ = call(capsys, "topo", "--instance", "trn2-ultraserver")
    assert code == 0
    for z in range(4):
        assert f"server z={z}" in out
    assert "Z links" in out and "neuronlink-z" in out
    assert "c63 [252-255]" in out


def test_text_single_chip_shows_cores(capsys):
    code, out, _ = call(capsys, "topo", "--instance", "trn1.2xlarge")
    assert code == 0
    assert "logical core 0" in out and "rank 1" in out


def test_text_two_nodes_show_efa(capsys):
    code, out, _ = call(capsys, "topo", "--nodes", "2")
    assert code == 0
    assert "node 1: ranks 64-127" in out and "efa" in out
    assert "ring 0: n0.c0 -> " in out


def test_text_small_world_marks_idle_and_routed_steps(capsys):
    code, out, _ = call(capsys, "topo", "-n", "12")
    assert code == 0
    assert "3 of 16 chips in use" in out and "c3 idle" in out
    assert "c2 ~> c0" in out


# --- help and errors -------------------------------------------------------------------
def test_help(capsys):
    res = run_cli("--help")
    assert res.returncode == 0 and "topo" in res.stdout
    with pytest.raises(SystemExit) as info:
        cli.main(["topo", "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--instance", "--lnc", "--nodes", "--format"):
        assert flag in out


def test_no_command_prints_help(capsys):
    code, out, err = call(capsys)
    assert code == 2 and "topo" in err


@pytest.mark.parametrize("args,env,needle", [
    (["topo", "--instance", "trn9.huge"], {}, "unknown instance"),
    (["topo", "--lnc", "3"], {}, "lnc"),
    (["topo", "--instance", "inf2.48xlarge", "--nodes", "2"], {}, "no EFA"),
    (["topo", "--instance", "trn1.2xlarge", "--nodes", "2"], {}, "no EFA"),
    (["topo", "--nodes", "0"], {}, "nodes"),
    (["topo", "--format", "xml"], {}, "invalid choice"),
    (["topo", "--lnc", "two"], {}, "--lnc"),
    (["bogus"], {}, "invalid choice"),
    (["topo"], {"NEURON_LOGICAL_NC_CONFIG": "x"}, "NEURON_LOGICAL_NC_CONFIG"),
    (["topo"], {"NEURON_MPI_INSTANCE": "nope"}, "unknown instance"),
    (["topo"], {"NEURON_MPI_NODES": "many"}, "NEURON_MPI_NODES"),
])
def test_errors_exit_2_with_one_line(capsys, monkeypatch, args, env, needle):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    code, out, err = call(capsys, *args)
    assert code == 2 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("neuron-mpi: error: ")
    assert needle in lines[0]


@pytest.mark.parametrize("args,env,needle", [
    (["topo", "--instance", "inf2.48xlarge", "--nodes", "2"], {}, "no EFA"),
    (["topo", "--format", "xml"], {}, "invalid choice"),
    (["topo"], {"NEURON_MPI_NODES": "many"}, "NEURON_MPI_NODES"),
])
def test_errors_subprocess_no_traceback(args, env, needle):
    res = run_cli(*args, **env)
    assert res.returncode == 2
    assert res.stdout == ""
    lines = res.stderr.splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("neuron-mpi: error: ") and needle in lines[0]
    assert "Traceback" not in res.stderr


def test_errors_in_process(capsys):
    code, out, err = call(capsys, "topo", "--lnc", "3")
    assert code == 2 and out == ""
    assert err == "neuron-mpi: error: lnc: trn2.48xlarge supports LNC 1 or 2, got 3\n"


def test_console_script_if_installed():
    from pathlib import Path

    exe = Path(sys.executable).parent / "neuron-mpi"
    if not exe.exists():
        pytest.skip("console script not installed next to this Python")
    res = subprocess.run([str(exe), "topo", "--instance", "inf2.48xlarge"],
                         capture_output=True, text=True, env=child_env(ENV), timeout=60)
    assert res.returncode == 0 and "ring 0: c0 -> c1" in res.stdout
