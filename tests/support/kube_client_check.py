#!/usr/bin/python3
"""The official Kubernetes Python client (Debian's python3-kubernetes) against
the stand-in: every answer must deserialize into the client's generated models,
which check the fields the real API server always sets.

  kube_client_check.py KUBECONFIG HELPER

It creates a TrainJob (CustomObjectsApi) that runs HELPER, watches it to
Complete, reads, lists and watches its pods (CoreV1Api), reads the namespace's
events, deletes the TrainJob with a propagation policy and checks that it is
gone. It prints what it did and exits 1 at the first answer that does not fit.
"""

import sys

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

GROUP, VERSION, PLURAL, NS = "trainer.kubeflow.org", "v1alpha1", "trainjobs", "default"


def main():
    config.load_kube_config(config_file=sys.argv[1])
    helper = sys.argv[2]
    core = client.CoreV1Api()
    custom = client.CustomObjectsApi()
    name = "made-by-python-client"

    body = {"apiVersion": GROUP + "/" + VERSION, "kind": "TrainJob", "metadata": {"name": name},
            "spec": {"runtimeRef": {"name": "torch-distributed"},
                     "trainer": {"numNodes": 1, "command": [helper, "sleep", "1000", "print", "from the python client\n"]}}}
    made = custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
    assert made["metadata"]["name"] == name and made["metadata"].get("uid"), made
    print("created", name)

    # watch the TrainJob until it is Complete (a watch from the list's version)
    def is_complete(obj):
        conds = obj.get("status", {}).get("conditions", [])
        return any(c["type"] == "Complete" and c["status"] == "True" for c in conds)

    listed = custom.list_namespaced_custom_object(GROUP, VERSION, NS, PLURAL)
    mine = [i for i in listed["items"] if i["metadata"]["name"] == name]
    assert mine, listed
    complete = is_complete(mine[0])
    w = watch.Watch()
    for ev in ([] if complete else w.stream(custom.list_namespaced_custom_object, GROUP, VERSION, NS, PLURAL,
                                            resource_version=listed["metadata"]["resourceVersion"],
                                            timeout_seconds=60)):
        if ev["object"]["metadata"]["name"] == name and is_complete(ev["object"]):
            complete = True
            w.stop()
    assert complete, "the TrainJob did not reach Complete within the watch"
    got = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
    assert got["metadata"]["name"] == name
    print("watched to Complete")

    # pods: list (into V1PodList), read (V1Pod), watch (V1Pod events), log
    selector = "jobset.sigs.k8s.io/jobset-name=" + name
    pods = core.list_namespaced_pod(NS, label_selector=selector)
    assert len(pods.items) == 1, pods
    pod = pods.items[0]
    status = pod.status.container_statuses[0]
    assert status.image_id and status.container_id and status.state.terminated.exit_code == 0, status
    assert pod.status.phase == "Succeeded" and pod.status.start_time is not None, pod.status
    one = core.read_namespaced_pod(pod.metadata.name, NS)
    assert one.metadata.uid == pod.metadata.uid
    seen = [e["object"].metadata.name for e in watch.Watch().stream(
        core.list_namespaced_pod, NS, label_selector=selector, timeout_seconds=1)]
    assert pod.metadata.name in seen, seen
    log = core.read_namespaced_pod_log(pod.metadata.name, NS, container="node")
    assert log == "from the python client\n", repr(log)
    print("pods listed, read, watched and their log read")

    # events (V1EventList, core/v1)
    events = core.list_namespaced_event(NS)
    assert any(e.involved_object.name == pod.metadata.name for e in events.items), events
    print("events listed:", len(events.items))

    # delete with a propagation policy, then it is gone
    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name,
                                           body=client.V1DeleteOptions(propagation_policy="Foreground"))
    try:
        custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
        raise AssertionError("the TrainJob is still there after delete")
    except ApiException as e:
        assert e.status == 404, e
    print("deleted with propagationPolicy Foreground")


if __name__ == "__main__":
    try:
        main()
    except (AssertionError, ValueError, ApiException) as e:
        print("kube_client_check: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        sys.exit(1)
