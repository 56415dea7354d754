from django.db import models
from django.utils import timezone

from accounts.models import Organization
from gshost.ids import new_id


def new_server_id() -> str:
    return new_id("srv")


class Game(models.TextChoices):
    MINECRAFT = "minecraft", "Minecraft"
    CUSTOM = "custom", "Custom"


class ServerState(models.TextChoices):
    STOPPED = "stopped", "Stopped"
    STARTING = "starting", "Starting"
    RUNNING = "running", "Running"
    STOPPING = "stopping", "Stopping"
    RESTARTING = "restarting", "Restarting"


class Server(models.Model):
    id = models.CharField(primary_key=True, max_length=40, default=new_server_id)
    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="servers")
    name = models.CharField(max_length=100)
    game = models.CharField(max_length=20, choices=Game.choices, default=Game.MINECRAFT)
    state = models.CharField(
        max_length=20, choices=ServerState.choices, default=ServerState.STOPPED
    )
    address = models.CharField(max_length=64, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        indexes = [models.Index(fields=["organization", "created_at"])]

    def __str__(self) -> str:
        return f"{self.name} ({self.id})"
