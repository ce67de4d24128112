"""Starts one Python SDK worker for the worker pool as Beam's SDK container's `boot` does: with the
job's pipeline options, asked of the runner's provision service.

The pool's own workers (`python -c "SdkHarness(...)"`) get no pipeline options, so Beam's
FileSystems on them have none either: `--s3_endpoint_url`, `--s3_access_key_id` and the
like would never reach a worker, as they do on a real cluster running Beam's container.
The pool runs this as its `--container_executable`, with the flags `boot` takes. With
BEAM_SHARDS_TEST_MERGE_DELAY=SECONDS in the pool's environment each merge of small shards
waits that long first, so that a fault test's kill lands while Flink runs the merge.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import grpc
from apache_beam.portability.api import beam_provision_api_pb2, beam_provision_api_pb2_grpc
from apache_beam.runners.worker import sdk_worker_main
from google.protobuf import json_format

MERGE_DELAY_VARIABLE = "BEAM_SHARDS_TEST_MERGE_DELAY"


def _slow_merges(seconds: float) -> None:
    from beam_shards.beam import merging

    merge = merging.merge_shards

    def slow_merge(*args, **kwargs):
        time.sleep(seconds)
        return merge(*args, **kwargs)

    merging.merge_shards = slow_merge


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("id", "logging_endpoint", "artifact_endpoint", "provision_endpoint", "control_endpoint"):
        parser.add_argument(f"--{name}", required=True)
    args = parser.parse_args()
    if os.environ.get(MERGE_DELAY_VARIABLE):
        _slow_merges(float(os.environ[MERGE_DELAY_VARIABLE]))
    with grpc.insecure_channel(args.provision_endpoint) as channel:
        info = beam_provision_api_pb2_grpc.ProvisionServiceStub(channel).GetProvisionInfo(
            beam_provision_api_pb2.GetProvisionInfoRequest(), metadata=[("worker_id", args.id)]).info
    os.environ.update({
        "WORKER_ID": args.id,
        "PIPELINE_OPTIONS": json_format.MessageToJson(info.pipeline_options),
        "RUNNER_CAPABILITIES": " ".join(info.runner_capabilities),
        "CONTROL_API_SERVICE_DESCRIPTOR": f'url: "{args.control_endpoint}"',
        "LOGGING_API_SERVICE_DESCRIPTOR": f'url: "{args.logging_endpoint}"',
    })
    sdk_worker_main.main(sys.argv)


if __name__ == "__main__":
    main()
