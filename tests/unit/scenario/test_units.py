import pytest

from testbed.units import UnitError, parse_duration, parse_percent, parse_rate, parse_size


@pytest.mark.parametrize("text,seconds", [("25ms", 0.025), ("1.5s", 1.5), ("2m", 120.0), ("500us", 0.0005),
                                          ("1h", 3600.0), (3, 3.0), ("0.5", 0.5), ("10 ms", 0.01)])
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text,bits", [("10Mbit", 10e6), ("4800bit", 4800), ("1Gbit", 1e9), ("100kbit", 1e5),
                                       ("1.5Mbps", 12e6), (9600, 9600)])
def test_rates(text, bits):
    assert parse_rate(text) == pytest.approx(bits)


@pytest.mark.parametrize("text,size", [("64KiB", 65536), ("1MB", 1_000_000), ("1000", 1000), ("1000B", 1000),
                                       (512, 512), ("2MiB", 2 * 1024 * 1024)])
def test_sizes(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text,frac", [("1%", 0.01), ("0.5%", 0.005), (0.25, 0.25), (1, 1.0), ("100%", 1.0), (0, 0.0)])
def test_percentages(text, frac):
    assert parse_percent(text) == pytest.approx(frac)


@pytest.mark.parametrize("parser,value,wording", [
    (parse_duration, "fast", 'expected a duration like "25ms", got "fast"'),
    (parse_duration, "-1s", 'expected a duration like "25ms"'),
    (parse_duration, "5 parsecs", 'unknown unit "parsecs"'),
    (parse_duration, True, 'expected a duration like "25ms"'),
    (parse_rate, "fast", 'expected a rate like "10Mbit"'),
    (parse_rate, 0, "greater than zero"),
    (parse_rate, "10Mbytes", 'unknown unit "Mbytes"'),
    (parse_size, "lots", 'expected a size like "64KiB"'),
    (parse_size, "1.5B", "whole number"),
    (parse_percent, "150%", "outside 0..1"),
    (parse_percent, 2, "outside 0..1"),
    (parse_percent, "abc", 'expected a percentage like "1%"'),
    (parse_percent, [1], 'expected a percentage like "1%"'),
])
def test_bad_values(parser, value, wording):
    with pytest.raises(UnitError) as e:
        parser(value)
    assert wording in str(e.value)
    assert isinstance(e.value, ValueError)
