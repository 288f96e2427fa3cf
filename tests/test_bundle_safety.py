"""Bundles read as untrusted input, files never written through a link, runs kept in the runs
folder, Ray addresses bounded (issue 48, items 3, 4 and 6). Each test failed before its fix."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tiny import small_encoder, tiny_data

from scarce_ltr.cli import run
from scarce_ltr.core.errors import UserError
from scarce_ltr.core.locks import FolderLock
from scarce_ltr.core.run_identity import run_folder
from scarce_ltr.serving.ranker import load_ranker

DATA = [*tiny_data(), "logger=none"]
GBDT = ["gbdt.num_threads=1", "gbdt.max_rounds=10", "gbdt.early_stopping_rounds=5"]


@pytest.fixture(scope="module")
def gbdt(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("safety") / "gbdt"
    run(["baseline", "gbdt", *DATA, *GBDT, f"run_dir={folder}"])
    return folder / "bundle"


@pytest.fixture(scope="module")
def torch_bundle(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("safety") / "full"
    run(["finetune", "full", *DATA, *small_encoder(), "epochs=1", "head_hidden=16",
         "pretrained=none", f"run_dir={folder}"])  # fmt: skip
    return folder / "bundle"


def copy_of(bundle: Path, tmp_path: Path, name: str = "copy") -> Path:
    copy = tmp_path / name
    shutil.copytree(bundle, copy, symlinks=True)
    return copy


def edit_manifest(bundle: Path, change) -> None:
    manifest = json.loads((bundle / "bundle.json").read_text())
    change(manifest)
    (bundle / "bundle.json").write_text(json.dumps(manifest))


def one_line_error(bundle: Path, match: str) -> None:
    with pytest.raises(UserError, match=match) as caught:
        load_ranker(bundle)
    assert "\n" not in str(caught.value)


# -- paths inside a bundle ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../../secret.txt", "/etc/passwd", "sub/../../x"])
def test_a_booster_path_leading_out_of_the_bundle_is_refused(gbdt, tmp_path, name) -> None:
    copy = copy_of(gbdt, tmp_path)
    (tmp_path / "secret.txt").write_text("tree\n")
    edit_manifest(copy, lambda m: m["model"].update(booster=name))
    one_line_error(copy, "model.booster .* leads out of the bundle")


def test_a_transform_file_linked_out_of_the_bundle_is_refused(gbdt, tmp_path) -> None:
    copy = copy_of(gbdt, tmp_path)
    info = json.loads((copy / "bundle.json").read_text())["transform"]
    if not info.get("file"):
        pytest.skip("this run's transform has no arrays")
    outside = tmp_path / "elsewhere.npz"
    shutil.copy(copy / info["file"], outside)
    (copy / info["file"]).unlink()
    (copy / info["file"]).symlink_to(outside)
    one_line_error(copy, "a link leading out of the bundle")


def ensemble_of(gbdt: Path, tmp_path: Path, members: list[str], weights: list) -> Path:
    folder = tmp_path / "ensemble"
    shutil.copytree(gbdt, folder / "members" / "0")
    edit = json.loads((gbdt / "bundle.json").read_text())
    edit["model"] = {"kind": "ensemble", "members": members, "weights": weights,
                     "normalize": "zscore"}  # fmt: skip
    edit["transform"] = {"kind": "none", "clip": None}
    edit.pop("outliers", None)
    (folder / "bundle.json").write_text(json.dumps(edit))
    return folder


def test_a_valid_hand_made_ensemble_loads(gbdt, tmp_path) -> None:
    import numpy as np

    ranker = load_ranker(ensemble_of(gbdt, tmp_path, ["members/0"], [1.0]))
    assert ranker.predict(np.zeros((3, ranker.n_features), np.float32)).shape == (3,)


@pytest.mark.parametrize("member", [".", "members/0/..", "members/../..", "/tmp"])
def test_a_member_that_is_the_bundle_or_outside_it_is_refused(gbdt, tmp_path, member) -> None:
    one_line_error(ensemble_of(gbdt, tmp_path, [member], [1.0]), "an ensemble member")


def test_a_member_linked_to_its_own_ensemble_is_one_line(gbdt, tmp_path) -> None:
    folder = ensemble_of(gbdt, tmp_path, ["members/1"], [1.0])
    (folder / "members" / "1").symlink_to(folder)  # was a 2,004-line RecursionError
    one_line_error(folder, "a link leading out of the bundle")


def test_ensemble_weights_that_disagree_with_the_members_are_refused(gbdt, tmp_path) -> None:
    one_line_error(ensemble_of(gbdt, tmp_path, ["members/0"], [0.5, 0.5]), "2 weights for 1")
    shutil.rmtree(tmp_path / "ensemble")
    one_line_error(ensemble_of(gbdt, tmp_path, ["members/0"], ["x"]), "not numbers")


# -- fields against the weights ---------------------------------------------------------------


@pytest.mark.parametrize("n_features", [5, 13, 10**11])
def test_n_features_that_disagree_with_the_weights_are_refused(gbdt, tmp_path, n_features):
    copy = copy_of(gbdt, tmp_path)
    edit_manifest(copy, lambda m: m.update(n_features=n_features))
    one_line_error(copy, "n_features|shape|do not fit together")


def test_a_torch_spec_wider_than_its_weights_is_refused_before_allocating(torch_bundle, tmp_path):
    copy = copy_of(torch_bundle, tmp_path)
    # 2**19 wide: ~160 GB of float32 weights once built; the check builds it on no device.
    edit_manifest(copy, lambda m: m["model"]["spec"]["encoder"].update(width=2**19, hidden=2**19))
    start = time.monotonic()
    one_line_error(copy, "bad model description .*differ from those of the weights")
    assert time.monotonic() - start < 30


def test_a_valid_torch_bundle_still_loads(torch_bundle) -> None:
    import numpy as np

    ranker = load_ranker(torch_bundle)
    assert np.isfinite(ranker.predict(np.zeros((4, ranker.n_features), np.float32))).all()


# -- damaged model files: one line, never an abort --------------------------------------------

CHILD = """
import sys
from scarce_ltr.core.errors import UserError
from scarce_ltr.serving.ranker import load_ranker
try:
    load_ranker(sys.argv[1])
except UserError as exc:
    print(exc)
    sys.exit(2)
"""


def load_in_child(bundle: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run([sys.executable, "-c", CHILD, str(bundle)], capture_output=True,
                          text=True, env=env, timeout=300)  # fmt: skip


def test_truncated_lightgbm_models_are_one_line_not_an_abort(gbdt, tmp_path) -> None:
    text = (gbdt / "model.txt").read_bytes()
    tree = text.index(b"Tree=1")
    for n, cut in enumerate([tree + 40, tree + 200, len(text) // 2, 20]):
        copy = copy_of(gbdt, tmp_path, f"cut{n}")
        (copy / "model.txt").write_bytes(text[:cut])
        done = load_in_child(copy)  # was rc 134 (terminate) or a segmentation fault
        assert done.returncode == 2, (cut, done.returncode, done.stderr[-500:])
        assert re.match(r".*model\.txt: not a LightGBM model \(line \d+", done.stdout)


@pytest.mark.parametrize(
    "edit",
    [
        lambda t: t.replace("tree_sizes=", "tree_sizes=1"),  # offsets into the middle of a tree
        lambda t: re.sub(r"left_child=(\S+)", r"left_child=7777", t, count=1),
        lambda t: re.sub(r"left_child=(-?\d+) (-?\d+)", r"left_child=\2 \1 0", t, count=1),
        lambda t: re.sub(r"num_leaves=\d+", "num_leaves=9999", t, count=1),
        lambda t: re.sub(r"threshold=\S+", "threshold=1.2.3", t, count=1),
        lambda t: t.replace("decision_type=", "decision_type", 1),
    ],
)
def test_edited_lightgbm_models_are_refused_with_the_line(gbdt, tmp_path, edit) -> None:
    copy = copy_of(gbdt, tmp_path)
    (copy / "model.txt").write_text(edit((gbdt / "model.txt").read_text()))
    done = load_in_child(copy)
    assert done.returncode == 2, (done.returncode, done.stderr[-500:])
    assert "not a LightGBM model (line" in done.stdout


def test_the_checked_text_is_the_model_unchanged(gbdt) -> None:
    from scarce_ltr.trees.lightgbm.model_text import checked_model_text

    data = (gbdt / "model.txt").read_bytes()
    assert checked_model_text(data, gbdt / "model.txt") == data.decode()


# -- files: locks and logs never through a link -----------------------------------------------


def test_a_lock_that_is_a_link_is_refused_and_its_target_kept(tmp_path) -> None:
    mine = tmp_path / "thesis.tex"
    mine.write_text("years of work\n")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / ".lock").symlink_to(mine)  # was truncated to 0 bytes
    with pytest.raises(UserError, match=r"\.lock: a symbolic link where the lock file belongs"):
        with FolderLock(run_dir):
            pass
    assert mine.read_text() == "years of work\n"


def test_a_finished_run_with_a_linked_lock_leaves_the_target_alone(gbdt, tmp_path) -> None:
    run_dir = gbdt.parent
    mine = tmp_path / "notes.txt"
    mine.write_text("keep\n")
    (run_dir / ".lock").unlink(missing_ok=True)
    (run_dir / ".lock").symlink_to(mine)
    try:
        with pytest.raises(UserError, match="symbolic link"):
            run(["baseline", "gbdt", *DATA, *GBDT, f"run_dir={run_dir}"])
    finally:
        (run_dir / ".lock").unlink()
    assert mine.read_text() == "keep\n"


def test_a_sweep_cells_linked_log_gets_nothing(tmp_path) -> None:
    from scarce_ltr.sweeps.sweep_runner import SweepRunner

    mine = tmp_path / "mine.txt"
    mine.write_text("mine\n")
    folder = tmp_path / "sweep"
    args = ["sweep", "quick", "models=[gbdt]", "fractions=[1.0]", "seeds=[0]", "logger=none",
            "report=false", "overrides.common=[" + ",".join([*tiny_data(), *GBDT]) + "]",
            "overrides.pretrain=[]", "overrides.finetune=[]", f"run_dir={folder}"]  # fmt: skip
    original = SweepRunner._execute  # the cell's folder is known once planned

    def linked(self, job):
        job.run_dir.mkdir(parents=True, exist_ok=True)
        (job.run_dir / "log.txt").unlink(missing_ok=True)
        (job.run_dir / "log.txt").symlink_to(mine)
        return original(self, job)

    SweepRunner._execute = linked
    try:
        cells = run(args)
    finally:
        SweepRunner._execute = original
    assert [c["status"] for c in cells] == ["failed"]
    assert mine.read_text() == "mine\n"  # the job's output was appended to it before


# -- run names inside the runs folder ---------------------------------------------------------


@pytest.mark.parametrize("name", ["../../elsewhere", "/tmp/root", "..", "a/b"])
def test_a_data_name_leading_out_of_the_runs_folder_is_refused(tmp_path, monkeypatch, name):
    monkeypatch.setenv("LTR_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="data.name"):
        run(["baseline", "gbdt", *DATA, *GBDT, f"data.name={name}"])
    assert not any(p.name != "runs" for p in tmp_path.iterdir())
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("seed=*"))


@pytest.mark.parametrize("part", ["..", "/abs", "a/../..", ""])
def test_run_folder_refuses_a_part_that_is_not_one_folder(tmp_path, part) -> None:
    with pytest.raises(UserError, match="cannot name a run folder"):
        run_folder(
            tmp_path, dataset=part or "", stage="baseline", name="gbdt", setting=None, seed=0
        )
    assert run_folder(tmp_path, dataset="d", stage="baseline", name="m", setting="frac=1", seed=0) \
        == tmp_path / "d" / "baseline" / "m" / "frac=1" / "seed=0"  # fmt: skip
    fold = run_folder(
        tmp_path, dataset="d/fold=1", stage="baseline", name="m", setting=None, seed=0
    )
    assert fold == tmp_path / "d" / "fold=1" / "baseline" / "m" / "seed=0"  # a sweep's fold


# -- Ray addresses ----------------------------------------------------------------------------


@pytest.mark.parametrize("address", ["127.0.0.1:70000", "127.0.0.1:0", "nohost", "ray://:10001"])
def test_a_malformed_ray_address_is_a_config_error(address) -> None:
    from scarce_ltr.sweeps.ray_executor import RayConfig

    with pytest.raises(ValueError, match="ray.address"):
        RayConfig(address=address)


def test_an_unreachable_ray_address_fails_in_one_line_quickly() -> None:
    from scarce_ltr.sweeps.ray_executor import probe_address

    start = time.monotonic()
    with pytest.raises(UserError, match=r"nothing answers at 127\.0\.0\.1:1 "):
        probe_address("127.0.0.1:1")  # loopback only; ray.init retried it for over 300 s
    assert time.monotonic() - start < 15


def test_a_port_that_is_no_ray_head_ends_in_one_line_within_the_deadline(tmp_path) -> None:
    import socket
    import threading

    pytest.importorskip("ray", reason="Ray is not installed")
    server = socket.create_server(("127.0.0.1", 0))  # accepts, never answers (loopback only)
    threading.Thread(target=lambda: [server.accept() for _ in range(100)], daemon=True).start()
    address = f"127.0.0.1:{server.getsockname()[1]}"
    args = ["sweep", "quick", "models=[gbdt]", "fractions=[1.0]", "seeds=[0]", "logger=none",
            "report=false", "executor=ray", f"ray.address={address}",
            f"run_dir={tmp_path / 's'}"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "LTR_RAY_INIT_SECONDS": "5",
           "RAY_AUTH_MODE": "disabled"}  # fmt: skip
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "scarce_ltr", *args], capture_output=True,
                          text=True, env=env, timeout=240)  # fmt: skip
    server.close()
    assert time.monotonic() - start < 120  # it ran on past 300 s
    assert done.returncode == 2, done.stderr[-1000:]
    assert f"error: ray.address={address}: Ray did not answer within 5 s" in done.stderr


@pytest.mark.parametrize("backend", ["xgboost", "catboost"])
def test_damaged_xgboost_and_catboost_files_are_one_line(tmp_path, backend) -> None:
    import numpy as np

    from scarce_ltr.trees.tuning import check_in_child

    module = pytest.importorskip(backend)
    x = np.random.default_rng(0).random((60, 4), dtype=np.float32)
    y, qid = np.arange(60) % 3, np.repeat(np.arange(6), 10)
    path = tmp_path / "model"
    if backend == "xgboost":
        from scarce_ltr.trees.xgboost import _CHECK

        params = {"objective": "rank:ndcg", "nthread": 1}
        model = module.train(params, module.DMatrix(x, y, qid=qid), 3)
        data = bytes(model.save_raw("ubj"))
    else:
        from scarce_ltr.trees.catboost import _CHECK

        model = module.CatBoost({"loss_function": "YetiRank", "iterations": 3, "verbose": 0,
                                 "thread_count": 1, "allow_writing_files": False})  # fmt: skip
        model.fit(module.Pool(x, y, group_id=qid))
        model.save_model(str(path))
        data = path.read_bytes()
    path.write_bytes(data)
    check_in_child(_CHECK, path, backend)  # the whole file passes
    for cut in (len(data) // 3, len(data) // 2):
        path.write_bytes(data[:cut])  # some cuts aborted or crashed the process
        with pytest.raises(UserError, match=f"^{re.escape(str(path))}: not a readable"):
            check_in_child(_CHECK, path, backend)
