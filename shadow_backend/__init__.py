"""Shadow backends: isolated replicas of the user's workspace where the agent acts.

Public names:
    LocalBackend, LocalWorkspace, LocalConfig   the local temp-directory backend (`shadow_backend.local`)
    open_backend, rebuild_backend, BACKENDS     pick a backend by name ("local", "docker"); the
                                                Docker backend is imported only when asked for
"""

from shadow_backend.backends import BACKENDS, open_backend, rebuild_backend
from shadow_backend.local import LocalBackend, LocalConfig, LocalWorkspace

__all__ = ["BACKENDS", "LocalBackend", "LocalConfig", "LocalWorkspace", "open_backend", "rebuild_backend"]
