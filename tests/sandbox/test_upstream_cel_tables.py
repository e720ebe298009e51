"""The sandbox held to upstream's own CEL test tables (Kubernetes 1.30's and cel-go v0.17.8's
`*_test.go`, read as text at test time): every case passes, or is one the sandbox does not model
(runner.NOT_MODELLED, with its reason), or is a known failure listed below with its reason.

KNOWN_FAILURES shrinks as the sandbox's CEL grows: a listed case that passes fails the test, so
the list says exactly what is left to do. The readers must keep finding the cases they find
today (MIN_CASES), so a reader that breaks cannot pass by finding nothing.
"""

# The case ids below are upstream's own expressions, kept whole so a search finds them.
# ruff: noqa: RUF001

from __future__ import annotations

import functools
import math

import pytest

from tests.upstream import upstream_file, upstream_root
from volcano_guard_sandbox.commands import main
from volcano_guard_sandbox.conformance import golang
from volcano_guard_sandbox.conformance.cases import (
    SOURCES,
    Expected,
    Extraction,
    Source,
    extract,
    library_table,
)
from volcano_guard_sandbox.conformance.runner import (
    FileReport,
    cel_equal,
    error_matches,
    run_case,
    run_extraction,
)

# Cases each reader finds today (a floor), and the most it may leave unparsed.
MIN_CASES = {
    "pkg/cel/library/quantity_test.go": 33,
    "pkg/cel/library/ip_test.go": 38,
    "pkg/cel/library/cidr_test.go": 30,
    "ext/strings_test.go": 216,
    "ext/sets_test.go": 44,
    "ext/lists_test.go": 9,
    "pkg/apiserver/schema/cel/validation_test.go": 702,
    "pkg/admission/plugin/cel/compile_test.go": 59,
    "pkg/admission/plugin/cel/filter_test.go": 5,
}
# TestFilter's cases evaluate against admission attributes: test_upstream_admission_tables.
MAX_UNPARSED: dict[str, int] = {}

KNOWN_FAILURES: dict[str, str] = {}


@functools.cache
def _extraction(source: Source) -> Extraction:
    return extract(source, upstream_file(source.project, source.revision, source.path))


@functools.cache
def _reports() -> tuple[FileReport, ...]:
    """Every upstream file's results, run once (read inside the first test that asks)."""
    return tuple(run_extraction(_extraction(source)) for source in SOURCES)


@pytest.mark.parametrize("path", sorted(MIN_CASES))
def test_each_upstream_table_yields_its_cases(path):
    (source,) = [s for s in SOURCES if s.path == path]
    extraction = _extraction(source)
    assert len(extraction.cases) >= MIN_CASES[path], [u.why for u in extraction.unparsed]
    assert len(extraction.unparsed) <= MAX_UNPARSED.get(path, 0), extraction.unparsed


def test_every_case_passes_or_is_not_modelled_or_a_known_failure():
    results = [result for report in _reports() for result in report.results]
    unexpected = [
        f"{r.id}: {r.expected} / got {r.got}"
        for r in results
        if r.verdict == "failed" and r.id not in KNOWN_FAILURES
    ]
    assert not unexpected, "\n".join(unexpected)


def test_no_known_failure_passes_or_is_gone():
    """A known failure that now passes (or that no table holds any more) leaves the list."""
    failed = {r.id for report in _reports() for r in report.results if r.verdict == "failed"}
    stale = sorted(set(KNOWN_FAILURES) - failed)
    assert not stale, "no longer failing, take them out of KNOWN_FAILURES:\n" + "\n".join(stale)


def test_what_a_1_30_policy_cannot_write_the_sandbox_refuses():
    """ip, cidr and the authorizer: not modelled, and refused when a policy is written."""
    not_modelled = [
        r for report in _reports() for r in report.results if r.verdict == "not modelled" and r.got
    ]
    assert len(not_modelled) >= 70
    assert {r.got for r in not_modelled} == {"refused when written"}


@pytest.mark.slow  # it runs every table again (8 s); the tests above hold each case
def test_conformance_command_prints_the_figures_per_file_and_the_failures(capsys):
    root = upstream_root()
    if root is None:
        pytest.skip("no upstream source on this machine")
    assert main(["conformance", str(root), "--failures"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[1:] == ["passed", "failed", "not", "modelled", "unparsed"]
    assert any(line.startswith("cel-go/v0.17.8/ext/sets_test.go ") for line in lines)
    assert lines[len(SOURCES) + 1].startswith("total ")
    failed = int(lines[len(SOURCES) + 1].split()[2])
    cel_lines = lines[: lines.index("admission plugin tables:")]
    listed = [line for line in cel_lines if line.startswith("  ") and ":Test" in line]
    assert len(listed) == failed == len(KNOWN_FAILURES)


def test_conformance_command_refuses_a_missing_folder_in_one_line(tmp_path, capsys):
    assert main(["conformance", str(tmp_path / "nowhere")]) == 2
    said = capsys.readouterr().err
    assert said == f"volcano-guard-sandbox conformance: {tmp_path / 'nowhere'}: not a folder\n"
    assert main(["conformance", str(tmp_path)]) == 2
    said = capsys.readouterr().err
    assert len(said.splitlines()) == 1 and f"{tmp_path} lacks " in said


# The reader and the comparisons on their own: no upstream source needed.

_GO_TABLE = """
func TestQuantity(t *testing.T) {
	twelveMi := resource.MustParse("12Mi")
	cases := []struct {
		name        string
		expr        string
		expectValue ref.Val
		expectedRuntimeErr string
	}{
		{
			name:        "parse",
			expr:        `quantity("12Mi")`,
			expectValue: apiservercel.Quantity{Quantity: &twelveMi},
		},
		{
			name: "broken", expr: "1 +", expectValue: types.Int(3) types.Int(4),
		},
		{
			name:               "overflow",
			expr:               "9223372036854775807 + 1",
			expectedRuntimeErr: "integer \\x6fverflow",
		},
	}
}
"""


def test_a_table_element_the_reader_cannot_parse_is_counted_not_dropped():
    read = library_table("TestQuantity")
    extraction = read("quantity_test.go", _GO_TABLE)
    assert [case.name for case in extraction.cases] == ["parse", "overflow"]
    assert [(u.function, u.name) for u in extraction.unparsed] == [("TestQuantity", "[1]")]
    parse, overflow = extraction.cases
    assert parse.expected == Expected("value", golang.Quantity("12Mi"))
    assert overflow.expected == Expected("error", message="integer overflow", regex=True)
    assert [run_case(case).verdict for case in extraction.cases] == ["passed", "passed"]


def test_go_string_literals_read_and_quote_as_go_does():
    assert golang.unquote(r'"a\tb\u00e9\x41\101\"' + '"') == 'a\tbéAA"'
    assert golang.unquote("`raw\\n`") == "raw\\n"
    # strconv.Quote: printable unicode kept, a narrow no-break space escaped
    assert golang.quote('%e "×"\u202f\n') == '"%e \\"×\\"\\u202f\\n"'


@pytest.mark.parametrize(
    ("expected", "actual", "equal"),
    [
        (3, 3.0, True),  # CEL: an int equals the double of its value
        (True, 1, False),  # a bool is no number
        ([1, [2.0]], [1.0, [2]], True),
        ({"a": golang.Unsigned(2)}, {"a": 2}, True),
        (golang.Quantity("200M"), golang.Quantity("0.2G"), True),
        (math.nan, math.nan, True),  # the table's own NaN, not CEL's ==
        ("a", b"a", False),
    ],
)
def test_values_compare_with_cels_equality(expected, actual, equal):
    assert cel_equal(expected, actual) is equal


@pytest.mark.parametrize(
    ("upstream", "sandbox", "matches"),
    [
        ("division by zero", "INVALID_ARGUMENT: divide by zero", True),
        ("index out of range: 30", "<pos> is greater than <string>.size()", True),
        ("no such key: d2", 'NOT_FOUND: Key not found in map : "d2"', True),
        ("division by zero", "integer overflow", False),
        ("could not parse formatting clause", "integer overflow", False),
    ],
)
def test_errors_match_by_reason_not_words(upstream, sandbox, matches):
    assert error_matches(upstream, False, sandbox) is matches
