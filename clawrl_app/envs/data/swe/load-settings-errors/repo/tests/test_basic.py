from settings.load import load_settings


def test_reads_an_object(tmp_path):
    path = tmp_path / "settings.json"
    path.write_text('{"theme": "dark", "size": 3}')
    assert load_settings(str(path)) == {"theme": "dark", "size": 3}
