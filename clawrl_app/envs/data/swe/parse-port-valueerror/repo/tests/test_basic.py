from netaddr.hostport import parse_hostport


def test_host_and_port():
    assert parse_hostport("localhost:8080") == ("localhost", 8080)
