"""Runnable conversion pipelines: `python -m pipelines.NAME --help`.

- `demo`: draws a sample image-classification dataset (no input needed).
- `image_folder`: one sub-folder per class, as ImageNet is laid out.
- `jsonl`, `csv`: one row per example, image paths relative to the manifest file.
- `parquet`: re-shards Parquet files, such as Hugging Face hub exports.
- `tfrecord`: TFRecord files of `tf.train.Example`, or a prepared TensorFlow Datasets folder.

What they share is named in `pipelines.common`.
"""

from beam_shards.beam import drop_known_noise

drop_known_noise()  # before any pipeline module imports Beam, which logs the first of them on import
