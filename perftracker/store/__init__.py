"""The Store: the in-memory, columnar view of a run that every analyzer shares."""

from perftracker.store.run_info import RunInfo, SyntheticInput
from perftracker.store.schema import TABLES, empty_table
from perftracker.store.store import LoadNote, Store

__all__ = ["TABLES", "LoadNote", "RunInfo", "Store", "SyntheticInput", "empty_table"]
