#!/usr/bin/env python3
"""botocore's own retries, unchanged, against the fault-server: CALLS S3 GetObject calls
(GET /chaos/item-N), one after another, each printed as one line.

What it exercises: botocore's retry handler with `retry_mode='standard'` and nothing else
set, so every other value is the library's default (botocore/retries/standard.py):
- at most 3 attempts (`DEFAULT_MAX_ATTEMPTS`);
- retries on HTTP 500, 502, 503, 504, the throttling error codes and connection errors;
- backoff `rand(0, 1) * min(2 ** (attempt - 1), 20)` seconds before botocore 1.44
  (`ExponentialBackoff.delay_amount`); with `AWS_NEW_RETRIES_2026=true` (botocore 1.43) or
  from botocore 1.44 on, `rand(0, 1) * min(base * 2 ** (attempt - 1), 20)` with a base of
  50 ms (25 ms and 4 attempts for DynamoDB) and `x-amz-retry-after` read;
- a retry quota of 500 tokens (quota.py);
- every attempt carries `amz-sdk-invocation-id` (the same for every attempt of one call)
  and `amz-sdk-request: attempt=N; max=M` (handlers.py, `add_retry_headers`), which is how
  the fault-server tells one call's retries from the next call.

`retry_mode` is set because botocore before 1.44 defaults to `legacy` (configprovider.py);
`--retry-mode legacy` tries that one (botocore/data/_retry.json: 5 attempts, `rand(0, 1) *
2 ** (attempt - 1)` s).
S3 GetObject because it is a GET, which a retry cannot run twice, and its body is not
parsed, so the fault-server's 200 (`{"ok":true,...}`) is a good answer; its 503 body is not
S3's XML, so botocore retries on the status alone. `--service dynamodb` makes DynamoDB
ListTables calls instead: the JSON protocol sends every operation, reads included, as a
POST without an Idempotency-Key, and botocore retries them (the fault-server's 200 body
parses as an empty ListTables result).

Usage: botocore_standard.py [URL] [--calls N] [--service s3|dynamodb] [--retry-mode legacy]
URL defaults to $CHAOS_TARGET_URL. Credentials are dummies unless set in the environment;
the user's AWS config and credential files are not read (so a local `max_attempts` cannot
change what is measured). Exits 0 whatever the calls' outcomes.
"""

import argparse
import os
import sys

# The call each service makes: S3 GetObject of a key per call, DynamoDB ListTables.
OPERATIONS = {
    "s3": lambda client, n: client.get_object(Bucket="chaos", Key=f"item-{n}"),
    "dynamodb": lambda client, n: client.list_tables(),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", nargs="?", default=os.environ.get("CHAOS_TARGET_URL"))
    parser.add_argument("--calls", type=int, default=6)
    parser.add_argument("--service", choices=sorted(OPERATIONS), default="s3")
    parser.add_argument("--retry-mode", choices=["standard", "legacy"], default="standard")
    args = parser.parse_args()
    if not args.url:
        parser.error("no URL: pass one or set CHAOS_TARGET_URL")

    # Dummy credentials and no config files: nothing on this machine changes the defaults.
    for name, value in {
        "AWS_ACCESS_KEY_ID": "AKIDCHAOSHARNESS",
        "AWS_SECRET_ACCESS_KEY": "chaos-harness-dummy-secret",
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        os.environ.setdefault(name, value)

    # Imported after the environment is set: botocore reads some of it at import.
    import botocore
    import botocore.session
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    client = botocore.session.get_session().create_client(
        args.service,
        endpoint_url=args.url,
        region_name="us-east-1",
        config=Config(
            retries={"mode": args.retry_mode},
            s3={"addressing_style": "path"},  # the bucket in the path: the URL is an address
            connect_timeout=2,
            read_timeout=10,
        ),
    )
    print(
        f"# botocore {botocore.__version__}, {args.service}, {args.retry_mode} mode, "
        f"AWS_NEW_RETRIES_2026={os.environ.get('AWS_NEW_RETRIES_2026', 'unset')}",
        file=sys.stderr,
    )

    for n in range(1, args.calls + 1):
        try:
            response = OPERATIONS[args.service](client, n)
            if "Body" in response:
                response["Body"].read()
            meta = response["ResponseMetadata"]
            outcome = f"ok {meta['HTTPStatusCode']}"
        except ClientError as e:
            meta = e.response["ResponseMetadata"]
            outcome = f"error {meta.get('HTTPStatusCode')} {e.response['Error'].get('Code')}"
        except BotoCoreError as e:
            meta = {}
            outcome = f"error {type(e).__name__}"
        attempts = meta.get("RetryAttempts", 0) + 1 if meta else "?"
        print(f"call {n}: {outcome} attempts={attempts}", flush=True)


if __name__ == "__main__":
    main()
