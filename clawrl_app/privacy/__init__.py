"""The user's data under the user's control: redaction, incognito rules, export and wipe.

`redact` and `incognito` are pure (no I/O, no engine imports), so the engine applies them
on the request path and tests call them directly; `data_export` and `wipe` work on the
app's folders and store for the `clawrl-app data` commands.
"""
