"""A small synthetic ImageFolder beside this file: train/ and val/, 8 classes of 160x160 JPEGs.

Deterministic (seeded). Each class is a colour tint with a stripe direction and frequency, under
noise, so a classifier can learn it; JPEGs, so the loader decodes as it would on ImageNet. 8 classes
because the script reports top-5 accuracy (topk=(1, 5) needs 5); 40 images a class to train (320:
20 steps of batch 16) and 8 to validate (64).
"""

from pathlib import Path

import numpy as np
from PIL import Image

CLASSES, TRAIN, VAL, SIZE = 8, 40, 8, 160


def image(rng: np.random.Generator, k: int) -> Image.Image:
    yy, xx = np.mgrid[0:SIZE, 0:SIZE]
    stripes = np.sin((xx if k % 2 else yy) * (0.2 + 0.1 * (k // 2)) + rng.uniform(0, 6.3))
    tint = np.array([[200, 60, 60], [60, 200, 60], [60, 60, 200], [180, 180, 60]][k // 2], dtype=np.float32)
    pixels = tint * (0.6 + 0.3 * stripes[..., None]) + rng.normal(0, 25, (SIZE, SIZE, 3))
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def main() -> None:
    rng = np.random.default_rng(0)
    for split, n in (("train", TRAIN), ("val", VAL)):
        for k in range(CLASSES):
            folder = Path(split) / f"class{k}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                image(rng, k).save(folder / f"{i:04d}.jpg", quality=90)


if __name__ == "__main__":
    main()
