"""The UI's screens, each a `.py` + `.tcss` pair."""
