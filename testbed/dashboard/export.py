"""A self-contained topology.html: the dashboard's full page with its libraries and the run's sampled states
inlined, so it opens from a file (the report links to it) with no server and nothing fetched.

The states are the run as it stood at FRAMES evenly spaced moments (the same replay `/state?t=` gives) and at
its end; the page's slider moves through them and its series panels are drawn from them.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from testbed.dashboard.server import FULL_PAGE_NEEDS, PAGE_DIR, STATIC_DIR
from testbed.dashboard.state import RunState, open_source

FRAMES = 30


def frames(run_dir: Path, count: int = FRAMES) -> list[dict[str, Any]]:
    """The run's state at `count` moments from its first record to its last (the last one: as it ended)."""
    final = open_source(run_dir)
    final.poll()
    end = final.snapshot()
    first, last = end.get("first_ts") or 0.0, end.get("last_ts") or 0.0
    out = []
    if last > first and count > 1:
        for i in range(count - 1):
            state = RunState(Path(end["run_dir"]), first + (last - first) * i / (count - 1))
            state.poll()
            out.append(state.snapshot())
    out.append(end)
    for snap in out:
        snap["replay"] = True
    return out


def _inline_script(text: str) -> str:
    return "<script>\n" + text.replace("</script", "<\\/script") + "\n</script>"


def write(run_dir: Path, out: Path, count: int = FRAMES) -> Path | None:
    """Write `out`; None when the page's libraries are not installed (`make setup`)."""
    if not all((STATIC_DIR / f).is_file() for f in FULL_PAGE_NEEDS):
        return None
    page = (PAGE_DIR / "app.html").read_text(encoding="utf-8")
    data = json.dumps(frames(run_dir, count), separators=(",", ":"))
    css = {"/static/uPlot.min.css": STATIC_DIR / "uPlot.min.css", "/page/app.css": PAGE_DIR / "app.css"}
    for href, path in css.items():
        page = page.replace(f'<link rel="stylesheet" href="{href}">',
                            "<style>\n" + path.read_text(encoding="utf-8") + "\n</style>")
    scripts = {"/static/cytoscape.min.js": STATIC_DIR / "cytoscape.min.js",
               "/static/uPlot.iife.min.js": STATIC_DIR / "uPlot.iife.min.js",
               "/page/layout.js": PAGE_DIR / "layout.js"}
    for src, path in scripts.items():
        page = page.replace(f'<script src="{src}"></script>', _inline_script(path.read_text(encoding="utf-8")))
    # the frames before app.js: it plays them instead of opening the event stream
    page = page.replace('<script src="/page/app.js"></script>',
                        _inline_script("window.DASH_FRAMES = " + data + ";")
                        + "\n" + _inline_script((PAGE_DIR / "app.js").read_text(encoding="utf-8")))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page, encoding="utf-8")
    return out


__all__ = ["frames", "write"]
