"""Link statistics and pictures: ``neuron-mpi-bench --link-stats`` (one 8-rank run:
the merged file holds exactly the bytes the schedule's hops carry), the chip traffic
it reduces to, ``neuron-mpi topo --png`` (plain and ``--heat``) and their errors; the
benchmarks' time-against-size figures."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import neuron_mpi as nm
from neuron_mpi import linkstats
from neuron_mpi.algorithms.group import GroupView
from neuron_mpi.algorithms.select import choose, schedule_for
from neuron_mpi.cli import main as cli_main
from neuron_mpi.router import lower

pytest.importorskip("matplotlib")
from matplotlib.image import imread  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LAUNCHER = Path(sys.executable).parent / "neuron-mpirun"
ENV = ("NEURON_MPI_INSTANCE", "NEURON_LOGICAL_NC_CONFIG", "NEURON_MPI_NODES",
       "NEURON_MPI_ALGO", "NEURON_MPI_TRACE")


def _stats_file(path, topo, entries):
    linkstats.write(path, topo, entries, ["test"])
    return str(path)


def _png_size(path):
    img = imread(str(path))
    return img.shape[1], img.shape[0]


# --- chip traffic -----------------------------------------------------------------------
def test_chip_traffic_sums_by_directed_chip_pair():
    topo = nm.topology("trn2.48xlarge", ranks=16)  # 4 chips of 4 ranks
    entries = [{"src": 0, "dst": 1, "link": "intra-chip", "bytes": 10, "messages": 1},
               {"src": 2, "dst": 3, "link": "intra-chip", "bytes": 5, "messages": 1},
               {"src": 3, "dst": 7, "link": "neuronlink", "bytes": 100, "messages": 2},
               {"src": 1, "dst": 5, "link": "neuronlink", "bytes": 1, "messages": 1},
               {"src": 5, "dst": 1, "link": "neuronlink", "bytes": 7, "messages": 1}]
    assert linkstats.chip_traffic(topo, entries) == {(0, 0): 15, (0, 1): 101, (1, 0): 7}


def test_chip_traffic_rejects_unlinked_and_unknown_ranks():
    topo = nm.topology("trn2.48xlarge", ranks=64)
    with pytest.raises(nm.InvalidArgumentError, match="--heat: ranks 0 and 40"):
        linkstats.chip_traffic(topo, [{"src": 0, "dst": 40, "bytes": 1}])  # chips 0, 10
    with pytest.raises(nm.InvalidArgumentError, match="outside"):
        linkstats.chip_traffic(topo, [{"src": 0, "dst": 64, "bytes": 1}])


def test_load_errors_name_heat(tmp_path):
    with pytest.raises(nm.InvalidArgumentError, match="--heat: cannot read"):
        linkstats.load(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(nm.InvalidArgumentError, match="--heat: .* is not JSON"):
        linkstats.load(bad)
    bad.write_text(json.dumps({"schema": "other"}))
    with pytest.raises(nm.InvalidArgumentError, match="not a merged link-stats file"):
        linkstats.load(bad)


# --- pictures ----------------------------------------------------------------------------
@pytest.mark.parametrize("opts", [["--instance", "trn2.48xlarge"],
                                  ["--instance", "inf2.48xlarge"],
                                  ["--instance", "trn1.32xlarge", "--nodes", "2"],
                                  ["--instance", "trn2-ultraserver"],
                                  ["--instance", "trn1.2xlarge"],
                                  ["--instance", "trn2.48xlarge", "-n", "24"]])
def test_topo_png(tmp_path, capsys, opts):
    out = tmp_path / "t.png"
    assert cli_main(["topo", *opts, "--png", str(out)]) == 0
    assert "topology of" in capsys.readouterr().out
    w, h = _png_size(out)
    assert w >= 600 and h >= 400


def test_picture_draws_every_link_and_every_loaded_direction(tmp_path):
    from neuron_mpi.picture import draw

    topo = nm.topology("trn2.48xlarge")
    plain = draw(topo, tmp_path / "p.png")
    chip_links = [lk for lk in topo.links if lk.a != lk.b]
    assert len(plain["links"]) == len(chip_links) == 32  # 4x4 torus
    assert len(plain["chips"]) == 16 and plain["chips"][5] == "chip 5\nranks 20-23"
    traffic = {(0, 1): 3 << 20, (1, 0): 1024, (5, 5): 1 << 30, (0, 3): 7}
    heat = draw(topo, tmp_path / "h.png", traffic)
    assert sorted(heat["links"]) == [(0, 1, "3 MiB"), (0, 3, "7 B"), (1, 0, "1 KiB")]
    assert heat["chips"][5].endswith("intra 1 GiB")
    assert heat["chips"][6] == "chip 6\nranks 24-27"


def test_topo_heat_errors(tmp_path, capsys):
    topo = nm.topology("trn2.48xlarge", ranks=8)
    f = _stats_file(tmp_path / "s.json", topo, [])
    assert cli_main(["topo", "--heat", f]) == 2
    assert "--heat: needs --png" in capsys.readouterr().err
    assert cli_main(["topo", "--heat", f, "--instance", "trn1.32xlarge", "--png",
                     str(tmp_path / "x.png")]) == 2
    assert "--instance: trn1.32xlarge differs" in capsys.readouterr().err
    assert cli_main(["topo", "--heat", str(tmp_path / "nope.json"), "--png",
                     str(tmp_path / "x.png")]) == 2
    assert not (tmp_path / "x.png").exists()


# --- the bench writes it ------------------------------------------------------------------
def test_bench_link_stats_then_heat_map(tmp_path, capsys):
    env = {k: v for k, v in os.environ.items() if k not in ENV}
    env.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".numba_cache"))
    stats = tmp_path / "ls.json"
    r = subprocess.run([str(LAUNCHER), "-n", "8", "--timeout", "240", "--", "python", "-m",
                        "neuron_mpi.bench", "all_reduce", "-b", "64KB", "-e", "64KB", "-n",
                        "2", "-w", "1", "--link-stats", str(stats)], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"# wrote {stats}" in r.stdout
    doc = linkstats.load(stats)
    assert doc["topology"] == {"instance": "trn2.48xlarge", "lnc": 2, "nodes": 1, "ranks": 8}
    assert {e["src"] for e in doc["links"]} == set(range(8))
    # 3 calls (1 warm-up + 2 timed), each moving exactly its schedule's hops
    topo = nm.topology("trn2.48xlarge", ranks=8)
    view = GroupView(topo, range(8))
    algo = choose("all_reduce", view, None, 64 << 10)
    sched = schedule_for(view, "all_reduce", algo, (64 << 10) // 4, False, None)
    want: dict = {}
    for rnd in lower(sched, view, 4):
        for h in rnd:
            if h.src != h.dst:
                key = (h.src_chip, h.dst_chip)
                want[key] = want.get(key, 0) + 3 * h.nbytes
    assert linkstats.chip_traffic(topo, doc["links"]) == want
    png = tmp_path / "heat.png"
    assert cli_main(["topo", "--heat", str(stats), "--png", str(png)]) == 0
    said = capsys.readouterr().out
    assert f"{sum(want.values())} bytes over {len(want)} directed links" in said
    assert _png_size(png)[0] >= 600


# --- time figures (benchmarks/collectives.py) ---------------------------------------------
def _row(op, size, t, mpi, model):
    return {"op": op, "redop": "sum", "size": size, "time_us": t, "mpi_time_us": mpi,
            "model_time_us": model}


def test_time_figures(tmp_path):
    from neuron_mpi.bench import report

    rows = [_row("all_reduce", s, 100.0 + s / 10, 50.0 + s / 100, 2.0 + s / 1e4)
            for s in (1024, 4096, 16384)]
    rows += [_row("all_gather", s, 80.0, None, 3.0) for s in (1024, 4096)]
    one = tmp_path / "ar.png"
    assert report.plot_times(str(one), rows[:3], "t") == [
        "emulated (this machine)", "native MPI (this machine)", "model (the real hardware)"]
    assert one.read_bytes()[:4] == b"\x89PNG"
    grid = tmp_path / "sub" / "times.png"
    drawn = report.plot_times_grid(str(grid), rows, "t")
    assert drawn == {"all_reduce": ["emulated (this machine)", "native MPI (this machine)",
                                    "model (the real hardware)"],
                     "all_gather": ["emulated (this machine)", "model (the real hardware)"]}
    w, h = _png_size(grid)
    assert w > h > 200
