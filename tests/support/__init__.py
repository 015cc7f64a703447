"""What the tests share beyond fixtures: real servers (nats-server, PostgreSQL, moto's S3),
local clusters and what drives them (the det CLI, chaos, the attacker, the browser), in-process
gateways for the harness's tests, pure-core drivers and the golden logs. `tests` is on the path
(pyproject's pytest `pythonpath`), so tests import `support.<module>`."""
