// The AWS SDK for JavaScript v3's own retries, unchanged, against the fault-server: CALLS
// S3 GetObject calls (GET /chaos/item-N), one after another, each printed as one line.
//
// What it exercises: the clients' default retry strategy, nothing configured
// (@smithy/core's retry submodule, `StandardRetryStrategy`, `resolveRetryConfig`):
// - retry mode `standard`, 3 attempts, a 50 ms base (`Retry.delay()`); DynamoDB's client
//   asks for 4 attempts and a 25 ms base instead
//   (`resolveRetryConfig(..., { defaultBaseDelay: 25, defaultMaxAttempts: 4 })`);
// - backoff `random() * min(base * 2 ** retries, 20 s)` (`DefaultRetryBackoffStrategy`,
//   full jitter; a 1 s base for throttling errors);
// - retries HTTP 500, 502, 503, 504, throttling and transient error codes;
// - `Retry-After` (seconds or a date) and `x-amz-retry-after` (ms) are honoured, clamped to
//   [backoff, backoff + 5 s];
// - a retry quota of 500 tokens, 14 per retry (5 for throttling);
// - every attempt carries `amz-sdk-invocation-id` (one per call) and
//   `amz-sdk-request: attempt=N; max=M`, which the fault-server groups by.
// These are the SDKs' 2026 retry behaviour (`Retry.v2026`), the default in this release.
//
// S3 GetObject because it is a GET, which a retry cannot run twice, and its body is not
// parsed, so the fault-server's 200 is a good answer. With SERVICE=dynamodb it makes
// DynamoDB ListTables calls instead: POSTs without an Idempotency-Key, as the JSON protocol
// sends every operation.
//
// Usage: node aws_sdk_js_v3.mjs [URL] [CALLS]   (URL defaults to $CHAOS_TARGET_URL, CALLS
// to 8; SERVICE=s3 or dynamodb, default s3). Credentials are dummies unless set; the
// user's AWS config and credential files are not read. Needs `npm ci` in interop/
// (interop/run.sh does it). Exits 0 whatever the calls' outcomes.

const url = process.argv[2] ?? process.env.CHAOS_TARGET_URL;
const calls = Number(process.argv[3] ?? 8);
const service = process.env.SERVICE ?? "s3";
if (!url || !["s3", "dynamodb"].includes(service)) {
  console.error("usage: aws_sdk_js_v3.mjs [URL] [CALLS], URL or CHAOS_TARGET_URL, SERVICE=s3|dynamodb");
  process.exit(2);
}
// Before the SDK is loaded: nothing on this machine changes its defaults.
process.env.AWS_CONFIG_FILE ??= "/dev/null";
process.env.AWS_SHARED_CREDENTIALS_FILE ??= "/dev/null";
process.env.AWS_EC2_METADATA_DISABLED ??= "true";

const config = {
  endpoint: url,
  region: "us-east-1",
  credentials: {
    accessKeyId: process.env.AWS_ACCESS_KEY_ID ?? "AKIDCHAOSHARNESS",
    secretAccessKey: process.env.AWS_SECRET_ACCESS_KEY ?? "chaos-harness-dummy-secret",
  },
};
let call;
if (service === "s3") {
  const { S3Client, GetObjectCommand } = await import("@aws-sdk/client-s3");
  // The bucket in the path: the URL is an address, not a bucket's host name.
  const client = new S3Client({ ...config, forcePathStyle: true });
  call = async (n) => {
    const out = await client.send(new GetObjectCommand({ Bucket: "chaos", Key: `item-${n}` }));
    await out.Body.transformToString();
    return out;
  };
} else {
  const { DynamoDBClient, ListTablesCommand } = await import("@aws-sdk/client-dynamodb");
  const client = new DynamoDBClient(config);
  call = (n) => client.send(new ListTablesCommand({}));
}
console.error(`# @aws-sdk/client-${service}, node ${process.version}`);

for (let n = 1; n <= calls; n++) {
  let outcome, meta;
  try {
    meta = (await call(n)).$metadata;
    outcome = `ok ${meta.httpStatusCode}`;
  } catch (e) {
    meta = e.$metadata ?? {};
    outcome = `error ${meta.httpStatusCode ?? "-"} ${e.name}`;
  }
  console.log(`call ${n}: ${outcome} attempts=${meta.attempts ?? "?"}`);
}
