"""`swe`: Python bug-fix tasks (ENVS.md §5.7.B): `env.SweEnv` (both protocols), `repo`
(workspace, baseline commit, patch computed inside the sandbox), `patch_filter` (what a
patch may touch), `verify` (hidden tests on a pristine copy) and `protocol` (prompts,
reply parsing, observation format)."""
