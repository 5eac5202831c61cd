"""gearbox's export front end: a PyTorch model (the user's own, e.g. transformers', or one
written with gearbox ops) exported with torch.export and lowered by GearboxPartitioner
into one ExecuTorch .pte whose delegate blobs are gearbox engines (docs/tutorial.md)."""

from gearbox.backend_id import BACKEND_ID
from gearbox import ops  # noqa: F401  (registers torch.ops.gearbox.*)

__all__ = ["BACKEND_ID", "ops"]
