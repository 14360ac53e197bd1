"""The `browser` env: Playwright + Debian's Chromium on small local web sites (env.py).
Importing this package never imports Playwright; a missing browser shows at `reset`."""
