"""The Kubernetes base, checked offline: every rendered document against the
API schemas (kubernetes-validate, strict), and the settings a rolling
deploy of a proxy depends on.

    python3 -m venv target/k8s-venv
    target/k8s-venv/bin/pip install -r deploy/kubernetes/requirements.txt
    target/k8s-venv/bin/python -m unittest discover -s deploy/kubernetes/tests
"""

import os
import re
import tomllib
import unittest

import kubernetes_validate

from render import BASE, Unsupported, find, render

# The oldest Kubernetes release still supported upstream when this base was
# written, and the newest the validator knows.
VERSIONS = ["1.32.0", "1.37.0"]


def duration_seconds(text):
    """A Weir duration ("20s", "1500ms", "2m") in seconds."""
    m = re.fullmatch(r"(\d+)(ms|s|m|h)", text)
    if not m:
        raise ValueError(f"not a duration: {text!r}")
    n, unit = int(m.group(1)), m.group(2)
    return n * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]


class Base(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.docs = render()
        cls.deployment = find(cls.docs, "Deployment", "weir")
        cls.pod = cls.deployment["spec"]["template"]["spec"]
        [cls.container] = [c for c in cls.pod["containers"] if c["name"] == "weir"]
        config_map = find(cls.docs, "ConfigMap", "weir-config")
        cls.weir_toml = tomllib.loads(config_map["data"]["weir.toml"])

    def port(self, name):
        [p] = [p for p in self.container["ports"] if p["name"] == name]
        return p["containerPort"]

    def test_every_document_passes_the_schemas(self):
        kinds = sorted(d["kind"] for d in self.docs)
        self.assertEqual(
            kinds,
            sorted([
                "ConfigMap", "Deployment", "HorizontalPodAutoscaler",
                "PodDisruptionBudget", "Role", "RoleBinding", "Service",
                "Service", "ServiceAccount",
            ]),
        )
        for version in VERSIONS:
            for doc in self.docs:
                with self.subTest(version=version, kind=doc["kind"], name=doc["metadata"]["name"]):
                    kubernetes_validate.validate(doc, version, strict=True)

    def test_a_schema_error_is_caught(self):
        # The validator is not a no-op: a misspelt field fails.
        bad = dict(self.deployment, spec=dict(self.deployment["spec"], replica=3))
        with self.assertRaises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(bad, VERSIONS[-1], strict=True)

    def test_the_renderer_refuses_what_it_does_not_do(self):
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "kustomization.yaml"), "w") as f:
                f.write("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamePrefix: x-\n")
            with self.assertRaises(Unsupported):
                render(d)

    def test_probes_have_separate_readiness_and_liveness(self):
        admin = self.port("admin")
        probes = {k: self.container[k] for k in ("startupProbe", "readinessProbe", "livenessProbe")}
        for name, probe in probes.items():
            with self.subTest(probe=name):
                self.assertIn(probe["httpGet"]["port"], ("admin", admin))
        self.assertEqual(probes["readinessProbe"]["httpGet"]["path"], "/readyz")
        self.assertEqual(probes["livenessProbe"]["httpGet"]["path"], "/livez")
        self.assertEqual(probes["startupProbe"]["httpGet"]["path"], "/livez")
        # Readiness drops at the first failed check after SIGTERM.
        self.assertEqual(probes["readinessProbe"]["failureThreshold"], 1)
        # Liveness is slower to give up than readiness.
        live, ready = probes["livenessProbe"], probes["readinessProbe"]
        self.assertGreater(
            live["periodSeconds"] * live["failureThreshold"],
            ready["periodSeconds"] * ready["failureThreshold"],
        )

    def test_the_admin_listener_answers_the_kubelet(self):
        admin = self.weir_toml["admin"]
        host, _, port = admin["address"].rpartition(":")
        self.assertEqual(host, "0.0.0.0", "probes come to the pod IP, not loopback")
        self.assertIs(admin.get("allow_public"), True)
        self.assertEqual(int(port), self.port("admin"))
        [listener] = self.weir_toml["listener"]
        self.assertEqual(int(listener["address"].rpartition(":")[2]), self.port("http"))

    def test_the_config_caches_so_a_fleet_has_something_to_shard(self):
        routes = self.weir_toml["route"]
        self.assertTrue(any(r.get("cache") for r in routes), routes)

    def test_grace_outlasts_prestop_and_drain(self):
        pre_stop = self.container["lifecycle"]["preStop"]["exec"]["command"]
        self.assertEqual(pre_stop[0], "/bin/sleep")
        sleep = int(pre_stop[1])
        self.assertGreaterEqual(sleep, 3)
        drain = duration_seconds(self.weir_toml["server"]["shutdown_grace"])
        grace = self.pod["terminationGracePeriodSeconds"]
        self.assertGreater(grace, sleep + drain, "SIGKILL would cut requests still draining")

    def test_config_is_a_watched_directory_never_a_subpath(self):
        args = self.container["args"]
        self.assertIn("--watch", args)
        config = args[args.index("--config") + 1]
        [mount] = [m for m in self.container["volumeMounts"] if m["name"] == "config"]
        self.assertNotIn("subPath", mount)
        self.assertEqual(mount["mountPath"], os.path.dirname(config))
        [volume] = [v for v in self.pod["volumes"] if v["name"] == "config"]
        self.assertEqual(volume["configMap"]["name"], "weir-config")
        self.assertEqual(os.path.basename(config), "weir.toml")

    def test_selectors_match_the_pods(self):
        labels = self.deployment["spec"]["template"]["metadata"]["labels"]
        selectors = [
            self.deployment["spec"]["selector"]["matchLabels"],
            find(self.docs, "Service", "weir")["spec"]["selector"],
            find(self.docs, "Service", "weir-peers")["spec"]["selector"],
            find(self.docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        ]
        for s in selectors:
            self.assertTrue(s.items() <= labels.items(), s)

    def test_peers_service_is_headless(self):
        peers = find(self.docs, "Service", "weir-peers")["spec"]
        self.assertEqual(peers["clusterIP"], "None")
        self.assertFalse(peers.get("publishNotReadyAddresses", False))

    def test_three_replicas_disrupted_one_at_a_time(self):
        self.assertEqual(self.deployment["spec"]["replicas"], 3)
        pdb = find(self.docs, "PodDisruptionBudget")["spec"]
        self.assertEqual(pdb.get("maxUnavailable"), 1)
        rolling = self.deployment["spec"]["strategy"]["rollingUpdate"]
        self.assertEqual(rolling["maxUnavailable"], 0)

    def test_hpa_scales_down_slowly(self):
        hpa = find(self.docs, "HorizontalPodAutoscaler")["spec"]
        self.assertEqual(hpa["scaleTargetRef"]["name"], "weir")
        self.assertGreaterEqual(hpa["minReplicas"], 3)
        down = hpa["behavior"]["scaleDown"]
        self.assertGreaterEqual(down["stabilizationWindowSeconds"], 300)
        for policy in down["policies"]:
            self.assertEqual(policy["type"], "Pods")
            self.assertEqual(policy["value"], 1)
        metric = hpa["metrics"][0]["resource"]
        self.assertEqual(metric["name"], "cpu")
        # Utilization needs a CPU request to be measured against.
        self.assertIn("cpu", self.container["resources"]["requests"])

    def test_rbac_lets_the_pod_watch_endpointslices_and_nothing_more(self):
        role = find(self.docs, "Role")
        [rule] = role["rules"]
        self.assertEqual(rule["apiGroups"], ["discovery.k8s.io"])
        self.assertEqual(rule["resources"], ["endpointslices"])
        self.assertEqual(sorted(rule["verbs"]), ["get", "list", "watch"])
        binding = find(self.docs, "RoleBinding")
        self.assertEqual(binding["roleRef"]["name"], role["metadata"]["name"])
        [subject] = binding["subjects"]
        self.assertEqual(subject["kind"], "ServiceAccount")
        self.assertEqual(subject["name"], self.pod["serviceAccountName"])
        find(self.docs, "ServiceAccount", self.pod["serviceAccountName"])

    def test_the_pod_runs_as_the_image_user_read_only(self):
        self.assertEqual(self.pod["securityContext"]["runAsUser"], 10001)
        sc = self.container["securityContext"]
        self.assertIs(sc["readOnlyRootFilesystem"], True)
        self.assertIs(sc["allowPrivilegeEscalation"], False)
        with open(os.path.join(BASE, "..", "..", "Dockerfile"), encoding="utf-8") as f:
            self.assertIn("--uid 10001", f.read())


if __name__ == "__main__":
    unittest.main()
