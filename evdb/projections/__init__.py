"""KurrentDB's system projections (``RunProjections=System``) and link resolution.

- :mod:`evdb.projections.links`: the ``$>`` link format and :func:`resolve_link`, the one rule every
  read path (streams, ``$all``, subscriptions; gRPC and HTTP) uses to resolve links.
- :mod:`evdb.projections.standard`: ``$streams``, ``$stream_by_category``, ``$by_category``,
  ``$by_event_type`` and ``$by_correlation_id`` as KurrentDB's native handlers define them.
- :mod:`evdb.projections.config`: a projection's configuration (KurrentDB's ``ProjectionConfig``): the
  one rule set for ``PUT /projection/{name}/config``, how it is kept and how it is answered.
- :mod:`evdb.projections.service`: :class:`SystemProjections`, which runs them on the leader from
  checkpoints kept in the log, and answers the management calls (statistics, enable, disable, reset).
"""

from evdb.projections.links import LINK_TYPE, Resolved, resolve_link, resolve_links
from evdb.projections.service import SystemProjections

__all__ = ["LINK_TYPE", "Resolved", "SystemProjections", "resolve_link", "resolve_links"]
