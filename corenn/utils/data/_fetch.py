"""Fetchers turn one entry of the index sampler into one batch.

Shared by the single-process iterator and the workers. Each fetcher records
what it is loading right now (``where``), so an exception can say which
index failed.
"""
from __future__ import annotations


class MapFetcher:
    def __init__(self, dataset, auto_collation, collate_fn, drop_last):
        self.dataset, self.auto_collation = dataset, auto_collation
        self.collate_fn, self.drop_last = collate_fn, drop_last
        getitems = getattr(dataset, "__getitems__", None)
        self._getitems = getitems if getitems else None
        self.where = None

    def fetch(self, index):
        dataset = self.dataset
        if not self.auto_collation:
            self.where = f"loading index {index!r}"
            data = dataset[index]
        elif self._getitems is not None:
            self.where = f"loading indices {index!r} (via __getitems__)"
            data = self._getitems(index)
        else:
            data = []
            for i in index:
                self.where = i  # formatted only if something fails: this loop is hot
                data.append(dataset[i])
        self.where = f"running collate_fn on the batch of indices {index!r}"
        return self.collate_fn(data)

    def describe(self) -> str:
        where = self.where
        return f"loading index {where!r}" if not isinstance(where, str) else where


class IterableFetcher:
    def __init__(self, dataset, auto_collation, collate_fn, drop_last):
        self.auto_collation, self.collate_fn, self.drop_last = auto_collation, collate_fn, drop_last
        self.where = "calling iter(dataset)"
        self.count = 0
        self.dataset_iter = iter(dataset)
        self.ended = False

    def _next(self):
        self.where = None
        item = next(self.dataset_iter)
        self.count += 1
        return item

    def fetch(self, index):
        """Raises StopIteration when the stream (or a drop_last batch) ends."""
        if self.ended:
            raise StopIteration
        if self.auto_collation:
            data = []
            for _ in index:
                try:
                    data.append(self._next())
                except StopIteration:
                    self.ended = True
                    break
            if not data or (self.drop_last and len(data) < len(index)):
                raise StopIteration
        else:
            data = self._next()
        first = self.count - (len(data) if self.auto_collation else 1)
        self.where = f"running collate_fn on items {first}..{self.count - 1} of the dataset's iterator"
        return self.collate_fn(data)

    def describe(self) -> str:
        return self.where if self.where is not None else f"loading item {self.count} of the dataset's iterator"
