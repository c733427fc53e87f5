"""The catalogue of pools in Redis: the node shapes ``sched capacity`` may add
(``pools``, one HASH of JSON values, at most :data:`MOST_POOLS`; ``lua/pool_put.lua``
keeps the bound)."""

from __future__ import annotations

import orjson

from scheduler.model.errors import NotFound, SpecError
from scheduler.model.pools import Pool, pool_from_dict
from scheduler.state.namespace import NamespaceStore

MOST_POOLS = 256  # pools a namespace's catalogue holds


class PoolStore(NamespaceStore):
    def put_pool(self, pool: Pool) -> bool:
        """Add or replace a pool; True when it is new. A new pool beyond the bound is refused."""
        self.register_namespace()
        result = self.scripts.pool_put(keys=[self.keys.pools],
                                       args=[pool.name, orjson.dumps(pool.to_dict()).decode(), MOST_POOLS])
        if int(result) < 0:
            raise SpecError(f"pool {pool.name}: the catalogue already holds {MOST_POOLS} pools, its most; "
                            f"remove one first (sched pool rm).")
        return int(result) == 1

    def pools(self) -> list[Pool]:
        """Every pool, by name."""
        return [pool_from_dict(orjson.loads(text)) for _, text in sorted(self.client.hgetall(self.keys.pools).items())]

    def get_pool(self, name: str) -> Pool:
        text = self.client.hget(self.keys.pools, name)
        if text is None:
            raise NotFound(f"pool {name!r} does not exist.")
        return pool_from_dict(orjson.loads(text))

    def remove_pool(self, name: str) -> bool:
        return bool(self.client.hdel(self.keys.pools, name))
