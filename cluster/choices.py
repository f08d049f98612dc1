from django.db import models


class NodeState(models.TextChoices):
    UP = "up", "Up"
    SUSPECT = "suspect", "Suspect"  # missed heartbeats for a while; nothing new starts
    DRAINING = "draining", "Draining"  # no new jobs; running ones finish
    DRAINED = "drained", "Drained"  # draining finished: nothing runs, nothing starts
    DOWN = "down", "Down"  # missed heartbeats or taken out by an admin


SCHEDULABLE_NODE_STATES = frozenset({NodeState.UP})
DRAIN_STATES = frozenset({NodeState.DRAINING, NodeState.DRAINED})


def node_can_drain(state: str, return_state: str) -> bool:
    """UP or SUSPECT nodes drain; a DOWN one is marked to come back DRAINED (Slurm's
    DOWN+DRAIN), unless it already returns to a drain."""
    if state == NodeState.DOWN:
        return return_state not in DRAIN_STATES
    return state in {NodeState.UP, NodeState.SUSPECT}


def node_can_undrain(state: str, return_state: str) -> bool:
    """DRAINING or DRAINED nodes, and DOWN ones that would come back drained."""
    if state == NodeState.DOWN:
        return return_state in DRAIN_STATES
    return state in DRAIN_STATES


class DeviceKind(models.TextChoices):
    GPU = "gpu", "GPU"
    CPU = "cpu", "CPU"


class Runtime(models.TextChoices):
    DOCKER = "docker", "Docker"
    APPTAINER = "apptainer", "Apptainer"
    PROCESS = "process", "Plain process"
