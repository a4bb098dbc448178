"""Budget strings."""
import pytest

from autokernel.loop.budget import BudgetError, format_duration, parse_budget


@pytest.mark.parametrize("text,seconds", [("30m", 1800), ("8h", 28800), ("90s", 90), ("1h30m", 5400),
                                          ("2h15m10s", 8110), ("1.5h", 5400), ("600", 600), (" 10M ", 600),
                                          ("1d", 86400)])
def test_parse(text, seconds):
    assert parse_budget(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "30x", "m30", "30m1h", "0s", "0", "-5m", "1h 3", "h", "1h1h", "3", "59.5"])
def test_rejects(text):
    with pytest.raises(BudgetError):
        parse_budget(text)


def test_a_bare_number_under_a_minute_asks_for_a_unit():
    """``--budget 3`` ran for 3 seconds: no experiment, exit 0, not a word."""
    with pytest.raises(BudgetError, match="give a unit: 3h, 3m or 3s"):
        parse_budget("3")
    assert parse_budget("3s") == 3 and parse_budget("60") == 60


def test_format_duration():
    assert format_duration(3725) == "1h02m"
    assert format_duration(95) == "1m35s"
    assert format_duration(7.2) == "7s"
    assert format_duration(-3) == "0s"
