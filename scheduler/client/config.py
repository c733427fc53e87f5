"""Config: the namespace's settings (retention, the stream's bound, rebalancing), and its memory."""

from __future__ import annotations

from scheduler.client.base import ClientBase
from scheduler.model import SpecError
from scheduler.model.moves import SETTINGS as REBALANCE, parse_setting as parse_rebalance_setting


class ConfigClient(ClientBase):
    """Read, set and unset settings; report memory."""

    def config(self) -> dict:
        """The namespace's settings: the retention settings (seconds, and a count) and
        ``stream_maxlen``, each with whether it is set or the default."""
        settings = self.store.retention()
        stored = self.store.config_fields()
        out = {name: {"value": value, "default": name not in stored}
               for name, value in vars(settings).items()}
        out["stream_maxlen"] = {"value": self.store.stream.maxlen(), "default": "stream_maxlen" not in stored}
        for name, value in vars(self.store.rebalance_settings()).items():
            out[name] = {"value": value, "default": name not in stored}
        return out

    def set_config(self, **values) -> dict:
        """Set settings: ``task_retention``, ``job_retention``, ``rebalance_interval``,
        ``rebalance_deadline`` (seconds, or a text such as ``90s``, ``1h``, ``7d``),
        ``ended_tasks_per_job`` and ``stream_maxlen`` (counts), ``rebalance_strategy``
        (``spread`` or ``pack``). Each is checked before any is written. Returns :meth:`config`."""
        for name in values:
            _check_setting(name)
        rebalancing = {name: values.pop(name) for name in list(values) if name in REBALANCE}
        for name, value in rebalancing.items():
            parse_rebalance_setting(name, value)
        entries = values.pop("stream_maxlen", None)
        if entries is not None:
            if isinstance(entries, str) and entries.strip().isdigit():
                entries = int(entries)
            if isinstance(entries, bool) or not isinstance(entries, int) or entries < 0:
                raise SpecError(f"stream_maxlen must be a whole number of entries, 0 or more, not {entries!r}.")
        self.store.set_retention(values)
        self.store.set_rebalance_settings(rebalancing)
        if entries is not None:
            self.store.stream.set_maxlen(entries)
        self._record("config-set", **{k: str(v) for k, v in {**values, **rebalancing,
                                                             **({} if entries is None else
                                                                {"stream_maxlen": entries})}.items()})
        return self.config()

    def unset_config(self, *names: str) -> dict:
        """Set these settings back to their defaults. Returns :meth:`config`."""
        for name in names:
            _check_setting(name)
        self.store.unset_settings(list(names))
        self._record("config-unset", settings=",".join(names))
        return self.config()

    def memory(self) -> dict:
        """Redis's memory as this namespace sees it: ``used_memory``, ``maxmemory`` (0: no
        limit), ``maxmemory_policy``, the namespace's ``live_tasks``, ``jobs`` and
        ``nodes``, and ``bytes_per_live_task``, ``bytes_per_job`` (its tasks apart) and
        ``bytes_per_node``, averaged over a sample of each (``MEMORY USAGE``)."""
        return self.store.memory_report()


def _check_setting(name: str) -> None:
    """A setting's name, or one sentence (with a did-you-mean) for one that is not."""
    import difflib

    from scheduler.model.retention import SETTINGS

    known = (*SETTINGS, "stream_maxlen", *REBALANCE)
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SpecError(f"{name!r} is not a setting{hint}; the settings are {', '.join(known)}.")
