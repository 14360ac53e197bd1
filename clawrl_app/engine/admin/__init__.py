"""The admin and env HTTP routes (for the TUI and `clawrl-app env`), built from an `EngineView`
the orchestrator hands in. May import the loops, wire, core, store and chat; never the
orchestrator."""
