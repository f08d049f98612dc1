from django.db import models


class NodeState(models.TextChoices):
    UP = "up", "Up"
    SUSPECT = "suspect", "Suspect"  # missed heartbeats for a while; nothing new starts
    DRAINING = "draining", "Draining"  # no new jobs; running ones finish
    DRAINED = "drained", "Drained"  # draining finished: nothing runs, nothing starts
    DOWN = "down", "Down"  # missed heartbeats or taken out by an admin


SCHEDULABLE_NODE_STATES = frozenset({NodeState.UP})


class DeviceKind(models.TextChoices):
    GPU = "gpu", "GPU"
    CPU = "cpu", "CPU"


class Runtime(models.TextChoices):
    DOCKER = "docker", "Docker"
    APPTAINER = "apptainer", "Apptainer"
    PROCESS = "process", "Plain process"
