"""`python -m train doctor`: real local processes with the variables torchrun/srun set, planted
faults that must each end non-zero with the right message, and the pure checks on records."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.harness.doctor_records import changed, minimal_record
from tests.harness.jobscript import run_job_script
from train.cluster.distenv import free_port, resolve
from train.config import load_config
from train.doctor import checks, findings, hcas, probes, rank_record
from train.doctor.links import Transport, check_transport, judge_bandwidth, nccl_transport
from train.doctor.records import Device, Hca, Links, Network, RankRecord, Shm
from train.doctor.table import format_table

ROOT = Path(__file__).resolve().parents[1]
_CLEARED = ("SLURM_", "TORCHELASTIC_", "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
            "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME")


def base_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_CLEARED)}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return env


def run_doctor(world: int, args: list[str], *, local_ranks=None, start=None, addr="127.0.0.1",
               port=None, timeout=60.0):
    """Start the ranks in `start` (default all) of a `world`-process job; returns ([(rc, output)], seconds)."""
    port = port or free_port()
    procs = []
    started = time.monotonic()
    for rank in (range(world) if start is None else start):
        env = base_env()
        env.update(WORLD_SIZE=str(world), RANK=str(rank), LOCAL_RANK=str(local_ranks[rank] if local_ranks else rank),
                   LOCAL_WORLD_SIZE=str(world), MASTER_ADDR=addr, MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, "-m", "train", "doctor", *args], cwd=ROOT, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    results = []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=max(timeout - (time.monotonic() - started), 1))
            results.append((proc.returncode, out))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results, time.monotonic() - started


def tiny(tmp_path: Path, *extra: str) -> list[str]:
    return ["--config", "tiny", "--timeout", "30", f"output.dir={tmp_path / 'run'}", *extra]


# ---- real processes ----------------------------------------------------------------------------
@pytest.mark.parametrize("world", [1, 2, 4])
def test_healthy_setup_passes_and_measures_bandwidth(tmp_path, world):
    results, _ = run_doctor(world, tiny(tmp_path, "--sizes", "64K,1M"))
    assert [rc for rc, _ in results] == [0] * world, results
    out = results[0][1]
    assert "all checks passed" in out and "FAIL" not in out
    table = out.split("\n\n")[0].splitlines()
    assert [line.split()[0] for line in table[1:]] == [str(r) for r in range(world)]  # one row per rank
    assert f"ok    contract  {world} rank(s) on 1 node(s) agree on world size {world}" in out
    assert re.search(r"sources \(every rank\): world_size<-WORLD_SIZE, rank<-RANK", out)
    row = re.search(r"^1 MiB\s+([\d.]+) ms\s+([\d.]+) GB/s\s+(\S+)", out, re.M)
    assert row, out
    if world > 1:
        algbw, busbw = float(row.group(2)), float(row.group(3))
        assert busbw > 0 and busbw == pytest.approx(algbw * 2 * (world - 1) / world, rel=0.02, abs=0.011)
    else:
        assert row.group(3) == "n/a"
    assert re.search(r"barrier latency: \d+ us", out)
    # the run's other collectives, each as the run makes it: the evaluation's all-to-all, the node groups' split
    assert re.search(rf"^ok\s+all2all\s+all_to_all_single of 1 MiB a rank over {world} rank\(s\): [\d.]+ ms", out,
                     re.M), out
    assert re.search(r"^ok\s+groups\s+the node groups' split \(1 gloo group\(s\)", out, re.M), out
    assert re.search(r"^node \S+: CPUs per rank \d+; GPU free memory: no GPU; between nodes NCCL would use TCP over",
                     out, re.M), out
    assert re.search(r"^ok\s+transport\s+gloo over TCP between ranks", out, re.M), out
    assert all(not o.strip() for _, o in results[1:])  # only rank 0 prints


def test_duplicate_local_rank_fails_naming_both_ranks(tmp_path):
    results, _ = run_doctor(4, tiny(tmp_path), local_ranks=[0, 1, 1, 3])
    assert all(rc == 1 for rc, _ in results), results
    out = results[0][1]
    host = socket.gethostname()
    assert f"FAIL  contract  ranks 1 and 2 on node {host} both have local rank 1 (from LOCAL_RANK)" in out
    assert "don't export LOCAL_RANK" in out
    assert "all-reduce over" not in out  # no collectives after a failed check


def test_unresolvable_master_fails_fast_naming_address_and_port(tmp_path):
    port = free_port()
    results, seconds = run_doctor(2, ["--config", "tiny", "--timeout", "5"], addr="doctor-test.invalid", port=port)
    assert all(rc == 1 for rc, _ in results), results
    for rank, (_, out) in enumerate(results):
        assert f"rank {rank} on" in out and f"doctor-test.invalid:{port}" in out and "does not resolve" in out
        assert "Traceback" not in out
    assert seconds < 5 + 10


def test_no_master_listening_ends_within_the_timeout(tmp_path):
    """Rank 0 never starts: rank 1 gives up after --timeout with the address and port."""
    port = free_port()
    results, seconds = run_doctor(2, ["--config", "tiny", "--timeout", "4"], start=[1], port=port)
    (rc, out), = results
    assert rc == 1
    assert f"nobody listens at the master 127.0.0.1:{port} after 4 s" in out and "Traceback" not in out
    assert seconds < 4 + 8  # the timeout plus interpreter and torch start-up


def test_master_address_of_another_host_fails_on_every_rank(tmp_path):
    """Rank 0 sees that it cannot serve an address it does not own; rank 1 ends within the timeout
    whether the address drops its packets or something else answers there."""
    port = free_port()
    results, seconds = run_doctor(2, ["--config", "tiny", "--timeout", "4"], addr="10.255.255.1", port=port)
    assert all(rc == 1 for rc, _ in results), results
    assert "not an address of this host" in results[0][1] and f"10.255.255.1:{port}" in results[0][1]
    assert f"10.255.255.1:{port}" in results[1][1] and "Traceback" not in results[1][1]
    assert seconds < 4 + 8


def test_port_taken_on_rank_0_host_fails(tmp_path):
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        results, _ = run_doctor(1, ["--config", "tiny", "--timeout", "5"], port=port)
    (rc, out), = results
    assert rc == 1 and f"port {port} of the master 127.0.0.1:{port}" in out and "choose another MASTER_PORT" in out


def test_missing_dataset_fails(tmp_path):
    empty = tmp_path / "data"
    empty.mkdir()
    results, _ = run_doctor(2, tiny(tmp_path, "data.name=Reddit", f"data.root={empty}"))
    assert all(rc == 1 for rc, _ in results), results
    out = results[0][1]
    assert f"FAIL  data      dataset 'Reddit' is missing under {empty / 'Reddit'} for ranks 0 and 1" in out
    assert "python -m train data" in out


def test_unwritable_run_dir_fails(tmp_path):
    """Root ignores permission bits: a run dir below a regular file is what cannot be created."""
    (tmp_path / "afile").write_text("not a directory")
    results, _ = run_doctor(1, ["--config", "tiny", "--timeout", "10", f"output.dir={tmp_path / 'afile' / 'run'}"])
    (rc, out), = results
    assert rc == 1
    assert f"FAIL  rundir    run dir {tmp_path / 'afile' / 'run'} is not writable from rank 0" in out
    assert f"{tmp_path / 'afile'} is a file, not a directory" in out


def test_no_bandwidth_skips_the_collectives(tmp_path):
    results, _ = run_doctor(1, tiny(tmp_path, "--no-bandwidth"))
    (rc, out), = results
    assert rc == 0 and "all checks passed" in out and "all-reduce over" not in out


@pytest.mark.parametrize("args, message", [
    (["--sizes", "0"], "--sizes item '0' is not a size"),
    (["--timeout", "0"], "--timeout 0 must be > 0"),
    (["dist.backend=nccl"], "dist.backend='nccl' needs a CUDA GPU"),
])
def test_usage_errors_exit_2_without_traceback(args, message):
    proc = subprocess.run([sys.executable, "-m", "train", "doctor", "--config", "tiny", *args], cwd=ROOT,
                          env=base_env(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr


# ---- the pure checks, on records shaped by the real collector ----------------------------------
@pytest.fixture(scope="module")
def template(tmp_path_factory):
    run = tmp_path_factory.mktemp("run")
    environ = {"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2",
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    config = load_config("tiny", [f"output.dir={run}"])
    return rank_record.collect_record(resolve(environ), config, "gloo", Network(master_ips=["127.0.0.1"], probe="x"),
                                 environ)


def record(template, rank, host="n1", local_rank=None, node_rank=0, world=2, per_node=2, **changes):
    """The collected `template` as rank `rank` of `world` on `host`; `part__field=value` changes one field of a part
    (network__gloo_addr=...)."""
    placed = changed(template, host=host, pid=1000 + rank, cpu_count=64, device__threads=1, job__rank=rank,
                     job__world_size=world, job__local_world_size=per_node, job__node_rank=node_rank,
                     job__local_rank=rank % per_node if local_rank is None else local_rank,
                     job__num_nodes=world // per_node)
    return changed(placed, **changes)


def test_a_record_travels_through_the_store_as_json_and_comes_back_equal(template):
    """Each rank's record is typed (train/doctor/records.py); the store carries it as JSON (rendezvous.py)."""
    sent = record(template, 1, device=Device(type="cuda", index=0, uuid="GPU-1", cpus=[1], ncpus=1, free=3 << 30),
                  shm=Shm("/dev/shm", 1 << 30, 1 << 29, need=1 << 20),
                  links=Links(hcas=[Hca("mlx5_0:1", 200.0)], devices=True, iface="ib0", iface_mbps=100000,
                              ib_hca="mlx5"))
    received = RankRecord.from_json(json.loads(json.dumps(sent.to_json())))
    assert received == sent and isinstance(received.device, Device) and received.shm.need == 1 << 20
    assert isinstance(received.links.hcas[0], Hca) and received.device.free == 3 << 30


def levels(findings, check):
    return [(f.level, f.message) for f in findings if f.check == check]


def test_healthy_records_pass(template):
    found = checks.run_checks([record(template, 0), record(template, 1)], 2)
    assert not findings.failed(found), found


def test_two_ranks_on_one_gpu_name_the_ranks_and_the_fix(template):
    gpu = Device(type="cuda", index=0, name="NVIDIA H100", memory=80 << 30, bus_id="0000:19:00.0", uuid="GPU-aaaa",
                 cpus=[0], ncpus=16, threads=1)  # ncpus: CPUS_PER_TASK=16
    records = [record(template, r, host="n1" if r < 2 else "n2", node_rank=r // 2, world=4,
                      device=replace(gpu, uuid=f"GPU-{r}", cpus=[r]) if r < 2 else replace(gpu, cpus=[r]),
                      variables={"CUDA_VISIBLE_DEVICES": "0"})
               for r in range(4)]
    (level, message), = levels(checks.run_checks(records, 4), "devices")
    assert level == findings.FAIL
    assert message.startswith("ranks 2 and 3 on node n2 both use GPU 0 (bus 0000:19:00.0")
    assert "srun --ntasks-per-node=2 --gpus-per-task=1 --gpu-bind=none" in message  # the advice `fit` gives too


def test_disagreeing_and_missing_ranks(template):
    records = [record(template, 0, world=4, per_node=4), record(template, 1, world=2, per_node=4)]
    messages = [m for _, m in levels(checks.run_checks(records, 4), "contract")]
    assert any(m.startswith("ranks disagree on the world size: rank 0: 4 (from WORLD_SIZE); rank 1: 2")
               for m in messages), messages
    assert any(m.startswith("ranks 2 and 3 of 4 never reached the master at 127.0.0.1:29500") for m in messages)


def test_duplicate_rank_and_node_rank(template):
    records = [record(template, 0), record(template, 0, host="n2"), record(template, 1, host="n2")]
    messages = [m for _, m in levels(checks.run_checks(records, 2), "contract")]
    assert any(m.startswith("rank 0 is claimed by 2 processes (n1 pid 1000, n2 pid 1000)") for m in messages)
    assert any(m.startswith("nodes n1, n2 both claim node rank 0") for m in messages)


def test_multinode_gloo_on_loopback_and_bad_ifname(template):
    records = [record(template, r, host=f"n{r + 1}", node_rank=r, per_node=1,
                      network__gloo_addr="127.0.1.1", network__route_iface="eth0", network__master_ips=["10.0.0.1"])
               for r in range(2)]
    records[1] = changed(records[1], variables={**records[1].variables, "NCCL_SOCKET_IFNAME": "ib"},
                         network__nccl_ifaces=[])
    found = levels(checks.run_checks(records, 2), "network")
    loopback = ("on node n1 the hostname resolves to 127.0.1.1, so gloo would listen on loopback where other "
                "nodes cannot connect: set GLOO_SOCKET_IFNAME=eth0 (the interface that reaches the master).")
    assert (findings.FAIL, loopback) in found
    assert any(level == findings.WARN and m.startswith("NCCL_SOCKET_IFNAME=ib names no interface of node n2")
               for level, m in found)  # only a warning while the backend is gloo


def test_master_on_loopback_fails_only_away_from_rank_0(template):
    records = [record(template, r, host=f"n{r + 1}", node_rank=r, per_node=1, network__gloo_addr=f"10.0.0.{r + 1}",
                      network__master_ips=["127.0.1.1"]) for r in range(2)]
    failures = [m for level, m in levels(checks.run_checks(records, 2), "network") if level == findings.FAIL]
    assert failures == ["MASTER_ADDR=127.0.0.1 resolves to 127.0.1.1 (loopback) on node n2, not rank 0's node n1: "
                        "set MASTER_ADDR to the first node's hostname."]


def test_different_software_versions_fail(template):
    records = [record(template, 0), record(template, 1, versions__torch="2.0.0")]
    (level, message), = levels(checks.run_checks(records, 2), "versions")
    assert level == findings.FAIL and message.startswith("torch differs across ranks") and "same image" in message


def test_small_shm_warns(template):
    shm = Shm("/dev/shm", total=64 << 20, free=64 << 20, need=1 << 30)
    records = [record(template, r, shm=shm) for r in range(2)]
    found = levels(checks.run_checks(records, 2), "data")
    assert found and found[0][0] == findings.WARN and "/dev/shm on n1 has 64 MiB free" in found[0][1]


@pytest.mark.parametrize("spec, expected", [
    (None, ["eth0", "eth1"]), ("eth1", ["eth1"]), ("^eth0,lo", ["docker0", "eth1"]), ("=eth", []), ("ib", []),
])
def test_nccl_interface_rules(spec, expected):
    assert findings.nccl_interfaces(spec, ["lo", "docker0", "eth0", "eth1"]) == expected


def test_small_helpers():
    assert findings.allreduce_bandwidth(1_000_000_000, 1.0, 4) == (1.0, 1.5)  # nccl-tests: busbw = algbw * 2(n-1)/n
    assert findings.allreduce_bandwidth(1000, 1.0, 1)[1] is None
    assert findings.parse_sizes("64K,1M,2G,100") == [64 << 10, 1 << 20, 2 << 30, 100]
    assert findings.format_cpus([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert findings.rank_list([3, 2]) == "ranks 2 and 3" and findings.rank_list([0, 1, 2, 3]) == "ranks 0-3"
    assert findings.nccl_interfaces(None, ["lo"]) == ["lo"]
    assert findings.nccl_interfaces(None, ["lo", "ib0", "eth0"]) == ["ib0"]


@pytest.mark.parametrize("path, detail", [
    ("afile/run", "is a file, not a directory"),
    ("/sys/doctor-run", "cannot create a file in /sys"),  # read-only even for root
])
def test_probe_writable(tmp_path, path, detail):
    (tmp_path / "afile").write_text("x")
    result = probes.probe_writable(tmp_path / path)
    assert not result.writable and detail in result.detail
    assert probes.probe_writable(tmp_path / "new" / "run").writable
    assert not (tmp_path / "new").exists()  # the probe creates nothing


# ---- where the data check looks: train.graph.datasets.loading.dataset_folder, the one home of that fact ------------
@pytest.mark.parametrize("name, via", [("ogbn-products", "root"), ("Cora", "DATA_DIR"), ("Reddit", "root")])
def test_dataset_check_looks_where_train_data_keeps_the_dataset(tmp_path, name, via):
    """ogbn-products lives in ogbn_products/, Cora in Planetoid/Cora/: the doctor must agree with
    train.graph.datasets.loading."""
    from train.config import DataConfig
    from train.graph.datasets.loading import dataset_folder

    config = DataConfig(name=name, root=str(tmp_path) if via == "root" else "")
    data_dir = str(tmp_path) if via == "DATA_DIR" else None  # DATA_DIR, as resolved at the entry
    assert rank_record.inspect_dataset(config, data_dir).state == "missing"
    folder = dataset_folder(config, data_dir)
    (folder / "processed").mkdir(parents=True)
    (folder / "processed" / "data.pt").write_bytes(b"x" * 10)
    seen = rank_record.inspect_dataset(config, data_dir)
    assert seen.state == "present" and seen.dir == str(folder) and seen.bytes == 10, seen


def test_dataset_check_of_your_own_files_looks_at_data_path(tmp_path):
    from train.config import DataConfig
    from train.graph.datasets.loading import dataset_folder

    saved = tmp_path / "graph.pt"
    saved.write_bytes(b"x" * 7)
    folder = tmp_path / "arrays"
    folder.mkdir()
    for name in ("edge_index.npy", "x.npy"):
        (folder / name).write_bytes(b"x" * 5)
    for path, size in ((saved, 7), (folder, 10)):
        config = DataConfig(name="files", path=str(path))
        seen = rank_record.inspect_dataset(config, None)
        assert seen.state == "present" and seen.dir == str(dataset_folder(config, None)) and seen.bytes == size
    for path, detail in ((tmp_path / "nothing", "no files at data.path="), ("", "data.path is empty")):
        seen = rank_record.inspect_dataset(DataConfig(name="files", path=str(path)), None)
        assert seen.state == "missing" and detail in seen.detail, seen
        message = levels(checks.check_environment([minimal_record(data=seen)]), "data")[0][1]
        assert "set data.path to your graph" in message and "python -m train data" not in message


# ---- the package's rooms -------------------------------------------------------------------------
def test_only_the_doctors_entry_reads_the_process_environment():
    package = ROOT / "train" / "doctor"
    readers = sorted(p.name for p in package.glob("*.py") if "os.environ" in p.read_text() or "getenv" in p.read_text())
    assert readers == ["cli.py"]
    assert all(len(p.read_text().splitlines()) < 300 for p in package.glob("*.py"))


def test_exit_statuses_are_defined_once_in_train_errors():
    import train.errors

    defined = [f"{p.relative_to(ROOT)}: {line}" for p in sorted((ROOT / "train").rglob("*.py"))
               for line in p.read_text().splitlines() if re.match(r"\s*EXIT_\w+\s*=\s*\d", line)]
    assert all(d.startswith("train/errors.py: ") for d in defined), defined
    assert (train.errors.EXIT_FAILED, train.errors.EXIT_USER_ERROR, train.errors.EXIT_REQUEUE,
            train.errors.EXIT_STOPPED) == (1, 2, 3, 4)


# ---- the doctor step of jobs/train.sbatch, with the stand-in srun of tests/test_jobs.py --------
def test_job_script_doctor_step_runs_first_in_the_container(tmp_path):
    image = tmp_path / "pyg.sqsh"
    image.write_bytes(b"")
    p, calls = run_job_script(tmp_path, {"IMAGE": str(image), "CONFIG": "tiny", "ARGS": "trainer.epochs=1",
                                         "DOCTOR": "1", "DOCTOR_TIMEOUT": "30"})
    assert p.returncode == 0, p.stderr
    doctor_step, fit_step = calls
    assert doctor_step[-9:] == ["python", "-m", "train", "doctor", "--config", "tiny", "--timeout", "30",
                                "trainer.epochs=1"]
    assert doctor_step[:-9] == fit_step[:-7]  # the same srun and pyxis options as the training step
    assert "doctor step passed" in p.stdout and fit_step[-6:-2] == ["-m", "train", "fit", "--config"]


@pytest.mark.parametrize("doctor_mode", ["1", "only"])
def test_job_script_failing_doctor_fails_the_job_before_training(tmp_path, doctor_mode):
    p, calls = run_job_script(tmp_path, {"IMAGE": "none", "GPUS_PER_TASK": "0", "DOCTOR": doctor_mode}, srun_rc=1)
    assert p.returncode == 1 and "doctor step exited with status 1: not training" in p.stdout
    (step,) = calls
    assert step[-7:] == ["-m", "train", "doctor", "--config", "synthetic", "--timeout", "120"]


def test_job_script_doctor_only_does_not_train_and_bad_value_is_refused(tmp_path):
    p, calls = run_job_script(tmp_path, {"IMAGE": "none", "GPUS_PER_TASK": "0", "DOCTOR": "only"})
    assert p.returncode == 0 and len(calls) == 1 and "training step" not in p.stdout
    p, _ = run_job_script(tmp_path, {"IMAGE": "none", "DOCTOR": "yes"})
    assert p.returncode == 2 and "DOCTOR='yes' is not valid: expected 0, 1 or only" in p.stderr


def test_make_doctor_runs_torchrun_locally(tmp_path):
    """`make doctor`: NPROC local processes under torchrun, whose agent already serves the store."""
    env = {k: v for k, v in base_env().items() if k not in ("NODES", "GPUS", "MAKEFLAGS", "MAKELEVEL")}
    proc = subprocess.run(["make", "--no-print-directory", "doctor", "NPROC=2", "CONFIG=tiny", "DOCTOR_TIMEOUT=60",
                           f"ARGS=--sizes 64K output.dir={tmp_path / 'run'}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "torchrun --standalone --nproc-per-node=2 -m train doctor --config tiny" in proc.stdout
    assert "ok    contract  2 rank(s) on 1 node(s)" in proc.stdout and "all checks passed" in proc.stdout
    assert re.search(r"^64 KiB\s+[\d.]+ ms\s+[\d.]+ GB/s\s+[\d.]+ GB/s", proc.stdout, re.M)


# ---- what NCCL uses between nodes, CPUs and free memory per GPU rank (issue 42) --------------------------------
def fake_sys(root: Path, ports: dict[str, tuple[str, str]], speed: str | None = "25000") -> Path:
    """A /sys with InfiniBand ports ("mlx5_0:1" -> (state, rate)) and eth0's speed in Mb/s."""
    for name, (state, rate) in ports.items():
        device, port = name.split(":")
        folder = root / "class" / "infiniband" / device / "ports" / port
        folder.mkdir(parents=True)
        (folder / "state").write_text(state + "\n")
        (folder / "rate").write_text(rate + "\n")
    if speed is not None:
        (root / "class" / "net" / "eth0").mkdir(parents=True)
        (root / "class" / "net" / "eth0" / "speed").write_text(speed + "\n")
    return root


def test_probe_links_reads_the_active_hcas_their_rate_and_the_interfaces_speed(tmp_path):
    sys_root = fake_sys(tmp_path / "sys", {"mlx5_0:1": ("4: ACTIVE", "200 Gb/sec (4X HDR)"),
                                           "mlx5_1:1": ("1: DOWN", "200 Gb/sec (4X HDR)"),
                                           "mlx5_2:1": ("4: ACTIVE", "400 Gb/sec (4X NDR)")})
    (tmp_path / "dev" / "infiniband").mkdir(parents=True)
    links = hcas.probe_links({"NCCL_IB_HCA": "mlx5_0"}, "eth0", sys_root, tmp_path / "dev")
    assert links.hcas == [Hca("mlx5_0:1", 200.0), Hca("mlx5_2:1", 400.0)]
    assert links.devices and links.iface_mbps == 25000 and links.ib_hca == "mlx5_0"
    bare = hcas.probe_links({}, "eth0", fake_sys(tmp_path / "bare", {}, speed="-1"), tmp_path / "nodev")
    assert bare.hcas == [] and not bare.devices and bare.iface_mbps is None


HCA = Hca("mlx5_0:1", 200.0)


def nccl_records(template, links_of, nodes=2):
    """Two ranks a node over `nodes` nodes, NCCL, each node's links given by links_of(node) (Links' fields)."""
    return [record(template, r, host=f"n{r // 2}", node_rank=r // 2, world=2 * nodes, backend="nccl",
                   links=Links(iface="eth0", iface_mbps=25000, **links_of(r // 2)))
            for r in range(2 * nodes)]


def test_the_transport_nccl_will_use_between_nodes(template):
    ib = nccl_records(template, lambda n: {"hcas": [HCA, Hca("mlx5_1:1", 200.0)], "devices": True})
    assert nccl_transport(ib).name == "IB" and nccl_transport(ib).link_gbs == 50.0
    assert levels(check_transport(ib), "transport")[0][0] == findings.OK
    unmounted = nccl_records(template, lambda n: {"hcas": [HCA], "devices": n == 0})  # node 1: no hook
    found = nccl_transport(unmounted)
    assert found.name == "Socket" and "n1: the node has HCAs (mlx5_0:1) but /dev/infiniband is not in" in found.why
    (level, message), = levels(check_transport(unmounted), "transport")
    assert level == findings.WARN and "ten times slower" in message and found.link_gbs == 25000 / 8000
    narrowed = nccl_records(template, lambda n: {"hcas": [HCA, Hca("mlx5_1:1", 100.0)], "devices": True,
                                                 "ib_hca": "^mlx5_0"})
    assert nccl_transport(narrowed).link_gbs == 12.5  # NCCL_IB_HCA=^mlx5_0 leaves mlx5_1
    forced = nccl_records(template, lambda n: {"hcas": [HCA], "devices": True, "nccl_net": "Socket"})
    assert nccl_transport(forced).name == "Socket" and "NCCL_NET=Socket" in nccl_transport(forced).why
    disabled = nccl_records(template, lambda n: {"hcas": [HCA], "devices": True, "ib_disable": True})
    assert nccl_transport(disabled).name == "Socket"
    assert nccl_transport(nccl_records(template, lambda n: {}, nodes=1)).name == "none"


def test_the_all_reduce_is_judged_against_the_links(template):
    ib = Transport("IB", "InfiniBand", 50.0)
    fine = judge_bandwidth(40.0, ib)
    assert fine.level == findings.OK and "80% of the 50.0 GB/s" in fine.message
    slow = judge_bandwidth(2.5, ib)  # what TCP gives where IB was meant
    assert slow.level == findings.WARN and "5% of the 50.0 GB/s" in slow.message and "NCCL_IB_HCA" in slow.message
    assert judge_bandwidth(2.5, Transport("none", "one node", None)) is None
    assert judge_bandwidth(None, ib) is None and judge_bandwidth(3.0, Transport("Socket", "TCP", None)) is None


def test_a_gpu_rank_with_one_cpu_is_warned_and_free_gpu_memory_is_shown(template):
    gpu = Device(type="cuda", index=0, name="NVIDIA H100", memory=80 << 30, free=15 << 30, bus_id="0000:19:00.0",
                 cpus=[0], ncpus=1, threads=1)
    records = [record(template, r, device=replace(gpu, index=r, uuid=f"GPU-{r}", cpus=[r], ncpus=1 if r else 16,
                                                  free=(15 << 30) if r else (79 << 30)), backend="nccl")
               for r in range(2)]
    found = levels(checks.run_checks(records, 2), "devices")
    assert (findings.WARN, "rank 1 on node n1 drive a GPU with one CPU each: the main thread, the prefetch thread, "
            "NCCL's proxy thread and pinning take turns on it; give each task the node's CPUs / its GPUs "
            "(CPUS_PER_TASK, or --cpus-per-task).") in found
    table = format_table(records)
    assert "cuda:1 NVIDIA H100 80 GiB (15 GiB free)" in table
    assert "node n1: CPUs per rank 1/16; GPU free memory: rank 0 79 GiB, rank 1 15 GiB" in table


def test_ranks_that_chose_different_backends_fail_naming_them(template):
    records = [record(template, 0, backend="nccl"), record(template, 1, backend="gloo")]
    (level, message), = [lf for lf in levels(checks.run_checks(records, 2), "contract") if "backends" in lf[1]]
    assert level == findings.FAIL and "nccl" in message and "gloo" in message and "rank 1" in message


def test_a_gpu_rank_records_its_free_memory_or_why_the_gpu_cannot_be_used(monkeypatch):
    """inspect_device on a stand-in GPU (none on this machine): torch's own calls answer as a GPU node's would."""
    import torch

    env = resolve({"WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"})
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(rank_record, "gpu_identity", lambda index: {"index": index, "name": "NVIDIA H100",
                                                                    "memory": 80 << 30, "uuid": "GPU-0"})
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda index: (70 << 30, 80 << 30))
    seen = rank_record.inspect_device(env, "nccl")
    assert seen.type == "cuda" and seen.free == 70 << 30 and seen.error is None

    def busy(index):
        raise RuntimeError("CUDA error: CUDA-capable device(s) is/are busy or unavailable\nCompile with ...")

    monkeypatch.setattr(torch.cuda, "mem_get_info", busy)
    refused = rank_record.inspect_device(env, "nccl")
    assert refused.error == "cuda:0 cannot be used: CUDA error: CUDA-capable device(s) is/are busy or unavailable"
    assert levels(checks.check_devices([minimal_record(device=refused)]), "devices")[0] == (
        findings.FAIL, f"rank 0 on n1: {refused.error}")
