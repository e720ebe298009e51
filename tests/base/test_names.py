"""Names as the API server checks them: the good and bad values of apimachinery's
validation_test.go (TestIsDNS1123Label, TestIsDNS1123Subdomain, TestIsDNS1035Label)."""

import pytest

from volcano_guard.base.names import (
    dns1035_label_problem,
    dns1123_label_problem,
    dns1123_subdomain_problem,
)

LABELS = [
    "a",
    "ab",
    "abc",
    "a1",
    "a-1",
    "a--1--2--b",
    "0",
    "01",
    "012",
    "1a",
    "1-a",
    "1--a--b--2",
    "a" * 63,
]
NOT_LABELS = [
    "",
    "A",
    "ABC",
    "aBc",
    "A1",
    "A-1",
    "1-A",
    "-",
    "a-",
    "-a",
    "1-",
    "-1",
    "_",
    "a_",
    "_a",
    "a_b",
    ".",
    "a.",
    ".a",
    "a.b",
    " ",
    "a ",
    " a",
    "a b",
    "a" * 64,
]


@pytest.mark.parametrize("name", LABELS)
def test_good_labels_pass(name):
    assert dns1123_label_problem(name) is None
    assert dns1123_subdomain_problem(name) is None
    assert (dns1035_label_problem(name) is None) == name[0].isalpha()


@pytest.mark.parametrize("name", NOT_LABELS)
def test_bad_labels_are_refused_in_the_api_servers_words(name):
    problem = dns1123_label_problem(name)
    assert problem is not None
    assert "RFC 1123 label" in problem or "no more than 63" in problem
    assert dns1035_label_problem(name) is not None


def test_subdomains_take_dots_and_253_characters():
    assert dns1123_subdomain_problem("a.b.c") is None
    assert dns1123_subdomain_problem(".".join(["a" * 63] * 3) + "." + "a" * 61) is None
    assert dns1123_subdomain_problem("a" * 254) == "must be no more than 253 characters"
    for name in ("a..b", "a.", ".a", "A.b", "a_b.c"):
        assert "RFC 1123 subdomain" in (dns1123_subdomain_problem(name) or "")
