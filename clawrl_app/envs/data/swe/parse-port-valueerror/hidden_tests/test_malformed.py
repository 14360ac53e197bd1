import pytest

from netaddr.hostport import parse_hostport


def test_missing_port_is_valueerror():
    with pytest.raises(ValueError):
        parse_hostport("example.org")


def test_port_out_of_range():
    with pytest.raises(ValueError):
        parse_hostport("example.org:70000")


def test_missing_host():
    with pytest.raises(ValueError):
        parse_hostport(":80")


def test_non_numeric_port():
    with pytest.raises(ValueError):
        parse_hostport("example.org:http")
