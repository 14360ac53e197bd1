"""The environment loop: env eval/train jobs that run `clawrl_app.envs` against the endpoint.
Imports `clawrl_app.envs` and core; never another loop."""
