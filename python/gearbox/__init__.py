"""gearbox's export front end: PyTorch models written with gearbox ops, exported with
torch.export and lowered by GearboxPartitioner into one ExecuTorch .pte whose delegate
blob is a gearbox engine (docs/tutorial.md)."""

from gearbox.backend_id import BACKEND_ID
from gearbox import ops  # noqa: F401  (registers torch.ops.gearbox.*)

__all__ = ["BACKEND_ID", "ops"]
