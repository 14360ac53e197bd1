from textkit import slugify


def test_french():
    assert slugify("Crème Brûlée") == "creme-brulee"


def test_spanish():
    assert slugify("Año Nuevo en España") == "ano-nuevo-en-espana"


def test_ascii_unchanged():
    assert slugify("Plain ASCII 42") == "plain-ascii-42"
