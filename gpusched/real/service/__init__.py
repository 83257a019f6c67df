"""The lab-cluster service: a job queue in SQLite, a scheduler loop running a project policy online,
and engines that run the users' commands (local processes, or one Ray actor per node).
Operator's guide: docs/DEPLOY.md."""
