"""Every chart the notebooks and the report draw reads well at 1280 px: built from the saved data
(the same calls the notebooks and ``funcbwd_lab.views.report`` make), each is checked from its layout
by :func:`funcbwd_lab.figstyle.layout_problems`: no annotation without text (plotly draws its
"new text" placeholder there), no title wider than its room at the width a 1280 px screen gives a
figure (:data:`funcbwd_lab.figstyle.SCREEN_WIDTH`), room between panels for the tick labels,
axis titles and subplot titles that sit there, and every tick of a log axis labelled in full.
Mutations prove each check can fail.

Fast (no kernel, no browser): about two seconds.
"""

from __future__ import annotations

import json

import copy
from pathlib import Path

import plotly.graph_objects as go
import pytest
from plotly.subplots import make_subplots

from funcbwd_lab import figstyle

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"


def _bench():
    from funcbwd_lab.studies.bench import results as bench_results

    return bench_results.load(str(DATA / "bench-quick.json"))


def charts() -> dict[str, go.Figure]:
    """Every figure the notebooks and the report show, by where it is shown."""
    from funcbwd_lab.studies.coverage import charts as coverage_charts
    from funcbwd_lab.studies.coverage import data as coverage_data
    from funcbwd_lab.studies.coverage import summary as coverage_summary
    from funcbwd_lab.studies.bench import profile_section as bench_profile
    from funcbwd_lab.studies.coverage import cost as coverage_cost
    from funcbwd_lab.studies.bench import profile
    from funcbwd_lab.studies.review import review
    from funcbwd_lab.studies.matrix import records
    from funcbwd_lab.views import display
    from funcbwd_lab.studies.review import decision
    from funcbwd_lab.studies.bench import charts as plots
    from funcbwd_lab.views.widgets import Explorer

    bench = _bench()
    out = {f"bench {name}": fig for name, fig in plots.all_figures(bench).items()}
    for metric in ("ratio_vs_handfixed", "ratio_vs_builtin", "speedup_vs_loop"):  # op notebooks
        out[f"op notebook {metric}"] = plots.ratio_vs_batch(bench, "small", metric, ops=["diag"], cols=1)
    out["op notebook vmap off"] = plots.overhead_chart(bench, ops=["diag"])
    for st, b in bench_profile.breakdowns(bench).items():
        out[f"profile {st}"] = profile.figure(b)
    evidence = review.load_evidence(DATA / review.EVIDENCE_FILE)
    out["decision"] = decision.chart(review.decision(evidence))
    results = records.load(DATA / "matrix-test-ops.json")
    out["matrix heatmap (overview)"] = display.matrix_heatmap(results, title="8 test ops x 8 scenarios")
    diag = [r for r in results if r.op == "diag"]
    out["matrix heatmap (op notebook)"] = display.matrix_heatmap(diag, title="diag: scenario x strategy")
    out["explorer"] = Explorer(results, strategies=sorted({r.strategy for r in results}),
                               scenarios=sorted({r.scenario for r in results}),
                               trace_view=lambda *a: "", graph_view=lambda *a: "").figure
    sweep = coverage_data.load(DATA / coverage_data.FILE_NAME)
    out["coverage summary"] = coverage_charts.summary_figure(coverage_summary.summarize(sweep["records"]))
    costs = json.loads((DATA / coverage_cost.COST_FILE).read_text())["cost"]
    out["coverage cost"] = coverage_cost.cost_figure(costs)
    return out


@pytest.fixture(scope="module")
def all_charts():
    return charts()


def test_the_catalog_holds_every_chart(all_charts):
    # the profile section is in the saved run, and both size classes are drawn
    assert {"profile traced", "bench ratio_vs_floor_large", "decision", "explorer"} <= set(all_charts)
    assert len(all_charts) >= 20


def test_every_chart_reads_well_at_1280_px(all_charts):
    problems = {name: figstyle.layout_problems(fig) for name, fig in all_charts.items()}
    problems = {k: v for k, v in problems.items() if v}
    assert not problems, "\n".join(f"{k}:\n  " + "\n  ".join(v) for k, v in problems.items())


def test_no_chart_has_an_annotation_without_text(all_charts):
    empty = {name: sum(1 for a in fig.layout.annotations if not (a.text or "").strip())
             for name, fig in all_charts.items()}
    assert not any(empty.values()), {k: v for k, v in empty.items() if v}


# ------------------------------------------------------------------------------ the checks can fail
def test_a_log_axis_labelled_by_plotly_is_found_and_log_ticks_fix_it():
    """issue 36: plotly labels the ticks between decades of a log axis with their first digit (a
    "2" above "10" that means 20); every log axis must carry :func:`figstyle.log_ticks`."""
    fig = go.Figure(go.Scatter(x=[1, 8, 64, 512], y=[0.8, 1.1, 1.6, 2.4]))
    fig.update_xaxes(type="log")
    fig.update_yaxes(type="log")
    assert sum("log axis" in p for p in figstyle.layout_problems(fig)) == 2
    for axis, values in ((fig.update_xaxes, [1, 8, 64, 512]), (fig.update_yaxes, [0.8, 2.4])):
        ticks, labels = figstyle.log_ticks(values)
        axis(tickvals=ticks, ticktext=labels)
    assert not [p for p in figstyle.layout_problems(fig) if "log axis" in p]
    assert figstyle.log_ticks([0.8, 2.4]) == ([0.7, 1.0, 1.5, 2.0, 3.0], ["0.7", "1", "1.5", "2", "3"])
    assert figstyle.log_ticks([0.05, 600])[1][:4] == ["0.05", "0.1", "0.2", "0.5"]  # wide: 1-2-5


def test_an_empty_annotation_is_found():
    fig = go.Figure(go.Scatter(x=[1], y=[1]))
    fig.add_hline(y=1, annotation_position="top left")  # what plots.py used to do: no text
    assert any("no text" in p for p in figstyle.layout_problems(fig))


def test_a_long_subplot_title_is_found_and_wrapping_fixes_it():
    label = "passes without vmap's slow per-sample fallback [cells]"
    fig = make_subplots(rows=1, cols=4, subplot_titles=[label] * 4)
    assert any("subplot title wider" in p for p in figstyle.layout_problems(fig))
    width = (figstyle.SCREEN_WIDTH - 160) * 0.2
    wrapped = make_subplots(rows=1, cols=4, subplot_titles=[figstyle.wrap_to(label, width, 16)] * 4)
    assert not any("subplot title wider" in p for p in figstyle.layout_problems(wrapped))


def test_crowded_panels_are_found():
    tight = make_subplots(rows=2, cols=3, horizontal_spacing=0.01, vertical_spacing=0.02,
                          subplot_titles=list("abcdef"))
    tight.update_yaxes(title_text="y")
    tight.update_xaxes(title_text="x")
    found = figstyle.layout_problems(tight)
    assert any("between panels" in p for p in found) and any("between rows" in p for p in found)
    tall = go.Figure(go.Scatter(x=[1], y=[1]), layout={"height": 200})
    tall.update_yaxes(title_text="a y axis title much taller than a 200 px high figure leaves room for")
    assert any("y axis title taller" in p for p in figstyle.layout_problems(tall))


def test_the_bench_chart_would_fail_with_titles_on_every_panel():
    from funcbwd_lab.studies.bench import charts as plots

    fig = copy.deepcopy(plots.ratio_vs_batch(_bench(), "small", "ratio_vs_handfixed"))
    assert not figstyle.layout_problems(fig)
    fig.update_yaxes(title_text="time / handfixed's time (x, lower is better)")  # the old titles
    assert any("y axis title taller" in p for p in figstyle.layout_problems(fig))


def test_text_width_estimate_orders_text_sensibly():
    assert figstyle.text_width("mmmm") > figstyle.text_width("iiii")
    assert figstyle.text_width("ab<br>abcdef") == figstyle.text_width("abcdef")
    assert figstyle.text_width("<b>bold</b>") == figstyle.text_width("bold")
    assert figstyle.text_width("x" * 10, 20) == 2 * figstyle.text_width("x" * 10, 10)


def test_every_row_of_the_coverage_chart_spans_the_axis(all_charts):
    """Issue 31: counts on one axis squashed every composition into a sliver beside vmapvjp's
    thousands of cells; each row is drawn as shares of its own cells, so each spans 0-100%."""
    fig = all_charts["coverage summary"]
    rows = {}
    for bar in fig.data:
        for y, x in zip(bar.y, bar.x):
            rows[y] = rows.get(y, 0) + x
    assert rows and all(abs(total - 100) < 1e-6 for total in rows.values()), rows
    counts = [int(y.rsplit("(", 1)[1].rstrip(")").replace(",", "")) for y in rows]
    assert max(counts) > 10 * min(counts)  # the rows do differ that much in size


def test_bench_failure_notes_sit_inside_their_panel(all_charts):
    """Issue 31: "failed: plain" sat under the panel, on the x tick labels, and a long one ran
    into the next panel; now inside the panel's top left, one strategy a line."""
    notes = [(name, a) for name, fig in all_charts.items() for a in fig.layout.annotations
             if (a.text or "").startswith("failed:")]
    assert notes
    for name, a in notes:
        assert a.yref.endswith(" domain") and 0 <= a.y <= 1 and a.yanchor == "top", (name, a.y)
        assert all(len(line) <= 40 for line in a.text.split("<br>")), (name, a.text)
