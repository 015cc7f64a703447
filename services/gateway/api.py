"""The gateway's feature functions, one object per feature: the one
implementation behind both edges, the gRPC servicer (servicer.py) and the
HTTP routes (http/routes.py). A new feature's functions get one line here."""

from services.gateway.features.agents.service import Agents
from services.gateway.features.checkpoints.edits import CheckpointEdits
from services.gateway.features.checkpoints.service import Checkpoints
from services.gateway.features.events.explain_service import Explanations
from services.gateway.features.events.service import Events
from services.gateway.features.events.workload_service import Workloads
from services.gateway.features.experiments.edits import ExperimentEdits
from services.gateway.features.experiments.runs import ExperimentRuns
from services.gateway.features.experiments.service import Experiments
from services.gateway.features.jobs.service import Jobs
from services.gateway.features.logs.service import Logs
from services.gateway.features.models.service import Models
from services.gateway.features.monitoring.service import Monitoring
from services.gateway.features.parts import Parts
from services.gateway.features.tasks.service import Tasks
from services.gateway.features.trials.reports import Reports
from services.gateway.features.trials.service import Trials
from services.gateway.features.users.service import Users
from services.gateway.read_only import ReplayUsers


class Api:
    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self.agents = Agents(parts)
        self.jobs = Jobs(parts)
        self.experiments = Experiments(parts)
        self.experiment_edits = ExperimentEdits(parts)
        self.experiment_runs = ExperimentRuns(parts, self.experiments)
        self.trials = Trials(parts)
        self.reports = Reports(parts)
        self.logs = Logs(parts)
        self.checkpoints = Checkpoints(parts, self.reports)
        self.checkpoint_edits = CheckpointEdits(parts, self.checkpoints, self.reports)
        self.models = Models(parts, self.checkpoints)
        self.users = (ReplayUsers if parts.settings.replay_of else Users)(parts)
        self.tasks = Tasks(parts, self.experiments)
        self.events = Events(parts)
        self.explanations = Explanations(parts)
        self.workloads = Workloads(parts)
        self.monitoring = Monitoring(parts)
