#!/usr/bin/env python3
"""What a child costs the API server created by POST and by server-side apply (issue 40).

Sends the Deployment and the Service the operator builds for a MyApp (as its `minimal` snapshots
show them), each `--count` times at concurrency `--concurrency`, once by POST (as the fair floor
and controller-runtime create them) and once by server-side apply (as the operator does:
`fieldManager=app-operator`, `fieldValidation=Ignore`), all with `dryRun=All`: every step runs
(decoding, admission, the field manager, the read the apply does first) but nothing is stored, so
no controller acts on them and each round costs the same whatever ran before. Rounds alternate
(POST, apply, POST, apply …) so the machine's drift falls on both alike. Prints the API server's
CPU (utime + stime from /proc/<pid>/stat) per request, each round and the median per way.

    hack/apply-vs-create.py --kubeconfig .local/cluster/kubeconfig --apiserver-pid <pid>
"""

import argparse
import base64
import http.client
import json
import os
import ssl
import statistics
import tempfile
import threading
import time
import urllib.parse

import yaml

NAMESPACE = "apply-vs-create"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def connection_factory(kubeconfig_path):
    with open(kubeconfig_path) as f:
        config = yaml.safe_load(f)
    context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    server = urllib.parse.urlparse(cluster["server"])
    tls = ssl.create_default_context()
    if "certificate-authority-data" in cluster:
        tls.load_verify_locations(cadata=base64.b64decode(cluster["certificate-authority-data"]).decode())
    else:
        tls.load_verify_locations(cafile=cluster["certificate-authority"])
    keys = tempfile.mkdtemp()
    cert, key = os.path.join(keys, "cert"), os.path.join(keys, "key")
    for path, field in ((cert, "client-certificate"), (key, "client-key")):
        with open(path, "wb") as out:
            if field + "-data" in user:
                out.write(base64.b64decode(user[field + "-data"]))
            else:
                with open(user[field], "rb") as source:
                    out.write(source.read())
    tls.load_cert_chain(cert, key)
    return lambda: http.client.HTTPSConnection(server.hostname, server.port, context=tls)


def selector(name):
    return {"app.kubernetes.io/instance": name, "app.kubernetes.io/name": name}


def metadata(name):
    """A child's metadata as the operator sets it: its labels, and its MyApp as controller."""
    return {
        "name": name,
        "namespace": NAMESPACE,
        "labels": {**selector(name), "app.kubernetes.io/managed-by": "app-operator"},
        "ownerReferences": [{
            "apiVersion": "example.com/v1",
            "kind": "MyApp",
            "name": name,
            "uid": "00000000-0000-4000-8000-000000000001",
            "controller": True,
            "blockOwnerDeletion": True,
        }],
    }


def deployment(name):
    labels = selector(name)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(name),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "automountServiceAccountToken": False,
                    "containers": [{
                        "image": "nginx:1.27",
                        "name": "app",
                        "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"}],
                        "securityContext": {
                            "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]},
                        },
                    }],
                    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                },
            },
        },
    }


def service(name):
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(name),
        "spec": {
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP", "targetPort": "http"}],
            "selector": selector(name),
            "type": "ClusterIP",
        },
    }


KINDS = {
    "Deployment": (f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments", deployment),
    "Service": (f"/api/v1/namespaces/{NAMESPACE}/services", service),
}


def request(way, collection, body):
    if way == "POST":
        query = {"dryRun": "All"}
        return "POST", f"{collection}?{urllib.parse.urlencode(query)}", "application/json"
    query = {"dryRun": "All", "fieldManager": "app-operator", "fieldValidation": "Ignore"}
    path = f"{collection}/{body['metadata']['name']}?{urllib.parse.urlencode(query)}"
    return "PATCH", path, "application/apply-patch+yaml"


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def send_round(connect, way, kind, count, concurrency):
    """Sends `count` of `kind` by `way` from `concurrency` threads, a connection each."""
    collection, build = KINDS[kind]
    names = iter(range(count))
    lock = threading.Lock()
    failures = []

    def work():
        conn = connect()
        while True:
            with lock:
                index = next(names, None)
            if index is None:
                return
            body = build(f"{kind.lower()}-{index}")
            method, path, content_type = request(way, collection, body)
            conn.request(method, path, json.dumps(body), {"Content-Type": content_type})
            response = conn.getresponse()
            payload = response.read()
            if response.status not in (200, 201):
                failures.append(f"{method} {path}: {response.status} {payload[:300]!r}")
                return

    threads = [threading.Thread(target=work) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise SystemExit(failures[0])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--apiserver-pid", type=int, required=True)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    connect = connection_factory(args.kubeconfig)

    conn = connect()
    conn.request("POST", "/api/v1/namespaces", json.dumps({"metadata": {"name": NAMESPACE}}),
                 {"Content-Type": "application/json"})
    response = conn.getresponse()
    response.read()
    if response.status not in (201, 409):
        raise SystemExit(f"namespace {NAMESPACE}: {response.status}")

    figures = {}
    for _ in range(args.rounds):
        for kind in KINDS:
            for way in ("POST", "apply"):
                cpu, wall = cpu_seconds(args.apiserver_pid), time.monotonic()
                send_round(connect, way, kind, args.count, args.concurrency)
                cpu = (cpu_seconds(args.apiserver_pid) - cpu) / args.count * 1000
                wall = (time.monotonic() - wall) / args.count * 1000
                figures.setdefault((kind, way), []).append(cpu)
                print(f"{kind:10} {way:5}: {cpu:.2f} ms of API server CPU per request, "
                      f"{wall:.2f} ms of wall time per request", flush=True)
    print(f"\nmedian of {args.rounds} rounds of {args.count}, concurrency {args.concurrency}:")
    for kind in KINDS:
        post = statistics.median(figures[(kind, "POST")])
        apply = statistics.median(figures[(kind, "apply")])
        print(f"{kind:10}: POST {post:.2f} ms, apply {apply:.2f} ms, apply - POST {apply - post:+.2f} ms")


if __name__ == "__main__":
    main()
