"""The lifecycle of a job: actions, the hooks around a deployment's rounds,
task records, change detection, node status and the per-environment lock."""
