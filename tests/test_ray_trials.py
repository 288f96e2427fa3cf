"""A deep search's trials as Ray tasks (``deep.search.trial_executor=ray``, ``search.*`` alike;
`finetune.trial_pool.RayTrialPool`): each task runs the job bytes a child of the process pool
runs, so the trials, scores and chosen model are those of ``n_jobs=N`` on this machine.

The Ray cluster is `test_ray_sweep`'s (a head and a worker node on the loopback address, one CPU
each) and runs, as there, only inside a network namespace of its own (``unshare -n``, loopback
up): `test_the_ray_trial_tests_run_in_a_network_namespace_of_their_own` runs this module again
inside one, and the cluster test skips elsewhere, with the reason where ``unshare -n`` is not
allowed. The config checks run anywhere.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from test_parallel_trials import _same_model
from test_ray_sweep import INSIDE, NO_AUTH, Cluster, _netns_refusal, rerun_inside_netns
from test_search import DEEP_SEARCH, RESNET, _metrics, _trials

from scarce_ltr.cli import run
from scarce_ltr.core.errors import UserError

pytestmark = pytest.mark.cpu

RAY = ["deep.search.n_jobs=2", "deep.search.trial_executor=ray"]


def test_the_ray_trial_tests_run_in_a_network_namespace_of_their_own():
    pytest.importorskip("ray", reason='Ray is not installed (pip install "scarce-ltr[cluster]")')
    if INSIDE:
        pytest.skip("already inside the namespace")
    refusal = _netns_refusal()
    if refusal is not None:
        pytest.skip(f"unshare -n is not allowed here ({refusal}): the Ray trial test needs a "
                    "network namespace of its own")  # fmt: skip
    rerun_inside_netns(Path(__file__), timeout=1200)


def _inside() -> None:
    pytest.importorskip("ray", reason='Ray is not installed (pip install "scarce-ltr[cluster]")')
    if not INSIDE:
        pytest.skip(
            "Ray runs only inside a network namespace of its own (see "
            "test_the_ray_trial_tests_run_in_a_network_namespace_of_their_own)"
        )


@pytest.fixture
def cluster(monkeypatch):
    _inside()
    for key, value in NO_AUTH.items():
        monkeypatch.setenv(key, value)
    cluster = Cluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> tuple[dict, Path]:
    """The search with its 2 trials at once in child processes here: its report and folder."""
    _inside()
    folder = tmp_path_factory.mktemp("local")
    return run([*RESNET, *DEEP_SEARCH, "deep.search.n_jobs=2", f"run_dir={folder}"]), folder


def _same_search(got: dict, folder: Path, local: tuple[dict, Path]) -> None:
    assert _trials(got) == _trials(local[0])
    assert _metrics(got) == _metrics(local[0])
    assert _same_model(folder, local[1])
    for number in range(3):
        assert (folder / "grid" / f"trial={number}" / "DONE").is_file()


def test_trials_on_ray_are_the_process_pools(cluster, local, tmp_path: Path) -> None:
    """resnet's 3 trials, 2 at once: as Ray tasks on the two nodes, the trials, scores, choice
    and model of the same search with its trials in child processes here."""
    address = f"deep.search.ray_address={cluster.address}"
    got = run([*RESNET, *DEEP_SEARCH, *RAY, address, f"run_dir={tmp_path}"])
    _same_search(got, tmp_path, local)
    # the trials ran as Ray tasks: the workers' logs name the task
    logs = [p.read_text(errors="replace") for p in Path(cluster.root).rglob("worker-*.out")]
    assert any("_train_on_ray" in log for log in logs)


def test_trials_on_a_ray_started_for_the_search_are_the_process_pools(
    local, tmp_path: Path, monkeypatch
) -> None:
    """No ray_address: a Ray started on this machine for the search, stopped after it."""
    for key, value in NO_AUTH.items():
        monkeypatch.setenv(key, value)
    got = run([*RESNET, *DEEP_SEARCH, *RAY, f"run_dir={tmp_path}"])
    _same_search(got, tmp_path, local)
    import ray

    assert not ray.is_initialized()


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        (["deep.search.trial_executor=slurm"],
         "deep.search.trial_executor must be one of local, ray"),
        (["deep.search.n_jobs=2", "deep.search.ray_address=auto"],
         "deep.search.ray_address: deep.search.trial_executor=local does not read it"),
        (["deep.search.trial_executor=ray"], r"give deep.search.n_jobs > 1 with it"),
        ([*RAY, "deep.search.ray_address=nohost"], "deep.search.ray_address='nohost': expected"),
    ],
)  # fmt: skip
def test_bad_trial_executor_keys_stop_before_any_trial(tmp_path, keys, message) -> None:
    with pytest.raises(UserError, match=message):
        run([*RESNET, *DEEP_SEARCH, *keys, f"run_dir={tmp_path}"])
    assert not list(tmp_path.rglob("trial=*"))


def test_an_unreachable_ray_address_stops_in_one_line_naming_the_key(tmp_path) -> None:
    pytest.importorskip("ray", reason="Ray is not installed")
    address = "deep.search.ray_address=127.0.0.1:1"  # loopback only: nothing listens there
    with pytest.raises(UserError, match=r"deep.search.ray_address=127.0.0.1:1: nothing answers"):
        run([*RESNET, *DEEP_SEARCH, *RAY, address, f"run_dir={tmp_path}"])
    assert not list(tmp_path.rglob("DONE"))


def test_without_ray_the_search_says_what_to_install(monkeypatch, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails
    with pytest.raises(UserError, match=r"deep.search.trial_executor=ray needs ray.*cluster"):
        run([*RESNET, *DEEP_SEARCH, *RAY, f"run_dir={tmp_path}"])
    assert not list(tmp_path.rglob("DONE"))
