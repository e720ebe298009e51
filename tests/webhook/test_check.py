import json

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import container, job_template, pod, review, volcano_cronjob, volcano_job
from tests.conftest import REPO
from tests.webhook.queue_cases import queue, res
from volcano_guard.cli import main

EXAMPLES = REPO / "examples" / "manifests"


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_clean_manifest_exits_0(capsys):
    assert main(["check", "-f", str(EXAMPLES / "volcano-job-ok.yaml")]) == 0
    assert "1 documents checked, 0 violations" in capsys.readouterr().out


def test_violations_exit_1_one_line_each_as_file_doc_kind_name(capsys):
    assert main(["check", "-f", str(EXAMPLES)]) == 1
    lines = capsys.readouterr().out.splitlines()
    violation_lines = [line for line in lines if ": " in line and "checked" not in line]
    assert len(violation_lines) == 5
    path = str(EXAMPLES / "violations.yaml")
    assert violation_lines[0].startswith(f"{path}:0 Job/pytorch-ddp: ")
    assert any(line.startswith(f"{path}:1 Deployment/inference: ") for line in violation_lines)
    assert not any("plain-web" in line for line in violation_lines)


def test_volcano_cronjobs_and_jobflow_job_templates_are_checked_like_jobs(tmp_path, capsys):
    tasks = {"worker": [container("tf", requests={"cpu": "1"})]}
    manifests = write(
        tmp_path,
        "flows.yaml",
        "\n---\n".join(json.dumps(obj) for obj in (volcano_cronjob(tasks), job_template(tasks))),
    )
    assert main(["check", "-f", str(manifests)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert any(
        line.startswith(f"{manifests}:0 CronJob/nightly: ")
        and "spec.jobTemplate.spec.tasks[0].template.spec.containers[0].resources.requests.memory"
        in line
        for line in lines
    ), lines
    assert any(
        line.startswith(f"{manifests}:1 JobTemplate/train: ") and 'task "worker"' in line
        for line in lines
    ), lines


def test_json_output_for_pipelines(capsys):
    assert main(["check", "-f", str(EXAMPLES), "--output", "json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["exitCode"] == 1
    assert report["documents"] == 4
    first = report["violations"][0]
    assert set(first) == {"file", "document", "item", "kind", "name", "policy", "mode", "message"}
    assert first["policy"] == "resourceRequests"


@pytest.mark.parametrize(
    ("name", "text", "needle"),
    [
        ("bad.yaml", "kind: Pod\n  spec: [unclosed", "line 2: not YAML or JSON"),
        ("list.yaml", "- 1\n- 2\n", "expected a Kubernetes object"),
        (
            "shape.yaml",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n"
            "  schedulerName: volcano\n  containers: nope\n",
            "spec.containers must be a list",
        ),
        ("binary.json", None, "not text (UTF-8)"),
    ],
)
def test_unusable_input_exits_2_naming_the_file(tmp_path, capsys, name, text, needle):
    path = tmp_path / name
    if text is None:
        path.write_bytes(b"\xff\xfe\x00")
    else:
        path.write_text(text)
    assert main(["check", "-f", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and needle in err


def test_missing_path_exits_2(tmp_path, capsys):
    assert main(["check", "-f", str(tmp_path / "nope.yaml")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_admission_reviews_and_json_files_are_checked(tmp_path, capsys):
    write(tmp_path, "review.json", json.dumps(review(pod(container("c")))))
    assert main(["check", "-f", str(tmp_path)]) == 1
    assert 'container "c" has no cpu request' in capsys.readouterr().out


def test_defaults_from_config_are_applied_before_validation(tmp_path, capsys):
    write(tmp_path, "pod.yaml", json.dumps(pod(container("c", requests={"cpu": "1"}))))
    config = write(
        tmp_path, "config.yml.txt", "policies: {resourceRequests: {defaults: {memory: 64Mi}}}"
    )
    assert main(["check", "-f", str(tmp_path / "pod.yaml"), "--config", str(config)]) == 0
    assert main(["check", "-f", str(tmp_path / "pod.yaml")]) == 1


def test_warn_mode_violations_are_reported_but_do_not_fail(tmp_path, capsys):
    write(tmp_path, "job.yaml", json.dumps(volcano_job({"w": [container("c")]})))
    config = write(tmp_path, "c.txt", "policies: {resourceRequests: {mode: warn}}")
    assert main(["check", "-f", str(tmp_path / "job.yaml"), "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "[warn]" in out
    # exit 0 with "2 violations" read as a contradiction: they are counted as what they are
    assert out.splitlines()[-1] == "1 documents checked, 0 violations, 2 warnings"


def test_workload_templates_lists_and_cronjobs(tmp_path, capsys):
    template = {"spec": {"schedulerName": "volcano", "containers": [container("c")]}}
    cron = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": "nightly"},
        "spec": {"schedule": "0 0 * * *", "jobTemplate": {"spec": {"template": template}}},
    }
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db"},
        "spec": {"template": template},
    }
    write(
        tmp_path,
        "list.yaml",
        json.dumps({"apiVersion": "v1", "kind": "List", "items": [cron, sts]}),
    )
    assert main(["check", "-f", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "CronJob/nightly" in out and "spec.jobTemplate.spec.template.spec.containers[0]" in out
    assert "StatefulSet/db" in out


def test_non_kubernetes_documents_are_skipped(tmp_path, capsys):
    write(tmp_path, "kustomization.yaml", "resources: [a.yaml]\n")
    assert main(["check", "-f", str(tmp_path)]) == 0


def bound_pod(node):
    obj = pod(container("c", requests={"cpu": "1", "memory": "1Gi"}))
    obj["spec"]["nodeName"] = node
    return obj


def test_node_name_without_nodes_file_counts_every_node_as_managed(tmp_path, capsys):
    write(tmp_path, "pod.json", json.dumps(bound_pod("any-node")))
    assert main(["check", "-f", str(tmp_path / "pod.json")]) == 1
    assert 'sets spec.nodeName "any-node"' in capsys.readouterr().out


@pytest.mark.parametrize(
    ("metadata", "said"),
    [
        (
            {"annotations": {"kubernetes.io/config.mirror": "x"}},
            "exempt only when created by node any-node's kubelet (user system:node:any-node in "
            "system:nodes), which cannot be judged offline",
        ),
        (
            {
                "ownerReferences": [
                    {
                        "apiVersion": "apps/v1",
                        "kind": "DaemonSet",
                        "name": "d",
                        "uid": "u",
                        "controller": True,
                    }
                ]
            },
            "exempt only when created by system:serviceaccount:kube-system:daemon-set-controller, "
            "which cannot be judged offline",
        ),
    ],
)
def test_a_mirror_or_daemonset_pod_is_a_violation_saying_only_its_creator_exempts_it(
    tmp_path, capsys, metadata, said
):
    obj = bound_pod("any-node")
    obj["metadata"].update(metadata)
    write(tmp_path, "pod.json", json.dumps(obj))
    assert main(["check", "-f", str(tmp_path / "pod.json")]) == 1
    out = capsys.readouterr().out
    assert 'sets spec.nodeName "any-node"' in out and said in out


def test_node_name_with_a_nodes_file_uses_the_managed_selectors(tmp_path, capsys):
    nodes = {
        "apiVersion": "v1",
        "kind": "NodeList",
        "items": [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": "gpu-1", "labels": {"volcano.sh/role": "train"}},
            },
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "web-1"}},
        ],
    }
    write(tmp_path, "nodes.yaml", json.dumps(nodes))
    config = write(
        tmp_path,
        "config.txt",
        "policies: {nodeName: {managedNodeSelectors: ['volcano.sh/role:train']}}",
    )
    write(tmp_path, "web.json", json.dumps(bound_pod("web-1")))
    write(tmp_path, "gpu.json", json.dumps(bound_pod("gpu-1")))
    args = ["--nodes", str(tmp_path / "nodes.yaml"), "--config", str(config)]
    assert main(["check", "-f", str(tmp_path / "web.json"), *args]) == 0
    assert main(["check", "-f", str(tmp_path / "gpu.json"), *args]) == 1
    assert 'sets spec.nodeName "gpu-1"' in capsys.readouterr().out


def test_a_nodes_file_without_nodes_is_unusable(tmp_path, capsys):
    write(tmp_path, "nodes.yaml", json.dumps({"kind": "Pod", "metadata": {"name": "x"}}))
    write(tmp_path, "pod.json", json.dumps(bound_pod("a")))
    assert (
        main(["check", "-f", str(tmp_path / "pod.json"), "--nodes", str(tmp_path / "nodes.yaml")])
        == 2
    )
    assert "expected Node objects" in capsys.readouterr().err


def test_a_podgroup_without_a_generation_id_is_reported_as_information_only(tmp_path, capsys):
    pg = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "a"},
        "spec": {"minMember": 1},
    }
    write(tmp_path, "pg.json", json.dumps(pg))
    assert main(["check", "-f", str(tmp_path / "pg.json")]) == 0
    assert "[info]" in capsys.readouterr().out
    pg["metadata"]["annotations"] = {"volcano-guard.io/generation-id": "0190-x"}
    write(tmp_path, "pg.json", json.dumps(pg))
    assert main(["check", "-f", str(tmp_path / "pg.json")]) == 0
    assert "[info]" not in capsys.readouterr().out


def test_standard_input_is_read_for_dash_as_kubectl_reads_it(tmp_path):
    import subprocess
    import sys

    text = json.dumps(pod(container("app")))
    result = subprocess.run(
        [sys.executable, "-m", "volcano_guard.cli", "check", "-f", "-"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert result.stdout.startswith("<stdin>:0 Pod/")
    assert "1 documents checked, 2 violations" in result.stdout  # no cpu, no memory request


def test_standard_input_that_is_not_utf8_is_named_as_a_file_is(tmp_path):
    import subprocess
    import sys

    latin1 = b"apiVersion: v1\nkind: Pod\nmetadata: {name: caf\xe9}\n"
    result = subprocess.run(
        [sys.executable, "-m", "volcano_guard.cli", "check", "-f", "-"],
        input=latin1,
        capture_output=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert result.stderr.decode().splitlines() == ["volcano-guard check: <stdin>: not text (UTF-8)"]


def test_a_file_that_does_not_parse_is_reported_and_the_others_are_still_checked(tmp_path, capsys):
    write(tmp_path, "a-bad.yaml", "kind: Pod\nmetadata:\n\tname: tabbed\n")
    write(tmp_path, "b-pod.json", json.dumps(pod(container("app"))))
    write(tmp_path, "c-half.yaml", json.dumps(pod(container("app"))) + "\n---\nkind: [\n")
    assert main(["check", "-f", str(tmp_path), "-f", str(tmp_path / "gone.yaml")]) == 2
    captured = capsys.readouterr()
    problems = captured.err.splitlines()
    assert problems[0].startswith(f"volcano-guard check: {tmp_path / 'a-bad.yaml'} line 3: ")
    assert problems[1].startswith(f"volcano-guard check: {tmp_path / 'c-half.yaml'} line 4: ")
    assert (
        problems[2] == f"volcano-guard check: {tmp_path / 'gone.yaml'}: no such file or directory"
    )
    out = captured.out.splitlines()
    assert out[0].startswith(f"{tmp_path / 'b-pod.json'}:0 Pod/")
    assert out[2].startswith(f"{tmp_path / 'c-half.yaml'}:0 Pod/")  # before the bad document
    assert out[-1] == "2 documents checked, 4 violations, 3 unusable (listed on stderr)"


def test_list_items_are_reported_by_their_own_index(tmp_path, capsys):
    items = [
        pod(container("app", requests={"cpu": "1", "memory": "1Gi"}), name="fine"),
        pod(container("app"), name="bare"),
    ]
    write(tmp_path, "list.json", json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    assert main(["check", "-f", str(tmp_path / "list.json")]) == 1
    lines = [line for line in capsys.readouterr().out.splitlines() if "Pod/" in line]
    assert lines and all(
        line.startswith(f"{tmp_path / 'list.json'}:0[1] Pod/bare: ") for line in lines
    )


def test_a_directory_is_read_one_level_deep_unless_recursive(tmp_path, capsys):
    (tmp_path / "nested").mkdir()
    write(tmp_path, "top.json", json.dumps(pod(container("app"), name="top")))
    write(tmp_path / "nested", "deep.json", json.dumps(pod(container("app"), name="deep")))
    main(["check", "-f", str(tmp_path)])
    assert "1 documents checked" in capsys.readouterr().out
    main(["check", "-R", "-f", str(tmp_path)])
    assert "2 documents checked" in capsys.readouterr().out


def test_notes_are_printed_but_not_counted_as_violations(tmp_path, capsys):
    pg = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "pg", "namespace": "a"},
        "spec": {"minMember": 1},
    }
    write(tmp_path, "pg.json", json.dumps(pg))
    assert main(["check", "-f", str(tmp_path / "pg.json"), "--output", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["violations"] == [] and report["notes"][0]["mode"] == "info"
    assert main(["check", "-f", str(tmp_path / "pg.json")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "1 documents checked, 0 violations, 1 notes"


@settings(max_examples=150, deadline=None)
@given(
    text=st.one_of(
        st.text(max_size=300),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=8),
            lambda inner: (
                st.lists(inner, max_size=4)
                | st.dictionaries(
                    st.sampled_from(
                        [
                            "apiVersion",
                            "kind",
                            "metadata",
                            "spec",
                            "items",
                            "containers",
                            "name",
                            "x",
                        ]
                    ),
                    inner,
                    max_size=5,
                )
            ),
            max_leaves=20,
        ).map(json.dumps),
    )
)
def test_any_input_is_checked_or_named_as_unusable_never_a_crash(text):
    from volcano_guard.webhook.check import run_check
    from volcano_guard.webhook.config import Config

    report = run_check(["-"], Config(), stdin=lambda: text)
    assert report.exit_code in (0, 1, 2)
    assert all(problem.startswith("<stdin>") for problem in report.problems)


def test_a_bad_item_of_a_list_is_named_and_its_siblings_are_still_checked(tmp_path, capsys):
    items = [pod(container("app"), name="bare"), "a string", pod(container("app"), name="other")]
    write(
        tmp_path, "pods.json", json.dumps({"apiVersion": "v1", "kind": "PodList", "items": items})
    )
    assert main(["check", "-f", str(tmp_path / "pods.json")]) == 2
    captured = capsys.readouterr()
    assert f"{tmp_path / 'pods.json'}:0[1]: expected a Kubernetes object" in captured.err
    out = captured.out
    assert "pods.json:0[0] Pod/bare: " in out and "pods.json:0[2] Pod/other: " in out


def test_queues_are_judged_among_the_manifests_queues_a_parent_elsewhere_not_judged(
    tmp_path, capsys
):
    (tmp_path / "queues.yaml").write_text(
        yaml.safe_dump_all(
            [
                queue("team", "root", res("4")),
                queue("greedy", "team", res("8")),
                queue("x", "y"),
                queue("y", "x"),
                queue("elsewhere", "in-the-cluster", res("1")),
            ]
        )
    )
    assert main(["check", "-f", str(tmp_path / "queues.yaml")]) == 1
    lines = [line for line in capsys.readouterr().out.splitlines() if "Queue/" in line]
    names = [line.split(" ")[1] for line in lines]
    assert names == ["Queue/team:", "Queue/greedy:", "Queue/x:", "Queue/y:"]  # not elsewhere
    assert 'less than the capability cpu 8 of its descendant queue "greedy"' in lines[0]
    assert 'of its ancestor queue "team"' in lines[1] and "makes a cycle" in lines[2]


QUEUE_HEAD = "apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: q}\n"


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ('spec: "oops"', "spec must be an object"),
        ("spec: {parent: 5}", "spec.parent must be a string"),
        ("spec: {capability: [cpu, 1]}", "spec.capability must be an object"),
        (
            "spec: {deserved: {cpu: {x: 1}}}",
            "spec.deserved.cpu must be a quantity (a string or a number)",
        ),
        ("spec: {guarantee: 3}", "spec.guarantee must be an object"),
        ("spec: {guarantee: {resource: [1]}}", "spec.guarantee.resource must be an object"),
    ],
)
def test_a_queue_of_the_wrong_shape_is_unusable_naming_the_field(tmp_path, capsys, spec, said):
    """What Volcano's CRD refuses never reaches the webhook; offline, check names it (exit 2)
    rather than calling the Queue clean."""
    path = tmp_path / "queues.yaml"
    path.write_text(QUEUE_HEAD + spec + "\n")
    assert main(["check", "-f", str(path)]) == 2
    assert capsys.readouterr().err == f"volcano-guard check: {path}:0: {said}\n"


def test_a_queue_with_null_fields_is_as_one_without_them(tmp_path, capsys):
    path = tmp_path / "queues.yaml"
    path.write_text(QUEUE_HEAD + "spec: {parent: null, capability: null, deserved: {cpu: null}}\n")
    assert main(["check", "-f", str(path)]) == 0, capsys.readouterr().err
