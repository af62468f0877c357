"""Which Ray cluster a launch joins (rftkit.cluster.cluster_to_join): the one RAY_ADDRESS names or `ray start` left
on this machine, never another process's ray.init() cluster, and never after more than a few seconds of waiting."""

import os
import socket
import subprocess
import sys
import time

import pytest

from conftest import REPO, copy_sample_data
from rftkit import cluster
from rftkit.inputs import InputError

# Another process's Ray, as a test suite starts one: ray.init() with no address, three (fake) GPUs.
OTHER_RAY = """
import time, ray
ray.init(num_cpus=1, num_gpus=3, include_dashboard=False, logging_level="ERROR")
print("up", flush=True)
time.sleep(600)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def own_ray_files(tmp_path, monkeypatch):
    """A Ray temp folder of this test's own, so that no `ray start` of this machine is found in it."""
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))
    monkeypatch.delenv(cluster.RAY_ADDRESS_ENV, raising=False)
    (tmp_path / "ray").mkdir()
    return tmp_path / "ray"  # where Ray keeps its address file


def test_a_dry_run_beside_another_processes_ray_plans_for_this_machine(tmp_path, own_ray_files, sample_work):
    env = {name: value for name, value in os.environ.items() if name != "RAY_TMPDIR"}  # Ray's own /tmp/ray
    other = subprocess.Popen([sys.executable, "-c", OTHER_RAY], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert other.stdout.readline().strip() == "up"
        data = copy_sample_data(sample_work, tmp_path / "work", "frozenlake")
        started = time.monotonic()
        result = subprocess.run([sys.executable, "frozenlake/main.py", "--dry-run", "--data-dir", str(data),
                                 "--checkpoint-dir", str(tmp_path / "ckpt")], cwd=REPO, capture_output=True,
                                text=True, timeout=300, env=os.environ)
        assert result.returncode == 0, result.stderr[-2000:]
        assert time.monotonic() - started < 60
        assert "x 3 GPU" not in result.stdout, "planned for the other process's cluster"
        assert cluster.cluster_to_join() is None
    finally:
        other.kill()
        other.wait()


def test_an_address_that_does_not_answer_is_one_line_within_seconds(tmp_path, own_ray_files, sample_work):
    address = f"127.0.0.1:{free_port()}"
    data = copy_sample_data(sample_work, tmp_path / "work", "frozenlake")
    started = time.monotonic()
    result = subprocess.run([sys.executable, "frozenlake/main.py", "--dry-run", "--data-dir", str(data)], cwd=REPO,
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, cluster.RAY_ADDRESS_ENV: address})
    assert result.returncode == 2 and time.monotonic() - started < 30
    assert result.stderr.strip().splitlines() == [
        f"error: RAY_ADDRESS={address}: no Ray cluster answers there within 3 s; start it, or unset RAY_ADDRESS to "
        f"run on this machine's own Ray"]


def test_the_address_a_stopped_ray_start_left_is_ignored_and_a_live_one_joined(own_ray_files, monkeypatch):
    """`ray start --head` writes its address to <Ray's temp folder>/ray_current_cluster and `ray stop` leaves it."""
    stale = f"127.0.0.1:{free_port()}"
    (own_ray_files / "ray_current_cluster").write_text(stale)
    assert cluster.cluster_to_join() is None
    with socket.socket() as server:  # something answers there: a live head's GCS port, as far as the probe goes
        server.bind(("127.0.0.1", 0))
        server.listen()
        live = f"127.0.0.1:{server.getsockname()[1]}"
        (own_ray_files / "ray_current_cluster").write_text(live)
        assert cluster.cluster_to_join() == live
        monkeypatch.setenv(cluster.RAY_ADDRESS_ENV, live)
        assert cluster.cluster_to_join() == live
    monkeypatch.setenv(cluster.RAY_ADDRESS_ENV, stale)
    with pytest.raises(InputError, match=f"RAY_ADDRESS={stale}: no Ray cluster answers there"):
        cluster.cluster_to_join()
