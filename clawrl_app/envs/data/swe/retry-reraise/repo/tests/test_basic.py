from retrying.retry import retry


def test_succeeds_after_failures():
    calls = []

    def flaky():
        calls.append(1)
        if len(calls) < 3:
            raise OSError("not yet")
        return "ok"

    assert retry(flaky, attempts=3) == "ok"
    assert len(calls) == 3
