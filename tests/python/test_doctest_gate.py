"""tools/doctest_gate.py, the runner tools/wheel-smoke.sh gives the docs on the new machines: an
example marked `# needs numpy>=X` is skipped, saying which, what it needs and why, only where
the installed NumPy is older (faked here), and runs, failing as it would, where NumPy is new
enough; the docs' markers all have a reason and skip nothing under this venv's NumPy."""

from __future__ import annotations

import doctest
import importlib.util
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parents[2]

SAMPLE = """Some prose.

```python
>>> 1 + 1
2
>>> 2 + 2                          # needs numpy>=2.1
5
>>> 3 + 3
6

```
"""


def _gate():
    spec = importlib.util.spec_from_file_location("doctest_gate", SRC / "tools" / "doctest_gate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def sample(tmp_path):
    path = tmp_path / "sample.md"
    path.write_text(SAMPLE)
    return path


def test_gate_skips_a_marked_example_under_an_older_numpy(sample, capsys):
    gate = _gate()
    failed, ran, skipped = gate.run(str(sample), version=lambda pkg: "2.0.2")
    assert (failed, ran, skipped) == (0, 2, 1)
    out = capsys.readouterr().out
    assert f"doctest-gate: SKIP {sample}:6: `2 + 2` needs numpy>=2.1, here numpy is 2.0.2: " in out
    assert gate.REASONS[("numpy", "2.1")] in out


@pytest.mark.parametrize("new_enough", ["2.1", "2.1.0", "2.4.6", "3.0.0rc1"])
def test_gate_runs_a_marked_example_where_numpy_is_new_enough(sample, capsys, new_enough):
    failed, ran, skipped = _gate().run(str(sample), version=lambda pkg: new_enough)
    assert (failed, ran, skipped) == (1, 3, 0)  # the marked example ran (and is wrong on purpose)
    out = capsys.readouterr().out
    assert "SKIP" not in out and "Expected:\n    5\nGot:\n    4" in out


def test_gate_skips_where_numpy_is_not_installed(sample, capsys):
    assert _gate().run(str(sample), version=lambda pkg: None) == (0, 2, 1)
    assert "here numpy is not installed" in capsys.readouterr().out


def test_a_marker_without_a_reason_is_an_error(tmp_path):
    path = tmp_path / "bad.md"
    path.write_text(">>> 1   # needs numpy>=9.9\n1\n")
    with pytest.raises(ValueError, match=r"bad.md:1: 'needs numpy>=9.9' has no reason"):
        _gate().run(str(path), version=lambda pkg: "2.0.2")
    assert _gate().main([str(path)]) == 2


def test_gate_cli_exit_status(sample, tmp_path):
    good = tmp_path / "good.md"
    good.write_text(">>> 1 + 1\n2\n")
    gate = _gate()
    assert gate.main(["-o", "ELLIPSIS", str(good)]) == 0
    assert gate.main([str(sample)]) == 1  # this venv's NumPy is new enough: 2 + 2 runs, fails


@pytest.mark.parametrize("doc", ["README.md", "docs/api.md"])
def test_docs_markers_have_reasons_and_skip_nothing_here(doc):
    gate = _gate()
    text = (SRC / doc).read_text()
    test = doctest.DocTestParser().get_doctest(text, {}, doc, doc, 0)
    marked = [ex for ex in test.examples if gate.needs(ex.source)]
    assert marked, f"{doc}: no example marked `# needs numpy>=X` (Debian 11's numpy needs some)"
    assert gate.gate(test) == []  # numpy >= 2.3 here (tools/requirements-test.txt): nothing skipped
    assert len(test.examples) == len(doctest.DocTestParser().get_examples(text))


def test_gate_module_doctests():
    assert doctest.testmod(_gate()).failed == 0
