"""The admission policies, each one unit: a module (or, once it grows, a package with one job a
module) that owns its config section, its webhook checks, its in-server (CEL) form and what
`check` and the audit need of it, behind the names its `__all__` lists. Nothing outside a policy
imports anything else of it (tests/webhook/test_policy_units.py). base.py is what they share;
the registry that runs them is webhook.evaluation.

Adding a policy (tests/webhook/test_adding_a_policy.py follows these steps with a toy policy):

1. Write `policies/<name>.py`, say `toy.py` for the config key `toy`, holding:
   - its config section, a `webhook.sections.Section` with at least `mode: Mode` and each key's
     type, bounds and safe default (`class ToyConfig(Section, frozen=True)`);
   - pure checks `validate` and/or `mutate`, `(request, context) -> Verdict | None` (None: not
     this policy's request), reading its section as `context.config.policies.toy`;
   - `POLICY = Policy(...)` (policies.base): its name, its mode, `off` (the setting that turns it
     off, `policies.toy.mode: off`), its checks, the request `kinds` they can act on, its
     `scopes` (what the webhook registrations must send it), the cluster data it reads
     (`watches`, `lookups`) and, for denies the API server can decide alone, `in_server`;
   - `__all__`: POLICY, the section, and whatever `check`, the audit or the node-state publisher
     use of it.
   A unit may hold several Policy objects, each with its own name (the metrics' `policy` label
   and the audit's finding) and its own mode key: nodeName also holds bindingGuard
   (`policies.nodeName.bindingGuard.mode`), and podGroups holds podGroups, podGroupGeneration
   and deleteGuard, the first two turned on by a boolean (`stampGenerationId`), not a mode.
   Import `Config` only under `TYPE_CHECKING`: webhook.config imports the policy for its section.
2. In webhook/config.py, give `PoliciesConfig` the field
   `toy: ToyConfig = msgspec.field(default_factory=ToyConfig)`.
3. In webhook/evaluation.py, list `toy.POLICY` in `POLICIES` (policies run in that order;
   one that inserts into lists goes last, as sidecarInjection does).
4. In docs/reference.md, a row a config key (`policies.toy.mode`) in the Configuration table, a
   "### Policy" section for it, and any annotation, label or metric it adds.
5. If it reads a resource the webhook does not yet read (`watches`, `lookups`), give the
   webhook's ServiceAccount those verbs in deploy/base/rbac.yaml (tests/deploy/test_rbac.py).
   If it adds an in-server check, add the check's name to IN_SERVER_CHECKS in
   webhook/manifests.py (an in-server mutation's to IN_SERVER_MUTATIONS) and to the
   reconciler's ClusterRole (deploy/base/reconciler.yaml, the chart's
   templates/reconciler.yaml): the reconciler writes only the names it is given.
6. Its tests, in tests/webhook/test_toy.py. test_config, test_policies, test_policy_units and
   test_registrations check every registered policy's off setting, kinds, interface and
   registrations by themselves; the tests that list today's policies by name gain it
   (test_policies' order and kinds tests, test_registrations' policies turned off).
7. Its decisions, in docs/decisions/policies.md.
"""
