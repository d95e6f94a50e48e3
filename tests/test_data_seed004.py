"""Seed 004 ("Effective PyTorch") section 6, ported to corenn: a map-style
image-folder dataset read by workers, and tar-shard IterableDatasets.

Real files in tmp_path: tiny images saved as .npy (decoded with numpy where
the seed used cv2), real tarfile shards."""
import glob
import io
import os
import random
import tarfile

import numpy as np
import pytest

import corenn
import corenn.utils.data as data


def make_image(i):
    """A 4x4 RGB uint8 image whose pixels say which image it is."""
    return np.full((4, 4, 3), i, dtype=np.uint8)


def decode(content: bytes) -> np.ndarray:
    return np.load(io.BytesIO(content))  # stands in for cv2.imdecode(content, 1)


@pytest.fixture
def image_dir(tmp_path):
    for i in range(10):
        np.save(tmp_path / f"img{i:02d}.npy", make_image(i))
    (tmp_path / "notes.txt").write_text("not an image")
    return tmp_path


class ImageDirectoryDataset(data.Dataset):
    """The seed's example (its __item__ typo fixed), reading by index."""

    def __init__(self, path, pattern):
        self.paths = sorted(glob.glob(os.path.join(path, pattern)))

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, index):
        return decode(open(self.paths[index], "rb").read())


class RandomImageDataset(ImageDirectoryDataset):
    """The seed's literal behaviour: each item is ``random.choice(paths)``."""

    def __getitem__(self, index):
        return decode(open(random.choice(self.paths), "rb").read())


def test_image_directory_dataset_with_workers(image_dir):
    dataloader = data.DataLoader(ImageDirectoryDataset(str(image_dir), "*.npy"), num_workers=2)
    images = [batch for batch in dataloader]
    assert len(images) == 10
    for i, batch in enumerate(images):
        assert isinstance(batch, corenn.Tensor) and tuple(batch.shape) == (1, 4, 4, 3)
        np.testing.assert_array_equal(batch.numpy()[0], make_image(i))


def test_random_choice_differs_between_workers(image_dir):
    # Python's `random` is reseeded per worker: the two workers do not pick
    # the same sequence of files (the duplicated-augmentation bug).
    ds = RandomImageDataset(str(image_dir), "*.npy")
    ds.paths = ds.paths * 1
    picks = [int(b.numpy()[0, 0, 0, 0]) for b in data.DataLoader(ds, num_workers=2)]
    worker0, worker1 = picks[0::2], picks[1::2]  # batches alternate between the two workers
    assert worker0 != worker1


def write_shard(path, ids):
    with tarfile.open(path, "w") as tar:
        for i in ids:
            buf = io.BytesIO()
            np.save(buf, make_image(i))
            info = tarfile.TarInfo(f"img{i:03d}.npy")
            info.size = buf.tell()
            buf.seek(0)
            tar.addfile(info, buf)


def tar_image_iterator(path):
    tar = tarfile.open(path, "r")
    for tar_info in tar:
        file = tar.extractfile(tar_info)
        content = file.read()
        yield decode(content)
        file.close()
        tar.members = []
    tar.close()


class TarImageDataset(data.IterableDataset):
    def __init__(self, paths):
        super().__init__()
        self.paths = paths

    def __iter__(self):
        worker_info = data.get_worker_info()
        # For simplicity we assume num_workers is equal to number of tar files
        if worker_info is None or worker_info.num_workers != len(self.paths):
            raise ValueError("Number of workers doesn't match number of files.")
        yield from tar_image_iterator(self.paths[worker_info.worker_id])


class SingleTarDataset(data.IterableDataset):
    def __init__(self, path):
        super().__init__()
        self.path = path

    def __iter__(self):
        yield from tar_image_iterator(self.path)


@pytest.fixture
def shards(tmp_path):
    paths = [str(tmp_path / "imagenet_part1.tar"), str(tmp_path / "imagenet_part2.tar")]
    write_shard(paths[0], range(0, 7))
    write_shard(paths[1], range(7, 12))
    return paths


def ids_of(loader):
    return [int(b.numpy()[0, 0, 0, 0]) for b in loader]


def test_tar_shards_two_workers_each_item_once(shards):
    dataloader = data.DataLoader(TarImageDataset(shards), num_workers=2)
    seen = ids_of(dataloader)
    assert sorted(seen) == list(range(12))  # every image exactly once
    assert seen[:4] == [0, 7, 1, 8]  # workers take turns, as in PyTorch


def test_single_tar_with_workers_duplicates_items(tmp_path):
    # The problem the seed describes: every worker reads the whole file.
    path = str(tmp_path / "imagenet.tar")
    write_shard(path, range(5))
    seen = ids_of(data.DataLoader(SingleTarDataset(path), num_workers=2))
    assert sorted(seen) == sorted(list(range(5)) * 2)


@pytest.mark.parametrize("num_workers", [0, 1])
def test_tar_shards_worker_count_mismatch_raises_value_error(shards, num_workers):
    loader = data.DataLoader(TarImageDataset(shards), num_workers=num_workers)
    with pytest.raises(ValueError, match="Number of workers doesn't match number of files"):
        list(loader)
