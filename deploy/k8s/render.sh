#!/usr/bin/env bash
# The manifests of a sharded run on Kubernetes, for N shards: `just k8s-render N [START]`,
# or `bash deploy/k8s/render.sh N [START] > chaos.yaml`. START is the shards' common start
# (RFC 3339 UTC; default two minutes from now: render just before `kubectl apply`).
# IMAGE overrides the image (default chaos-harness:0.1.0, the Dockerfile's, as compose
# tags it). What each part is and every command around it: docs/kubernetes.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
n=${1:?usage: render.sh N [START]}
[[ $n =~ ^[0-9]+$ ]] && (( n >= 1 && n <= 1024 )) || { echo "render.sh: N must be 1 to 1024, not $n" >&2; exit 2; }
start=${2:-$(date -u -d '+2 min' +%Y-%m-%dT%H:%M:%SZ)}
image=${IMAGE:-chaos-harness:0.1.0}
plan=plans/cluster.yaml
cat <<YAML
# The plan, as the shards read it (/plan/cluster.yaml).
apiVersion: v1
kind: ConfigMap
metadata:
  name: chaos-plan
  labels: { app.kubernetes.io/part-of: chaos-harness }
data:
  cluster.yaml: |
$(sed 's/^/    /' "$plan")
---
# One fault-server: one ledger, one capacity model, whatever the number of shards.
apiVersion: apps/v1
kind: Deployment
metadata:
  name: fault-server
  labels: { app.kubernetes.io/name: fault-server, app.kubernetes.io/part-of: chaos-harness }
spec:
  replicas: 1
  selector:
    matchLabels: { app.kubernetes.io/name: fault-server }
  template:
    metadata:
      labels: { app.kubernetes.io/name: fault-server, app.kubernetes.io/part-of: chaos-harness }
    spec:
      securityContext: { runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000 }
      containers:
        - name: fault-server
          image: $image
          command: [fault-server, --listen, "0.0.0.0:8080"]
          env:
            - name: FAULT_SERVER_TOKEN
              valueFrom:
                secretKeyRef: { name: chaos-token, key: token }
          ports:
            - { name: http, containerPort: 8080 }
          readinessProbe:
            httpGet: { path: /healthz, port: http }
            periodSeconds: 2
          resources:
            requests: { cpu: "1", memory: 256Mi }
            limits: { memory: 2Gi }
---
apiVersion: v1
kind: Service
metadata:
  name: fault-server
  labels: { app.kubernetes.io/part-of: chaos-harness }
spec:
  selector: { app.kubernetes.io/name: fault-server }
  ports:
    - { name: http, port: 8080, targetPort: http }
---
# The shards: pod I runs \`--shard I/$n\`, all from the same --start-at. Shard 0 resets the
# fault-server and reads its ledger. Each prints its partial report on its log
# (\`--partial -\`); \`harness merge\` judges them together.
apiVersion: batch/v1
kind: Job
metadata:
  name: chaos-shards
  labels: { app.kubernetes.io/part-of: chaos-harness }
spec:
  completionMode: Indexed
  completions: $n
  parallelism: $n
  backoffLimit: 0                 # a shard run again would be late for its start
  activeDeadlineSeconds: 3600
  template:
    metadata:
      labels: { app.kubernetes.io/name: chaos-shard, app.kubernetes.io/part-of: chaos-harness }
    spec:
      restartPolicy: Never
      securityContext: { runAsNonRoot: true, runAsUser: 1000, runAsGroup: 1000 }
      affinity:
        podAntiAffinity:          # one shard a node where the cluster has the nodes
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 100
              podAffinityTerm:
                topologyKey: kubernetes.io/hostname
                labelSelector:
                  matchLabels: { app.kubernetes.io/name: chaos-shard }
      containers:
        - name: shard
          image: $image
          command:
            - harness
            - chaos
            - /plan/cluster.yaml
            - --shard
            - \$(SHARD_INDEX)/$n
            - --start-at
            - "$start"
            - --partial
            - "-"
          env:
            - name: SHARD_INDEX
              valueFrom:
                fieldRef: { fieldPath: "metadata.annotations['batch.kubernetes.io/job-completion-index']" }
            - name: FAULT_SERVER_TOKEN
              valueFrom:
                secretKeyRef: { name: chaos-token, key: token }
          volumeMounts:
            - { name: plan, mountPath: /plan, readOnly: true }
          resources:
            requests: { cpu: "1", memory: 256Mi }
            limits: { memory: 2Gi }
      volumes:
        - name: plan
          configMap: { name: chaos-plan }
YAML
