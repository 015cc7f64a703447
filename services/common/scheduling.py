"""The words of scheduling that the scheduler and the gateway both use: the
default resource pool, the kinds of pool scheduler and the default priority.
The scheduler decides with them; the gateway only names them to users."""

from determined.common.expconf import Resources

# The pool of an agent or a request that names none.
DEFAULT_POOL = "default"
FAIR_SHARE = "fair_share"
PRIORITY = "priority"
SCHEDULER_TYPES = (FAIR_SHARE, PRIORITY)
# The priority of a job that gives none (lower runs first), as in Determined; a cluster
# may choose another (DET_SCHEDULER_DEFAULT_PRIORITY), which the scheduler publishes.
DEFAULT_PRIORITY = 42
# The fair-share weight of a job whose request gives none: the config model's default.
DEFAULT_WEIGHT: float = Resources.model_fields["weight"].default
