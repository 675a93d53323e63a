"""A Python client of the neuralbake asset service (:class:`ServiceClient`)."""

from neuralbake.client.client import ServiceClient, ServiceError

__all__ = ["ServiceClient", "ServiceError"]
