"""Policy resourceRequests: every container Volcano schedules requests what Volcano accounts for.

Volcano's scheduler subtracts pod requests from node idle resources; a container without them
makes the accounting wrong, and the scheduler panics on it. Applies to Pod CREATE of pods whose
schedulerName is a Volcano scheduler, and to CREATE/UPDATE of Volcano Jobs (every task
template), of the Volcano kinds that become Jobs (CronJob, JobFlow JobTemplate) and of workloads
whose pod template names a Volcano scheduler (Deployment, StatefulSet, DaemonSet, ReplicaSet,
ReplicationController, batch Job, CronJob), which `check` and an operator who registers those
kinds get for free.

Kubernetes copies a container's limits into its missing requests before admission, so a
resource with a limit and no request counts as requested (at that limit).

Outside this module the guard uses only what __all__ lists: POLICY, for the registry
(webhook.evaluation), and its config section, for the config (webhook.config).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import msgspec

from volcano_guard.base import jsonpatch
from volcano_guard.base.jsonbody import shown
from volcano_guard.base.jsonpatch import escape
from volcano_guard.base.quantity import QuantityError, parse_quantity
from volcano_guard.webhook.cel import (
    DESCRIBED,
    Expr,
    all_of,
    any_of,
    concat,
    json_patch,
    kind_is,
    literal,
    operation_is,
    string,
    strings,
)
from volcano_guard.webhook.policies.base import (
    MUTATE,
    NOTHING_FOUND,
    PATCHED_CONTAINERS,
    REPORTED_FINDINGS,
    VALIDATE,
    InServerCheck,
    InServerMutation,
    Policy,
    PolicyContext,
    Rule,
    Scope,
    Verdict,
    more_findings,
    pods_rule,
)
from volcano_guard.webhook.review import AdmissionRequest
from volcano_guard.webhook.sections import Mode, Name, QuantityText, Section
from volcano_guard.webhook.workloads import (
    CONTAINER_FIELDS,
    DEFAULT_SCHEDULER,
    POD,
    SUPPORTED_KINDS,
    VOLCANO_JOB_SPEC_PATHS,
    Container,
    PodTemplate,
    containers,
    format_path,
    is_supported,
    pod_templates,
    requests_and_limits,
)

if TYPE_CHECKING:  # config.py gathers the policies' sections: at run time, it imports this
    from volcano_guard.webhook.config import Config

__all__ = ["POLICY", "ResourceRequestsConfig"]


class ResourceRequestsConfig(Section, frozen=True):
    """`policies.resourceRequests`."""

    mode: Mode = "enforce"
    resources: tuple[Name, ...] = ("cpu", "memory")
    # Filled in by /mutate for a missing request, e.g. {cpu: 100m, memory: 128Mi}.
    defaults: dict[Name, QuantityText] = msgspec.field(default_factory=dict)


NAME = "resourceRequests"


def settings(config: Config) -> ResourceRequestsConfig:
    return config.policies.resourceRequests


def validate(request: AdmissionRequest, context: PolicyContext) -> Verdict | None:
    templates = _volcano_templates(request, context.config)
    if templates is None:
        return None
    found = violations(request.describe, templates, settings(context.config))
    return Verdict(violations=tuple(found)) if found else NOTHING_FOUND


def mutate(request: AdmissionRequest, context: PolicyContext) -> Verdict | None:
    config = settings(context.config)
    if not config.defaults:
        return None
    templates = _volcano_templates(request, context.config)
    if templates is None:
        return None
    count = sum(len(containers(template)) for template in templates)
    if count > FILLED_CONTAINERS:  # a forged object: its patch would not fit in an answer
        return Verdict(violations=(f"{request.describe()}: {too_many_to_fill(count)}",))
    patch, changes = default_requests(templates, config.defaults)
    return Verdict(patch=tuple(patch), changes=tuple(changes))


FILLED_CONTAINERS = PATCHED_CONTAINERS  # containers one answer can fill requests for


def too_many_to_fill(count: int) -> str:
    return (
        f"has {count:,} containers, more than the {FILLED_CONTAINERS:,} whose requests one "
        "answer can fill"
    )


def scopes(config: Config) -> tuple[Scope, ...]:
    """Pods a Volcano scheduler places, on CREATE; the Volcano kinds that carry task templates,
    on CREATE and UPDATE (their templates may name other schedulers: the policy decides). The
    workload kinds `check` reads are not registered: their pods are checked when created."""
    pods = all_of(
        kind_is(*POD),
        operation_is("CREATE"),
        "has(object.spec.schedulerName)",
        f"object.spec.schedulerName in {strings(config.volcanoSchedulerNames)}",
    )
    volcano = (kind_is(group, kind) for group, kind in VOLCANO_JOB_SPEC_PATHS)
    rules = (
        pods_rule("CREATE"),
        *(
            Rule(group, "v1alpha1", (plural,), ("CREATE", "UPDATE"))
            for group, plural in _VOLCANO_PLURALS
        ),
    )
    condition = any_of(pods, *volcano)
    validating = Scope(VALIDATE, rules, condition)
    return (
        (Scope(MUTATE, rules, condition), validating)
        if settings(config).defaults
        else (validating,)
    )


# CEL: container c requests resource r, or limits it (Kubernetes copies a limit into a missing
# request), as requests_and_limits reads a container.
_REQUESTED = (
    "has(c.resources) && ((has(c.resources.requests) && r in c.resources.requests) "
    "|| (has(c.resources.limits) && r in c.resources.limits))"
)


def _some(items: str, name: str, test: str) -> str:
    """CEL: some element of items passes test, as `exists` says it but at a third of the cost
    on a Job's thousands of containers: cel-go charges `exists` 4 an element for its loop
    condition and step, a filter nothing (its condition is the constant true; the step
    resolves the accumulator raw), and comparing a list with the constant [] costs 0. Unlike
    `exists`, it does not stop at the first element that passes (only a refused object has
    one) nor absorb an error of the test (these tests raise none: they guard every read)."""
    return f"{items}.filter({name}, {test}) != []"


# The container lists of a pod spec in the order the webhook reports them, and their words.
_CONTAINER_WORDS = (("initContainers", "init container"), ("containers", "container"))


def missing_request(resource: str, path: str = "") -> tuple[str, ...]:
    """The words for a container without a request of resource (the resource may be a CEL Expr:
    the in-server check says the same)."""
    return (
        "has no ",
        resource,
        f" request{path}; Volcano accounts node resources by requests, so set resources.requests.",
        resource,
        " (or a limit, which Kubernetes copies into the request)",
    )


def in_server(config: Config) -> tuple[InServerCheck, ...]:
    """Volcano pods without a request, decided by the API server (pods only: its own validation
    refuses a pod's unparsable or negative quantities and requests over limits before any
    admission policy, and the Volcano kinds are not checked there yet). The first container
    without a request, init containers first, is named as the webhook names it first; the
    field path is left out (CEL has no index of a list element)."""
    names, resources = config.volcanoSchedulerNames, strings(settings(config).resources)
    condition = all_of(
        "has(object.spec.schedulerName)", f"object.spec.schedulerName in {strings(names)}"
    )
    variables, validations = [], []
    for field, kind in _CONTAINER_WORDS:
        short, first = f"{field}WithoutRequests", f"{field}FirstMissing"
        lacks = f"!({_REQUESTED})"
        variables += [
            (
                short,
                f"has(object.spec.{field}) ? object.spec.{field}.filter(c, "
                f"{_some(resources, 'r', lacks)}) : []",
            ),
            (
                first,
                f"size(variables.{short}) == 0 ? '' : {resources}.filter(r, "
                f"{lacks.replace('c.', f'variables.{short}[0].')})[0]",
            ),
        ]
        subject = (*DESCRIBED, ": ", kind, ' "', Expr(f"variables.{short}[0].name"), '" ')
        validations.append(
            (
                f"size(variables.{short}) == 0",
                concat(*subject, *missing_request(Expr(f"variables.{first}"))),
            )
        )
    return (
        InServerCheck(
            "resource-requests",
            (pods_rule("CREATE"),),
            condition,
            tuple(validations),
            tuple(variables),
        ),
        _volcano_in_server(config),
    )


def _volcano_in_server(config: Config) -> InServerCheck:
    """Volcano Jobs, CronJobs and JobTemplates (CREATE and UPDATE), as the webhook judges their
    task templates: a template Volcano places (its schedulerName, else the Job's, else the
    first Volcano scheduler's) whose containers lack a request, have a quantity that does not
    parse or is below zero, or request more than their limit. Their CRDs accept all of these.
    One validation a kind of problem and container list; the first task and container with
    it are named."""
    names, resources = config.volcanoSchedulerNames, strings(settings(config).resources)
    variables = list(_job_variables(names))
    validations = []
    for field, kind in _CONTAINER_WORDS:
        for problem, (found, key, words) in _problems(resources).items():
            name = f"{field}{problem}"
            if problem == "OverLimit":
                parts = _over_limit_parts(field, settings(config).resources)
                variables += parts
                variables.append((name, _any_of_tasks(part for part, _ in parts)))
            else:
                variables.append((name, _tasks_with(field, found)))
            task = f"variables.{name}[0]"
            container = f"{task}.template.spec.{field}.filter(c, {found})[0]"
            subject = (
                *DESCRIBED,
                ' task "',
                Expr(f"{task}.name"),
                '": ',
                kind,
                ' "',
                Expr(f"{container}.name"),
                '" ',
            )
            # The words read the container as c: the first such container stands in for it.
            said = concat(*words(Expr(key))).replace("c.resources", f"{container}.resources")
            validations.append((f"size(variables.{name}) == 0", f"{concat(*subject)} + {said}"))
    rules = tuple(
        Rule(group, "v1alpha1", (plural,), ("CREATE", "UPDATE"))
        for group, plural in _VOLCANO_PLURALS
    )
    return InServerCheck(
        "volcano-resource-requests",
        rules,
        all_of("has(object.spec)", _CRONJOB_HAS_TEMPLATE),
        tuple(validations),
        tuple(variables),
    )


# A Volcano CronJob's tasks are under spec.jobTemplate.spec, which may be absent (omitempty):
# variables.jobSpec reads it unguarded, an error that would refuse the object in the server.
_CRONJOB_HAS_TEMPLATE = (
    "request.kind.kind != 'CronJob' || (has(object.spec.jobTemplate) && "
    "has(object.spec.jobTemplate.spec))"
)


def _job_variables(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """The Job spec of a Volcano kind's object, its scheduler, and the tasks a Volcano
    scheduler places (a template's schedulerName, else the Job's, else the first Volcano
    scheduler's), as pod_templates finds them."""
    tasks = (
        "has(variables.jobSpec.tasks) ? variables.jobSpec.tasks.filter(t, "
        "has(t.template) && has(t.template.spec) && ((has(t.template.spec.schedulerName) "
        "&& t.template.spec.schedulerName != '') ? t.template.spec.schedulerName : "
        f"variables.jobScheduler) in {strings(names)}) : []"
    )
    return (
        ("jobSpec", "request.kind.kind == 'CronJob' ? object.spec.jobTemplate.spec : object.spec"),
        (
            "jobScheduler",
            "has(variables.jobSpec.schedulerName) && "
            "variables.jobSpec.schedulerName != '' ? "
            f"variables.jobSpec.schedulerName : {string(names[0])}",
        ),
        ("tasks", tasks),
    )


def _tasks_with(field: str, found: str) -> str:
    """CEL: the tasks of variables.tasks with a container in field for which found holds."""
    containers = f"t.template.spec.{field}"
    return f"variables.tasks.filter(t, has({containers}) && {_some(containers, 'c', found)})"


def _over_limit_parts(field: str, resources: tuple[str, ...]) -> list[tuple[str, str]]:
    """Variables that together find the tasks with a container of field requesting more than
    its limit: one a required resource, one for the other resources (each is its own call
    against the per-call limit). One comprehension over every container and key cost 69 a
    container, 973,678 on the largest Job etcd stores; split, each costs at most 26 a
    container. When no quantity of field is invalid (as in every Job the policy admits), the
    comparisons skip isQuantity, which only guards quantity() against such a quantity."""
    parts = [
        (f"{field}OverLimit{index}", _over_limit_variable(field, _over_limit_of(string(resource))))
        for index, resource in enumerate(resources)
    ]
    others = _over_limit_of_others(strings(resources))
    return [*parts, (f"{field}OverLimitOthers", _over_limit_variable(field, others))]


_LIMITED = "has(c.resources) && has(c.resources.requests) && has(c.resources.limits)"


def _over_limit_of(resource: str) -> Callable[[bool], str]:
    """CEL, given whether to guard quantity(): container c requests more of resource than its
    limit."""

    def test(guard: bool) -> str:
        listed = f"{resource} in c.resources.requests && {resource} in c.resources.limits"
        return f"{_LIMITED} && {listed} && {_over(resource, guard)}"

    return test


def _over_limit_of_others(resources: str) -> Callable[[bool], str]:
    """CEL, given whether to guard quantity(): container c requests more of a resource not in
    the CEL list resources than its limit."""

    def test(guard: bool) -> str:
        over = f"!(k in {resources}) && k in c.resources.limits && {_over('k', guard)}"
        return f"{_LIMITED} && {_some('c.resources.requests', 'k', over)}"

    return test


def _over_limit_variable(field: str, test: Callable[[bool], str]) -> str:
    """The tasks with a container of field passing test, whose quantity() calls are guarded
    only when field has an invalid quantity (reading those variables is charged to the policy's
    budget, not to this call)."""
    valid = f"variables.{field}InvalidRequests == [] && variables.{field}InvalidLimits == []"
    return f"{valid} ? {_tasks_with(field, test(False))} : {_tasks_with(field, test(True))}"


def _over(key: str, guard: bool) -> str:
    """CEL: container c requests more of key than its limit (guard: and both quantities
    parse; without it, quantity() fails on one that does not)."""
    request, limit = f"c.resources.requests[{key}]", f"c.resources.limits[{key}]"
    parsed = f"isQuantity(string({request})) && isQuantity(string({limit})) && " if guard else ""
    return f"{parsed}{_quantity(request)}.isGreaterThan({_quantity(limit)})"


def _any_of_tasks(names: Iterable[str]) -> str:
    """CEL: the tasks of variables.tasks in any of the named variables, in task order."""
    listed = " || ".join(f"t in variables.{name}" for name in names)
    return f"variables.tasks.filter(t, {listed})"


def _quantity(value: str) -> str:
    return f"quantity(string({value}))"


def _problems(resources: str) -> dict[str, tuple[str, str, Any]]:
    """Problem name -> (CEL: container c has it; CEL: the resource it concerns, in c; the
    words, given that resource as an Expr), in the order the webhook finds them."""
    problems: dict[str, tuple[str, str, Any]] = {}
    for field in ("requests", "limits"):
        values = f"c.resources.{field}"
        listed = f"has(c.resources) && has({values})"
        invalid = f"!isQuantity(string({values}[k]))"
        # A negative quantity starts with '-' (resource.ParseQuantity trims nothing): that
        # cheap test spares the common quantity its parsing twice.
        negative = (
            f"string({values}[k]).startsWith('-') && isQuantity(string({values}[k])) && "
            f"{_quantity(f'{values}[k]')}.isLessThan(quantity('0'))"
        )
        for problem, test in (("invalid", invalid), ("negative", negative)):
            key = f"{values}.filter(k, {test})[0]"
            problems[f"{problem.capitalize()}{field.capitalize()}"] = (
                f"{listed} && {_some(values, 'k', test)}",
                key,
                lambda resource, problem=problem, field=field, values=values: unusable_quantity(
                    problem,
                    resource,
                    field[:-1],
                    Expr(f"'\"' + string({values}[{resource}]) + '\"'"),
                ),
            )
    problems["Missing"] = (
        _some(resources, "r", f"!({_REQUESTED})"),
        f"{resources}.filter(r, !({_REQUESTED}))[0]",
        missing_request,
    )
    both = "has(c.resources) && has(c.resources.requests) && has(c.resources.limits)"
    over = (
        "k in c.resources.limits && isQuantity(string(c.resources.requests[k])) && "
        "isQuantity(string(c.resources.limits[k])) && "
        f"{_quantity('c.resources.requests[k]')}.isGreaterThan("
        f"{_quantity('c.resources.limits[k]')})"
    )
    problems["OverLimit"] = (
        f"{both} && {_some('c.resources.requests', 'k', over)}",
        f"c.resources.requests.filter(k, {over})[0]",
        lambda resource: over_limit(
            resource,
            Expr(f"string(c.resources.requests[{resource}])"),
            Expr(f"string(c.resources.limits[{resource}])"),
        ),
    )
    return problems


def mutate_in_server(config: Config) -> tuple[InServerMutation, ...]:
    """`defaults` in the API server, in enforce mode: the same requests filled in the same
    containers as default_requests fills them, for pods ("default-requests") and the Volcano
    kinds' task templates ("volcano-default-requests"). Every config can be written: resource
    names and quantities are literals, each name escaped for a JSON pointer here.

    The patch is not the webhook's list of operations but makes the same object: a container
    without resources gets `{requests: <every default>}` as from the webhook; one with
    resources but no requests first gets `requests: {}`, and then each request it misses is
    added on its own. CEL has no index of a list element in the libraries the sandbox models
    (cel-go's lists.range and two-variable comprehensions come with the 1.34 and 1.32
    environments), so a container is found by its name (k8s.lists indexOf; the API server
    refuses a pod whose containers share a name, after mutation), a task by its name unless
    another task shares it, then by its whole value (of tasks equal in every field, only the
    first is filled: Volcano refuses tasks that share a name); nor a list's flatten, so the
    Volcano kinds' paths, one list a task, are joined into a string and split again.

    What one patch can hold is bounded by the per-call cost limit: 64 to 69 an operation
    (bench.policy_cost), some 14,000 operations. The largest Job etcd stores, 14,095
    containers without resources, takes 90% of it; an object needing more operations than
    that is refused in the server (failurePolicy Fail) where the webhook fills it.

    Past FILLED_CONTAINERS containers the webhook refuses the object; the policy's patch then
    removes a member that does not exist, which fails it, and the API server refuses the
    object (failurePolicy Fail)."""
    section = settings(config)
    if not section.defaults:
        return ()
    return (_pod_defaults(config), _volcano_defaults(config))


_TOO_MANY = json_patch(
    "remove", string("/spec/" + escape("more containers than volcano-guard fills requests of"))
)


def _fills(defaults: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """The fills, in the order they must apply: (CEL: container c needs it, the path below c's
    resources, the value). A fill that makes a parent (resources, requests) comes before those
    that add below it."""
    unlimited = _some(
        strings(defaults), "r", "!(has(c.resources.limits) && r in c.resources.limits)"
    )
    fills = [
        ("!has(c.resources)", "", literal({"requests": dict(defaults)})),
        (f"has(c.resources) && !has(c.resources.requests) && {unlimited}", "/requests", "{}"),
    ]
    for key, value in defaults.items():
        requested = _REQUESTED.replace("r in", f"{string(key)} in")
        fills.append(
            (f"has(c.resources) && !({requested})", f"/requests/{escape(key)}", string(value))
        )
    return fills


def _fill_patch(paths: list[str], defaults: Mapping[str, str]) -> str:
    """CEL: the JSONPatch list of every fill, given for each of _fills(defaults) the CEL list
    of the resources paths of the containers that need it."""
    patches = (
        (listed, json_patch("add", f"p + {string(below)}" if below else "p", value))
        for listed, (_, below, value) in zip(paths, _fills(defaults), strict=True)
    )
    return " + ".join(f"{listed}.map(p, {patch})" for listed, patch in patches)


def _pod_defaults(config: Config) -> InServerMutation:
    names = strings(config.volcanoSchedulerNames)
    scheduler = (
        "has(object.spec.schedulerName) && object.spec.schedulerName != '' ? "
        f"object.spec.schedulerName : {string(DEFAULT_SCHEDULER)}"
    )
    variables = tuple(
        (name, expression)
        for field in CONTAINER_FIELDS
        for name, expression in (
            (field, f"has(object.spec.{field}) ? object.spec.{field} : []"),
            (f"{field}Names", f"variables.{field}.map(c, c.name)"),
        )
    )

    def path(field: str, below: str) -> str:
        index = f"string(variables.{field}Names.indexOf(c.name))"
        return f"'/spec/{field}/' + {index} + {string('/resources' + below)}"

    # One comprehension an operation (a pod's paths need no joining): ~70 an operation.
    defaults = settings(config).defaults
    patch = " + ".join(
        f"variables.{field}.map(c, {test}, {json_patch('add', path(field, below), value)})"
        for test, below, value in _fills(defaults)
        for field in CONTAINER_FIELDS
    )
    count = " + ".join(f"size(variables.{field})" for field in CONTAINER_FIELDS)
    return InServerMutation(
        "default-requests",
        (pods_rule("CREATE"),),
        all_of(kind_is(*POD), operation_is("CREATE"), f"({scheduler}) in {names}"),
        f"{count} > {FILLED_CONTAINERS} ? [{_TOO_MANY}] : {patch}",
        variables,
    )


# CEL: the index of task t in the Job spec, by its name unless another task shares it.
_TASK_NAME = "(has(t.name) ? t.name : '')"
_TASK_INDEX = (
    f"variables.taskNames.indexOf({_TASK_NAME}) == variables.taskNames.lastIndexOf({_TASK_NAME})"
    f" ? variables.taskNames.indexOf({_TASK_NAME}) : variables.jobSpec.tasks.indexOf(t)"
)


def _volcano_defaults(config: Config) -> InServerMutation:
    """The tasks' fills, one variable a fill: each task's paths joined by ',' (no path holds
    one: its tokens are field names and indices), then the tasks'; the patch splits them.
    `[x].map(v, e)[0]` evaluates x once for e to read it as v: the task's index and each
    container list's path, once a task rather than once a container."""
    defaults = settings(config).defaults
    job_path = "(request.kind.kind == 'CronJob' ? '/spec/jobTemplate/spec' : '/spec')"

    def task_paths(test: str) -> str:
        listed = " + ".join(
            f"[{job_path} + '/tasks/' + string(i) + '/template/spec/{field}/'].map(prefix, "
            f"(has(t.template.spec.{field}) ? t.template.spec.{field} : []).map(c, {test}, "
            f"prefix + string(variables.containerNames[i][{number}].indexOf(c.name)) + "
            "'/resources'))[0]"
            for number, field in enumerate(CONTAINER_FIELDS)
        )
        return (
            f"variables.tasks.map(t, [{_TASK_INDEX}].map(i, ({listed}).join(','))[0])"
            ".filter(p, size(p) > 0).join(',')"
        )

    listed = [
        (f"fills{number}", task_paths(test)) for number, (test, _, _) in enumerate(_fills(defaults))
    ]
    names = ", ".join(
        f"has(t.template) && has(t.template.spec) && has(t.template.spec.{field}) ? "
        f"t.template.spec.{field}.map(c, c.name) : []"
        for field in CONTAINER_FIELDS
    )
    every_task = "has(variables.jobSpec.tasks) ? variables.jobSpec.tasks"
    variables = (
        *_job_variables(config.volcanoSchedulerNames),
        ("taskNames", f"{every_task}.map(t, {_TASK_NAME}) : []"),
        ("containerNames", f"{every_task}.map(t, [{names}]) : []"),
        *listed,
    )
    sizes = " + ".join(
        f"(has(t.template.spec.{field}) ? size(t.template.spec.{field}) : 0)"
        for field in CONTAINER_FIELDS
    )
    split = [
        f"(size(variables.{name}) == 0 ? [] : variables.{name}.split(','))" for name, _ in listed
    ]
    return InServerMutation(
        "volcano-default-requests",
        tuple(
            Rule(group, "v1alpha1", (plural,), ("CREATE", "UPDATE"))
            for group, plural in _VOLCANO_PLURALS
        ),
        all_of("has(object.spec)", _CRONJOB_HAS_TEMPLATE),
        f"variables.tasks.map(t, {sizes}).sum() > {FILLED_CONTAINERS} ? [{_TOO_MANY}] : "
        f"{_fill_patch(split, defaults)}",
        variables,
    )


# The resources of the kinds in VOLCANO_JOB_SPEC_PATHS, as registrations name them.
_VOLCANO_PLURALS = (
    ("batch.volcano.sh", "jobs"),
    ("batch.volcano.sh", "cronjobs"),
    ("flow.volcano.sh", "jobtemplates"),
)
POLICY = Policy(
    name=NAME,
    mode=lambda config: settings(config).mode,
    off="policies.resourceRequests.mode: off",
    mutate=mutate,
    validate=validate,
    kinds=SUPPORTED_KINDS,
    scopes=scopes,
    in_server=in_server,
    in_server_mutations=mutate_in_server,
)


def violations(
    subject: Callable[[], str], templates: list[PodTemplate], config: ResourceRequestsConfig
) -> list[str]:
    """What is wrong, a line per problem up to REPORTED_FINDINGS, then a count of the rest;
    subject() names the object (only called to say so)."""
    found: list[str] = []
    unreported = 0
    for template in templates:
        for container in containers(template):
            room = REPORTED_FINDINGS - len(found)
            problems = _container_problems(container, config.resources, located=room > 0)
            if problems and room <= 0:  # a forged object: count, do not describe
                unreported += len(problems)
            elif problems:  # rare: the message parts are built only here
                where = f'{subject()} task "{template.task}"' if template.task else subject()
                found += (
                    f'{where}: {container.kind} "{container.name}" {problem}'
                    for problem in problems[:room]
                )
                unreported += len(problems[room:])
    return [*found, more_findings(unreported)] if unreported else found


def default_requests(
    templates: list[PodTemplate], defaults: Mapping[str, str]
) -> tuple[list[jsonpatch.Operation], list[str]]:
    """JSON patch filling each missing request from defaults, and what it does in words."""
    patch: list[jsonpatch.Operation] = []
    changes: list[str] = []
    for template in templates:
        for container in containers(template):
            requests, limits = requests_and_limits(container)
            missing = {
                name: value
                for name, value in defaults.items()
                if name not in requests and name not in limits
            }
            if not missing:
                continue
            patch.extend(_add_requests(container, missing))
            filled = ", ".join(f"{name}={value}" for name, value in missing.items())
            changes.append(
                f'set {container.kind} "{container.name}" requests {filled} '
                f"({format_path((*container.path, 'resources', 'requests'))})"
            )
    return patch, changes


def _volcano_templates(request: AdmissionRequest, config: Config) -> list[PodTemplate] | None:
    """The pod templates of the request's object that a Volcano scheduler will place, or None
    when the request is not one this policy handles."""
    group, kind = request.kind.group, request.kind.kind
    if request.sub_resource or request.object is None:
        return None
    if (group, kind) == POD:
        if request.operation != "CREATE":  # a pod's requests are fixed once it exists
            return None
    elif not is_supported(group, kind) or request.operation not in ("CREATE", "UPDATE"):
        return None
    names = config.volcanoSchedulerNames
    templates = [
        template
        for template in pod_templates(group, kind, request.object, names[0])
        if template.scheduler_name in names
    ]
    return templates or None


def _container_problems(
    container: Container, required: tuple[str, ...], *, located: bool = True
) -> list[str]:
    """One container's problems: unusable quantities, missing requests, requests over limits;
    without their paths unless located (formatting paths is most of the cost, and problems
    past the reported ones are only counted)."""
    requests, limits = requests_and_limits(container)
    problems: list[str] = []
    requested = _quantities(container, "requests", requests, problems, located)
    limited = _quantities(container, "limits", limits, problems, located)
    for resource in required:
        if resource not in requests and resource not in limits:
            problems.append(
                "".join(missing_request(resource, _where(container, "requests", resource, located)))
            )
    for resource, value in requested.items():
        limit = limited.get(resource)
        if limit is not None and value > limit:
            problems.append(
                "".join(
                    over_limit(
                        resource,
                        shown(requests[resource]),
                        shown(limits[resource]),
                        _where(container, "requests", resource, located),
                    )
                )
            )
    return problems


def over_limit(resource: str, request: str, limit: str, path: str = "") -> tuple[str, ...]:
    """The words for a request above its limit (any part may be a CEL Expr)."""
    return (
        "requests ",
        resource,
        " ",
        request,
        ", more than its limit ",
        limit,
        f"{path}; lower the request or raise the limit",
    )


def unusable_quantity(
    problem: str, resource: str, field: str, raw: str, path: str = ""
) -> tuple[str, ...]:
    """The words for a quantity that does not parse ("invalid") or is below zero ("negative");
    the webhook adds why an invalid one does not parse."""
    article = "an" if problem == "invalid" else "a"
    advice = "; use a value >= 0" if problem == "negative" else ""
    return (f"has {article} {problem} ", resource, f" {field} ", raw, path, advice)


def _quantities(
    container: Container,
    field: str,
    values: dict[str, Any],
    problems: list[str],
    located: bool = True,
) -> dict[str, Decimal]:
    """values parsed; what cannot be (or is negative) is left out and told in problems."""
    parsed: dict[str, Decimal] = {}
    for resource, raw in values.items():
        try:
            quantity = parse_quantity(raw)
        except QuantityError as exc:
            problems.append(
                "".join(
                    unusable_quantity(
                        "invalid",
                        resource,
                        field[:-1],
                        shown(raw),
                        _where(container, field, resource, located),
                    )
                )
                + f": {exc}"
            )
            continue
        if quantity < 0:
            problems.append(
                "".join(
                    unusable_quantity(
                        "negative",
                        resource,
                        field[:-1],
                        shown(raw),
                        _where(container, field, resource, located),
                    )
                )
            )
            continue
        parsed[resource] = quantity
    return parsed


def _add_requests(container: Container, missing: dict[str, str]) -> Iterator[jsonpatch.Operation]:
    """Add operations that are valid whether resources/requests exist, are null or are absent."""
    base = (*container.path, "resources")
    if not isinstance(container.body.get("resources"), dict):
        yield jsonpatch.add(jsonpatch.pointer(*base), {"requests": dict(missing)})
    elif not isinstance(container.body["resources"].get("requests"), dict):
        yield jsonpatch.add(jsonpatch.pointer(*base, "requests"), dict(missing))
    else:
        for name, value in missing.items():
            yield jsonpatch.add(jsonpatch.pointer(*base, "requests", name), value)


def _where(container: Container, field: str, resource: str, located: bool) -> str:
    """ " (path)" for a message, or nothing when the problem is only counted."""
    return f" ({_path(container, field, resource)})" if located else ""


def _path(container: Container, field: str, resource: str) -> str:
    return format_path((*container.path, "resources", field, resource))
