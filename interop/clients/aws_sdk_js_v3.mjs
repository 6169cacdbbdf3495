// The AWS SDK for JavaScript v3's own retries, unchanged, against the fault-server: CALLS
// DynamoDB ListTables calls, one after another, each printed as one line.
//
// What it exercises: the client's default retry strategy, nothing configured
// (@smithy/core's retry submodule, `StandardRetryStrategy`, and @aws-sdk/client-dynamodb's
// runtime config):
// - retry mode `standard`; DynamoDB's client asks for 4 attempts and a 25 ms base
//   (`resolveRetryConfig(..., { defaultBaseDelay: 25, defaultMaxAttempts: 4 })`; other
//   clients 3 attempts and 50 ms, `Retry.delay()`);
// - backoff `random() * min(base * 2 ** retries, 20 s)` (`DefaultRetryBackoffStrategy`,
//   full jitter; a 1 s base for throttling errors);
// - retries HTTP 500, 502, 503, 504, throttling and transient error codes;
// - `Retry-After` (seconds or a date) and `x-amz-retry-after` (ms) are honoured, clamped to
//   [backoff, backoff + 5 s];
// - a retry quota of 500 tokens, 14 per retry (5 for throttling);
// - every attempt carries `amz-sdk-invocation-id` (one per call) and
//   `amz-sdk-request: attempt=N; max=M`, which the fault-server groups by.
// These are the SDKs' 2026 retry behaviour (`Retry.v2026`), already the default in this
// release.
//
// Usage: node aws_sdk_js_v3.mjs [URL] [CALLS]   (URL defaults to $CHAOS_TARGET_URL, CALLS
// to 8). Credentials are dummies unless set; the user's AWS config and credential files
// are not read. Needs `npm ci` in interop/ (interop/run.sh does it). Exits 0 whatever the
// calls' outcomes.

const url = process.argv[2] ?? process.env.CHAOS_TARGET_URL;
const calls = Number(process.argv[3] ?? 8);
if (!url) {
  console.error("no URL: pass one or set CHAOS_TARGET_URL");
  process.exit(2);
}
// Before the SDK is loaded: nothing on this machine changes its defaults.
process.env.AWS_CONFIG_FILE ??= "/dev/null";
process.env.AWS_SHARED_CREDENTIALS_FILE ??= "/dev/null";
process.env.AWS_EC2_METADATA_DISABLED ??= "true";

const { DynamoDBClient, ListTablesCommand } = await import("@aws-sdk/client-dynamodb");
const client = new DynamoDBClient({
  endpoint: url,
  region: "us-east-1",
  credentials: {
    accessKeyId: process.env.AWS_ACCESS_KEY_ID ?? "AKIDCHAOSHARNESS",
    secretAccessKey: process.env.AWS_SECRET_ACCESS_KEY ?? "chaos-harness-dummy-secret",
  },
});
console.error(`# @aws-sdk/client-dynamodb, node ${process.version}`);

for (let n = 1; n <= calls; n++) {
  let outcome, meta;
  try {
    meta = (await client.send(new ListTablesCommand({}))).$metadata;
    outcome = `ok ${meta.httpStatusCode}`;
  } catch (e) {
    meta = e.$metadata ?? {};
    outcome = `error ${meta.httpStatusCode ?? ""} ${e.name}`.replace("  ", " ");
  }
  console.log(`call ${n}: ${outcome} attempts=${meta.attempts ?? "?"}`);
}
