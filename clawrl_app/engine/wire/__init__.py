"""The admin API's JSON shapes, read from the store: what the admin routes send and the TUI's
in-process client builds. Imports store only."""
