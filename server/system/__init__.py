"""The server's own endpoints: health, the model list and metrics."""

from fastapi import APIRouter

from . import health, metrics, models

router = APIRouter()
router.include_router(health.router)
router.include_router(models.router)
router.include_router(metrics.router)

__all__ = ["router"]
