"""Starts one Python SDK worker for the worker pool as Beam's SDK container's `boot` does: with the
job's pipeline options, asked of the runner's provision service.

The pool's own workers (`python -c "SdkHarness(...)"`) get no pipeline options, so Beam's
FileSystems on them have none either: `--s3_endpoint_url`, `--s3_access_key_id` and the
like would never reach a worker, as they do on a real cluster running Beam's container.
The pool runs this as its `--container_executable`, with the flags `boot` takes. With
BEAM_SHARDS_TEST_DELAYS=MODULE:FUNCTION=SECONDS[,...] in the pool's environment each call of
those functions waits that long first, so that a fault test's kill lands mid-step.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import sys
import time

import grpc
from apache_beam.portability.api import beam_provision_api_pb2, beam_provision_api_pb2_grpc
from apache_beam.runners.worker import sdk_worker_main
from google.protobuf import json_format

DELAYS_VARIABLE = "BEAM_SHARDS_TEST_DELAYS"


def _delay_calls(delays: str) -> None:
    """Makes each function of `delays` (`module:function=seconds`, comma-separated) wait that long first."""
    for item in delays.split(","):
        target, seconds = item.split("=")
        module_name, name = target.split(":")
        module = importlib.import_module(module_name)
        setattr(module, name, _delayed(getattr(module, name), float(seconds)))


def _delayed(function, seconds: float):
    @functools.wraps(function)
    def delayed(*args, **kwargs):
        time.sleep(seconds)
        return function(*args, **kwargs)

    return delayed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    for name in ("id", "logging_endpoint", "artifact_endpoint", "provision_endpoint", "control_endpoint"):
        parser.add_argument(f"--{name}", required=True)
    args = parser.parse_args()
    if os.environ.get(DELAYS_VARIABLE):
        _delay_calls(os.environ[DELAYS_VARIABLE])
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
