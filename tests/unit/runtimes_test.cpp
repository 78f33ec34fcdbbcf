#include "core/runtimes.hpp"
#include "tests/support/test_support.hpp"

#include <doctest/doctest.h>

#include <fstream>

using namespace tjob;
using namespace tjob::detail;

namespace {

// The shape kubeflow/trainer ships (release-2.1 torch runtime), with fields
// tjob does not use: they must not stop it from loading.
constexpr const char* upstream_shape = R"(apiVersion: trainer.kubeflow.org/v1alpha1
kind: ClusterTrainingRuntime
metadata:
  name: torch-custom
  labels:
    trainer.kubeflow.org/framework: torch
spec:
  mlPolicy:
    numNodes: 2
    torch:
      numProcPerNode: auto
  template:
    spec:
      replicatedJobs:
        - name: node
          dependsOn:
            - name: model-initializer
              status: Complete
          template:
            metadata:
              labels:
                trainer.kubeflow.org/trainjob-ancestor-step: trainer
            spec:
              template:
                spec:
                  containers:
                    - name: sidecar
                      image: busybox
                    - name: node
                      image: example.org/torch:1
                      command:
                        - /bin/bash
                        - -c
                        - echo "$PET_NNODES"
                      resources:
                        limits:
                          nvidia.com/gpu: 1
---
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - torch_distributed.yaml
)";

std::vector<runtime> parse(const std::string& text, std::vector<std::string>& problems) {
  std::vector<runtime> out;
  std::vector<std::string> sources;
  parse_runtime_documents(text, "test.yaml", out, sources, problems);
  return out;
}

}  // namespace

TEST_CASE("the built-in runtimes are torch-distributed and python") {
  auto cat = load_runtimes({});
  CHECK(cat.problems.empty());
  auto* torch = cat.find("torch-distributed");
  REQUIRE(torch);
  CHECK(torch->trainer.framework == "torch");
  CHECK(torch->trainer.packages == std::vector<std::string>{"torch"});
  CHECK(torch->trainer.num_nodes == 1);
  CHECK(torch->kind == "ClusterTrainingRuntime");
  auto* py = cat.find("python");
  REQUIRE(py);
  CHECK(py->trainer.framework == "python");
  CHECK(py->trainer.packages.empty());
}

TEST_CASE("a manifest in kubeflow/trainer's shape loads and other kinds in the file are ignored") {
  std::vector<std::string> problems;
  auto rts = parse(upstream_shape, problems);
  CHECK(problems.empty());
  REQUIRE(rts.size() == 1);
  CHECK(rts[0].name == "torch-custom");
  CHECK(rts[0].trainer.framework == "torch");
  CHECK(rts[0].trainer.num_nodes == 2);
  CHECK(rts[0].trainer.image == "example.org/torch:1");  // the container named node, not the sidecar
  CHECK(rts[0].trainer.trainer_type == "CustomTrainer");
}

TEST_CASE("each malformed manifest is reported with its file and field") {
  struct bad {
    std::string yaml, mention;
  };
  std::vector<bad> cases = {
      {"kind: ClusterTrainingRuntime\nspec: {}\n", "metadata is missing"},
      {"kind: ClusterTrainingRuntime\nmetadata: {labels: {trainer.kubeflow.org/framework: torch}}\n",
       "metadata.name is missing"},
      {"kind: ClusterTrainingRuntime\nmetadata: {name: x}\nspec: {}\n",
       "metadata.labels.trainer.kubeflow.org/framework is missing"},
      {"kind: ClusterTrainingRuntime\nmetadata: {name: x, labels: {trainer.kubeflow.org/framework: "
       "torch}}\nspec: {template: {spec: {replicatedJobs: [{name: launcher}]}}}\n",
       "no job named 'node'"},
      {"kind: ClusterTrainingRuntime\nmetadata: {name: x, labels: {trainer.kubeflow.org/framework: "
       "torch}}\nspec: {mlPolicy: {numNodes: many}, template: {spec: {replicatedJobs: [{name: node}]}}}\n",
       "spec.mlPolicy.numNodes"},
      {"kind: ClusterTrainingRuntime\nmetadata: [\n", "not valid YAML"},
      {"- just\n- a list\n", "must be a mapping"},
      {"metadata: {name: x}\n", "kind is missing"},
  };
  for (const auto& c : cases) {
    std::vector<std::string> problems;
    auto rts = parse(c.yaml, problems);
    CAPTURE(c.yaml);
    CHECK(rts.empty());
    REQUIRE(problems.size() == 1);
    CHECK(problems[0].find("test.yaml") != std::string::npos);
    CHECK(problems[0].find(c.mention) != std::string::npos);
  }
}

TEST_CASE("user directories override built-ins by name and a broken file spoils nothing else") {
  tjob::test::temp_dir d;
  std::ofstream(d.path() / "a-override.yaml")
      << "kind: ClusterTrainingRuntime\nmetadata:\n  name: torch-distributed\n  labels:\n"
         "    trainer.kubeflow.org/framework: torch\n  annotations:\n    tjob/packages: torch, numpy\n"
         "spec:\n  template:\n    spec:\n      replicatedJobs:\n        - name: node\n";
  std::ofstream(d.path() / "b-broken.yaml") << "kind: ClusterTrainingRuntime\nmetadata: {name: broken}\n";
  std::ofstream(d.path() / "c-extra.yml") << upstream_shape;
  std::ofstream(d.path() / "notes.txt") << "not a manifest";
  auto cat = load_runtimes({d.path(), d.path() / "missing"});
  REQUIRE(cat.find("torch-distributed"));
  CHECK(cat.find("torch-distributed")->trainer.packages == std::vector<std::string>{"torch", "numpy"});
  CHECK(cat.find("python"));
  CHECK(cat.find("torch-custom"));
  CHECK_FALSE(cat.find("broken"));
  REQUIRE(cat.problems.size() == 1);
  CHECK(cat.problems[0].find("b-broken.yaml") != std::string::npos);
  CHECK(cat.problems[0].find("broken") != std::string::npos);
  auto msg = cat.not_found_message("nope");
  CHECK(msg.find("Runtime 'nope' not found") != std::string::npos);
  CHECK(msg.find("python, torch-custom, torch-distributed") != std::string::npos);
}

TEST_CASE("a YAML bomb is read without expanding it") {
  std::string bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n";
  char prev = 'a';
  for (char c = 'b'; c <= 'k'; ++c) {
    bomb += std::string(1, c) + ": &" + c + " [";
    for (int i = 0; i < 9; ++i) bomb += std::string(i ? ", *" : "*") + prev;
    bomb += "]\n";
    prev = c;
  }
  bomb +=
      "kind: ClusterTrainingRuntime\nmetadata:\n  name: bomb\n  labels: {trainer.kubeflow.org/framework: "
      "torch}\n  annotations: {tjob/packages: *k}\nspec:\n  template: {spec: {replicatedJobs: [{name: "
      "node}]}}\n";
  std::vector<std::string> problems;
  auto rts = parse(bomb, problems);
  REQUIRE(rts.size() == 1);
  CHECK(rts[0].trainer.packages.empty());  // an alias to a list is not a package list
}
