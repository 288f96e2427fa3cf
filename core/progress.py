"""Progress that reads well on a terminal and in a file, and the block that ends a run.

On a terminal `progress_bar` is a tqdm bar. When stderr is not a terminal (nohup, CI, a sweep
cell's ``log.txt``) a bar's redraws would be noise or nothing at all, so it writes plain lines
instead: the first step, then at most one line every ``LTR_PROGRESS_SECONDS`` (default 30), and
the last step, each with the elapsed time and an ETA over the whole run.

`final_block` is what `core.runs.Run.finish` prints last: the run folder, the chosen epoch or
grid point, vali and test NDCG@k and Outlier-NDCG, and the seconds the run took.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, TextIO

PROGRESS_ENV = "LTR_PROGRESS_SECONDS"
DEFAULT_EVERY = 30.0


def duration(seconds: float) -> str:
    """``75.2`` -> ``1m15s``; ``4000`` -> ``1h06m``."""
    if not math.isfinite(seconds):
        return "?"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s" if seconds >= 10 else f"{seconds:.1f}s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def eta(elapsed: float, done: float, total: float) -> float:
    """Seconds left when ``done`` of ``total`` steps took ``elapsed`` seconds (nan: unknown)."""
    if done <= 0 or total <= 0:
        return math.nan
    return elapsed / done * max(total - done, 0)


class LineProgress:
    """tqdm's ``update`` / ``set_postfix`` / ``close``, written as rate-limited plain lines."""

    def __init__(
        self,
        *,
        total: int,
        desc: str,
        unit: str,
        initial: int = 0,
        every: float | None = None,
        file: TextIO | None = None,
    ) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.n = self.start_n = initial
        self.every = _every() if every is None else every
        self.file = file
        self.started = time.monotonic()
        self.last_line = -math.inf
        self.postfix = ""
        self._lock = threading.Lock()  # a sweep's worker threads update one bar

    def update(self, n: int = 1) -> None:
        if n <= 0:
            return
        with self._lock:
            before = self.n
            self.n = min(self.n + n, self.total) if self.total else self.n + n
            now = time.monotonic()
            first = before == self.start_n
            if first or self.n >= self.total or now - self.last_line >= self.every:
                self.last_line = now
                self._write(now)

    def set_postfix(self, refresh: bool = True, **values: Any) -> None:
        self.postfix = ", ".join(f"{k} {v}" for k, v in values.items())

    def close(self) -> None:
        pass

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write(self, now: float) -> None:
        elapsed = now - self.started
        left = eta(elapsed, self.n - self.start_n, self.total - self.start_n)
        line = f"{self.desc}: {self.unit} {self.n}/{self.total}"
        if self.postfix:
            line += f", {self.postfix}"
        line += f" [{duration(elapsed)} elapsed, ETA {duration(left)}]"
        print(line, file=self.file or sys.stderr, flush=True)


def progress_bar(*, total: int, desc: str, unit: str, initial: int = 0, enabled: bool = True):
    """A tqdm bar on a terminal, `LineProgress` otherwise; a silent one when not ``enabled``."""
    if not enabled:
        return LineProgress(total=total, desc=desc, unit=unit, initial=initial, every=math.inf)
    if sys.stderr.isatty():
        from tqdm import tqdm

        return tqdm(total=total, initial=initial, desc=desc, unit=unit, file=sys.stderr)
    return LineProgress(total=total, desc=desc, unit=unit, initial=initial)


def _every() -> float:
    try:
        return float(os.environ.get(PROGRESS_ENV, DEFAULT_EVERY))
    except ValueError:
        return DEFAULT_EVERY


def final_block(report: dict[str, Any], folder: Path, seconds: float) -> str:
    """The lines that end a run (``report`` is its report.json)."""
    name = f"{report.get('stage', 'run')} {report.get('model', '')}".strip()
    where = ", ".join(
        str(report[k]) for k in ("dataset", "label_setting") if report.get(k) is not None
    )
    seed = report.get("seed")
    head = f"== {name} finished ({where}{', seed ' + str(seed) if seed is not None else ''}) =="
    lines = [head, f"run folder : {folder}"]
    chosen = _chosen(report)
    if chosen:
        lines.append(f"chosen     : {chosen}")
    lines += _metric_lines(report.get("metrics") or {})
    lines.append(f"seconds    : {seconds:.1f}")
    return "\n".join(lines)


def _chosen(report: dict[str, Any]) -> str:
    """The vali-chosen epoch or grid point, or (pretraining) where training ended."""
    if report.get("stage") == "pretrain":
        parts = [f"last epoch {report.get('epochs')}"]
        if report.get("loss_curve"):
            parts.append(f"loss {report['loss_curve'][-1]:.4f}")
        last = next(
            (h["monitor"] for h in reversed(report.get("history") or []) if "monitor" in h), {}
        )
        if "effective_rank" in last:
            parts.append(f"effective rank {last['effective_rank']:.1f}")
        if "knn_ndcg@5" in last:
            parts.append(f"knn-probe vali NDCG@5 {last['knn_ndcg@5']:.4f}")
        return ", ".join(parts)
    selected = report.get("selected") if isinstance(report.get("selected"), dict) else {}
    parts = []
    epoch = report.get("best_epoch", selected.get("best_epoch"))
    if epoch is not None:
        trained = report.get("epochs_trained", selected.get("epochs_trained"))
        parts.append(f"epoch {epoch}" + (f" of {trained}" if trained is not None else ""))
    if "learning_rate" in report:
        parts.append(f"lr {report['learning_rate']:g}")
    # The grid point's own settings; its scores and timings are shown elsewhere in the block.
    skip = {"name", "phase", "best_epoch", "epochs_trained"}
    parts += [
        f"{k}={_short(v)}"
        for k, v in selected.items()
        if k not in skip
        and "vali" not in k
        and not k.startswith("seconds")
        and not isinstance(v, dict | list)
    ]
    weights = report.get("weights")
    if isinstance(weights, dict):  # an ensemble: each member's weight, chosen on vali
        models = {m.get("run"): m.get("model") for m in report.get("members") or []}
        named = [f"{models.get(run) or Path(run).parts[-3]} {w:.2f}" for run, w in weights.items()]
        parts.append("weights " + ", ".join(named))
    return ", ".join(parts)


def _short(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _metric_lines(metrics: dict[str, Any]) -> list[str]:
    vali, test = metrics.get("vali") or {}, metrics.get("test") or {}
    ks = [key.split("@")[1] for key in test if key.startswith("ndcg@")]
    if not ks:
        return []
    rows = [("", [f"@{k:<6}" for k in ks])]
    rows.append(("vali NDCG", [_value(vali.get(f"ndcg@{k}")) for k in ks]))
    rows.append(("test NDCG", [_value(test.get(f"ndcg@{k}")) for k in ks]))
    n_outliers = test.get("n_outlier_groups")
    if n_outliers:
        rows.append(
            (f"Outlier-NDCG (n={n_outliers})", [_value(test.get(f"outlier_ndcg@{k}")) for k in ks])
        )
    width = max(len(label) for label, _ in rows)
    lines = [f"{label:<{width}} : {' '.join(values)}".rstrip() for label, values in rows]
    lines[0] = lines[0].replace(":", " ", 1)
    if not n_outliers:
        method = (metrics.get("outliers") or {}).get("method", "?")
        lines.append(
            f"Outlier-NDCG: no outlier test QG flagged (data.outliers.method={method}); "
            "see data-info, or try data.outliers.method=knn"
        )
    return lines


def _value(value: Any) -> str:
    if not isinstance(value, int | float) or not math.isfinite(value):
        return "n/a    "
    return f"{value:.4f} "
