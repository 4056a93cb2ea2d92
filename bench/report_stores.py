"""The object-store part of the report (:mod:`bench.store_requests`): requests by verb
and delayed-store latency of the 10-row write and the coalesced commit, on S3 and
ADLS, each goal stated met or not, and the request trace of one write with each
request above the MERGE's named."""

from __future__ import annotations

from typing import Any

__all__ = ["ABOVE_FLOOR", "goal_rows", "render_stores"]

_VERBS = ("GET", "HEAD", "PUT", "LIST", "DELETE", "POST")
_STORE_NAMES = {"s3": "S3 (moto)", "adls": "ADLS (Azurite)"}

#: Why each request of a steady-state write above the kept-open MERGE's must stay,
#: keyed by the call the tracer names (a prefix of it).
ABOVE_FLOOR = {
    "deltalog.tables._exists": (
        "HEAD of the next commit file: nothing was committed since the snapshot held. "
        "Once in the staging log for the state the write decides from (pending versions, "
        "quarantine, the committed mark, a newer writer's claim), once in the staging log "
        "right before the target commit (the fencing check: a claim made after the "
        "intent), once in the target right before the MERGE (another writer's commit, "
        "which the MERGE must read). Each replaces a LIST and a GET of `_last_checkpoint`."
    ),
    "deltalake.write_deltalake <- deltalog.commits.marker_commit": (
        "the publish intent, one staging commit (PUT, and the LIST before and the LIST "
        "and GETs after it that every delta-rs commit makes): it must be durable before "
        "the target commit, because it bounds which versions may have landed when the "
        "target loses its markers (rebuilt, restored, expired), and a claim made since "
        "the state was read fails it (fencing)."
    ),
    "embedded.retention.delete_old_log": (
        "the staging log kept by count, at the commit that writes a checkpoint (one "
        "in ten staging commits on an object store)."
    ),
    "checkpoint": (
        "a staging checkpoint, every ten staging commits on an object store (its "
        "Parquet file and `_last_checkpoint`, and the commits read to write it)."
    ),
}


def _x(value: float) -> str:
    return f"{value:.2f}x"


def _mark(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def _write_goals(sink: dict[str, float], merge: dict[str, float]) -> dict[str, tuple[str, bool]]:
    ratio = sink["total"] / merge["total"]
    extra = {v: sink.get(v, 0.0) - merge.get(v, 0.0) for v in ("HEAD", "LIST")}
    # the MERGE's PUTs are its data files plus its one commit
    puts = sink.get("PUT", 0.0) - merge.get("PUT", 0.0)
    return {
        "total": (f"{_x(ratio)} (≤ 1.1x)", ratio <= 1.1),
        "PUT": (f"+{puts:.2f} (≤ +0)", puts <= 0.0),
        "HEAD/LIST": (
            f"HEAD +{extra['HEAD']:.2f}, LIST +{extra['LIST']:.2f} (≤ +0)",
            extra["HEAD"] <= 0 and extra["LIST"] <= 0,
        ),
    }


def goal_rows(out: dict[str, Any]) -> list[list[str]]:
    """Rows for the report's goals table."""
    rows: list[list[str]] = []
    for name, store in out["stores"].items():
        label = _STORE_NAMES.get(name, name)
        for layout, case in store["write"].items():
            for what, (measured, ok) in _write_goals(case["sink"], case["merge_txn"]).items():
                rows.append(
                    [
                        f"{label}: 10-row `write`, {layout} layout, {what} vs the kept-open "
                        "MERGE with the same marker",
                        {"total": "≤ 1.1x", "PUT": "≤ +0", "HEAD/LIST": "≤ +0"}[what],
                        measured,
                        _mark(ok),
                    ]
                )
        for case in store["coalesced"].values():
            ratio = case["sink"]["total"]["total"] / case["hand"]["total"]["total"]
            rows.append(
                [
                    f"{label}: requests of {out['pending']} pending versions and their "
                    "coalesced commit vs their staging writes and one MERGE of their union",
                    "≤ 1.2x",
                    _x(ratio),
                    _mark(ratio <= 1.2 and case["same_rows"]),
                ]
            )
        for delay, lat in store["latency"].items():
            rows.append(
                [
                    f"{label}: 10-row `write` wall time, {delay} ms per request",
                    "≤ 1.2x",
                    _x(lat["ratio"]),
                    _mark(lat["ratio"] <= 1.2),
                ]
            )
            co = lat["coalesced"]
            rows.append(
                [
                    f"{label}: {out['pending']} pending versions staged and committed, "
                    f"{delay} ms per request, vs staged by hand and one MERGE",
                    "≤ 1.2x",
                    _x(co["ratio"]),
                    _mark(co["ratio"] <= 1.2),
                ]
            )
    return rows


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _verbs(counts: dict[str, float]) -> list[str]:
    return [f"{counts.get(v, 0.0):.2f}" for v in _VERBS] + [f"**{counts['total']:.2f}**"]


def _reason(call: str) -> str:
    for key, why in ABOVE_FLOOR.items():
        if call.startswith(key) or key in call:
            return why
    return ""


def render_stores(out: dict[str, Any]) -> str:
    """The whole object-store section."""
    parts: list[str] = []
    for name, store in out["stores"].items():
        label = _STORE_NAMES.get(name, name)
        parts.append(f"### {label}")
        rows = []
        for layout, case in store["write"].items():
            for side in ("sink", "merge_txn"):
                rows.append([f"write, {layout}", f"`{side}`", *_verbs(case[side])])
        for layout, case in store["coalesced"].items():
            for side in ("sink", "hand"):
                for part in ("stage", "commit", "total"):
                    rows.append(
                        [f"coalesced, {layout}", f"`{side}` {part}", *_verbs(case[side][part])]
                    )
        parts.append(_table(["case", "side", *_VERBS, "total"], rows))
        same = all(c["same_rows"] for c in [*store["write"].values(), *store["coalesced"].values()])
        parts.append(
            f"Requests per write (coalesced: per round of {out['pending']} versions), "
            f"{out['runs']} writes after 3 warm-up writes, {out['rounds']} coalesced rounds; "
            f"every side's target holds the same rows afterwards: {'yes' if same else '**no**'}."
        )
        lat_rows = []
        for delay, lat in store["latency"].items():
            co = lat["coalesced"]
            lat_rows.append(
                [
                    f"{delay} ms",
                    f"{lat['sink']['median']:.0f}",
                    f"{lat['merge_txn']['median']:.0f}",
                    _x(lat["ratio"]),
                    f"{co['sink_total']['median']:.0f} ({co['sink_commit']['median']:.0f})",
                    f"{co['hand_total']['median']:.0f} ({co['merge']['median']:.0f})",
                    f"{_x(co['ratio'])} ({_x(co['commit_ratio'])})",
                ]
            )
        parts.append(
            _table(
                [
                    "delay per request",
                    "`write` ms",
                    "MERGE ms",
                    "ratio",
                    f"{out['pending']} staged + commit ms (commit)",
                    "by hand ms (MERGE)",
                    "ratio (commit / MERGE)",
                ],
                lat_rows,
            )
        )
        trace = store.get("trace", {}).get("sink", [])
        if trace:
            merge_calls = [r for r in trace if "merge.execute" in r[1]]
            above = [r for r in trace if "merge.execute" not in r[1]]
            lines = [f"{req:<70} {call}" for req, call in trace]
            parts.append(
                f"The request trace of one steady-state `write` ({len(trace)} requests: "
                f"{len(merge_calls)} inside delta-rs's MERGE, {len(above)} around it), each "
                "request with the call that caused it:"
            )
            parts.append("```text\n" + "\n".join(lines) + "\n```")
            reasons = {}
            for _req, call in above:
                why = _reason(call)
                if why:
                    key = next(k for k in ABOVE_FLOOR if k in call)
                    reasons[key] = why
            if reasons:
                parts.append(
                    "Above the MERGE, and why each stays:\n\n"
                    + "\n".join(f"* `{key}`: {why}" for key, why in reasons.items())
                )
    load = f"load average {out.get('loadavg_start')} at start, {out.get('loadavg_end')} at end"
    parts.append(f"Measured with `python -m bench.store_requests` ({load}).")
    return "\n\n".join(parts)
